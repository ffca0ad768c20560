// The op kernels of the forward pass on the card (gpu/op_kernels.h) against the CPU ops, through
// their on-card oracle (model/verify_gpu.h): every kernel bit-exact on random and adversarial data
// (small shapes), a corrupted output refused for each, every module valid SPIR-V, and the
// `bankml gpu --verify --json` document.
#include <algorithm>
#include <bit>
#include <cstring>
#include <random>
#include <fstream>

#include "core/error.h"
#include "core/json.h"
#include "gpu/compute.h"
#include "gpu/kernels.h"
#include "gpu/op_kernels.h"
#include "model/verify_gpu.h"
#include "gpu_device.h"
#include "test.h"

using namespace bankml;

namespace {

gpu::Gpu* test_gpu() {
    bt::TestGpu& t = bt::test_gpu_device();
    if (!t.gpu) SKIP("gpu", t.why);
    if (!t.gpu->has_f64()) SKIP("gpu", "this card has no shaderFloat64 (the op kernels need it)");
    return t.gpu.get();
}

// The Build bankml would use on this card: the Fma path its probe proves, the host's expf.
gpu::ops::Build card_build(gpu::Gpu& g) {
    return gpu::ops::build_for(g, gpu::kernels::probe_native_fma(g).native);
}

// One kernel's small shapes: every case bit-exact (verify_ops throws on the first difference,
// naming it), with the kinds of data the oracle promises.
void bit_exact(const char* kernel, std::initializer_list<const char*> kinds) {
    gpu::Gpu* g = test_gpu();
    model::VerifyOpsOptions o;
    o.only = kernel;
    std::vector<gpu::kernels::Check> checks;
    o.checks = &checks;
    std::vector<std::string> lines;
    try {
        lines = model::verify_ops(*g, card_build(*g), o);
    } catch (const std::exception& e) {
        bt::fail(__FILE__, __LINE__, e.what());
        return;
    }
    REQUIRE(!checks.empty());
    // A card that needs soft f32 runs the guarded build too, and one line sums its flags up.
    const bool guard = gpu::ops::has_guard(gpu::ops::guarded(card_build(*g)));
    if (guard) {
        REQUIRE(lines.back().find("guarded f32: ") == 0);
        lines.pop_back();
    }
    REQUIRE_EQ(lines.size(), checks.size());
    size_t guarded = 0;
    for (size_t i = 0; i < checks.size(); ++i) {
        const bool g_run = checks[i].name == std::string(kernel) + " (guarded f32)";
        guarded += g_run;
        CHECK(checks[i].name == kernel || g_run);
        CHECK(checks[i].bit_exact);
        CHECK_GT(checks[i].rows, 0u);
        CHECK(lines[i].find(checks[i].name + " " + checks[i].shape + ": ") == 0);
        CHECK(lines[i].find(" words bit-exact") != std::string::npos || lines[i].find("flagged a subnormal") != std::string::npos);
    }
    CHECK_EQ(guarded, guard ? checks.size() / 2 : 0);
    for (const char* k : kinds) {
        bool seen = false;
        for (auto& c : checks) seen |= c.shape.find(std::string("(") + k + ")") != std::string::npos;
        if (!CHECK(seen)) std::printf("    no %s case for %s\n", k, kernel);
    }
}

// A card whose output differs in one bit is refused, with the kernel, the shape, the output's
// index and both values named.
void refused(const char* kernel, size_t word) {
    gpu::Gpu* g = test_gpu();
    model::VerifyOpsOptions o;
    o.only = kernel;
    std::vector<gpu::kernels::Check> checks;
    o.checks = &checks;
    size_t calls = 0;
    o.corrupt = [&](const std::string& k, std::vector<uint32_t>& w) {
        CHECK_EQ(k, std::string(kernel));
        if (word < w.size()) w[word] ^= 1u;
        ++calls;
    };
    std::string what;
    int code = 0;
    try {
        model::verify_ops(*g, card_build(*g), o);
    } catch (const Error& e) {
        what = e.what();
        code = e.code;
    }
    CHECK_EQ(code, 2);
    CHECK_GT(calls, 0u);  // every case of the kernel runs (and fails): one run names them all
    CHECK(what.find(std::string(kernel) + " ") == 0);
    CHECK(what.find("[" + std::to_string(word) + "] differs (card ") != std::string::npos);
    CHECK(what.find(", CPU ") != std::string::npos);
    REQUIRE_EQ(checks.size(), size_t(calls));
    for (const auto& c : checks) CHECK(!c.bit_exact);
    if (what.find("differs") == std::string::npos) std::printf("    got: %s\n", what.c_str());
}

// The oracle's checks of one kernel on the test card (verify_ops with its build).
std::vector<gpu::kernels::Check> oracle_checks(const char* kernel) {
    gpu::Gpu* g = test_gpu();
    model::VerifyOpsOptions o;
    o.only = kernel;
    std::vector<gpu::kernels::Check> checks;
    o.checks = &checks;
    model::verify_ops(*g, card_build(*g), o);
    return checks;
}

}  // namespace

