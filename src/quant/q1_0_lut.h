// Q1_0 × Q8_0 decode by lane tables: one activation column against many rows, with
// vec_dot_q1_0_ref's bits. For each lane of four quants (sub-block k, lane j), the column's table
// holds, for each pattern of four sign bits (nibble n), s(n), the lane's sum of ±q (int8 negation,
// -(-128) = -128, as the reference), so that the reference's per-lane steps become lookups; then
// acc = fma(d0, ab, acc) and the reference's sum of the eight lanes. The weights go in a decode
// layout that puts 16 rows' sign bytes side by side, so that one lookup serves 16 rows.
//
// AVX-512 (tables, rows): the entries are the floats d1_k·s(n). d1 is an f16 and |s| <= 512, so
// each product is exact and the reference's ab = d1·s (k = 0) and fma(d1, s, ab) = ab + entry
// (k > 0) take one rounding either way. A 16-entry permute (vpermps) looks a lane up for 16 rows;
// two groups run together, each table load serving both.
//
// AVX2 (tables_avx2, rows_avx2): no 16-entry float permute, but vpshufb is a 16-entry byte lookup
// (32 bytes an instruction). The entries are the int16 s(n), as two byte planes (low, high); a
// ymm's low half looks lane 2jj up and its high half lane 2jj + 1, for the same 16 rows. Unpacking
// the planes gives words s; a word moved to the top of its int32 (shift or mask) is s·2^16, which
// converts exactly, and with the table's d1·2^-16 (exact: d1 is an f16, far from f32's range
// ends) the product d1·2^-16 · s·2^16 is d1·s exactly, so mul and fma round as the reference's.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/kernels.h"
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

// Which decode a kernel level runs: AVX-512 at avx512 and above, AVX2 at avx2 and avxvnni, none
// (the row loops) at scalar.
enum class Kernel { None, Avx2, Avx512 };
inline Kernel kernel_for(Isa level) {
#if defined(__x86_64__)
    return level >= Isa::Avx512 ? Kernel::Avx512 : level >= Isa::Avx2 ? Kernel::Avx2 : Kernel::None;
#else
    (void)level;
    return Kernel::None;
#endif
}

// One column's tables: per Q8_0 block (sub-block) and lane, 16 floats (64-byte aligned).
inline size_t table_floats(size_t cols) { return cols / QK8_0 * 8 * 16; }
// One column's AVX2 tables (32-byte aligned): per sub-block, 256 bytes (for each lane pair jj:
// lanes 2jj and 2jj + 1's 16 low bytes of s, then their 16 high bytes), the f32 d1·2^-16, and
// padding to keep the next sub-block aligned; a sub-block's record is its own, so that callers may
// share the sub-blocks out among threads.
inline constexpr size_t TABLE_AVX2_BYTES = 288;
inline size_t table_bytes_avx2(size_t cols) { return cols / QK8_0 * TABLE_AVX2_BYTES; }
#if defined(__x86_64__)
void tables(const BlockQ8_0* x, size_t cols, float* t);

// y[r] = row r · the column, for the rows of groups [g0, g1) (rows past `rows` not written). Needs
// AVX-512 (F, BW, VL; isa_supported(Isa::Avx512)).
void rows(const uint8_t* packed, size_t rows, size_t cols, size_t g0, size_t g1, const float* t, float* y);

// The same with AVX2 tables; needs AVX2, FMA and F16C (isa_supported(Isa::Avx2)).
void tables_avx2(const BlockQ8_0* x, size_t cols, uint8_t* t);
void rows_avx2(const uint8_t* packed, size_t rows, size_t cols, size_t g0, size_t g1, const uint8_t* t, float* y);
#endif

}  // namespace bankml::quant::lut
