#include "gpu/kernels.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/f16.h"
#include "gpu/compute.h"
#include "gpu/spirv.h"
#include "quant/blocks.h"
#include "quant/dot.h"

namespace bankml::gpu::kernels {

using namespace spirv;

namespace {

// What both kernels share: the types, the five buffers, the push block and a few constants.
struct Kernel {
    Module m;
    uint32_t u = 0, f = 0, bl = 0;
    uint32_t ws = 0, wb = 0, as = 0, aq = 0, out = 0, push = 0, gid = 0, lid = 0;
    uint32_t cmask = 0, c1 = 0, c0 = 0, cf0 = 0;

    FmaPath fma = FmaPath::exact;
    // The table chunk in workgroup memory.
    uint32_t shared = 0;
    uint32_t f4 = 0, u2 = 0;

    // Bindings 0 and 1 as uvec2, binding 3 as vec4: a row's four scales of a chunk, its lane's
    // bits of a chunk and four table entries are one load each.
    Kernel(FmaPath path, uint32_t local_size) : fma(path) {
        u = m.t_u32();
        f = m.t_f32();
        bl = m.t_bool();
        f4 = m.t_vec(f, 4);
        u2 = m.t_vec(u, 2);
        ws = m.storage_buffer(u2, 0, true, "weight_scales", 8);
        wb = m.storage_buffer(u2, 1, true, "weight_bits", 8);
        as = m.storage_buffer(f, 2, true, "act_scales");
        aq = m.storage_buffer(f4, 3, true, "act_lane_products", 16);
        out = m.storage_buffer(f, 4, false, "out");
        push = m.push_constants(2);
        gid = m.builtin_u32x3(BuiltInGlobalInvocationId);
        lid = m.builtin_u32x3(BuiltInLocalInvocationId);
        cmask = m.c_u32(0xFFFFF000u);
        c1 = m.c_u32(1);
        c0 = m.c_u32(0);
        cf0 = m.c_f32(0.0f);
        m.entry_point(local_size);
        m.begin_main();
    }

    uint32_t push_u32(uint32_t k) {
        uint32_t p = m.op(OpAccessChain, m.t_ptr(StoragePushConstant, u), {push, m.c_u32(k)});
        return m.load(u, p);
    }
    uint32_t add_u(uint32_t a, uint32_t b) { return m.op(OpIAdd, u, {a, b}); }
    uint32_t mul_u(uint32_t a, uint32_t b) { return m.op(OpIMul, u, {a, b}); }
    uint32_t shr_u(uint32_t a, uint32_t b) { return m.op(OpShiftRightLogical, u, {a, b}); }
    uint32_t shl_u(uint32_t a, uint32_t b) { return m.op(OpShiftLeftLogical, u, {a, b}); }
    uint32_t and_u(uint32_t a, uint32_t b) { return m.op(OpBitwiseAnd, u, {a, b}); }

    // One lane's d1·s for sub-block k of the table chunk's block `slot`: `lane_nib` (lane·16 plus
    // the four sign bits) picks one of the chunk's products. One workgroup-memory load.
    uint32_t product(uint32_t lane_nib, uint32_t slot, uint32_t k) {
        uint32_t at = add_u(lane_nib, m.c_u32((slot * 4 + k) * 128));
        return m.load(f, m.op(OpAccessChain, m.t_ptr(StorageWorkgroup, f), {shared, at}));
    }

    // ab = d1·s, then ab + d1·s (d1·s is exact, so the CPU's fma(d1, s, ab) is this single
    // rounding, and pack_act tabulates d1·s itself), then acc = fma(d0, ab, acc) exactly: through
    // fma_exact, or through GLSL's Fma where the card proved it fuses (FmaPath::native).
    void accumulate(uint32_t d0, const uint32_t p[4], uint32_t acc_var) {
        uint32_t ab = p[0];
        for (int k = 1; k < 4; ++k) ab = m.op(OpFAdd, f, {ab, p[k]});
        uint32_t acc = m.load(f, acc_var);
        // acc starts at +0 and a sum is -0 only from two -0 addends, so acc is never -0.
        uint32_t r = fma == FmaPath::native ? m.ext(f, GlslFma, {d0, ab, acc})
                                            : m.fma_exact({f, u, bl}, d0, ab, acc, cmask, c1, c0, cf0, false);
        m.store(acc_var, r);
    }

    // The CPU's horizontal sum of eight lanes: (a0+a4 + a2+a6) + (a1+a5 + a3+a7).
    uint32_t hsum(const std::vector<uint32_t>& a) {
        auto add = [&](uint32_t x, uint32_t y) { return m.op(OpFAdd, f, {x, y}); };
        uint32_t x0 = add(a[0], a[4]), x1 = add(a[1], a[5]), x2 = add(a[2], a[6]), x3 = add(a[3], a[7]);
        return add(add(x0, x2), add(x1, x3));
    }