TEST(gpu_op_rms_norm_bit_exact) {
    bit_exact("rms_norm", {"random", "spread exponents", "narrow spread", "sparse rounding", "huge first", "last place", "subnormal squares", "ties",
                           "some ties", "large few", "zeros",
                           "equal", "mean on a boundary", "mean on a boundary, rounded up", "residual random", "residual cancel", "residual spread"});
}
TEST(gpu_op_rms_norm_q8_bit_exact) {
    bit_exact("rms_norm_q8", {"random", "spread exponents", "narrow spread", "sparse rounding", "huge first", "last place", "subnormal squares",
                              "ties", "some ties", "large few", "zeros", "equal", "mean on a boundary", "mean on a boundary, rounded up", "residual random", "residual cancel",
                              "residual spread"});
}
// The rows the forward pass compiles into rms_norm_q8's pipeline (the real shapes' and the tiny
// models'), each checked by the oracle with that pipeline; other rows keep the general one.
TEST(gpu_op_rms_norm_q8_rows_compiled_in_are_checked) {
    for (uint32_t n : {256u, 2048u, 2560u, 4096u}) {
        const std::vector<gpu::SpecValue> s = gpu::ops::norm_spec(n);
        REQUIRE_EQ(s.size(), 1u);
        CHECK_EQ(s[0].id, gpu::ops::SPEC_NORM_VALUES);
        CHECK_EQ(s[0].value, n / 256);
    }
    for (uint32_t n : {32u, 1056u, 3072u, 8192u}) CHECK(gpu::ops::norm_spec(n).empty());
    // Each compiled-in row is a pipeline of its own in a cache keyed by name.
    CHECK_EQ(gpu::ops::spec_suffix(gpu::ops::norm_spec(2048)), std::string("/1=8"));
    CHECK_EQ(gpu::ops::spec_suffix({}), std::string(""));
    CHECK_EQ(gpu::ops::spec_values(gpu::ops::Build{}, gpu::ops::norm_spec(4096)).size(), 2u);
    const std::vector<gpu::kernels::Check> checks = oracle_checks("rms_norm_q8");
    for (uint32_t n : gpu::ops::NORM_ROWS_COMPILED_IN) {
        size_t seen = 0;
        for (const auto& c : checks) seen += c.shape.find("1×" + std::to_string(n) + ", the row compiled in (") == 0 && c.bit_exact;
        CHECK_GE(seen, 17u);  // every kind of row data
    }
}
// A layer's Q2_0 product runs with 32 lanes a row, an output matrix's with 16 (its pipeline's
// lanes compiled in); the oracle checks every shape with both pipelines.
TEST(gpu_op_q2_0_lanes_of_wide_matrices_are_checked) {
    CHECK_EQ(gpu::ops::q2_0_lanes(12288), 32u);
    CHECK_EQ(gpu::ops::q2_0_lanes(151936), 16u);
    CHECK(gpu::ops::q2_0_spec(32).empty());
    CHECK_THROWS(gpu::ops::q2_0_spec(8), "q2_0_spec: 8 lanes a row (16 or 32)");
    const std::vector<gpu::SpecValue> s = gpu::ops::q2_0_spec(16);
    REQUIRE_EQ(s.size(), 1u);
    CHECK_EQ(s[0].id, gpu::ops::SPEC_Q2_0_LANES);
    CHECK_EQ(s[0].value, 16u);
    CHECK_EQ(gpu::ops::q2_0_groups(151936, 16), 151936u / 16);
    CHECK_EQ(gpu::ops::q2_0_groups(37), 5u);
    const std::vector<gpu::kernels::Check> checks = oracle_checks("q2_0_mat_vec");
    size_t wide = 0, plain = 0;
    for (const auto& c : checks) {
        CHECK(c.bit_exact);
        if (c.name != "q2_0_mat_vec") continue;
        (c.shape.find(", 16 lanes a row") != std::string::npos ? wide : plain)++;
    }
    CHECK_GE(plain, 5u);
    CHECK_EQ(wide, plain);
}
// A model whose products read one of prep_act's outputs (Q1_0: the table, Q2_0: the quants, F16:
// the f16 pairs) prepares only that one (SPEC_ACT_OUTPUTS); the oracle checks each such pipeline
// of every kernel that prepares a product's input, the outputs left out still poisoned.
TEST(gpu_op_act_outputs_alone_are_checked) {
    namespace go = gpu::ops;
    CHECK(go::act_spec(go::ACT_ALL).empty());
    CHECK_THROWS(go::act_spec(0), "act_spec: outputs 0 (a mask of 1, 2, 4)");
    CHECK_THROWS(go::act_spec(8), "act_spec: outputs 8 (a mask of 1, 2, 4)");
    const std::vector<gpu::SpecValue> s = go::act_spec(go::ACT_Q8);
    REQUIRE_EQ(s.size(), 1u);
    CHECK_EQ(s[0].id, go::SPEC_ACT_OUTPUTS);
    CHECK_EQ(s[0].value, go::ACT_Q8);
    const std::vector<gpu::SpecValue> h = go::act_spec(go::ACT_TABLE, go::head_spec(128));  // a shape's values first
    REQUIRE_EQ(h.size(), 2u);
    CHECK_EQ(h[0].id, go::SPEC_HEAD_DIM);
    CHECK_EQ(h[1].id, go::SPEC_ACT_OUTPUTS);
    CHECK_EQ(h[1].value, go::ACT_TABLE);
    for (const char* k : {"rms_norm_q8", "prep_act", "attention_q8", "swiglu_q1_0_q8", "swiglu_q2_0_q8"}) {
        const std::vector<gpu::kernels::Check> checks = oracle_checks(k);
        size_t table = 0, quants = 0, f16 = 0;
        for (const auto& c : checks) {
            CHECK(c.bit_exact);
            table += c.shape.find(", the table alone") != std::string::npos;
            quants += c.shape.find(", the quants alone") != std::string::npos;
            f16 += c.shape.find(", the f16 pairs alone") != std::string::npos;
        }
        CHECK_GE(table, 1u);
        CHECK_EQ(quants, table);
        CHECK_EQ(f16, table);
    }
}
// The head size the forward pass compiles into head_norm_rope's and attention's pipelines (every
// qwen3 model's), checked by the oracle with those pipelines; other sizes keep the general ones.
TEST(gpu_op_head_dims_compiled_in_are_checked) {
    const std::vector<gpu::SpecValue> s = gpu::ops::head_spec(128);
    REQUIRE_EQ(s.size(), 1u);
    CHECK_EQ(s[0].id, gpu::ops::SPEC_HEAD_DIM);
    CHECK_EQ(s[0].value, 128u);
    for (uint32_t d : {32u, 64u, 256u}) CHECK(gpu::ops::head_spec(d).empty());
    for (const char* k : {"head_norm_rope", "attention_q8"}) {
        const std::vector<gpu::kernels::Check> checks = oracle_checks(k);
        size_t compiled_in = 0, general = 0;
        for (const auto& c : checks) {
            CHECK(c.bit_exact);
            const bool d128 = c.shape.find("×128") != std::string::npos;
            compiled_in += d128 && c.shape.find("×128, D compiled in ") != std::string::npos;
            general += !d128 && c.shape.find("compiled in") == std::string::npos;
        }
        CHECK_GE(compiled_in, 5u);  // every kind of data at D = 128
        CHECK_GE(general, 2u);      // D = 32 and 256
    }
}
// The oracle checks every workgroup's blocks: a word of quants of the second workgroup's span
// (every row the oracle has, the shortest compiled-in one of 256 included, has one; four quants a
// word) that differs refuses the card.
TEST(gpu_op_rms_norm_q8_refused_for_a_wrong_block_of_a_later_workgroup) {
    CHECK_EQ(gpu::ops::norm_q8_groups(256), 2u);
    CHECK_EQ(50 * 4 / gpu::ops::NORM_Q8_SPAN, 1u);
    refused("rms_norm_q8", 50);
}

