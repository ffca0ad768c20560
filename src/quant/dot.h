// One row against one activation column: the scalar references, each following ggml's x86
// arithmetic step by step (see docs/modules/q1_0.md, q2_0.md, f16.md). n is the row's length.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"

namespace bankml::quant {

// ggml_vec_dot_q1_0_q8_0 (AVX2 order): per 128-weight block, four Q8_0 sub-blocks; per sub-block
// eight exact int lane sums of +-q (negating -128 wraps to -128); ab = d1*s, then fma(d1, s, ab);
// acc = fma(d0, ab, acc); result (a0+a4 + a2+a6) + (a1+a5 + a3+a7). n: multiple of 128.
float vec_dot_q1_0_ref(size_t n, const BlockQ1_0* w, const BlockQ8_0* x);
// ggml_vec_dot_q2_0_q8_0 (the generic C loop, the one x86 runs): per 64-weight block two exact
// int sums; sumi = 0 + d1a*sa; sumi += d1b*sb; sumf += d0*sumi; nothing fused. n: multiple of 64.
float vec_dot_q2_0_ref(size_t n, const BlockQ2_0* w, const BlockQ8_0* x);
// ggml_vec_dot_f16 (AVX2 order) of an f16 weight row with an f16 activation column: four 8-lane
// fma accumulators over steps of 32, sum0+=sum2, sum1+=sum3, sum0+=sum1, then (l0+h0 + l1+h1) +
// (l2+h2 + l3+h3); a tail beyond a multiple of 32 adds f32 products in double.
float vec_dot_f16_ref(size_t n, const uint16_t* w, const uint16_t* x);
// ggml_vec_dot_f32 (AVX2 order) of an f32 row with an f32 column: four 8-lane fma accumulators over
// steps of 32, the same reduction as vec_dot_f16_ref, then a tail beyond a multiple of 32 fused
// into the sum one product at a time (ggml's C is built with FMA contraction).
float vec_dot_f32_ref(size_t n, const float* w, const float* x);
// The same bits with AVX2 (callers check the CPU has it: core/kernels.h).
float vec_dot_f32_avx2(size_t n, const float* w, const float* x);

}  // namespace bankml::quant
