// Internal: the row-range kernels behind matmul.cpp. Each computes y[c * ldy + r] for rows
// r in [r0, r1) and columns c in [0, ncols). The fast ones take activations prepared once per call
// (Prepared) so that per-column work (f16 scales to f32, sums) is not redone per row.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "core/aligned.h"
#include "core/kernels.h"
#include "quant/blocks.h"

namespace bankml::quant::detail {

// A thread's scratch memory, 64-byte aligned (contents unspecified; a larger request may move it).
class AlignedScratch {
public:
    template <class T>
    T* get(size_t n) {
        if (buf_.size() < n * sizeof(T)) buf_.resize(n * sizeof(T));
        return reinterpret_cast<T*>(buf_.data());
    }

private:
    AlignedVector<uint8_t> buf_;
};

// A fast path's once-per-call data: the level its rows kernel runs at, and parts whose layout the
// type's prepare function chooses (each type's fast file names its parts); nothing here is
// specific to a type. The buffer only grows, so a caller that keeps one allocates once.
class Prepared {
public:
    Isa isa = Isa::Scalar;
    size_t cols = 0, ncols = 0;

    // Lays out parts of these sizes in bytes, each 64-byte aligned (contents unspecified).
    void layout(std::initializer_list<size_t> bytes) {
        if (off_.size() < bytes.size()) off_.resize(bytes.size());
        size_t off = 0, i = 0;
        for (size_t b : bytes) {
            off_[i++] = off;
            off += (b + 63) & ~size_t(63);
        }
        base_ = buf_.get<uint8_t>(off);
    }
    template <class T>
    T* part(size_t i) const { return reinterpret_cast<T*>(base_ + off_[i]); }

private:
    AlignedScratch buf_;
    uint8_t* base_ = nullptr;
    std::vector<size_t> off_;
};

// 1.5 * 2^23 and its f32 bits: for an int32 s with |s| < 2^22, the f32 with bits MAGIC_BITS + s is
// exactly MAGIC + s (the binade [2^23, 2^24) has a unit step), so `vpdpbusd` started from
// MAGIC_BITS - T leaves the lane sum s as a float offset by MAGIC, with no conversion.
inline constexpr float Q1_MAGIC = 12582912.0f;
inline constexpr int32_t Q1_MAGIC_BITS = 0x4B400000;

// The view of one activation column that the AVX-512 VNNI tiles and the avx2 level's identity
// loops read (q1_0_prepare's part 3): per weight block of 128 values, one record of Q1_TILE_REC
// bytes, 64-byte aligned, holding for its sub-block k (0..3): at 64k its 32 quants, at 64k + 32
// its eight int32 lanes MAGIC_BITS - T (T: the lane's sum of four quants), at 256 + 4k its f32
// scale d1 and at 272 + 4k d1 * -MAGIC. One pointer per column then reaches everything the loops
// read, and each sub-block's quants and lanes share a cache line.
inline constexpr size_t Q1_TILE_REC = 320;

// The avx2 level's exact blocks (q1_0_prepare's part 5, several columns): per column and weight
// block, Q1_EXACT_REC bytes holding at 0 eight int32 lanes -C (in a column of kind
// Q1_EXACT_MAGIC, the bits of MAGIC·u less C: the binade of MAGIC·u steps by u), at 32 two int32
// words holding the int16 pairs (M_0, M_1) and (M_2, M_3) (M_0 and M_2 in the low halves), at 48
// the f32 u (the converting loop's multiplier), at 52 a byte that is 1 where the block qualifies,
// at 53 one that is 1 where its lanes' bound is under 2^22 as well, at 56 the f32 -MAGIC·u (the
// magic loop's addend), and at 64 the block's quants paired across sub-blocks (four vectors of 32
// bytes; see q1_0_fast.cpp's exact_record for what these are and when). Part 6 holds a byte per
// column: the kind of loop its blocks allow.
inline constexpr size_t Q1_EXACT_REC = 192;
enum : uint8_t { Q1_EXACT_NONE = 0, Q1_EXACT_CVT = 1, Q1_EXACT_MAGIC = 2 };

#if defined(__x86_64__)
void q1_0_layout(size_t cols, size_t ncols, Isa isa, Prepared& p);
void q1_0_prepare(const BlockQ8_0* x, Prepared& p, size_t c0, size_t c1);
// Both steps for every column, on one thread.
inline void q1_0_prepare(const BlockQ8_0* x, size_t cols, size_t ncols, Prepared& p, Isa isa) {
    q1_0_layout(cols, ncols, isa, p);
    q1_0_prepare(x, p, 0, ncols);
}
void q1_0_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                    float* y, size_t ldy);
void q1_0_rows_avx512(const BlockQ1_0* w, size_t cols, size_t r0, size_t r1, const BlockQ8_0* x, const Prepared& p,
                      size_t ncols, float* y, size_t ldy);
void q2_0_layout(size_t cols, size_t ncols, Isa isa, Prepared& p);
void q2_0_prepare(const BlockQ8_0* x, Prepared& p, size_t c0, size_t c1);
// Bytes per (column, 64-weight block) of the Q2_0 kernels' prepared activations (q2_0_fast.cpp).
inline constexpr size_t Q2_REC = 88;
void q2_0_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                    float* y, size_t ldy);
void q2_0_rows_avx512(const BlockQ2_0* w, size_t cols, size_t r0, size_t r1, const Prepared& p, size_t ncols, float* y,
                      size_t ldy);
// The Q2_0 kernels' groups of G rows over [r0, r1): group(rows, sums) fills sums[G·c + r] for the
// G rows at `rows` (nb blocks each); a short last group runs on a copy of its rows with the last
// one repeated, and only the real rows' sums are stored into y.
template <size_t G, class Group>
void q2_0_row_groups(const BlockQ2_0* wb, size_t nb, size_t r0, size_t r1, size_t ncols, float* y, size_t ldy, Group&& group) {
    const size_t stride = nb * sizeof(BlockQ2_0);
    static thread_local std::vector<float> sums;
    static thread_local std::vector<uint8_t> tail;
    if (sums.size() < G * ncols) sums.resize(G * ncols);
    for (size_t g = r0; g < r1; g += G) {
        const uint8_t* rows = reinterpret_cast<const uint8_t*>(wb + g * nb);
        if (r1 - g < G) {
            tail.resize(G * stride);
            for (size_t r = 0; r < G; ++r)
                std::memcpy(tail.data() + r * stride, wb + (g + r < r1 ? g + r : r1 - 1) * nb, stride);
            rows = tail.data();
        }
        group(rows, sums.data());
        for (size_t c = 0; c < ncols; ++c)
            for (size_t r = 0; r < G && g + r < r1; ++r) y[c * ldy + g + r] = sums[G * c + r];
    }
}
float f16_dot_fast(size_t n, const uint16_t* w, const uint16_t* x, Isa isa);
float f16_dot_avx512(size_t n, const uint16_t* w, const uint16_t* x);
float f16_dotf_avx512(size_t n, const float* w, const float* x);
void f32_layout(size_t cols, size_t ncols, Isa isa, Prepared& p);
void f32_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                   float* y, size_t ldy);
void f16_layout(size_t cols, size_t ncols, Isa isa, Prepared& p);
void f16_prepare(const uint16_t* x, Prepared& p, size_t c0, size_t c1);
void f16_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                   float* y, size_t ldy);
#endif

}  // namespace bankml::quant::detail
