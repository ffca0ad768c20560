// IEEE half precision <-> f32, bit-exact with the x86 F16C instructions (round to nearest even,
// subnormals kept, overflow to infinity, NaN quieted with its payload's top bits). The software
// path gives the same bits as F16C on every input, so machines without F16C agree with ggml's.
#pragma once
#include <cstddef>
#include <cstdint>

namespace bankml {

// Software conversions: the reference. Exact for every one of the 65,536 halves.
float f16_to_f32(uint16_t h);
// Round to nearest even; |x| >= 65520 becomes infinity; NaN keeps sign and top payload bits, quieted.
uint16_t f32_to_f16(float x);

// Rows: F16C when the CPU has it (and BANKML_KERNELS is not "scalar"), else the software path.
void f16_to_f32_row(const uint16_t* h, float* out, size_t n);
void f32_to_f16_row(const float* x, uint16_t* out, size_t n);

// The hardware instructions themselves, for tests that compare them with the software path.
// Only callable when cpu_has_avx2_fma_f16c(); on other machines they fall back to the software path.
float f16_to_f32_f16c(uint16_t h);
uint16_t f32_to_f16_f16c(float x);

}  // namespace bankml
