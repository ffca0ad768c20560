// Q8_0 activations made as ggml's x86 AVX2 quantize_row_q8_0 makes them (golden kind 1).
// Per block of 32: amax = max|x|; d = amax / 127 stored as f16; id = amax ? 127 / amax : 0 (in f32,
// not 1/d); q = round_half_even(x * id), saturated to int8 as the AVX2 packs do.
#pragma once
#include <cstddef>

#include "quant/blocks.h"
#include "quant/path.h"

namespace bankml::quant {

// Quantizes n floats (n a multiple of 32) into n/32 blocks. Fast path (AVX2) or reference, same bits.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, size_t n, Path path = Path::Auto);
// The scalar reference, step by step in the AVX2 kernel's order.
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, size_t n);

}  // namespace bankml::quant
