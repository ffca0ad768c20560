#include "gpu/kernels.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>

#include "core/error.h"
#include "core/f16.h"
#include "gpu/compute.h"
#include "gpu/shader.h"
#include "quant/blocks.h"
#include "quant/dot.h"

namespace bankml::gpu::kernels {

using namespace shader;

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
// The product's body in the kernel being built (see Q1_0Rows); q1_0_mat_vec's (eight false) stores
// its row itself.
static Q1_0Rows table_body(FmaPath path, bool eight, uint32_t per, uint32_t ahead) {
    constexpr uint32_t INV = KERNEL_INVOCATIONS;  // invocations per workgroup, both kernels
    constexpr uint32_t CHUNK = MAT_VEC_CHUNK, FLOATS = 512;  // table floats per block: 4 sub-blocks × 8 lanes × 16
    constexpr uint32_t TABLE = CHUNK * FLOATS;               // one chunk of the table
    static_assert(MAT_VEC_ROWS == INV && MAT_VEC8_ROWS * 8 == INV, "256 invocations per workgroup");
    static_assert(PACK_ROWS % MAT_VEC_ROWS == 0 && PACK_ROWS % (MAT_VEC8_ROWS * 4) == 0, "workgroups read whole padded rows");
    static_assert(TABLE * 4 == KERNEL_SHARED_BYTES, "workgroup memory the card must offer");
    static_assert(TABLE % (4 * INV) == 0 && CHUNK == 4, "a chunk's copy is whole vec4s for every invocation");
    static_assert(4 * INV <= TABLE, "the lane sums of four rows fit in the table's memory");
    if (ahead < 1 || ahead > 16) throw Error("q1_0_mat_vec8: " + std::to_string(ahead) + " chunks loaded ahead is not within 1..16");
    if (eight ? (per != 1 && per != 2 && per != 4) : per != 1)
        throw Error("q1_0_mat_vec8: " + std::to_string(per) + " rows per invocation is not one of 1, 2, 4");
    // Bindings 0 and 1 as uvec2, binding 3 as vec4: a row's four scales of a chunk, its lane's
    // bits of a chunk and four table entries are one load each.
    auto weight_scales = buffer<K::u2>(0, true, "weight_scales");
    auto weight_bits = buffer<K::u2>(1, true, "weight_bits");
    buffer<K::f32>(2, true, "act_scales");
    auto lane_products = buffer<K::f4>(3, true, "act_lane_products");
    std::optional<Arr<K::f32>> out;  // q1_0_mat_vec's; q1_0_mat_vec8's caller stores the sums
    if (!eight) out = buffer<K::f32>(4, false, "out");
    push_constants(2);
    auto shared = workgroup<K::f32>(TABLE);  // the table's chunk
    const uint32_t nrow = eight ? per : 1;
    std::vector<Var<K::f32>> acc;  // per row (q1_0_mat_vec8) or per lane (q1_0_mat_vec)
    for (uint32_t i = 0; i < (eight ? per : 8); ++i) acc.push_back(var(f32c(0.0f)));
    // An index plus a constant (none where it is 0).
    auto plus = [](U32 a, uint32_t c) { return c ? a + c : a; };

    U32 lid = local_id();
    U32 rows = push(0), blocks = push(1);
    U32 chunks = (blocks + (CHUNK - 1)) >> 2u;
    // R, the packed row count (padded_rows): every workgroup's rows lie below it.
    U32 stride = (rows + (PACK_ROWS - 1)) & ~uint32_t(PACK_ROWS - 1);
    // The rows this invocation computes (past `rows` it computes a padding row and stores nothing)
    // and, for q1_0_mat_vec8, its lane and that lane's run in the table, in bytes (lane·64).
    std::vector<U32> row(nrow);
    U32 lane, lane_rows, lane_off;
    if (eight) {
        lane = lid >> 5u;
        U32 first = group_id() * (32 * per) + (lid & 31u);
        for (uint32_t i = 0; i < per; ++i) row[i] = plus(first, 32 * i);
        lane_rows = lane * stride;
        lane_off = lane << 6u;
    } else {
        row[0] = global_id();
    }

    // One chunk's weights: per row, its four scales, then its bits (the lane's uvec2, or all eight).
    struct Weights { std::vector<UVec2> scale, bits; };
    auto load_weights = [&](U32 c) {
        U32 crows = c * stride, lanes_at = crows << 3u;  // (c·8)·R
        Weights w;
        for (uint32_t i = 0; i < nrow; ++i) {
            w.scale.push_back(weight_scales[crows + row[i]]);
            if (eight) {
                w.bits.push_back(weight_bits[(lanes_at + lane_rows) + row[i]]);
                continue;
            }
            U32 at = lanes_at + row[i];
            for (uint32_t l = 0; l < 8; ++l) w.bits.push_back(weight_bits[l ? at + stride * l : at]);
        }
        return w;
    };
    // The chunk's table: 512 vec4, two per invocation.
    const U32 idx[2] = {lid, lid + INV};
    auto load_table = [&](U32 c) {
        U32 first = c << 9u;
        return std::vector<Vec4>{lane_products[first + idx[0]], lane_products[first + idx[1]]};
    };
    // One chunk with its weights (and its table, if loaded ahead): the table into workgroup
    // memory, then every row's lookups.
    auto process = [&](U32 c, const Weights& w, std::vector<Vec4> t) {
        if (t.empty()) t = load_table(c);
        barrier();  // every row has read the previous chunk
        for (int x = 0; x < 2; ++x) {
            U32 at = idx[x] << 2u;
            for (uint32_t e = 0; e < 4; ++e) shared.set(plus(at, e), comp(t[x], e));
        }
        barrier();  // the chunk is in workgroup memory
        for (uint32_t j = 0; j < CHUNK; ++j) {
            for (uint32_t i = 0; i < nrow; ++i) {
                // d0: the block's f16 scale, widened exactly (every f16, subnormals too, is an
                // f32; verify_q1_0's data has subnormal scales to prove it).
                U32 scales = comp(w.scale[i], j / 2);
                F32 d0 = j % 2 ? unpack_half_hi(scales) : unpack_half_lo(scales);
                for (uint32_t l = 0; l < (eight ? 1u : 8u); ++l) {
                    U32 word = comp(w.bits[eight ? i : l], j / 2);
                    F32 p[4];
                    for (uint32_t s = 0; s < 4; ++s) {
                        // The nibble at bit sh, as a byte offset (nibble·4: shifted to bit 2 and
                        // masked), the lane's run OR'd in (q1_0_mat_vec8: its bits and the
                        // nibble's are disjoint) or added as a constant (q1_0_mat_vec), then back
                        // to an index: the card's compiler sees that index·4 is the offset
                        // itself, so a lookup is a shift, an AND-OR and the load (on the H200:
                        // q1_0_mat_vec8x4's code 9 % shorter than with the nibble shifted to bit
                        // 0, 2.5 % faster; 6 % with the padded rows).
                        uint32_t at_bit = 16 * (j % 2) + 4 * s;
                        U32 b4 = (at_bit ? word >> (at_bit - 2) : word << 2u) & 0x3Cu;
                        if (eight) b4 = b4 | lane_off;
                        // One lane's d1·s for sub-block s of the chunk's block j.
                        p[s] = shared[plus(b4 >> 2u, (eight ? 0 : 16 * l) + (j * 4 + s) * 128)];
                    }
                    // ab = d1·s summed (d1·s is exact, so the CPU's fma(d1, s, ab) is this single
                    // rounding, and pack_act tabulates d1·s itself), then acc = fma(d0, ab, acc)
                    // exactly: through fma_exact, or GLSL's Fma where the card proved it fuses.
                    // acc starts at +0 and a sum is -0 only from two -0 addends, so acc is never -0.
                    F32 ab = ((p[0] + p[1]) + p[2]) + p[3];
                    const Var<K::f32>& a = acc[eight ? i : l];
                    a = path == FmaPath::native ? fma_f32(d0, ab, a) : fma_exact(d0, ab, a, false);
                }
            }
        }
    };
    // The chunks in batches of `ahead`, each batch's weights and tables loaded before its first
    // chunk runs (their latencies overlap where a matrix has too few workgroups to hide them), then
    // the rest one at a time.
    U32 whole = u32c(0);
    if (ahead > 1) {
        whole = chunks / ahead * ahead;
        for_(u32c(0), whole, u32c(ahead), [&](U32 c0) {
            std::vector<Weights> w;
            std::vector<std::vector<Vec4>> t;
            for (uint32_t a = 0; a < ahead; ++a) w.push_back(load_weights(plus(c0, a)));
            for (uint32_t a = 0; a < ahead; ++a) t.push_back(load_table(plus(c0, a)));
            for (uint32_t a = 0; a < ahead; ++a) process(plus(c0, a), w[a], t[a]);
        });
    }
    for_(whole, chunks, [&](U32 c) { process(c, load_weights(c), {}); });

    // The CPU's horizontal sum of eight lanes: (a0+a4 + a2+a6) + (a1+a5 + a3+a7).
    auto hsum = [](const std::vector<F32>& a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); };
    if (!eight) {
        if_(row[0] < rows, [&] {
            std::vector<F32> a;
            for (const Var<K::f32>& v : acc) a.push_back(v);
            out->set(row[0], hsum(a));
        });
        return {row, rows, lane, {}};
    }
    barrier();  // every row has read the last chunk: the table's memory takes the lane sums
    for (uint32_t i = 0; i < per; ++i) shared.set(plus(lid, i * INV), acc[i]);
    barrier();  // in uniform control flow: every invocation of the workgroup reaches it
    auto sum = [shared, plus, hsum](uint32_t i, U32 r) {
        std::vector<F32> a;
        for (uint32_t l = 0; l < 8; ++l) a.push_back(shared[plus(r, i * INV + 32 * l)]);
        return hsum(a);
    };
    return {row, rows, lane, sum};
}