// rms_norm_q8 against the two dispatches it replaces, on the card: rms_norm (x in place) then
// prep_act give every word it gives, in every workgroup, and its x_out is rms_norm's x. A dispatch
// one workgroup short leaves the last span's blocks unwritten, and only those.
TEST(gpu_op_rms_norm_q8_is_rms_norm_then_prep_act) {
    gpu::Gpu* g = test_gpu();
    const gpu::ops::Build b = card_build(*g);
    REQUIRE(!gpu::ops::has_guard(b));
    const uint32_t n = 1056, w_off = 3, groups = gpu::ops::norm_q8_groups(n), blocks = n / 32;
    const float eps = 1e-6f;
    REQUIRE(groups > 2u);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(n), add(n), w(w_off + n);
    for (float& v : x) v = normal(rng);
    for (float& v : add) v = 0.5f * normal(rng);
    for (float& v : w) v = 1.0f + 0.1f * normal(rng);
    std::vector<gpu::Buffer> live;
    auto buf = [&](const std::vector<float>& v) {
        live.push_back(g->readback_buffer(v.size() * 4));
        g->write(live.back(), std::span<const float>(v));
        return live.size() - 1;
    };
    auto poisoned = [&](size_t words) { return buf(std::vector<float>(words, std::bit_cast<float>(0x7fbadbadu))); };
    auto words = [&](size_t i, size_t count) {
        std::vector<uint32_t> o(count);
        std::memcpy(o.data(), live[i].mapped, count * 4);
        return o;
    };
    auto pipe = [&](const char* name) {
        const gpu::ops::OpKernel& k = gpu::ops::op_kernel(name);
        return g->pipeline(k.build(b), gpu::ops::bindings(k, b), k.push_words * 4, gpu::ops::spec_values(b));
    };
    gpu::Pipeline norm = pipe("rms_norm"), prep = pipe("prep_act"), norm_q8 = pipe("rms_norm_q8");
    const std::vector<uint32_t> push{n, w_off, std::bit_cast<uint32_t>(eps), 1u};
    const size_t tf = gpu::ops::table_floats(n), table = size_t(blocks) * 128;
    // The pair.
    const size_t rx = buf(x), ra = buf(add), rw = buf(w), ry = poisoned(n), rt = poisoned(tf), rq = poisoned(n), rd = poisoned(2 * blocks),
                 rh = poisoned(n / 2);
    g->run(norm, std::vector<const gpu::Buffer*>{&live[rx], &live[ra], &live[rw], &live[ry]}, push, 1);
    g->run(prep, std::vector<const gpu::Buffer*>{&live[ry], &live[rt], &live[rq], &live[rd], &live[rh]}, std::vector<uint32_t>{n, 0u, 0u}, blocks);
    // rms_norm_q8, with every workgroup and with one fewer.
    for (uint32_t gs : {groups, groups - 1}) {
        const size_t qx = buf(x), qo = poisoned(n), qt = poisoned(tf), qq = poisoned(n), qd = poisoned(2 * blocks), qh = poisoned(n / 2);
        g->run(norm_q8, std::vector<const gpu::Buffer*>{&live[qx], &live[ra], &live[rw], &live[qo], &live[qt], &live[qq], &live[qd], &live[qh]},
               push, gs);
        CHECK(std::memcmp(live[qx].mapped, x.data(), n * 4) == 0);  // x is only read
        CHECK(words(qo, n) == words(rx, n));  // the first workgroup writes the whole row
        const uint32_t done = std::min(n, gs * gpu::ops::NORM_Q8_SPAN);  // values of the spans that ran
        auto same = [&](size_t got, size_t want, size_t count, size_t upto) {
            const std::vector<uint32_t> a = words(got, count), e = words(want, count);
            size_t equal = 0;
            for (size_t i = 0; i < count; ++i) equal += a[i] == e[i];
            return CHECK_EQ(equal, upto) && std::equal(a.begin(), a.begin() + long(upto), e.begin());
        };
        same(qd, rd, 2 * blocks, done / 16);  // a scale and a quant sum a block
        same(qt, rt, table, done / 32 * 128);
        same(qh, rh, n / 2, done / 2);
        // The quants where q8_word puts them: the spans that ran as the pair's, the others the poison.
        const std::vector<uint32_t> got = words(qq, gpu::ops::q8_words(n)), want = words(rq, gpu::ops::q8_words(n));
        size_t wrong = 0, poison = 0;
        for (size_t w = 0; w < n / 4; ++w) {
            const size_t at = gpu::ops::q8_word(w, n);
            wrong += got[at] != (w < done / 4 ? want[at] : 0x7fbadbadu);
            poison += got[at] == 0x7fbadbadu;
        }
        CHECK_EQ(wrong, 0u);
        CHECK_EQ(poison, size_t(n - done) / 4);
    }
    CHECK(std::memcmp(live[rx].mapped, x.data(), n * 4) != 0);  // the residual was added
    for (gpu::Buffer& bb : live) g->free(bb);
}

