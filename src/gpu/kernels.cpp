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
    uint32_t u = 0, u4 = 0, i = 0, f = 0, bl = 0;
    uint32_t ws = 0, wb = 0, as = 0, aq = 0, out = 0, push = 0, gid = 0, lid = 0;
    uint32_t cmask = 0, c1 = 0, c0 = 0, cf0 = 0;

    explicit Kernel(bool local_id) {
        u = m.t_u32();
        i = m.t_i32();
        f = m.t_f32();
        bl = m.t_bool();
        ws = m.storage_buffer(f, 0, true, "weight_scales");
        u4 = m.t_vec(u, 4);
        wb = m.storage_buffer(u4, 1, true, "weight_bits", 16);  // one uvec4 (16 bytes) per block
        as = m.storage_buffer(f, 2, true, "act_scales");
        aq = m.storage_buffer(i, 3, true, "act_lane_sums");
        out = m.storage_buffer(f, 4, false, "out");
        push = m.push_constants(2);
        gid = m.builtin_u32x3(BuiltInGlobalInvocationId);
        if (local_id) lid = m.builtin_u32x3(BuiltInLocalInvocationId);
        cmask = m.c_u32(0xFFFFF000u);
        c1 = m.c_u32(1);
        c0 = m.c_u32(0);
        cf0 = m.c_f32(0.0f);
        m.entry_point(LOCAL_SIZE);
        m.begin_main();
    }

    uint32_t push_u32(uint32_t k) {
        uint32_t p = m.op(OpAccessChain, m.t_ptr(StoragePushConstant, u), {push, m.c_u32(k)});
        return m.load(u, p);
    }
    uint32_t add_u(uint32_t a, uint32_t b) { return m.op(OpIAdd, u, {a, b}); }
    uint32_t mul_u(uint32_t a, uint32_t b) { return m.op(OpIMul, u, {a, b}); }

    // What one block needs from memory before its arithmetic: the weight scale, the 128 sign
    // bits (one 16-byte load) and the four activation scales.
    struct Loaded {
        uint32_t b, d0, words, d1[4];
    };
    Loaded load_block(uint32_t row, uint32_t rows, uint32_t b) {
        Loaded L{};
        L.b = b;
        uint32_t idx = add_u(mul_u(b, rows), row);
        L.d0 = m.load_elem(f, ws, idx);
        L.words = m.load_elem(u4, wb, idx);
        for (uint32_t k = 0; k < 4; ++k) L.d1[k] = m.load_elem(f, as, add_u(mul_u(b, m.c_u32(4)), m.c_u32(k)));
        return L;
    }

    // One 128-weight block for the given lanes (lane ids are u32 values, constant or not):
    // ab = d1·s, then ab + d1·s (exact products: the CPU's fma(d1, s, ab) is this single
    // rounding), then acc = fma(d0, ab, acc) exactly.
    void compute_block(const Loaded& L, const std::vector<uint32_t>& lanes, const std::vector<uint32_t>& acc_vars) {
        std::vector<uint32_t> ab(lanes.size(), 0);
        for (uint32_t k = 0; k < 4; ++k) {
            uint32_t word = m.op(OpCompositeExtract, u, {L.words, k});
            uint32_t sub = add_u(mul_u(L.b, m.c_u32(4)), m.c_u32(k));
            // The lane's sum for this sub-block and these four sign bits, from the activation's table.
            uint32_t base = m.op(OpShiftLeftLogical, u, {sub, m.c_u32(7)});  // 8 lanes × 16 entries
            for (size_t l = 0; l < lanes.size(); ++l) {
                uint32_t nib = m.op(OpBitwiseAnd, u, {m.op(OpShiftRightLogical, u, {word, m.op(OpShiftLeftLogical, u, {lanes[l], m.c_u32(2)})}), m.c_u32(15)});
                uint32_t at = add_u(add_u(base, m.op(OpShiftLeftLogical, u, {lanes[l], m.c_u32(4)})), nib);
                uint32_t s = m.op(OpConvertSToF, f, {m.load_elem(i, aq, at)});
                uint32_t p = m.op(OpFMul, f, {L.d1[k], s});
                ab[l] = k == 0 ? p : m.op(OpFAdd, f, {ab[l], p});
            }
        }
        for (size_t l = 0; l < lanes.size(); ++l) {
            uint32_t acc = m.load(f, acc_vars[l]);
            // acc starts at +0 and a sum is -0 only from two -0 addends, so acc is never -0.
            m.store(acc_vars[l], m.fma_exact({f, u, bl}, L.d0, ab[l], acc, cmask, c1, c0, cf0, false));
        }
    }

    // for (b = 0; b < blocks; ++b) block b, in the same order. Blocks come UNROLL at a time with
    // every load issued before the arithmetic, so a row's memory latency overlaps (each lane's
    // chain over the blocks is sequential); the last blocks one at a time.
    static constexpr uint32_t UNROLL = 4;
    void blocks_loop(uint32_t row, uint32_t rows, uint32_t blocks, const std::vector<uint32_t>& lanes,
                     const std::vector<uint32_t>& acc_vars, uint32_t bvar) {
        m.store(bvar, c0);
        for (uint32_t v : acc_vars) m.store(v, cf0);
        m.loop([&] { return m.op(OpULessThanEqual, bl, {add_u(m.load(u, bvar), m.c_u32(UNROLL)), blocks}); },
               [&] {
                   uint32_t b = m.load(u, bvar);
                   std::vector<Loaded> L;
                   for (uint32_t j = 0; j < UNROLL; ++j) L.push_back(load_block(row, rows, j ? add_u(b, m.c_u32(j)) : b));
                   for (const Loaded& x : L) compute_block(x, lanes, acc_vars);
               },
               [&] { m.store(bvar, add_u(m.load(u, bvar), m.c_u32(UNROLL))); });
        m.loop([&] { return m.op(OpULessThan, bl, {m.load(u, bvar), blocks}); },
               [&] { compute_block(load_block(row, rows, m.load(u, bvar)), lanes, acc_vars); },
               [&] { m.store(bvar, add_u(m.load(u, bvar), c1)); });
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

std::vector<uint32_t> q1_0_mat_vec() {
    Kernel k(false);
    Module& m = k.m;
    std::vector<uint32_t> acc(8), lanes(8);
    for (uint32_t l = 0; l < 8; ++l) acc[l] = m.local_var(k.f), lanes[l] = m.c_u32(l);
    uint32_t bvar = m.local_var(k.u);
    uint32_t row = m.builtin_x(k.gid);
    uint32_t rows = k.push_u32(0), blocks = k.push_u32(1);
    m.if_then(m.op(OpULessThan, k.bl, {row, rows}), [&] {
        k.blocks_loop(row, rows, blocks, lanes, acc, bvar);
        std::vector<uint32_t> a(8);
        for (int l = 0; l < 8; ++l) a[l] = m.load(k.f, acc[l]);
        m.store_elem(k.f, k.out, row, k.hsum(a));
    });
    return k.finish();
}

std::vector<uint32_t> q1_0_mat_vec8() {
    Kernel k(true);
    Module& m = k.m;
    uint32_t acc = m.local_var(k.f), bvar = m.local_var(k.u);
    uint32_t shared = m.workgroup_array(k.f, LOCAL_SIZE);
    uint32_t gid = m.builtin_x(k.gid), lid = m.builtin_x(k.lid);
    uint32_t row = m.op(OpShiftRightLogical, k.u, {gid, m.c_u32(3)});
    uint32_t lane = m.op(OpBitwiseAnd, k.u, {gid, m.c_u32(7)});
    uint32_t rows = k.push_u32(0), blocks = k.push_u32(1);
    uint32_t active = m.op(OpULessThan, k.bl, {row, rows});
    uint32_t wptr = m.t_ptr(StorageWorkgroup, k.f);
    m.if_then(active, [&] {
        k.blocks_loop(row, rows, blocks, {lane}, {acc}, bvar);
        m.store(m.op(OpAccessChain, wptr, {shared, lid}), m.load(k.f, acc));
    });
    m.barrier();  // in uniform control flow: every invocation of the workgroup reaches it
    uint32_t first = m.op(OpLogicalAnd, k.bl, {active, m.op(OpIEqual, k.bl, {lane, k.c0})});
    m.if_then(first, [&] {
        std::vector<uint32_t> a(8);
        for (uint32_t l = 0; l < 8; ++l)
            a[l] = m.load(k.f, m.op(OpAccessChain, wptr, {shared, k.add_u(lid, m.c_u32(l))}));
        m.store_elem(k.f, k.out, row, k.hsum(a));
    });
    return k.finish();
}

std::vector<std::pair<std::string, std::vector<uint32_t>>> all_modules() {
    return {{"q1_0_mat_vec.spv", q1_0_mat_vec()}, {"q1_0_mat_vec8.spv", q1_0_mat_vec8()}};
}

static uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

PackedQ1_0 pack_q1_0(std::span<const uint8_t> w, size_t rows, size_t n) {
    if (n % Q1_0_BLOCK) throw Error("pack_q1_0: row length " + std::to_string(n) + " is not a multiple of 128");
    size_t blocks = n / Q1_0_BLOCK;
    if (w.size() < rows * blocks * Q1_0_BLOCK_BYTES)
        throw Error("pack_q1_0: " + std::to_string(w.size()) + " bytes for " + std::to_string(rows) + "×" + std::to_string(n));
    PackedQ1_0 p;
    p.scales.resize(rows * blocks);
    p.bits.resize(rows * blocks * 4);
    for (size_t r = 0; r < rows; ++r)
        for (size_t b = 0; b < blocks; ++b) {
            const uint8_t* blk = w.data() + (r * blocks + b) * Q1_0_BLOCK_BYTES;
            size_t at = b * rows + r;
            p.scales[at] = f16_to_f32(rd16(blk));
            for (size_t k = 0; k < 4; ++k) {
                const uint8_t* q = blk + 2 + 4 * k;
                p.bits[at * 4 + k] = uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 24;
            }
        }
    return p;
}

PackedAct pack_act(std::span<const uint8_t> q8, size_t n) {
    if (n % Q1_0_BLOCK) throw Error("pack_act: length " + std::to_string(n) + " is not a multiple of 128");
    size_t blocks = n / Q8_0_BLOCK;
    if (q8.size() < blocks * Q8_0_BLOCK_BYTES) throw Error("pack_act: " + std::to_string(q8.size()) + " bytes for " + std::to_string(n) + " values");
    PackedAct a;
    a.scales.resize(blocks);
    a.lane_sums.resize(blocks * 8 * 16);
    for (size_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = q8.data() + b * Q8_0_BLOCK_BYTES;
        a.scales[b] = f16_to_f32(rd16(blk));
        for (size_t l = 0; l < 8; ++l) {
            const uint8_t* q = blk + 2 + 4 * l;
            uint32_t word = uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 24;
            for (uint32_t nib = 0; nib < 16; ++nib) a.lane_sums[(b * 8 + l) * 16 + nib] = q1_0_lane_sum(word, nib);
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
        p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
        for (int k = 2; k < 18; ++k) p[k] = uint8_t(rng());
    }
    for (size_t blk = 0; blk < ab; ++blk) {
        uint8_t* p = &q8[blk * Q8_0_BLOCK_BYTES];
        float d = layer ? std::exp(2.0f * g(rng)) / 127.0f : 0.05f * (1.0f + float(rng() % 1024) / 1024.0f);
        uint16_t h = f32_to_f16(d);
        p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
        for (int k = 2; k < 34; ++k) {
            uint8_t v = uint8_t(rng());
            if (rng() % 16 == 0) v = 0x80;  // -128: the quant whose negation wraps
            if (layer && (rng() % 64 == 0)) v = 127;
            p[k] = v;
        }
    }
}

std::string hex(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    char s[64];
    std::snprintf(s, sizeof s, "%.9g (0x%08x)", double(x), b);
    return s;
}

}  // namespace

std::vector<std::string> verify_q1_0(Gpu& gpu, const VerifyOptions& opt) {
    std::vector<Case> cases;
    if (opt.full)
        cases = {{"random", 64, 128}, {"random", 256, 1024}, {"random", 200, 1152}, {"random", 1024, 4096}, {"random", 4096, 4096},
                 {"random", 12288, 4096}, {"random", 4096, 12288}, {"layer", 4096, 4096}, {"layer", 2048, 12288}};
    else
        cases = {{"random", 64, 128}, {"random", 67, 512}, {"random", 40, 1152}, {"layer", 136, 1024}};
    Pipeline p1 = gpu.pipeline(q1_0_mat_vec(), Q1_0_BINDINGS, Q1_0_PUSH_BYTES);
    Pipeline p8 = gpu.pipeline(q1_0_mat_vec8(), Q1_0_BINDINGS, Q1_0_PUSH_BYTES);
    std::mt19937_64 rng(20260413);
    std::vector<std::string> lines;
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
        Buffer bs = gpu.upload<float>(pw.scales), bb = gpu.upload<uint32_t>(pw.bits);
        Buffer as = gpu.upload<float>(pa.scales), aq = gpu.upload<int32_t>(pa.lane_sums);
        Buffer out = gpu.buffer(c.rows * 4);
        const Buffer* bufs[] = {&bs, &bb, &as, &aq, &out};
        uint32_t push[] = {uint32_t(c.rows), uint32_t(c.n / Q1_0_BLOCK)};
        std::string failure;
        for (int kernel = 0; kernel < 2 && failure.empty(); ++kernel) {
            const char* name = kernel ? "q1_0_mat_vec8" : "q1_0_mat_vec";
            std::vector<float> poison(c.rows, std::nanf(""));
            gpu.write<float>(out, poison);  // a row the card does not write cannot pass
            auto t0 = std::chrono::steady_clock::now();
            gpu.run(kernel ? p8 : p1, bufs, push, kernel ? groups_mat_vec8(c.rows) : groups_mat_vec(c.rows));
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            std::vector<float> got = gpu.read_f32(out, c.rows);
            if (opt.corrupt) opt.corrupt(got);
            char shape[64];
            std::snprintf(shape, sizeof shape, "%zu×%zu %s", c.rows, c.n, c.regime);
            for (size_t r = 0; r < c.rows; ++r)
                if (std::memcmp(&got[r], &want[r], 4) != 0) {
                    failure = std::string(name) + " " + shape + ": row " + std::to_string(r) + " differs (card " +
                              hex(got[r]) + ", CPU " + hex(want[r]) + ")";
                    break;
                }
            if (failure.empty()) {
                char line[160];
                std::snprintf(line, sizeof line, "%s %s: %zu of %zu rows bit-exact, %.2f ms", name, shape, c.rows, c.rows, ms);
                lines.push_back(line);
            }
        }
        for (Buffer* b : {&bs, &bb, &as, &aq, &out}) gpu.free(*b);
        if (!failure.empty()) throw Error(failure, 2);
    }
    return lines;
}

}  // namespace bankml::gpu::kernels
