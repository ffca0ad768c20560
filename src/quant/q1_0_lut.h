// Q1_0 × Q8_0 decode by lane tables (AVX-512): one activation column against many rows, with
// vec_dot_q1_0_ref's bits. For each lane of four quants (sub-block k, lane j), the column's table
// holds the 16 values d1_k·s(nibble), s the lane's sum of ±q for each pattern of four sign bits
// (int8 negation, -(-128) = -128, as the reference). d1 is an f16 and |s| <= 512, so each product is
// exact, and the reference's steps become lookups: ab = d1·s is the entry itself (k = 0) and
// fma(d1, s, ab) = ab + entry (k > 0), one rounding either way; then acc = fma(d0, ab, acc) and the
// reference's sum of the eight lanes. A 16-entry permute (vpermps) looks a lane up for 16 rows at
// once, so the weights go in a decode layout that puts 16 rows' sign bytes side by side; two such
// groups run together, each table load serving both.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"

namespace bankml::quant::lut {

// Rows a group: one lookup serves them all.
inline constexpr size_t ROWS = 16;
inline size_t groups(size_t rows) { return (rows + ROWS - 1) / ROWS; }
// The decode layout: per group of ROWS rows (the last padded with zero rows), per weight block:
// the rows' f16 scales (32 bytes), then for each of the block's 16 sign bytes b, byte b of each row
// (16 × 16 bytes): the same 18 bytes a block as the GGUF's.
inline constexpr size_t GROUP_BLOCK_BYTES = 2 * ROWS + (QK1_0 / 8) * ROWS;
inline size_t packed_bytes(size_t rows, size_t cols) { return groups(rows) * (cols / QK1_0) * GROUP_BLOCK_BYTES; }
// Groups [g0, g1) of the layout (out: the whole layout's start), so that callers may share the
// groups out among threads; the default, every group.
void pack(const BlockQ1_0* w, size_t rows, size_t cols, uint8_t* out, size_t g0 = 0, size_t g1 = SIZE_MAX);

// One column's tables: per Q8_0 block (sub-block) and lane, 16 floats (64-byte aligned).
inline size_t table_floats(size_t cols) { return cols / QK8_0 * 8 * 16; }
#if defined(__x86_64__)
void tables(const BlockQ8_0* x, size_t cols, float* t);

// y[r] = row r · the column, for the rows of groups [g0, g1) (rows past `rows` not written). Needs
// AVX-512 (F, BW, VL; isa_supported(Isa::Avx512)).
void rows(const uint8_t* packed, size_t rows, size_t cols, size_t g0, size_t g1, const float* t, float* y);
#endif

}  // namespace bankml::quant::lut