// The activation's quants by word group: every word of n values has a place of its own inside
// q8_words(n); a row's lanes, a block each, find group g of consecutive blocks in consecutive
// 16-byte pieces; a block's four words of a group stay together, in order.
TEST(gpu_op_q8_word_puts_each_blocks_group_together) {
    for (size_t n : {64u, 128u, 1056u, 2048u, 6144u}) {
        const size_t nb = gpu::ops::q8_blocks(n), words = gpu::ops::q8_words(n);
        CHECK_EQ(words, nb * 16);
        std::vector<int> seen(words, 0);
        for (size_t w = 0; w < n / 4; ++w) {
            const size_t at = gpu::ops::q8_word(w, n);
            REQUIRE(at < words);
            ++seen[at];
            const size_t blk = w / 16, g = w / 4 % 4, j = w % 4;
            if (j == 0) CHECK_EQ(at % 4, 0u);                                          // a group is one aligned 16-byte load
            if (j < 3 && w + 1 < n / 4) CHECK_EQ(gpu::ops::q8_word(w + 1, n), at + 1);  // its words in order
            if (blk + 1 < nb && w + 16 < n / 4) CHECK_EQ(gpu::ops::q8_word(w + 16, n), at + 4);  // the next block's group next
            if (blk == 0 && j == 0) CHECK_EQ(at, g * nb * 4);                           // group g after every block's group g - 1
        }
        CHECK_EQ(size_t(std::count(seen.begin(), seen.end(), 1)), n / 4);
        CHECK_EQ(size_t(std::count(seen.begin(), seen.end(), 0)), words - n / 4);
    }
}

TEST(gpu_op_sum_squares_bit_exact) {
    bit_exact("sum_squares", {"random", "spread exponents", "narrow spread", "sparse rounding", "huge first", "last place", "subnormal squares",
                              "ties", "some ties", "large few", "zeros", "equal", "mean on a boundary", "mean on a boundary, rounded up"});
}
TEST(gpu_op_prep_act_bit_exact) {
    bit_exact("prep_act", {"random", "zero blocks", "rounding ties", "subnormal", "huge", "f16 ties"});
}
TEST(gpu_op_swiglu_q1_0_q8_bit_exact) { bit_exact("swiglu_q1_0_q8", {"random"}); }
TEST(gpu_op_q2_0_mat_vec_bit_exact) { bit_exact("q2_0_mat_vec", {"random", "extreme", "tiny"}); }
TEST(gpu_op_swiglu_q2_0_q8_bit_exact) { bit_exact("swiglu_q2_0_q8", {"random"}); }
// A card without the packed 8-bit dot product sums a block's products in integer steps: the same
// bits (the card under test may have the instruction: its build is forced to the steps here).
// verify_ops of one kernel with build b: every case runs, every case bit-exact.
static void bit_exact_with(gpu::Gpu& g, const gpu::ops::Build& b, const char* kernel) {
    model::VerifyOpsOptions o;
    o.only = kernel;
    std::vector<gpu::kernels::Check> checks;
    o.checks = &checks;
    try {
        model::verify_ops(g, b, o);
    } catch (const std::exception& e) {
        bt::fail(__FILE__, __LINE__, e.what());
    }
    REQUIRE(!checks.empty());
    for (const auto& c : checks) CHECK(c.bit_exact);
}
TEST(gpu_op_q2_0_kernels_bit_exact_without_the_dot_product) {
    gpu::Gpu* g = test_gpu();
    gpu::ops::Build b = card_build(*g);
    b.int_dot = false;
    bit_exact_with(*g, b, "q2_0_mat_vec");
    bit_exact_with(*g, b, "swiglu_q2_0_q8");
}
// The norms' workgroup sums: with the card's subgroup arithmetic (each subgroup reduced, one
// partial a subgroup added in index order) and with the workgroup tree, both bit-exact on every
// kind of data the norms' oracle has (the card's own build takes the first where it offers it).
void norms_bit_exact(bool subgroup) {
    gpu::Gpu* g = test_gpu();
    gpu::ops::Build b = card_build(*g);
    if (subgroup && !g->subgroup_arithmetic()) SKIP("gpu", "the card offers no subgroup arithmetic in compute shaders");
    CHECK_EQ(b.subgroup, g->subgroup_arithmetic() && g->has_f64());
    b.subgroup = subgroup;
    for (const char* k : gpu::ops::SUBGROUP_KERNELS) {
        // The flag changes the module: the subgroup sum is there exactly when asked for.
        const std::vector<uint32_t> w = gpu::ops::op_kernel(k).build(b);
        bool has_sum = false;
        for (size_t i = 5; i < w.size(); i += w[i] >> 16) has_sum |= (w[i] & 0xffffu) == gpu::spirv::OpGroupNonUniformFAdd;
        CHECK_EQ(has_sum, subgroup);
        bit_exact_with(*g, b, k);
    }
}
TEST(gpu_op_norms_bit_exact_with_subgroup_sums) { norms_bit_exact(true); }
TEST(gpu_op_norms_bit_exact_with_the_workgroup_tree) { norms_bit_exact(false); }
TEST(gpu_op_f16_mat_vec_bit_exact) { bit_exact("f16_mat_vec", {"random", "wide"}); }
TEST(gpu_op_head_norm_rope_bit_exact) { bit_exact("head_norm_rope", {"random", "spread exponents", "mean on a boundary"}); }
TEST(gpu_op_attention_bit_exact) { bit_exact("attention", {"random", "equal scores", "rise and fall", "large scores", "cancelling", "negative zero"}); }
TEST(gpu_op_attention_q8_bit_exact) { bit_exact("attention_q8", {"random", "equal scores", "rise and fall", "large scores", "cancelling", "negative zero"}); }
TEST(gpu_op_swiglu_bit_exact) { bit_exact("swiglu", {"random", "large gates", "subnormal gates"}); }
TEST(gpu_op_expf_bit_exact) { bit_exact("expf", {"specials, boundaries, every exponent"}); }
// expf's module holds glibc's fused and unfused sequences; the specialisation constant
// SPEC_EXPF_FUSED picks one per pipeline. Both pipelines of the one module, each against the C++
// twin of its own sequence, on the inputs where the two differ and on random bits; the host's
// variant is the verify test's (gpu_op_expf_bit_exact).
TEST(gpu_op_expf_both_sequences_by_specialisation_constant) {
    gpu::Gpu* g = test_gpu();
    gpu::ops::Build b = card_build(*g);
    const gpu::ops::OpKernel& k = gpu::ops::op_kernel("expf");
    gpu::ops::Build fused = b, unfused = b;
    fused.expf_fused = true;
    unfused.expf_fused = false;
    const std::vector<uint32_t> words = k.build(fused);
    CHECK(words == k.build(unfused));  // one module: the variant is not in its words
    // The constant, as the module declares it: a bool of SpecId SPEC_EXPF_FUSED, default true.
    bool spec_true = false, spec_id = false;
    for (size_t i = 5; i < words.size(); i += words[i] >> 16) {
        const uint16_t op = uint16_t(words[i] & 0xffff);
        spec_true |= op == gpu::spirv::OpSpecConstantTrue;
        spec_id |= op == gpu::spirv::OpDecorate && words[i + 2] == gpu::spirv::DecorationSpecId && words[i + 3] == gpu::ops::SPEC_EXPF_FUSED;
    }
    CHECK(spec_true && spec_id);
    std::vector<uint32_t> x;
    for (uint32_t c : {0x4202422fu, 0x00000000u, 0x7fc00001u, std::bit_cast<uint32_t>(-0x1.9d1d9ep6f), std::bit_cast<uint32_t>(0x1.62e42ep6f)})
        for (int d = -4; d <= 4; ++d) x.push_back(c + uint32_t(d));
    std::mt19937_64 rng(13);
    while (x.size() < (size_t(1) << 16)) x.push_back(uint32_t(rng()));
    auto run = [&](const gpu::ops::Build& with) {
        gpu::Pipeline p = g->pipeline(words, gpu::ops::bindings(k, with), k.push_words * 4, gpu::ops::spec_values(with));
        gpu::Buffer in = g->upload<uint32_t>(x), out = g->readback_buffer(x.size() * 4);
        const gpu::Buffer* bufs[] = {&in, &out};
        g->run(p, bufs, std::vector<uint32_t>{uint32_t(x.size())}, uint32_t((x.size() + 255) / 256));
        std::vector<uint32_t> y(x.size());
        std::memcpy(y.data(), out.mapped, y.size() * 4);
        g->free(in);
        g->free(out);
        return y;
    };
    const std::vector<uint32_t> yf = run(fused), yu = run(unfused);
    size_t wrong_f = 0, wrong_u = 0, differ = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const float xi = std::bit_cast<float>(x[i]);
        wrong_f += yf[i] != std::bit_cast<uint32_t>(gpu::ops::expf_libm_ref(xi, true));
        wrong_u += yu[i] != std::bit_cast<uint32_t>(gpu::ops::expf_libm_ref(xi, false));
        differ += yf[i] != yu[i];
    }
    CHECK_EQ(wrong_f, 0u);
    CHECK_EQ(wrong_u, 0u);
    CHECK_GT(differ, 0u);  // each pipeline took its own sequence
    CHECK(yf[4] != yu[4]);  // 0x4202422f, where glibc's two builds differ
    if (gpu::Gpu::validation_enabled()) {
        auto msgs = gpu::Gpu::validation_messages();
        for (auto& m : msgs) std::printf("    validation: %s\n", m.c_str());
        CHECK_EQ(msgs.size(), 0u);
    }
}
TEST(gpu_op_div_sqrt_bit_exact) { bit_exact("div_sqrt", {"quotients and roots next to midpoints, exact ones, random"}); }
// The exact division, square root and mean correct an estimate a step off, up or down, however
// they were given it: with every estimate moved to a neighbour, the kernels that make them (the
// probe, the norms' scales and means, the Q8_0 scales) still give the CPU's bits. A correction
// that did nothing would leave half the outputs a step off.
TEST(gpu_op_exact_ops_correct_an_estimate_a_step_off) {
    gpu::Gpu* g = test_gpu();
    gpu::ops::Build b = card_build(*g);
    b.float_modes |= gpu::shader::NUDGE_ESTIMATES;
    for (const char* k : {"div_sqrt", "rms_norm", "rms_norm_q8", "head_norm_rope", "prep_act", "attention_q8"}) {
        CHECK(gpu::ops::op_kernel(k).build(b) != gpu::ops::op_kernel(k).build(card_build(*g)));
        bit_exact_with(*g, b, k);
    }
}
TEST(gpu_op_f16_round_bit_exact) { bit_exact("f16_round", {"every f16, ties, boundaries, every exponent"}); }
// The token's embedding row: every code, subnormal and special scales (±0, the largest, ±infinity,
// NaN), every f16; tokens pushed and read from the state buffer; a token past the rows writes nothing.
TEST(gpu_op_embed_q1_0_bit_exact) { bit_exact("embed_q1_0", {"random", "subnormal scales", "special scales"}); }
TEST(gpu_op_embed_q2_0_bit_exact) { bit_exact("embed_q2_0", {"random", "subnormal scales", "special scales"}); }
TEST(gpu_op_embed_f16_bit_exact) { bit_exact("embed_f16", {"random", "every f16"}); }

