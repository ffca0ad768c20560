#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <set>

#include "core/f16.h"
#include "gpu/fma_exact.h"
#include "gpu/kernels.h"
#include "gpu/spirv.h"
#include "test.h"

using namespace bankml::gpu;
namespace sp = bankml::gpu::spirv;

static uint32_t fbits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
static float from_bits(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }

TEST(header_and_string_words) {
    sp::Module m;
    m.entry_point(64);
    m.begin_main();
    m.end_main();
    auto w = m.words();
    REQUIRE(w.size() > 5);
    CHECK_EQ(w[0], 0x07230203u);
    CHECK_EQ(w[1], 0x00010300u);  // SPIR-V 1.3
    CHECK_EQ(w[2], 0u);           // generator
    CHECK_EQ(w[4], 0u);           // schema
    // The bound is one more than the largest id: every id in the module is below it.
    CHECK_EQ(w[5], (2u << 16) | 17u);  // the first instruction: OpCapability Shader
    CHECK_EQ(w[6], 1u);
    CHECK_EQ(sp::string_words(""), std::vector<uint32_t>{0u});
    CHECK_EQ(sp::string_words("abc"), std::vector<uint32_t>{0x00636261u});
    CHECK_EQ(sp::string_words("main"), (std::vector<uint32_t>{0x6e69616du, 0u}));
    CHECK_EQ(sp::string_words("GLSL.std.450").size(), 4u);
}

TEST(types_and_constants_are_made_once) {
    sp::Module m;
    CHECK_EQ(m.t_u32(), m.t_int(32, false));
    CHECK_NE(m.t_u32(), m.t_i32());
    CHECK_EQ(m.c_u32(7), m.c_u32(7));
    CHECK_NE(m.c_u32(7), m.c_i32(7));
    CHECK_EQ(m.c_f32(0.5f), m.c_f32(0.5f));
    CHECK_NE(m.c_f32(0.0f), m.c_f32(-0.0f));
    CHECK_EQ(m.t_vec(m.t_f32(), 4), m.t_vec(m.t_f32(), 4));
    CHECK_EQ(m.t_ptr(sp::StorageInput, m.t_u32()), m.t_ptr(sp::StorageInput, m.t_u32()));
}

TEST(specialisation_constants_are_made_once_per_spec_id) {
    sp::Module m;
    const uint32_t b = m.spec_bool(3, true), u = m.spec_u32(4, 64);
    CHECK_EQ(m.spec_bool(3, true), b);
    CHECK_EQ(m.spec_u32(4, 64), u);
    CHECK_NE(b, m.c_bool(true));  // never shared with a plain constant
    CHECK_NE(u, m.c_u32(64));
    CHECK_THROWS(m.spec_bool(3, false), "SpecId 3 is a bool true, asked again as a bool false");
    CHECK_THROWS(m.spec_u32(3, 1), "SpecId 3 is a bool true, asked again as a u32 1");
    m.entry_point(1);
    m.begin_main();
    m.end_main();
    const std::vector<uint32_t> w = m.words();
    // OpSpecConstantTrue %bool %b; OpSpecConstant %u32 %u 64; each decorated SpecId.
    bool t = false, c = false, dt = false, du = false;
    for (size_t i = 5; i < w.size(); i += w[i] >> 16) {
        const uint16_t op = uint16_t(w[i] & 0xffff);
        t |= op == sp::OpSpecConstantTrue && w[i + 1] == m.t_bool() && w[i + 2] == b;
        c |= op == sp::OpSpecConstant && w[i + 1] == m.t_u32() && w[i + 2] == u && w[i + 3] == 64u;
        dt |= op == sp::OpDecorate && w[i + 1] == b && w[i + 2] == sp::DecorationSpecId && w[i + 3] == 3u;
        du |= op == sp::OpDecorate && w[i + 1] == u && w[i + 2] == sp::DecorationSpecId && w[i + 3] == 4u;
    }
    CHECK(t && c && dt && du);
}

// Walks the instructions of a module: (opcode, operand words).
static std::vector<std::pair<uint16_t, std::vector<uint32_t>>> instructions(const std::vector<uint32_t>& w) {
    std::vector<std::pair<uint16_t, std::vector<uint32_t>>> out;
    for (size_t i = 5; i < w.size();) {
        uint32_t n = w[i] >> 16;
        if (n == 0 || i + n > w.size()) return {};
        out.push_back({uint16_t(w[i] & 0xFFFF), std::vector<uint32_t>(w.begin() + long(i) + 1, w.begin() + long(i + n))});
        i += n;
    }
    return out;
}