Q1_0Rows q1_0_rows8(FmaPath path, uint32_t per, uint32_t ahead) { return table_body(path, true, per, ahead); }

static std::vector<uint32_t> table_kernel(FmaPath path, bool eight, uint32_t per, uint32_t ahead = 1) {
    Shader sh(KERNEL_INVOCATIONS, false, path == FmaPath::native ? Fma::native : Fma::exact);
    Q1_0Rows r = table_body(path, eight, per, ahead);
    if (eight) {
        auto out = buffer<K::f32>(4, false, "out");
        U32 lid = local_id();
        if_(r.lane == 0u, [&] {  // lid < 32
            for (uint32_t i = 0; i < per; ++i) if_(r.row[i] < r.rows, [&] { out.set(r.row[i], r.sum(i, lid)); });
        });
    }
    return sh.finish();
}

std::vector<uint32_t> q1_0_mat_vec(FmaPath path) { return table_kernel(path, false, 1); }
std::vector<uint32_t> q1_0_mat_vec8(FmaPath path, uint32_t per, uint32_t ahead) { return table_kernel(path, true, per, ahead); }

std::string kernel_name(bool eight, FmaPath path, uint32_t per) {
    return std::string(eight ? "q1_0_mat_vec8" : "q1_0_mat_vec") + (per > 1 ? "x" + std::to_string(per) : "") +
           (path == FmaPath::native ? "_fma" : "");
}