// The guard's proof on any card: with every subnormal f32 result and load flushed as a card without
// DenormPreserve may flush them, each guarded run gives the CPU's bits or raises its flag (the
// adversarial data raises it, random data does not), while the same flushing kernels without the
// guard differ from the CPU.
TEST(gpu_op_guard_flags_every_run_a_flushing_card_would_change) {
    gpu::Gpu* g = test_gpu();
    gpu::ops::Build exact = card_build(*g);
    exact.float_modes = (exact.float_modes & ~uint32_t(gpu::shader::DENORM32)) | gpu::shader::SOFT_F32 | gpu::shader::FLUSH_F32;
    model::VerifyOpsOptions o;
    std::vector<std::string> lines;
    try {
        lines = model::verify_ops(*g, exact, o);
    } catch (const std::exception& e) {
        bt::fail(__FILE__, __LINE__, e.what());
        return;
    }
    REQUIRE(!lines.empty());
    const std::string sum = lines.back();
    CHECK(sum.find("guarded f32: ") == 0);
    size_t flagged = 0, unflagged = 0;
    std::sscanf(sum.c_str(), "guarded f32: %zu runs flagged a subnormal (the exact build runs instead), %zu", &flagged, &unflagged);
    CHECK_GT(flagged, (size_t)8);
    CHECK_GT(unflagged, (size_t)8);
    size_t differed = 0;
    size_t norm_sites = 0;
    for (const std::string& l : lines) {
        const bool d = l.find("flagged a subnormal (the exact build") != std::string::npos && l.find("guarded f32: ") != 0;
        differed += d;
        // Each flag names the parts of the kernel that raised it (rms_norm marks its three).
        if (d) CHECK(l.find(", raised in ") != std::string::npos && l.find(", raised in ") + 12 < l.size());
        if (d && l.rfind("rms_norm", 0) == 0) norm_sites += l.find("raised in rms_norm sum") != std::string::npos;
    }
    CHECK_GT(norm_sites, (size_t)0);
    // Scores that cancel exactly to zero are every card's zeros: the guard lets them pass.
    size_t cancelling = 0;
    for (const std::string& l : lines)
        if (l.rfind("attention (guarded f32)", 0) == 0 && l.find("(cancelling)") != std::string::npos) {
            ++cancelling;
            CHECK(l.find("bit-exact, ") != std::string::npos && l.find("flagged") == std::string::npos);
        }
    CHECK_EQ(cancelling, (size_t)1);
    // Quotients and roots of normal floats that stay at least twice the smallest normal pass the
    // guard unflagged (the probe's pairs keep them there).
    size_t div_sqrt = 0;
    for (const std::string& l : lines)
        if (l.rfind("div_sqrt (guarded f32)", 0) == 0) {
            ++div_sqrt;
            CHECK(l.find("bit-exact, ") != std::string::npos && l.find("flagged") == std::string::npos);
        }
    CHECK_EQ(div_sqrt, (size_t)1);
    std::printf("    %s; %zu differed\n", sum.c_str(), differed);
    CHECK_GT(differed, (size_t)0);  // the flushing changed outputs, and the guard caught each
    // Without the guard the flushing kernels are refused.
    gpu::ops::Build flushing = exact;
    flushing.float_modes &= ~uint32_t(gpu::shader::SOFT_F32);
    CHECK_THROWS(model::verify_ops(*g, flushing, o), "differs");
}

