// The Q1_0 kernels on the card: q1_0_mat_vec (one invocation per output row, 256 rows per
// workgroup sharing the activation's table in workgroup memory) and q1_0_mat_vec8 (eight per row,
// one per accumulation lane; 32·per rows per workgroup sharing the same table, per = 1, 2 or 4
// rows per invocation: per = 1 gives small matrices the most workgroups, larger per share one
// copy of the table among more rows). Both follow the CPU's vec_dot_ref step by step, so a card
// that runs them correctly gives the CPU's bits; verify_q1_0 proves that on the card.
//
// Data on the card (pack_q1_0, pack_act): the numbers unchanged (or their exact products), only
// aligned. Rows are cut into chunks of four blocks (512 weights), padded to whole chunks with zero
// scales, bits and products (which leave every sum unchanged: acc + 0·0 = acc, acc never -0), and
// the rows are padded to R = padded_rows(rows), a multiple of 256, with zero rows: every workgroup
// reads whole rows, so no invocation clamps its row (rows past `rows` compute and store nothing).
//   binding 0  weight scales, the f16 bits, in chunks: (chunk c, row r) at uvec2 c·R + r, block
//              j of the chunk in half j%2 of word j/2 (the card widens them exactly)
//   binding 1  weight bits, lane-planar: (chunk c, lane l, row r) at uvec2 (c·8 + l)·R + r,
//              block j's 16 bits of lane l in half j%2 of word j/2, and there sub-block s's four
//              sign bits (quants 32s + 4l .. +3) at bits 4s..4s+3
//   binding 2  activation scales, f32, one per 32 values (bound for the layout; the kernels read
//              them through binding 3)
//   binding 3  activation lane products, f32: for sub-block j, lane l (quants 4l..4l+3) and each
//              of the 16 patterns of four sign bits, d1_j · s at (j·8 + l)·16 + bits, where s is
//              the exact integer lane sum; the product is exact (d1 an f16, |s| <= 512: at most
//              21 significant bits, never below 2^-24), so it is the CPU's d1·float(s) bit for bit
//   binding 4  output, f32, one per row
//   push constants: u32 rows, u32 blocks per row
// Neighbouring invocations (neighbouring rows) read neighbouring words; an invocation of
// q1_0_mat_vec8 reads one uvec2 of scales and one of its own lane's bits per row and chunk, and
// every nibble sits at a constant place in its word. Scales stay f16 on the card: the weights are
// 18 bytes a block there as in the GGUF (f32 scales made the output matrix 11 % more bytes).
// The activation is the same for every row, so its lane sums are tabulated once per product
// (16 per four quants, 64 KiB for n = 4096) and each row's four sign bits pick one: the card does
// no per-byte work, no int-to-float conversion and no multiply, and the products are exactly the
// CPU's d1·float(q1_0_lane_sum).
//
// The outer fma(d0, ab, acc) comes in two variants (FmaPath): fma_exact (plain operations, right
// on every card that rounds its adds and multiplies correctly) and native (GLSL.std.450 Fma, one
// instruction), which a card may use only after probe_native_fma proved its Fma correctly rounded
// and verify_q1_0 proved the native kernels on it. Drivers that do not fuse Fma (RADV on a Vega 3)
// fail the probe and keep fma_exact.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gpu/shader.h"
#include "quant/blocks.h"

namespace bankml::gpu {
class Gpu;
}

