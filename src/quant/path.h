// Which implementation a kernel call uses. Auto: the fast path when bankml::fast_kernels()
// (AVX2+FMA+F16C present, BANKML_KERNELS not "scalar"), else the reference. Reference: the scalar
// reference. Fast: the fast path if the CPU has it, else the reference. All give the same bits.
#pragma once

#include "core/kernels.h"

namespace bankml::quant {

enum class Path { Auto, Reference, Fast };

// True when a call with this path runs the AVX2 code.
bool use_fast(Path p);

}  // namespace bankml::quant