TEST(gpu_op_corrupted_output_refused_for_each_kernel) {
    // (sum_squares' output is two words.)
    for (const gpu::ops::OpKernel& k : gpu::ops::op_kernels()) refused(k.name, std::string(k.name) == "sum_squares" ? 1 : 3);
    CHECK_THROWS(model::verify_ops(*test_gpu(), {}, [] { model::VerifyOpsOptions o; o.only = "nonsense"; return o; }()), "no kernel named nonsense");
}

// The quantizers round x·id to even by adds (shader::round_even), never by the driver's RoundEven:
// lavapipe's rounds some ties toward zero (1.5 to 1), which the "rounding ties" case above shows.
TEST(gpu_op_modules_round_without_the_drivers_round_even) {
    size_t ext = 0;
    for (const auto& [name, w] : model::op_modules())
        for (size_t i = 5; i < w.size() && (w[i] >> 16); i += w[i] >> 16)
            if ((w[i] & 0xffffu) == gpu::spirv::OpExtInst) {
                ++ext;
                if (!CHECK(w[i + 4] != gpu::spirv::GlslRoundEven)) std::printf("    %s\n", name.c_str());
            }
    CHECK_GT(ext, 0u);  // (the scan sees the other GLSL instructions the kernels use)
}

TEST(gpu_op_modules_pass_spirv_val) {
    auto mods = model::op_modules();
    // Both Fma paths of every kernel, each plain, soft and guarded, the Q2_0 kernels with the
    // packed 8-bit dot product, and the norms with subgroup arithmetic.
    const size_t n_sub = std::size(gpu::ops::SUBGROUP_KERNELS), n_dot = std::size(gpu::ops::INT_DOT_KERNELS);
    CHECK_EQ(mods.size(), 6 * gpu::ops::op_kernels().size() + n_dot + n_sub);
    CHECK_EQ(mods[mods.size() - n_dot - n_sub].first, "q2_0_mat_vec_int_dot.spv");
    CHECK_EQ(mods[mods.size() - 1 - n_sub].first, "swiglu_q2_0_q8_int_dot.spv");
    CHECK_EQ(mods[mods.size() - n_sub].first, "rms_norm_subgroup.spv");
    CHECK_EQ(mods.back().first, "head_norm_rope_subgroup.spv");
    CHECK_EQ(mods[0].first, "rms_norm.spv");
    CHECK_EQ(mods[1].first, "rms_norm_fma.spv");
    CHECK_EQ(mods[2].first, "rms_norm_soft.spv");
    CHECK_EQ(mods[5].first, "rms_norm_guarded_fma.spv");
    // The workgroup memory the oracle checks against the card's limit: rms_norm's chunk of 4096
    // squares and its scan, at least.
    CHECK_GT(model::workgroup_bytes(mods[0].second), 4096u * 4);
    CHECK_EQ(model::workgroup_bytes(gpu::kernels::fma_probe()), 0u);
    auto which = bt::run_cmd("command -v spirv-val");
    if (which.code != 0) SKIP("gpu", "spirv-val is not installed (apt-get install spirv-tools)");
    std::string dir = bt::temp_dir();
    for (auto& [name, words] : mods) {
        std::string path = dir + "/" + name;
        std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(words.data()), std::streamsize(words.size() * 4));
        auto res = bt::run_cmd("spirv-val --target-env vulkan1.1 " + path);
        if (!CHECK_EQ(res.code, 0)) std::printf("    %s: %s%s\n", name.c_str(), res.out.c_str(), res.err.c_str());
    }
}