    std::vector<uint32_t> finish() {
        m.end_main();
        return m.words();
    }
};

}  // namespace

// Both kernels keep the activation's table in workgroup memory: the table is the same for every
// row, so the workgroup copies it a chunk of four blocks at a time (8 KiB; 16-byte loads, two per
// invocation of 256) and every row reads its products from there: no global address arithmetic
// per read, and the table leaves L2 once per workgroup. Each chunk: issue the weight and table
// loads, wait until every row has read the previous chunk, store the table, wait, compute. Rows
// are padded to whole chunks (pack_q1_0, pack_act: zero scales, bits and products, which leave
// every sum unchanged), so there is no tail, and to whole workgroups of rows (padded_rows), so no
// row index is clamped: with the row offsets constant per invocation, the H200's compiler gives
// q1_0_mat_vec8x4 40 registers instead of 48. Every invocation reaches the barriers (rows past the
// end compute on padding rows and store nothing).
//
// q1_0_mat_vec: one invocation per row, MAT_VEC_ROWS rows per workgroup, the eight lanes in
// registers; a chunk is one uvec2 of scales and eight uvec2 of bits (one per lane).
// q1_0_mat_vec8: eight per row, lane-major: invocation lid is lane lid/32 of rows lid%32 + 32i
// (i < per), so a 32-wide subgroup holds one lane of 32 neighbouring rows (its table reads one
// 16-entry run: no bank conflicts; its bit loads 256 contiguous bytes) and a chunk is one uvec2 of
// scales and one uvec2 of its lane's bits per row. `per` rows per invocation let one copy of the
// table serve 32·per rows (64 KiB of table for n = 4096 against 20 KiB of weights for 32 rows).
// The lane sums meet in workgroup memory (the table's, after a barrier) and lane 0 adds them in
// the CPU's order.
// Every nibble sits at a constant place in its word (bit 16·(j%2) + 4s for block j of the chunk
// and sub-block s), so a lookup is a shift, an AND-OR, a workgroup-memory load and the FAdd.
static std::vector<uint32_t> table_kernel(FmaPath path, bool eight, uint32_t per, uint32_t ahead = 1) {
    constexpr uint32_t INV = KERNEL_INVOCATIONS;  // invocations per workgroup, both kernels
    constexpr uint32_t CHUNK = MAT_VEC_CHUNK, FLOATS = 512;  // table floats per block: 4 sub-blocks × 8 lanes × 16
    constexpr uint32_t TABLE = CHUNK * FLOATS;               // one chunk of the table
    static_assert(MAT_VEC_ROWS == INV && MAT_VEC8_ROWS * 8 == INV, "256 invocations per workgroup");
    static_assert(PACK_ROWS % MAT_VEC_ROWS == 0 && PACK_ROWS % (MAT_VEC8_ROWS * 4) == 0, "workgroups read whole padded rows");
    static_assert(TABLE * 4 == KERNEL_SHARED_BYTES, "workgroup memory the card must offer");
    static_assert(TABLE % (4 * INV) == 0 && CHUNK == 4, "a chunk's copy is whole vec4s for every invocation");
    if (ahead < 1 || ahead > 16) throw Error("q1_0_mat_vec8: " + std::to_string(ahead) + " chunks loaded ahead is not within 1..16");
    if (eight ? (per != 1 && per != 2 && per != 4) : per != 1)
        throw Error("q1_0_mat_vec8: " + std::to_string(per) + " rows per invocation is not one of 1, 2, 4");
    static_assert(4 * INV <= TABLE, "the lane sums of four rows fit in the table's memory");
    Kernel k(path, INV);
    Module& m = k.m;
    k.shared = m.workgroup_array(k.f, TABLE);
    const uint32_t nrow = eight ? per : 1;
    std::vector<uint32_t> acc(eight ? per : 8);
    for (uint32_t& a : acc) a = m.local_var(k.f);
    uint32_t gid = m.builtin_x(k.gid), lid = m.builtin_x(k.lid);
    uint32_t rows = k.push_u32(0), blocks = k.push_u32(1);
    uint32_t chunks = k.shr_u(k.add_u(blocks, m.c_u32(CHUNK - 1)), m.c_u32(2));
    // R, the packed row count (padded_rows): every workgroup's rows lie below it.
    uint32_t stride = k.and_u(k.add_u(rows, m.c_u32(PACK_ROWS - 1)), m.c_u32(~uint32_t(PACK_ROWS - 1)));
    // The rows this invocation computes (past `rows` it computes a padding row and stores nothing)
    // and, for q1_0_mat_vec8, its lane and that lane's run in the table, in bytes (lane·64).
    std::vector<uint32_t> row(nrow);
    uint32_t lane = 0, lane_rows = 0, lane_off = 0;
    if (eight) {
        lane = k.shr_u(lid, m.c_u32(5));
        uint32_t first = k.add_u(k.mul_u(k.shr_u(gid, m.c_u32(8)), m.c_u32(32 * per)), k.and_u(lid, m.c_u32(31)));
        for (uint32_t i = 0; i < per; ++i) row[i] = i ? k.add_u(first, m.c_u32(32 * i)) : first;
        lane_rows = k.mul_u(lane, stride);
        lane_off = k.shl_u(lane, m.c_u32(6));
    } else {
        row[0] = gid;
    }
    uint32_t wptr = m.t_ptr(StorageWorkgroup, k.f);
    uint32_t c60 = m.c_u32(0x3C), f2 = m.t_vec(k.f, 2);

    for (uint32_t a : acc) m.store(a, k.cf0);
    // One chunk's weights: per row, its four scales, then its bits (the lane's uvec2, or all eight).
    struct Weights { std::vector<uint32_t> scale, bits; };
    auto load_weights = [&](uint32_t c) {
        uint32_t crows = k.mul_u(c, stride), lanes_at = k.shl_u(crows, m.c_u32(3));  // (c·8)·rows
        Weights w;
        for (uint32_t i = 0; i < nrow; ++i) {
            w.scale.push_back(m.load_elem(k.u2, k.ws, k.add_u(crows, row[i])));
            if (eight) {
                w.bits.push_back(m.load_elem(k.u2, k.wb, k.add_u(k.add_u(lanes_at, lane_rows), row[i])));
                continue;
            }
            uint32_t at = k.add_u(lanes_at, row[i]);
            for (uint32_t l = 0; l < 8; ++l) w.bits.push_back(m.load_elem(k.u2, k.wb, l ? k.add_u(at, k.mul_u(stride, m.c_u32(l))) : at));
        }
        return w;
    };
    // The chunk's table: 512 vec4, two per invocation.
    uint32_t idx[2] = {lid, k.add_u(lid, m.c_u32(INV))};
    auto load_table = [&](uint32_t c) {
        uint32_t first = k.shl_u(c, m.c_u32(9));
        std::vector<uint32_t> t(2);
        for (int x = 0; x < 2; ++x) t[x] = m.load_elem(k.f4, k.aq, k.add_u(first, idx[x]));
        return t;
    };
    // One chunk with its weights (and its table, if loaded ahead): the table into workgroup
    // memory, then every row's lookups.
    auto process = [&](uint32_t c, const Weights& w, std::vector<uint32_t> t) {
        const std::vector<uint32_t>& scale = w.scale;
        const std::vector<uint32_t>& bits = w.bits;
        if (t.empty()) t = load_table(c);
        m.barrier();  // every row has read the previous chunk
        for (int x = 0; x < 2; ++x) {
            uint32_t at = k.shl_u(idx[x], m.c_u32(2));
            for (uint32_t e = 0; e < 4; ++e)
                m.store(m.op(OpAccessChain, wptr, {k.shared, e ? k.add_u(at, m.c_u32(e)) : at}), m.op(OpCompositeExtract, k.f, {t[x], e}));
        }
        m.barrier();  // the chunk is in workgroup memory
        for (uint32_t j = 0; j < CHUNK; ++j) {
            for (uint32_t i = 0; i < nrow; ++i) {
                // d0: the block's f16 scale, widened exactly (every f16, subnormals
                // too, is an f32; verify_q1_0's data has subnormal scales to prove it).
                uint32_t pair = m.ext(f2, GlslUnpackHalf2x16, {m.op(OpCompositeExtract, k.u, {scale[i], j / 2})});
                uint32_t d0 = m.op(OpCompositeExtract, k.f, {pair, j % 2});
                for (uint32_t l = 0; l < (eight ? 1u : 8u); ++l) {
                    uint32_t word = m.op(OpCompositeExtract, k.u, {bits[eight ? i : l], j / 2}), p[4];
                    for (uint32_t s = 0; s < 4; ++s) {
                        // The nibble at bit sh, as a byte offset (nibble·4: shifted to bit 2
                        // and masked), the lane's run OR'd in (q1_0_mat_vec8: its bits and
                        // the nibble's are disjoint) or added as a constant (q1_0_mat_vec),
                        // then back to an index: the card's compiler sees that index·4 is
                        // the offset itself, so a lookup is a shift, an AND-OR and the load
                        // (on the H200: q1_0_mat_vec8x4's code 9 % shorter than with the
                        // nibble shifted to bit 0, 2.5 % faster; 6 % with the padded rows).
                        uint32_t sh = 16 * (j % 2) + 4 * s;
                        uint32_t x = sh ? k.shr_u(word, m.c_u32(sh - 2)) : k.shl_u(word, m.c_u32(2));
                        uint32_t b4 = k.and_u(x, c60);
                        if (eight) b4 = m.op(OpBitwiseOr, k.u, {b4, lane_off});
                        uint32_t at = k.shr_u(b4, m.c_u32(2));
                        p[s] = k.product(eight ? at : k.add_u(at, m.c_u32(16 * l)), j, s);
                    }
                    k.accumulate(d0, p, acc[eight ? i : l]);
                }
            }
        }
    };
    // The chunks in batches of `ahead`, each batch's weights and tables loaded before its first
    // chunk runs (their latencies overlap where a matrix has too few workgroups to hide them), then
    // the rest one at a time.
    uint32_t cvar = m.local_var(k.u);
    m.store(cvar, k.c0);
    uint32_t whole = k.mul_u(m.op(OpUDiv, k.u, {chunks, m.c_u32(ahead)}), m.c_u32(ahead));
    if (ahead > 1)
        m.loop([&] { return m.op(OpULessThan, k.bl, {m.load(k.u, cvar), whole}); },
               [&] {
                   uint32_t c0 = m.load(k.u, cvar);
                   std::vector<Weights> w;
                   std::vector<std::vector<uint32_t>> t(ahead);
                   for (uint32_t a = 0; a < ahead; ++a) w.push_back(load_weights(a ? k.add_u(c0, m.c_u32(a)) : c0));
                   for (uint32_t a = 0; a < ahead; ++a) t[a] = load_table(a ? k.add_u(c0, m.c_u32(a)) : c0);
                   for (uint32_t a = 0; a < ahead; ++a) process(a ? k.add_u(c0, m.c_u32(a)) : c0, w[a], t[a]);
               },
               [&] { m.store(cvar, k.add_u(m.load(k.u, cvar), m.c_u32(ahead))); });
    m.loop([&] { return m.op(OpULessThan, k.bl, {m.load(k.u, cvar), chunks}); },
           [&] {
               uint32_t c = m.load(k.u, cvar);
               process(c, load_weights(c), {});
           },
           [&] { m.store(cvar, k.add_u(m.load(k.u, cvar), k.c1)); });
    if (!eight) {
        m.if_then(m.op(OpULessThan, k.bl, {gid, rows}), [&] {
            std::vector<uint32_t> a(8);
            for (int l = 0; l < 8; ++l) a[l] = m.load(k.f, acc[l]);
            m.store_elem(k.f, k.out, gid, k.hsum(a));
        });
        return k.finish();
    }
    m.barrier();  // every row has read the last chunk: the table's memory takes the lane sums
    for (uint32_t i = 0; i < per; ++i)
        m.store(m.op(OpAccessChain, wptr, {k.shared, k.add_u(lid, m.c_u32(i * INV))}), m.load(k.f, acc[i]));
    m.barrier();  // in uniform control flow: every invocation of the workgroup reaches it
    m.if_then(m.op(OpIEqual, k.bl, {lane, k.c0}), [&] {  // lid < 32
        for (uint32_t i = 0; i < per; ++i)
            m.if_then(m.op(OpULessThan, k.bl, {row[i], rows}), [&] {
                std::vector<uint32_t> a(8);
                for (uint32_t l = 0; l < 8; ++l)
                    a[l] = m.load(k.f, m.op(OpAccessChain, wptr, {k.shared, k.add_u(lid, m.c_u32(i * INV + 32 * l))}));
                m.store_elem(k.f, k.out, row[i], k.hsum(a));
            });
    });
    return k.finish();
}

std::vector<uint32_t> q1_0_mat_vec(FmaPath path) { return table_kernel(path, false, 1); }
std::vector<uint32_t> q1_0_mat_vec8(FmaPath path, uint32_t per, uint32_t ahead) { return table_kernel(path, true, per, ahead); }

std::string kernel_name(bool eight, FmaPath path, uint32_t per) {
    return std::string(eight ? "q1_0_mat_vec8" : "q1_0_mat_vec") + (per > 1 ? "x" + std::to_string(per) : "") +
           (path == FmaPath::native ? "_fma" : "");
}

std::vector<uint32_t> fma_probe() {
    Module m;
    uint32_t u = m.t_u32(), f = m.t_f32(), bl = m.t_bool();
    uint32_t abc = m.storage_buffer(f, 0, true, "abc"), out = m.storage_buffer(f, 1, false, "out");
    uint32_t push = m.push_constants(1);
    uint32_t gid = m.builtin_u32x3(BuiltInGlobalInvocationId);
    m.entry_point(LOCAL_SIZE);
    m.begin_main();
    uint32_t i = m.builtin_x(gid);
    uint32_t count = m.load(u, m.op(OpAccessChain, m.t_ptr(StoragePushConstant, u), {push, m.c_u32(0)}));
    m.if_then(m.op(OpULessThan, bl, {i, count}), [&] {
        uint32_t at = m.op(OpIMul, u, {i, m.c_u32(3)});
        uint32_t a = m.load_elem(f, abc, at);
        uint32_t b = m.load_elem(f, abc, m.op(OpIAdd, u, {at, m.c_u32(1)}));
        uint32_t c = m.load_elem(f, abc, m.op(OpIAdd, u, {at, m.c_u32(2)}));
        m.store_elem(f, out, i, m.ext(f, GlslFma, {a, b, c}));
    });
    m.end_main();
    return m.words();
}

namespace {
std::string hex(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    char s[64];
    std::snprintf(s, sizeof s, "%.9g (0x%08x)", double(x), b);
    return s;
}
float from_bits(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }
uint32_t to_bits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
// What a card that does not fuse computes: RN(RN(a·b) + c).
float unfused(float a, float b, float c) { volatile float p = a * b; volatile float r = p + c; return r; }
}  // namespace

std::vector<FmaTriple> fma_probe_triples() {
    std::vector<FmaTriple> t;
    std::mt19937_64 rng(20261130);
    auto rnd = [&](int emin, int span) {  // a random normal float with a full mantissa
        uint32_t e = uint32_t(127 + emin + int(rng() % uint32_t(span)));
        return from_bits((uint32_t(rng()) & 0x807FFFFFu) | e << 23);
    };
    // Fused: c near -a·b (cancellation of the leading bits) or of a random size; kept only where
    // the unfused result differs, so a card that does not fuse fails every one of them.
    while (t.size() < 4096) {
        float a = rnd(-20, 40), b = rnd(-20, 40);
        float p = a * b;
        float c = rng() % 2 ? from_bits(to_bits(-p) ^ uint32_t(rng() % 64)) : std::ldexp(rnd(0, 1), std::ilogb(p) + int(rng() % 30) - 15);
        if (to_bits(std::fma(a, b, c)) != to_bits(unfused(a, b, c))) t.push_back({a, b, c, "fused"});
    }
    // Cancellation: c = -RN(a·b), so the result is a·b's rounding error (0 without fusing).
    for (int k = 0; k < 256; ++k) {
        float a = rnd(-10, 20), b = rnd(-10, 20);
        t.push_back({a, b, -(a * b), "cancellation"});
    }
    // Exact ties of the final rounding: (1 + 2^-12)^2 - 2^-11 = 1 + 2^-24, halfway between 1 and
    // its successor, and scaled and signed copies.
    for (int e = -40; e <= 40; e += 8)
        for (float sg : {1.0f, -1.0f}) {
            float a = std::ldexp(1.0f + 0x1p-12f, e), b = sg * (1.0f + 0x1p-12f);
            t.push_back({a, b, -sg * std::ldexp(0x1p-11f, e), "tie"});
            t.push_back({a, b, sg * std::ldexp(0x1p-22f, e), "tie"});  // 1 + 2^-11 + 2^-22 + 2^-24: above
        }
    // Double rounding: a·b = h(1 - 2^-2m) just below half an ulp h of c, whose last bit is odd:
    // the correct result is c, but rounding a·b + c to double first lands on the tie c + h, which
    // then rounds to the even neighbour c + 2h (and an unfused card does the same).
    for (int m = 15; m <= 23; ++m)
        for (int k = 0; k < 8; ++k) {
            float c = from_bits((uint32_t(rng()) & 0x807FFFFEu) | 1u | uint32_t(127 + int(rng() % 40) - 20) << 23);
            int e = std::ilogb(c) - 24;  // h = 2^e
            float a = std::ldexp(1.0f - std::ldexp(1.0f, -m), e / 2), b = std::ldexp(1.0f + std::ldexp(1.0f, -m), e - e / 2);
            if (std::signbit(c)) b = -b;
            t.push_back({a, b, c, "double rounding"});
        }
    // Subnormal results and inputs (the kernels never meet them: reported apart).
    for (int k = 0; k < 256; ++k) {
        float a = rnd(-70, 10), b = rnd(-70, 10);
        float c = k % 2 ? from_bits(uint32_t(rng()) & 0x807FFFFFu) : -(a * b);
        t.push_back({a, b, c, "subnormal"});
    }
    return t;
}

FmaProbe judge_fma_probe(const std::vector<FmaTriple>& t, const std::vector<float>& got) {
    FmaProbe r;
    std::string bad, bad_sub;
    size_t ok = 0, sub = 0, sub_ok = 0;
    for (size_t i = 0; i < t.size(); ++i) {
        float want = std::fma(t[i].a, t[i].b, t[i].c);
        bool same = i < got.size() && to_bits(got[i]) == to_bits(want);
        bool is_sub = std::strcmp(t[i].kind, "subnormal") == 0;
        sub += is_sub;
        (is_sub ? sub_ok : ok) += same;
        std::string& b = is_sub ? bad_sub : bad;
        if (!same && b.empty())
            b = std::string(t[i].kind) + " triple " + std::to_string(i) + ": fma(" + hex(t[i].a) + ", " + hex(t[i].b) + ", " +
                hex(t[i].c) + ") = " + (i < got.size() ? hex(got[i]) : std::string("nothing")) + " on the card, " + hex(want) +
                " on the CPU";
    }
    r.native = bad.empty() && !t.empty();
    r.line = "native Fma probe: " + std::to_string(ok) + " of " + std::to_string(t.size() - sub) +
             " triples bit-exact with std::fma (fused, cancellation, tie, double rounding)";
    r.line += bad.empty() ? "" : "; first difference: " + bad;
    r.line += "; subnormals: " + std::to_string(sub_ok) + " of " + std::to_string(sub) +
              (bad_sub.empty() ? " bit-exact" : " (" + bad_sub + "; the kernels never meet a subnormal)");
    r.line += r.native ? " — native Fma proven" : " — native Fma refused";
    return r;
}

FmaProbe probe_native_fma(Gpu& gpu, const std::function<void(std::vector<float>&)>& corrupt) {
    std::vector<FmaTriple> t = fma_probe_triples();
    std::vector<float> abc;
    for (const FmaTriple& x : t) abc.insert(abc.end(), {x.a, x.b, x.c});
    Pipeline p = gpu.pipeline(fma_probe(), 2, 4);
    Buffer in = gpu.upload<float>(abc), out = gpu.buffer(t.size() * 4);
    std::vector<float> poison(t.size(), std::nanf(""));
    gpu.write<float>(out, poison);
    const Buffer* bufs[] = {&in, &out};
    uint32_t push[] = {uint32_t(t.size())};
    gpu.run(p, bufs, push, uint32_t((t.size() + LOCAL_SIZE - 1) / LOCAL_SIZE));
    std::vector<float> got = gpu.read_f32(out, t.size());
    gpu.free(in);
    gpu.free(out);
    if (corrupt) corrupt(got);
    return judge_fma_probe(t, got);
}

std::vector<std::pair<std::string, std::vector<uint32_t>>> all_modules() {
    return {{"q1_0_mat_vec.spv", q1_0_mat_vec()},
            {"q1_0_mat_vec8.spv", q1_0_mat_vec8()},
            {"q1_0_mat_vec_fma.spv", q1_0_mat_vec(FmaPath::native)},
            {"q1_0_mat_vec8_fma.spv", q1_0_mat_vec8(FmaPath::native)},
            {"fma_probe.spv", fma_probe()}};
}

static uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

PackedQ1_0 pack_q1_0(std::span<const uint8_t> w, size_t rows, size_t n) {
    if (n % Q1_0_BLOCK) throw Error("pack_q1_0: row length " + std::to_string(n) + " is not a multiple of 128");
    size_t blocks = n / Q1_0_BLOCK, chunks = (blocks + MAT_VEC_CHUNK - 1) / MAT_VEC_CHUNK;
    if (w.size() < rows * blocks * Q1_0_BLOCK_BYTES)
        throw Error("pack_q1_0: " + std::to_string(w.size()) + " bytes for " + std::to_string(rows) + "×" + std::to_string(n));
    const size_t R = padded_rows(rows);
    PackedQ1_0 p;
    p.scales.assign(chunks * R * 2, 0);  // the padding: zero scales and bits, whole chunks and rows
    p.bits.assign(chunks * 8 * R * 2, 0);
    for (size_t r = 0; r < rows; ++r)
        for (size_t b = 0; b < blocks; ++b) {
            const uint8_t* blk = w.data() + (r * blocks + b) * Q1_0_BLOCK_BYTES;
            size_t c = b / 4, j = b % 4;
            p.scales[(c * R + r) * 2 + j / 2] |= uint32_t(rd16(blk)) << (16 * (j % 2));
            for (size_t s = 0; s < 4; ++s) {
                const uint8_t* q = blk + 2 + 4 * s;
                uint32_t word = uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 24;
                for (size_t l = 0; l < 8; ++l)  // lane l's four sign bits of sub-block s
                    p.bits[((c * 8 + l) * R + r) * 2 + j / 2] |= (word >> (4 * l) & 15u) << (16 * (j % 2) + 4 * s);
            }
        }
    return p;
}

PackedAct pack_act(std::span<const uint8_t> q8, size_t n) {
    if (n % Q1_0_BLOCK) throw Error("pack_act: length " + std::to_string(n) + " is not a multiple of 128");
    size_t blocks = n / Q8_0_BLOCK, chunk_values = MAT_VEC_CHUNK * Q1_0_BLOCK;
    if (q8.size() < blocks * Q8_0_BLOCK_BYTES) throw Error("pack_act: " + std::to_string(q8.size()) + " bytes for " + std::to_string(n) + " values");
    PackedAct a;
    a.scales.resize(blocks);
    // Padded to whole chunks of the weights (zero products).
    a.lane_products.assign((n + chunk_values - 1) / chunk_values * chunk_values / Q8_0_BLOCK * 8 * 16, 0.0f);
    for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = q8.data() + b * Q8_0_BLOCK_BYTES;
        a.scales[b] = f16_to_f32(rd16(blk));
        for (size_t l = 0; l < 8; ++l) {
            const uint8_t* q = blk + 2 + 4 * l;
            uint32_t word = uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 24;
            // Exact: the CPU's d1 * float(s) (kernels.h, binding 3).
            for (uint32_t nib = 0; nib < 16; ++nib)
                a.lane_products[(b * 8 + l) * 16 + nib] = a.scales[b] * float(q1_0_lane_sum(word, nib));
        }
    }
    return a;
}