std::vector<uint32_t> warm_l2() {
    Shader sh(KERNEL_INVOCATIONS, false, Fma::native);
    auto src = buffer<K::u2>(0, true, "src");
    auto sink = buffer<K::u32>(1, false, "sink");
    push_constants(2);
    U32 n = push(0), stride = push(1);
    U32 i = global_id();
    std::vector<UVec2> v;
    for (uint32_t k = 0; k < WARM_L2_PER; ++k) {
        U32 at = k ? i + stride * u32c(k) : i;
        v.push_back(src[select(at < n, at, u32c(0))]);
    }
    auto x = var(u32c(0));
    for (const UVec2& w : v) x = (x.get() ^ comp(w, 0)) ^ comp(w, 1);
    // A store the compiler cannot drop, so the loads stay; the sink is never read.
    if_(x.get() == WARM_L2_NEVER, [&] { sink.set(u32c(0), x.get()); });
    return sh.finish();
}

std::vector<uint32_t> fma_probe() {
    Shader sh(LOCAL_SIZE, false, Fma::native);
    auto abc = buffer<K::f32>(0, true, "abc");
    auto out = buffer<K::f32>(1, false, "out");
    push_constants(1);
    U32 i = global_id();
    if_(i < push(0), [&] {
        U32 at = i * 3u;
        out.set(i, fma_f32(abc[at], abc[at + 1u], abc[at + 2u]));
    });
    return sh.finish();
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
            {"fma_probe.spv", fma_probe()},
            {"warm_l2.spv", warm_l2()}};
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
        // Rows of 3, 4 and 9 chunks: fewer than a batch loaded ahead, one batch, two and one after them.
        cases = {{"random", 64, 128}, {"random", 267, 512}, {"random", 40, 1152}, {"layer", 136, 1024},
                 {"layer", 40, 2048}, {"layer", 72, 4608}};
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