TEST(gpu_verify_json_and_dump_spirv_of_the_op_kernels) {
    auto none = bt::run_cmd("BANKML_GPU=off " + bt::bankml_bin() + " gpu --verify --json");
    CHECK_EQ(none.code, 0);
    auto nd = json::parse(none.out);
    CHECK(nd["devices"].is_array());
    CHECK_EQ(nd["devices"].size(), 0u);
    std::string dir = bt::temp_dir();
    auto d = bt::run_cmd(bt::bankml_bin() + " gpu --dump-spirv " + dir + "/spv");
    CHECK_EQ(d.code, 0);
    for (auto& [name, words] : model::op_modules()) CHECK_EQ(bt::read_file(dir + "/spv/" + name).size(), words.size() * 4);
    auto usage = bt::run_cmd(bt::bankml_bin() + " gpu --full");
    CHECK_EQ(usage.code, 2);

    bool lavapipe = false;
    for (auto& dev : gpu::Gpu::devices()) lavapipe |= dev.kind == gpu::Kind::Cpu;
    if (!lavapipe) SKIP("gpu", "no software renderer here to run --verify on");
    const std::string env = "BANKML_GPU=0 BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU_TEST_SMALL=1 ";
    auto ok = bt::run_cmd(env + bt::bankml_bin() + " gpu --verify --json");
    CHECK_EQ(ok.code, 0);
    auto v = json::parse(ok.out);
    REQUIRE_EQ(v["devices"].size(), 1u);
    const json::Value& dev = v["devices"][0];
    CHECK_EQ(dev["index"].as_int(), 0);
    CHECK(dev["name"].is_string());
    CHECK(dev["verified"].as_bool());
    CHECK(dev["reason"].is_null());
    std::vector<std::string> names;
    for (const json::Value& k : dev["kernels"].as_array()) {
        CHECK(k["name"].is_string() && k["shape"].is_string() && k["rows"].is_integer() && k["ms"].is_number());
        CHECK(k["bit_exact"].as_bool());
        if (names.empty() || names.back() != k["name"].as_string()) names.push_back(k["name"].as_string());
    }
    for (const char* want : {"q1_0_mat_vec", "q1_0_mat_vec8", "rms_norm", "rms_norm_q8", "prep_act", "q2_0_mat_vec", "f16_mat_vec", "head_norm_rope",
                             "attention", "swiglu", "expf", "f16_round"})
        if (!CHECK(std::find(names.begin(), names.end(), want) != names.end())) std::printf("    no %s in --json\n", want);
    // The text form names the op kernels too.
    auto text = bt::run_cmd(env + "BANKML_GPU_TEST_CORRUPT_ROW=3 BANKML_GPU_TEST_CORRUPT_KERNEL=rms_norm " + bt::bankml_bin() + " gpu --verify");
    CHECK_EQ(text.code, 2);
    CHECK(text.out.find("q1_0_mat_vec8 267×512 random: 267 of 267 rows bit-exact") != std::string::npos);
    CHECK(text.out.find("NOT VERIFIED — rms_norm 1×1000 (random): y[3] differs (card ") != std::string::npos);
    // It says what the card offers of subgroups; the test hook takes them away (the workgroup tree).
    CHECK(text.out.find("  subgroups: size ") != std::string::npos);
    auto no_sub = bt::run_cmd(env + "BANKML_GPU_NO_SUBGROUPS=1 BANKML_GPU_TEST_CORRUPT_ROW=3 BANKML_GPU_TEST_CORRUPT_KERNEL=rms_norm " +
                              bt::bankml_bin() + " gpu --verify");
    CHECK_EQ(no_sub.code, 2);
    CHECK(no_sub.out.find("arithmetic in compute shaders no (the norms' workgroup sums: a tree)") != std::string::npos);
    // A corrupted op kernel refuses the card whole, in the JSON too, each of its checks marked.
    auto bad = bt::run_cmd(env + "BANKML_GPU_TEST_CORRUPT_ROW=3 BANKML_GPU_TEST_CORRUPT_KERNEL=rms_norm " + bt::bankml_bin() + " gpu --verify --json");
    CHECK_EQ(bad.code, 2);
    auto b = json::parse(bad.out);
    REQUIRE_EQ(b["devices"].size(), 1u);
    CHECK(!b["devices"][0]["verified"].as_bool());
    CHECK(b["devices"][0]["reason"].as_string().find("rms_norm 1×1000 (random): y[3] differs") == 0);
    const json::Value& ks = b["devices"][0]["kernels"];
    REQUIRE(ks.size() > 0);
    size_t failed = 0, others_failed = 0;
    for (size_t i = 0; i < ks.size(); ++i) {
        if (ks[i]["bit_exact"].as_bool()) continue;
        (ks[i]["name"].as_string() == "rms_norm" ? failed : others_failed)++;
    }
    CHECK_GT(failed, (size_t)0);
    CHECK_EQ(others_failed, (size_t)0);
}

// A model opens on the card only after the card passed every op kernel (small shapes): a card
// whose attention differs in one bit keeps the model on the CPU, and says why.
TEST(gpu_model_stays_on_the_cpu_when_an_op_kernel_differs) {
    bool lavapipe = false;
    for (auto& dev : gpu::Gpu::devices()) lavapipe |= dev.kind == gpu::Kind::Cpu;
    if (!lavapipe) SKIP("gpu", "no software renderer here to run the model on");
    const std::string run = bt::bankml_bin() + " run -m " + bt::data_path("tiny-q2_0.gguf") + " --tokens 1,2,3 -n 2";
    auto ok = bt::run_cmd("BANKML_GPU=0 BANKML_GPU_ALLOW_SOFTWARE=1 " + run);
    CHECK_EQ(ok.code, 0);
    CHECK(ok.err.find("bankml: GPU: llvmpipe") != std::string::npos && ok.err.find("runs the model") != std::string::npos);
    auto bad = bt::run_cmd("BANKML_GPU=0 BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU_TEST_CORRUPT_ROW=3 BANKML_GPU_TEST_CORRUPT_KERNEL=attention " + run);
    CHECK_EQ(bad.code, 0);
    CHECK(bad.err.find("runs the model") == std::string::npos);
    CHECK(bad.err.find("stays on the CPU: not verified: attention 4×128, D compiled in over 1 (random): out[3] differs") != std::string::npos);
    CHECK_EQ(bad.out, ok.out);  // the same tokens either way
    if (bad.err.find("stays on the CPU") == std::string::npos) std::printf("    stderr: %s\n", bad.err.c_str());
}

