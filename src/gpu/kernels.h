// The Q1_0 kernels on the card: q1_0_mat_vec (one invocation per output row) and q1_0_mat_vec8
// (eight per row, one per accumulation lane). Both follow the CPU's vec_dot_ref step by step, so
// a card that runs them correctly gives the CPU's bits; verify_q1_0 proves that on the card.
//
// Data on the card (pack_q1_0, pack_act): the numbers unchanged, only aligned.
//   binding 0  weight scales, f32, block-major: scale of (row r, block b) at b·rows + r
//   binding 1  weight bits, uvec4 per block, block-major: word k (bits 32k..32k+31) of (r, b) at
//              u32 index (b·rows + r)·4 + k (one 16-byte load per block)
//   binding 2  activation scales, f32, one per 32 values
//   binding 3  activation lane sums, i32: for sub-block j, lane l (quants 4l..4l+3) and each of
//              the 16 patterns of four sign bits, the exact integer sum at (j·8 + l)·16 + bits
//   binding 4  output, f32, one per row
//   push constants: u32 rows, u32 blocks per row
// Block-major weights let neighbouring invocations (neighbouring rows) read neighbouring words.
// The activation is the same for every row, so its lane sums are tabulated once per product
// (16 per four quants, 64 KiB for n = 4096) and each row's four sign bits pick one: the card does
// no per-byte work, and the sums are exactly the CPU's (q1_0_lane_sum).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace bankml::gpu {
class Gpu;
}

namespace bankml::gpu::kernels {

inline constexpr uint32_t Q1_0_BINDINGS = 5;
inline constexpr uint32_t Q1_0_PUSH_BYTES = 8;
inline constexpr uint32_t LOCAL_SIZE = 64;
inline constexpr size_t Q1_0_BLOCK = 128, Q1_0_BLOCK_BYTES = 18;  // f16 d, then 16 bytes of sign bits
inline constexpr size_t Q8_0_BLOCK = 32, Q8_0_BLOCK_BYTES = 34;   // f16 d, then 32 i8

std::vector<uint32_t> q1_0_mat_vec();
std::vector<uint32_t> q1_0_mat_vec8();
// Workgroups to dispatch for `rows` output rows.
inline uint32_t groups_mat_vec(size_t rows) { return uint32_t((rows + LOCAL_SIZE - 1) / LOCAL_SIZE); }
inline uint32_t groups_mat_vec8(size_t rows) { return uint32_t((rows * 8 + LOCAL_SIZE - 1) / LOCAL_SIZE); }

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
    std::vector<float> scales;
    std::vector<uint32_t> bits;
};
// w: rows × n/128 Q1_0 blocks, row-major as GGUF stores them.
PackedQ1_0 pack_q1_0(std::span<const uint8_t> w, size_t rows, size_t n);

struct PackedAct {
    std::vector<float> scales;       // one per 32 values
    std::vector<int32_t> lane_sums;  // n/32 · 8 · 16: see binding 3
};
// q8: n/32 Q8_0 blocks (the activation quantized as ggml quantizes it).
PackedAct pack_act(std::span<const uint8_t> q8, size_t n);

// The on-card oracle: both kernels against the CPU kernel (quant::vec_dot_q1_0_ref) on random weights and activations
// (with -128 quants), shapes 64×128 up to 12288×4096 (and 9 blocks a row, for the kernels' tail) (`full`; otherwise small shapes for tests),
// and a layer-shaped regime. Returns one line per kernel and shape; throws bankml::Error with the
// reason on the first row that differs. `corrupt` (tests only) may alter the card's output
// before the comparison, to prove the check fails closed.
struct VerifyOptions {
    bool full = true;
    std::function<void(std::vector<float>&)> corrupt;
};
std::vector<std::string> verify_q1_0(Gpu& gpu, const VerifyOptions& opt = {});

}  // namespace bankml::gpu::kernels