TEST(every_float_op_and_ext_inst_is_no_contraction) {
    for (auto& [name, words] : kernels::all_modules()) {
        auto ins = instructions(words);
        REQUIRE(!ins.empty());
        std::set<uint32_t> nc, floats;
        uint32_t max_id = 0;
        for (auto& [op, ops] : ins) {
            if (op == sp::OpDecorate && ops.size() >= 2 && ops[1] == sp::DecorationNoContraction) nc.insert(ops[0]);
            if (op == sp::OpFMul || op == sp::OpFAdd || op == sp::OpFSub || op == sp::OpExtInst) floats.insert(ops[1]);
            if (op == sp::OpTypeInt || op == sp::OpTypeFloat || op == sp::OpLabel) max_id = std::max(max_id, ops[0]);
        }
        // The probe has one Fma, the kernels dozens; warm_l2 only loads and compares words.
        if (name != "warm_l2.spv") CHECK_GT(floats.size(), 0u);
        for (uint32_t id : floats) CHECK(nc.count(id));
        CHECK_LT(max_id, words[3]);
    }
}

TEST(every_module_bankml_emits_passes_spirv_val) {
    auto which = bt::run_cmd("command -v spirv-val");
    if (which.code != 0) SKIP("gpu", "spirv-val is not installed (apt-get install spirv-tools)");
    std::string dir = bt::temp_dir();
    // A module using what kernels do not: vectors, an ext instruction, a nested loop and selection.
    sp::Module x;
    uint32_t f = x.t_f32(), u = x.t_u32();
    uint32_t buf = x.storage_buffer(f, 0, false, "buf");
    uint32_t gid = x.builtin_u32x3(sp::BuiltInGlobalInvocationId);
    x.builtin_u32x3(sp::BuiltInWorkgroupId);
    x.entry_point(32);
    x.begin_main();
    uint32_t i = x.local_var(u);
    uint32_t g = x.builtin_x(gid);
    uint32_t v = x.load_elem(f, buf, g);
    uint32_t r = x.ext(f, sp::GlslFma, {v, v, x.c_f32(1.0f)});
    x.store(i, x.c_u32(0));
    x.loop([&] { return x.op(sp::OpULessThan, x.t_bool(), {x.load(u, i), x.c_u32(3)}); },
           [&] { x.if_then(x.op(sp::OpIEqual, x.t_bool(), {g, x.c_u32(0)}), [&] { x.store_elem(f, buf, g, r); }); },
           [&] { x.store(i, x.op(sp::OpIAdd, u, {x.load(u, i), x.c_u32(1)})); });
    x.end_main();
    auto mods = kernels::all_modules();
    mods.push_back({"assembler_features.spv", x.words()});
    for (auto& [name, words] : mods) {
        std::string path = dir + "/" + name;
        std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(words.data()), std::streamsize(words.size() * 4));
        auto res = bt::run_cmd("spirv-val --target-env vulkan1.1 " + path);
        if (!CHECK_EQ(res.code, 0)) std::printf("    %s: %s%s\n", name.c_str(), res.out.c_str(), res.err.c_str());
    }
}

// shader::f16_round_normal's sequence, c = x·(2^13 + 1), then c - (c - x), is the f16 rounding
// (round to nearest, ties to even) of every float of f16's normal range, |x| in [2^-14, 65520),
// and of ±0; just past that range (f16's subnormals, 65520 and up) it is not, which is why the
// walk takes it only where shader::f16_normal holds.
TEST(f16_round_normal_is_f16_rounding_on_every_float_of_the_normal_range) {
    using fma_detail::mul, fma_detail::sub, fma_detail::bits;
    auto veltkamp = [](float x) { float c = mul(x, 8193.0f); return sub(c, sub(c, x)); };
    auto f16 = [](float x) { return bankml::f16_to_f32(bankml::f32_to_f16(x)); };
    long bad = 0;
    for (uint32_t u = 0x38800000u; u < 0x477ff000u; ++u)
        for (uint32_t sign : {0u, 0x80000000u}) {
            const float x = from_bits(u | sign);
            bad += bits(veltkamp(x)) != bits(f16(x));
        }
    CHECK_EQ(bad, 0L);
    for (float z : {0.0f, -0.0f}) CHECK_EQ(bits(veltkamp(z)), bits(z));
    // Past the range: 65520 rounds to inf in f16, to 65536 here; an f16 subnormal keeps 11 bits here.
    CHECK(bits(veltkamp(65520.0f)) != bits(f16(65520.0f)));
    CHECK(bits(veltkamp(0x1.004p-20f)) != bits(f16(0x1.004p-20f)));  // 2^-20 + 2^-30: f16 keeps 2^-20
}