namespace bankml::gpu::kernels {

inline constexpr uint32_t Q1_0_BINDINGS = 5;
inline constexpr uint32_t Q1_0_PUSH_BYTES = 8;
inline constexpr uint32_t LOCAL_SIZE = 64;
// q1_0_mat_vec's workgroup: 256 rows share one copy of the activation's table in workgroup memory.
inline constexpr uint32_t MAT_VEC_ROWS = 256;
// q1_0_mat_vec8's workgroup: 32 row slots of eight lanes (256 invocations), each slot `per` rows
// (q1_0_mat_vec8x<per>), sharing the table the same way.
inline constexpr uint32_t MAT_VEC8_ROWS = 32;
// Blocks of the table a workgroup holds at once (512 floats each).
inline constexpr uint32_t MAT_VEC_CHUNK = 4;
// What both kernels ask of a card: 256 invocations per workgroup (Vulkan guarantees only 128) and
// workgroup memory for a chunk of the table (8 KiB; q1_0_mat_vec8 reuses it for the lane sums).
inline constexpr uint32_t KERNEL_INVOCATIONS = 256;
inline constexpr uint32_t KERNEL_SHARED_BYTES = MAT_VEC_CHUNK * 512 * 4;
// The GGUF block layouts the packers read (quant/blocks.h).
inline constexpr size_t Q1_0_BLOCK = quant::QK1_0, Q1_0_BLOCK_BYTES = sizeof(quant::BlockQ1_0);
inline constexpr size_t Q8_0_BLOCK = quant::QK8_0, Q8_0_BLOCK_BYTES = sizeof(quant::BlockQ8_0);

enum class FmaPath { exact, native };
std::vector<uint32_t> q1_0_mat_vec(FmaPath path = FmaPath::exact);
// per: rows per invocation (1, 2 or 4), each with the same eight lanes: more rows per workgroup
// share one copy of the table (the large matrices), fewer give more workgroups (the small ones).
// ahead: chunks whose weights and tables an invocation loads before the first of them runs (1:
// each chunk's just before it). A matrix with few rows has about one workgroup per core, too few to
// hide one chunk's load behind another workgroup's work, so q1_0_mat_vec8 (one row per
// invocation) loads four chunks at a time (eight left a 2048-wide row, four chunks, without a
// whole batch: one at a time); with 2 or 4 rows per invocation (the large matrices, many
// workgroups) one chunk at a time was faster (H200: docs/PERFORMANCE.md).
inline uint32_t mat_vec8_ahead(uint32_t per) { return per == 1 ? 4 : 1; }
std::vector<uint32_t> q1_0_mat_vec8(FmaPath path, uint32_t per, uint32_t ahead);
inline std::vector<uint32_t> q1_0_mat_vec8(FmaPath path = FmaPath::exact, uint32_t per = 1) {
    return q1_0_mat_vec8(path, per, mat_vec8_ahead(per));
}
// q1_0_mat_vec8's product inside a kernel being built (the caller's Shader, KERNEL_INVOCATIONS
// invocations): declares bindings 0-3 (scales, bits, an unused binding, the lane-product table) and
// two push words (rows, blocks), and leaves each row's eight lane sums in workgroup memory, where
// sum(i, r) adds them in the CPU's order for row i (< per) of the invocation r (< 32) of lane 0
// (any invocation may call it, until the next barrier).
struct Q1_0Rows {
    std::vector<shader::U32> row;  // this invocation's rows: group·32·per + lid%32 + 32i
    shader::U32 rows, lane;        // push word 0; lid/32
    std::function<shader::F32(uint32_t i, shader::U32 r)> sum;
};
Q1_0Rows q1_0_rows8(FmaPath path, uint32_t per, uint32_t ahead);
// (8 was measured slower on the H200: 80-95 registers; docs/PERFORMANCE.md.)
inline constexpr uint32_t MAT_VEC8_PERS[] = {1, 2, 4};
// The kernels' names as verify and the bench print them ("q1_0_mat_vec8x4_fma": native, 4 rows
// per invocation).
std::string kernel_name(bool eight, FmaPath path, uint32_t per = 1);

// The native-Fma probe: out[i] = Fma(abc[3i], abc[3i+1], abc[3i+2]) for i < push[0].
// Bindings 0 (f32 triples) and 1 (f32 out); 4 push bytes.
std::vector<uint32_t> fma_probe();
// warm_l2: reads the first n uvec2 of binding 0 and keeps nothing (binding 1, a sink, is written
// only where the reads' XOR is WARM_L2_NEVER, which nothing reads): recorded beside a step without
// a barrier between them, it brings what the next step reads into the card's L2 while this one
// runs. Push: n, stride (the dispatch's invocations); warm_l2_groups(n) workgroups.
std::vector<uint32_t> warm_l2();
inline constexpr uint32_t WARM_L2_PER = 8, WARM_L2_NEVER = 0x9e3779b9u;
inline uint32_t warm_l2_groups(size_t n) { return uint32_t((n + KERNEL_INVOCATIONS * WARM_L2_PER - 1) / (KERNEL_INVOCATIONS * WARM_L2_PER)); }
struct FmaTriple {
    float a, b, c;
    const char* kind;  // "fused", "cancellation", "tie", "double rounding", "subnormal"
};
// Triples where a correctly rounded fma differs from a·b then + c ("fused"; the CPU checks that
// each one does), from rounding through double ("double rounding"), exact cancellations, exact
// ties, and subnormal inputs and results.
std::vector<FmaTriple> fma_probe_triples();
// The first triple whose `got` differs in any bit from std::fma, described; "" when none. Subnormal
// triples are reported apart (`subnormal`): the kernels never meet a subnormal (their nonzero
// values are multiples of 2^-48), so a card that flushes them may still use its Fma.
struct FmaProbe {
    bool native = false;  // every triple but the subnormal ones bit-exact with std::fma
    std::string line;     // what verify prints
};
FmaProbe judge_fma_probe(const std::vector<FmaTriple>& t, const std::vector<float>& got);
// Runs fma_probe on the card. `corrupt` (tests only) may alter the card's results first.
FmaProbe probe_native_fma(Gpu& gpu, const std::function<void(std::vector<float>&)>& corrupt = {});
// The rows pack_q1_0 stores: `rows` rounded up to whole workgroups of either kernel (256 rows).
inline constexpr size_t PACK_ROWS = 256;
inline size_t padded_rows(size_t rows) { return (rows + PACK_ROWS - 1) / PACK_ROWS * PACK_ROWS; }
// Workgroups to dispatch for `rows` output rows.
inline uint32_t groups_mat_vec(size_t rows) { return uint32_t((rows + MAT_VEC_ROWS - 1) / MAT_VEC_ROWS); }
inline uint32_t groups_mat_vec8(size_t rows, uint32_t per = 1) {
    return uint32_t((rows + MAT_VEC8_ROWS * per - 1) / (MAT_VEC8_ROWS * per));
}
// The q1_0_mat_vec8 variant a product of `rows` rows uses: the most rows per invocation (1, 2 or
// 4) that still leaves MAT_VEC8_MIN_GROUPS workgroups, so small matrices keep every core busy and
// large ones share the table among more rows (H200: 4096 and 12288 rows fastest with 1, the
// 151,936-row output matrix with 4; docs/PERFORMANCE.md).
inline constexpr uint32_t MAT_VEC8_MIN_GROUPS = 1024;
inline uint32_t mat_vec8_per(size_t rows) {
    for (uint32_t per : {4u, 2u})
        if (groups_mat_vec8(rows, per) >= MAT_VEC8_MIN_GROUPS) return per;
    return 1;
}

// One lane's integer sum over a sub-block, as pack_act tabulates it: the four products of sign
// bits `nib` (bit t set: +x_t) and the i8 quants in `q` (byte t = x_t), where a clear bit negates
// x_t in i8 (-(-128) wraps to -128, as ggml's sign_epi8 does). Branch-free on four bytes at once:
// the bits are spread to bytes, the negated bytes become ~x + 1 (byte-wise, no carry between
// bytes), and the bytes are summed with a bias of 128 each. Tests check it against the plain loop.
inline int32_t q1_0_lane_sum(uint32_t q, uint32_t nib) {
    uint32_t set = (nib * 0x00204081u) & 0x01010101u;  // bit t of nib -> bit 0 of byte t
    uint32_t neg1 = set ^ 0x01010101u;                 // 1 in each byte to negate
    uint32_t y = q ^ ((neg1 * 0xFFu) ^ 0x80808080u);  // ~x in negated bytes, top bits flipped (bias)
    uint32_t z = ((y & 0x7F7F7F7Fu) + neg1) ^ (y & 0x80808080u);  // each byte: term + 128
    uint32_t t = (z & 0x00FF00FFu) + ((z >> 8) & 0x00FF00FFu);
    return int32_t((t * 0x00010001u) >> 16) - 512;
}

// Every module bankml would load, by file name ("q1_0_mat_vec.spv", ...).
std::vector<std::pair<std::string, std::vector<uint32_t>>> all_modules();

struct PackedQ1_0 {
    std::vector<uint32_t> scales;  // the f16 scales, two to a word (binding 0)
    std::vector<uint32_t> bits;
};
// w: rows × n/128 Q1_0 blocks, row-major as GGUF stores them; the result holds padded_rows(rows).
PackedQ1_0 pack_q1_0(std::span<const uint8_t> w, size_t rows, size_t n);

struct PackedAct {
    std::vector<float> scales;         // one per 32 values
    std::vector<float> lane_products;  // n/32 · 8 · 16: see binding 3
};
// q8: n/32 Q8_0 blocks (the activation quantized as ggml quantizes it).
PackedAct pack_act(std::span<const uint8_t> q8, size_t n);

// The on-card oracle: the native-Fma probe, then both kernels (and, where the probe passed, their
// native variants) against the CPU kernel (quant::vec_dot_q1_0_ref) on random weights and activations
// (with -128 quants), shapes 64×128 up to 12288×4096 (and 9 blocks a row, for the kernels' tail) (`full`; otherwise small shapes for tests),
// and a layer-shaped regime. Returns one line per kernel and shape; throws bankml::Error with the
// reason on the first row that differs. `corrupt` (tests only) may alter the card's output
// before the comparison, to prove the check fails closed.
// The card is refused (Error) only when an fma_exact kernel differs; a native kernel that differs
// only refuses the native path. `chosen`, when given, receives the path the card may use.
// One kernel and shape as verify reports it (bankml gpu --verify --json): `rows` the output values
// compared, bit_exact false only for the check that refused the card.
struct Check {
    std::string name, shape;
    size_t rows = 0;
    bool bit_exact = false;
    double ms = 0;
    bool flagged = false;  // a guarded build's run that raised its subnormal flag (bit_exact then says it may differ)
    // Timed (model::VerifyOpsOptions::time_reps): the card's time for the dispatch (its queue's
    // timestamps), best and median of `reps` runs after the check; negative where not timed or
    // the queue has no timestamps.
    double card_us_best = -1, card_us_median = -1;
    size_t reps = 0;
};
struct VerifyOptions {
    bool full = true;
    std::function<void(std::vector<float>&)> corrupt;
    std::function<void(std::vector<float>&)> corrupt_probe;  // tests: a card whose Fma does not fuse
    FmaPath* chosen = nullptr;
    std::vector<Check>* checks = nullptr;  // receives every kernel and shape run, in order
};
// Why a card's workgroup limits cannot run the kernels, or "" when they can.
std::string limits_problem(uint32_t max_invocations, uint32_t max_size_x, uint32_t max_shared_bytes);
// Throws bankml::Error (the reason) when the card cannot run the kernels or a row differs.
std::vector<std::string> verify_q1_0(Gpu& gpu, const VerifyOptions& opt = {});

}  // namespace bankml::gpu::kernels