namespace {

struct Case {
    const char* regime;
    size_t rows, n;
};

void make_data(std::mt19937_64& rng, const Case& c, std::vector<uint8_t>& w, std::vector<uint8_t>& q8) {
    bool layer = std::strcmp(c.regime, "layer") == 0;
    std::normal_distribution<float> g(0.0f, 1.0f);
    size_t wb = c.n / Q1_0_BLOCK, ab = c.n / Q8_0_BLOCK;
    w.assign(c.rows * wb * Q1_0_BLOCK_BYTES, 0);
    q8.assign(ab * Q8_0_BLOCK_BYTES, 0);
    for (size_t blk = 0; blk < c.rows * wb; ++blk) {
        uint8_t* p = &w[blk * Q1_0_BLOCK_BYTES];
        // Random: one scale magnitude with a random mantissa. Layer-shaped: magnitudes that vary
        // per block, as real layers' do, so d0·ab is inexact and the exact FMA matters.
        float d = layer ? 0.02f * std::exp(1.5f * g(rng)) : 0.01f * (1.0f + float(rng() % 1024) / 1024.0f);
        if (rng() % 8 == 0) d = -d;
        uint16_t h = f32_to_f16(d);
        // Now and then a subnormal scale: the card must widen every f16 exactly.
        if (rng() % 64 == 0) h = uint16_t((1 + rng() % 1023) | (rng() % 2 ? 0x8000u : 0u));
        p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
        for (size_t k = 2; k < Q1_0_BLOCK_BYTES; ++k) p[k] = uint8_t(rng());
    }
    for (size_t blk = 0; blk < ab; ++blk) {
        uint8_t* p = &q8[blk * Q8_0_BLOCK_BYTES];
        float d = layer ? std::exp(2.0f * g(rng)) / 127.0f : 0.05f * (1.0f + float(rng() % 1024) / 1024.0f);
        uint16_t h = f32_to_f16(d);
        p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
        for (size_t k = 2; k < Q8_0_BLOCK_BYTES; ++k) {
            uint8_t v = uint8_t(rng());
            if (rng() % 16 == 0) v = 0x80;  // -128: the quant whose negation wraps
            if (layer && (rng() % 64 == 0)) v = 127;
            p[k] = v;
        }
    }
}

}  // namespace

