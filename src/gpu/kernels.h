// The Q1_0 kernels on the card: q1_0_mat_vec (one invocation per output row) and q1_0_mat_vec8
// (eight per row, one per accumulation lane). Both follow the CPU's vec_dot_ref step by step, so
// a card that runs them correctly gives the CPU's bits; verify_q1_0 proves that on the card.
//
// Data on the card (pack_q1_0, pack_act): the numbers unchanged, only aligned.
//   binding 0  weight scales, f32, block-major: scale of (row r, block b) at b·rows + r
//   binding 1  weight bits, u32, block-major: word k (bits 32k..32k+31) of (r, b) at (b·rows + r)·4 + k
//   binding 2  activation scales, f32, one per 32 values
//   binding 3  activation quants, i32 words of four i8 (little-endian), n/4 words
//   binding 4  output, f32, one per row
//   push constants: u32 rows, u32 blocks per row
// Block-major weights let neighbouring invocations (neighbouring rows) read neighbouring words.
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

// Every module bankml would load, by file name ("q1_0_mat_vec.spv", ...).
std::vector<std::pair<std::string, std::vector<uint32_t>>> all_modules();

struct PackedQ1_0 {
    std::vector<float> scales;
    std::vector<uint32_t> bits;
};
// w: rows × n/128 Q1_0 blocks, row-major as GGUF stores them.
PackedQ1_0 pack_q1_0(std::span<const uint8_t> w, size_t rows, size_t n);

struct PackedAct {
    std::vector<float> scales;
    std::vector<int32_t> quants;
};
// q8: n/32 Q8_0 blocks (the activation quantized as ggml quantizes it).
PackedAct pack_act(std::span<const uint8_t> q8, size_t n);

// The on-card oracle: both kernels against the CPU kernel (quant::vec_dot_q1_0_ref) on random weights and activations
// (with -128 quants), shapes 64×128 up to 12288×4096 (`full`; otherwise small shapes for tests),
// and a layer-shaped regime. Returns one line per kernel and shape; throws bankml::Error with the
// reason on the first row that differs. `corrupt` (tests only) may alter the card's output
// before the comparison, to prove the check fails closed.
struct VerifyOptions {
    bool full = true;
    std::function<void(std::vector<float>&)> corrupt;
};
std::vector<std::string> verify_q1_0(Gpu& gpu, const VerifyOptions& opt = {});

}  // namespace bankml::gpu::kernels