TEST(two_sum_is_exact) {
    std::mt19937_64 rng(5);
    for (int n = 0; n < 200000; ++n) {
        float a = from_bits(uint32_t(rng()) & 0xBFFFFFFFu), b = from_bits(uint32_t(rng()) & 0xBFFFFFFFu);
        float s, e;
        two_sum_ref(a, b, s, e);
        if (!CHECK_EQ(double(s) + double(e), double(a) + double(b))) return;  // doubles hold both sums exactly
    }
}

// a with at most 12 significant bits: the domain of fma_exact (an f16 scale has 11).
static float a12(std::mt19937_64& rng, int lo, int hi) {
    uint32_t e = uint32_t(lo + int(rng() % uint64_t(hi - lo)));
    return from_bits((uint32_t(rng()) & 0x807FF000u) | e << 23);
}

static long mismatches(float a, float b, float c, long& shown) {
    float got = fma_exact_ref(a, b, c), want = std::fma(a, b, c);
    // Without the signed-zero step the result is the same unless c is -0 (the kernels' case).
    float got_nz = fma_exact_ref(a, b, c, false);
    bool nz_ok = fbits(got_nz) == fbits(want) || (c == 0.0f && std::signbit(c));
    if (fbits(got) == fbits(want) && nz_ok) return 0;
    if (shown++ < 5) std::printf("    fma_exact(%a, %a, %a) = %a, std::fma %a\n", double(a), double(b), double(c), double(got), double(want));
    return 1;
}

TEST(fma_exact_matches_std_fma_on_random_triples) {
    std::mt19937_64 rng(2008);
    long bad = 0, shown = 0, n = 0;
    for (; n < 4000000; ++n) {
        float a = a12(rng, 90, 165);  // exponents -37..37: no overflow, no underflow
        float b = from_bits((uint32_t(rng()) & 0x807FFFFFu) | uint32_t(90 + rng() % 75) << 23);
        double p = double(a) * double(b);
        int ex;
        std::frexp(p, &ex);
        float c = std::ldexp(float(0.5 + double(rng() % (1u << 24)) / double(1u << 25)), ex + int(rng() % 70) - 35);
        if (rng() & 1) c = -c;
        switch (rng() % 6) {
            case 0: c = -float(p); break;                                        // cancellation
            case 1: c = from_bits(fbits(-float(p)) ^ uint32_t(rng() % 8)); break;  // near cancellation
            default: break;
        }
        bad += mismatches(a, b, c, shown);
    }
    CHECK_EQ(bad, 0L);
    CHECK_EQ(n, 4000000L);
}

TEST(fma_exact_matches_std_fma_on_ties_zeros_and_subnormals) {
    std::mt19937_64 rng(1958);
    long bad = 0, shown = 0;
    // Ties: c even with ulp 2, a·b an odd integer (scaled by 2^s): a·b + c lies halfway.
    for (int n = 0; n < 200000; ++n) {
        int s = int(rng() % 120) - 60;
        float c = std::ldexp(float((1u << 24) + 2 * (rng() % (1u << 23))), s);
        uint32_t odd = uint32_t(rng() % (1u << 20)) | 1u;
        uint32_t a_int = uint32_t(1 + rng() % 15) | 1u;  // odd, <= 4 bits
        float a = float(a_int), b = std::ldexp(float(odd), s);
        if (rng() & 1) a = -a, c = -c;
        bad += mismatches(a, b, c, shown);
        bad += mismatches(a, b, -c, shown);
    }
    // Zeros and signs.
    for (float a : {0.0f, -0.0f, 1.0f, -1.5f})
        for (float b : {0.0f, -0.0f, 3.0f, -0x1.fffffep-1f})
            for (float c : {0.0f, -0.0f, 2.0f, -2.0f}) bad += mismatches(a, b, c, shown);
    // Subnormals: c and the result subnormal or tiny; a·b's partial products stay exact (their
    // lowest bits are at or above 2^-149, the precondition).
    for (int n = 0; n < 1000000; ++n) {
        int ea = int(rng() % 40) - 30;                     // a = A·2^ea, A < 2^12
        float a = std::ldexp(float(rng() % 4096), ea);
        int eb = -149 - ea + int(rng() % 8);               // b = B·2^eb, B < 2^24
        float b = std::ldexp(float(rng() % (1u << 24)), eb);
        float c = from_bits(uint32_t(rng() % 0x01000000u) | (rng() & 1 ? 0x80000000u : 0u));  // subnormal to 2^-125
        if (rng() % 4 == 0) c = -std::fma(a, b, 0.0f);
        bad += mismatches(a, b, c, shown);
    }
    CHECK_EQ(bad, 0L);
}