std::string limits_problem(uint32_t max_invocations, uint32_t max_size_x, uint32_t max_shared_bytes) {
    auto need = [](const char* what, uint32_t have, uint32_t want) {
        return std::string("the kernels need ") + what + " of " + std::to_string(want) + ", the card offers " +
               std::to_string(have);
    };
    if (max_invocations < KERNEL_INVOCATIONS) return need("maxComputeWorkGroupInvocations", max_invocations, KERNEL_INVOCATIONS);
    if (max_size_x < KERNEL_INVOCATIONS) return need("maxComputeWorkGroupSize[0]", max_size_x, KERNEL_INVOCATIONS);
    if (max_shared_bytes < KERNEL_SHARED_BYTES) return need("maxComputeSharedMemorySize", max_shared_bytes, KERNEL_SHARED_BYTES);
    return "";
}

std::vector<std::string> verify_q1_0(Gpu& gpu, const VerifyOptions& opt) {
    const Gpu::Limits& lim = gpu.limits();
    if (std::string why = limits_problem(lim.max_invocations, lim.max_size_x, lim.max_shared_bytes); !why.empty())
        throw Error(why + "; bankml refuses the card rather than dispatch past its limits", 2);
    std::vector<Case> cases;
    if (opt.full)
        cases = {{"random", 64, 128}, {"random", 256, 1024}, {"random", 200, 1152}, {"random", 1024, 4096}, {"random", 4096, 4096},
                 {"random", 12288, 4096}, {"random", 4096, 12288}, {"layer", 4096, 4096}, {"layer", 2048, 12288}};
    else
        cases = {{"random", 64, 128}, {"random", 267, 512}, {"random", 40, 1152}, {"layer", 136, 1024},
                 {"layer", 72, 4608}};  // nine chunks: a batch loaded ahead and one after it
    std::vector<std::string> lines;
    // The native kernels run only on a card whose Fma passed the probe, and stay in use only if
    // every row of theirs is bit-exact too; the fma_exact kernels decide whether the card is used.
    FmaProbe probe;
    try {
        probe = probe_native_fma(gpu, opt.corrupt_probe);
    } catch (const std::exception& e) {  // a driver that cannot run the probe keeps fma_exact
        probe.line = std::string("native Fma probe failed to run: ") + e.what() + " — native Fma refused";
    }
    lines.push_back(probe.line);
    bool native = probe.native;
    std::string native_refused;
    struct K {
        bool eight;
        FmaPath path;
        uint32_t per;
        Pipeline p;
    };
    std::vector<K> ks;  // every variant bankml may dispatch
    for (FmaPath path : {FmaPath::exact, FmaPath::native}) {
        if (path == FmaPath::native && !native) continue;
        ks.push_back({false, path, 1, gpu.pipeline(q1_0_mat_vec(path), Q1_0_BINDINGS, Q1_0_PUSH_BYTES)});
        for (uint32_t per : MAT_VEC8_PERS)
            ks.push_back({true, path, per, gpu.pipeline(q1_0_mat_vec8(path, per), Q1_0_BINDINGS, Q1_0_PUSH_BYTES)});
    }
    std::mt19937_64 rng(20260413);
    for (const Case& c : cases) {
        std::vector<uint8_t> w, q8;
        make_data(rng, c, w, q8);
        std::vector<float> want(c.rows);
        size_t row_bytes = c.n / Q1_0_BLOCK * Q1_0_BLOCK_BYTES;
        auto* qw = reinterpret_cast<const quant::BlockQ1_0*>(w.data());
        auto* qx = reinterpret_cast<const quant::BlockQ8_0*>(q8.data());
        for (size_t r = 0; r < c.rows; ++r) want[r] = quant::vec_dot_q1_0_ref(c.n, qw + r * row_bytes / Q1_0_BLOCK_BYTES, qx);
        PackedQ1_0 pw = pack_q1_0(w, c.rows, c.n);
        PackedAct pa = pack_act(q8, c.n);
        Buffer bs = gpu.upload<uint32_t>(pw.scales), bb = gpu.upload<uint32_t>(pw.bits);
        Buffer as = gpu.upload<float>(pa.scales), aq = gpu.upload<float>(pa.lane_products);
        Buffer out = gpu.buffer(c.rows * 4);
        const Buffer* bufs[] = {&bs, &bb, &as, &aq, &out};
        uint32_t push[] = {uint32_t(c.rows), uint32_t(c.n / Q1_0_BLOCK)};
        std::string failure;
        for (const K& k : ks) {
            if (!failure.empty()) break;
            if (k.path == FmaPath::native && !native) continue;
            std::string name = kernel_name(k.eight, k.path, k.per);
            std::vector<float> poison(c.rows, std::nanf(""));
            gpu.write<float>(out, poison);  // a row the card does not write cannot pass
            auto t0 = std::chrono::steady_clock::now();
            gpu.run(k.p, bufs, push, k.eight ? groups_mat_vec8(c.rows, k.per) : groups_mat_vec(c.rows));
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            std::vector<float> got = gpu.read_f32(out, c.rows);
            if (opt.corrupt) opt.corrupt(got);
            char shape[64];
            std::snprintf(shape, sizeof shape, "%zu×%zu %s", c.rows, c.n, c.regime);
            std::string diff;
            for (size_t r = 0; r < c.rows; ++r)
                if (std::memcmp(&got[r], &want[r], 4) != 0) {
                    diff = name + " " + shape + ": row " + std::to_string(r) + " differs (card " + hex(got[r]) + ", CPU " +
                           hex(want[r]) + ")";
                    break;
                }
            if (opt.checks && (diff.empty() || k.path == FmaPath::exact))
                opt.checks->push_back({name, std::to_string(c.rows) + "×" + std::to_string(c.n) + " " + c.regime, c.rows,
                                       diff.empty(), ms});
            if (diff.empty()) {
                char line[160];
                std::snprintf(line, sizeof line, "%s %s: %zu of %zu rows bit-exact, %.2f ms", name.c_str(), shape, c.rows, c.rows, ms);
                lines.push_back(line);
            } else if (k.path == FmaPath::native) {
                native = false;
                native_refused = diff;
            } else {
                failure = diff;
            }
        }
        for (Buffer* b : {&bs, &bb, &as, &aq, &out}) gpu.free(*b);
        if (!failure.empty()) throw Error(failure, 2);
    }
    if (!native_refused.empty()) lines.push_back("native Fma refused: " + native_refused);
    lines.push_back(native ? "uses q1_0_mat_vec_fma and q1_0_mat_vec8_fma (native Fma, proven on this card)"
                           : "uses q1_0_mat_vec and q1_0_mat_vec8 (fma_exact)");
    if (opt.chosen) *opt.chosen = native ? FmaPath::native : FmaPath::exact;
    return lines;
}

}  // namespace bankml::gpu::kernels
