// Which kernels run: the AVX2+FMA+F16C fast paths when the CPU has them, else the scalar
// references. BANKML_KERNELS=scalar forces the references everywhere (same bits, slower).
#pragma once
#include <string>

namespace bankml {

// True when the fast paths run: the CPU has AVX2, FMA and F16C and BANKML_KERNELS is not "scalar".
// Read once per process.
bool fast_kernels();
// "avx2+fma+f16c", "scalar (BANKML_KERNELS=scalar)" or "scalar (cpu lacks avx2/fma/f16c)".
std::string kernels_description();

}  // namespace bankml
