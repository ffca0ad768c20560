// Internal: the row-range kernels behind matmul.cpp. Each computes y[c * ldy + r] for rows
// r in [r0, r1) and columns c in [0, ncols). The fast ones take activations prepared once per call
// (Prepared) so that per-column work (f16 scales to f32, sums) is not redone per row.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/blocks.h"

namespace bankml::quant::detail {

struct Prepared {
    std::vector<float> d;      // f32 of every Q8_0 block's scale, all columns
    // Q1_0 batches on AVX-VNNI: per column, whether it holds a -128 quant (then the AVX2 path
    // runs it: the VNNI identity below does not reproduce the -(-128) wrap), and per sub-block the
    // eight negated lane sums -T of its quants.
    bool vnni = false;
    std::vector<uint8_t> has_m128;
    std::vector<int32_t> neg_lane_sums;
    std::vector<int32_t> sum;  // Q2_0: sum of each Q8_0 block's quants
    std::vector<int8_t> perm;  // Q2_0: each Q8_0 block's quants in bit-plane order (see q2_0_fast.cpp)
    std::vector<float> xf;     // F16, several columns: the columns widened to f32 (exact)
};

#if defined(__x86_64__)
// vnni: use the AVX-VNNI batch kernel (only when the CPU has it).
void q1_0_prepare(const BlockQ8_0* x, size_t cols, size_t ncols, Prepared& p, bool vnni);
void q2_0_prepare(const BlockQ8_0* x, size_t cols, size_t ncols, Prepared& p);
void q1_0_rows_avx2(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                    float* y, size_t ldy);
void q2_0_rows_avx2(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                    float* y, size_t ldy);
float f16_dot_avx2(size_t n, const uint16_t* w, const uint16_t* x);
void f16_prepare(const uint16_t* x, size_t cols, size_t ncols, Prepared& p);
void f16_rows_avx2(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                   float* y, size_t ldy);
#endif

}  // namespace bankml::quant::detail