// The guarded native Fma's flag on a card that flushes f32 subnormals: an exact cancellation to
// zero is every card's zero and passes; a result whose exact value is a nonzero subnormal (a flushing
// card's zero) raises it. The decisions need no fused Fma: these products are exact in f32.
TEST(gpu_guarded_fma_passes_exact_cancellations_and_flags_subnormal_results) {
    gpu::Gpu* g = test_gpu();
    namespace sh = gpu::shader;
    std::vector<uint32_t> words;
    {
        sh::Shader s(64, true, sh::Fma::native, sh::GUARD_F32 | sh::FLUSH_F32);
        auto a = sh::buffer<sh::K::f32>(0, true, "a"), b = sh::buffer<sh::K::f32>(1, true, "b");
        auto c = sh::buffer<sh::K::f32>(2, true, "c");
        auto out = sh::buffer<sh::K::f32>(3, false, "out");
        sh::U32 i = sh::global_id();
        out.set(i, sh::fma_f32(a[i], b[i], c[i]));
        words = s.finish();
    }
    gpu::Pipeline p = g->pipeline(words, 5, 0);
    auto flagged = [&](std::vector<float> a, std::vector<float> b, std::vector<float> c) {
        a.resize(64, 0.0f), b.resize(64, 0.0f), c.resize(64, 0.0f);
        gpu::Buffer A = g->upload<float>(a), B = g->upload<float>(b), C = g->upload<float>(c), O = g->buffer(64 * 4);
        gpu::Buffer F = g->buffer(sh::GUARD_FLAG_WORDS * 4);
        std::vector<uint32_t> zero(sh::GUARD_FLAG_WORDS, 0);
        g->write_bytes(F, zero.data(), zero.size() * 4);
        const gpu::Buffer* bufs[] = {&A, &B, &C, &O, &F};
        g->run(p, bufs, {}, 1);
        uint32_t f = 0;
        std::memcpy(&f, F.mapped, 4);
        for (gpu::Buffer* x : {&A, &B, &C, &O, &F}) g->free(*x);
        return f != 0;
    };
    // f16-sized products cancelling their addend, of both signs, and a zero product with a zero addend.
    CHECK(!flagged({1.5f, -0.099975586f, 3.0f, 0.0f}, {3.0f, 0.5f, -2.0f, 7.0f}, {-4.5f, 0.049987793f, 6.0f, 0.0f}));
    // 2^-62 · 2^-63 = 2^-125 less a normal 2^-125 - 2^-140: the exact result 2^-140 is subnormal.
    CHECK(flagged({0x1p-62f}, {0x1p-63f}, {-(0x1p-125f - 0x1p-140f)}));
    // A zero from a subnormal addend and a zero product.
    CHECK(flagged({0.0f}, {1.0f}, {0x1p-140f}));
}

// The guarded Q2_0 product checks its float steps only at the row's sum: a row with an infinite or
// NaN scale (its codes all 1, so that inf·0 makes a NaN) raises the flag, and rows of ordinary
// scales around it give their values unflagged.
TEST(gpu_op_q2_0_mat_vec_guarded_flags_a_nan_row) {
    gpu::Gpu* g = test_gpu();
    gpu::ops::Build b = card_build(*g);
    b.float_modes = (b.float_modes & ~uint32_t(gpu::shader::DENORM32)) | gpu::shader::SOFT_F32;
    const gpu::ops::Build gb = gpu::ops::guarded(b);
    REQUIRE(gpu::ops::has_guard(gb));
    const gpu::ops::OpKernel& k = gpu::ops::op_kernel("q2_0_mat_vec");
    gpu::Pipeline p = g->pipeline(k.build(gb), gpu::ops::bindings(k, gb), k.push_words * 4, gpu::ops::spec_values(gb));
    const uint32_t rows = 8, n = 128, nb = n / 64;
    // The activation: every quant 1 (four to a word), every Q8_0 scale 1 with its quant sum 32.
    const std::vector<uint32_t> q8(size_t(nb) * 16, 0x01010101u);
    std::vector<uint32_t> d8;
    for (uint32_t i = 0; i < nb; ++i) d8.insert(d8.end(), {std::bit_cast<uint32_t>(1.0f), 32u, std::bit_cast<uint32_t>(1.0f), 32u});
    auto flagged = [&](uint16_t special, float& row0) {
        std::vector<quant::BlockQ2_0> w(size_t(rows) * nb);
        for (size_t i = 0; i < w.size(); ++i) {
            w[i].d = i / nb == 3 ? special : 0x3c00;   // row 3 special, the others 1.0
            std::memset(w[i].qs, i / nb == 3 ? 0x55 : 0xaa, sizeof w[i].qs);  // codes 1 (c - 1 = 0), 2 (1)
        }
        const gpu::ops::PackedQ2_0 pk = gpu::ops::pack_q2_0(reinterpret_cast<const uint8_t*>(w.data()), rows, n);
        gpu::Buffer S = g->upload<uint32_t>(pk.scales), C = g->upload<uint32_t>(pk.codes), Q = g->upload<uint32_t>(q8),
                    D = g->upload<uint32_t>(d8), O = g->readback_buffer(rows * 4), F = g->readback_buffer(gpu::shader::GUARD_FLAG_WORDS * 4);
        const std::vector<uint32_t> zero(gpu::shader::GUARD_FLAG_WORDS, 0);
        g->write_bytes(F, zero.data(), zero.size() * 4);
        const gpu::Buffer* bufs[] = {&S, &C, &Q, &D, &O, &F};
        g->run(p, bufs, std::vector<uint32_t>{rows, nb}, gpu::ops::q2_0_groups(rows));
        uint32_t f = 0;
        std::memcpy(&f, F.mapped, 4);
        std::memcpy(&row0, O.mapped, 4);
        for (gpu::Buffer* x : {&S, &C, &Q, &D, &O, &F}) g->free(*x);
        return f != 0;
    };
    float row0 = 0.0f;
    CHECK(!flagged(0x3c00, row0));
    CHECK_EQ(row0, 128.0f);  // every value's code 2 (c - 1 = 1) times quant 1, scales 1
    for (uint16_t special : {uint16_t(0x7c00), uint16_t(0xfc00), uint16_t(0x7e00)}) CHECK(flagged(special, row0));
}
