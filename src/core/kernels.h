// Which kernels run: the AVX2+FMA+F16C fast paths when the CPU has them, else the scalar
// references. BANKML_KERNELS=scalar forces the references everywhere (same bits, slower);
// BANKML_KERNELS=avx2 keeps the fast paths but not the AVX-VNNI batch loop.
#pragma once
#include <string>

namespace bankml {

// True when the fast paths run: the CPU has AVX2, FMA and F16C and BANKML_KERNELS is not "scalar".
// Read once per process.
bool fast_kernels();
// "avx2+fma+f16c" (", avx-vnni for Q1_0 batches" where present), "scalar (BANKML_KERNELS=scalar)"
// or "scalar (cpu lacks avx2/fma/f16c)".
std::string kernels_description();
// True when the CPU has AVX-VNNI and BANKML_KERNELS is not "avx2" (the Q1_0 batch loop may use it).
bool vnni_allowed();

}  // namespace bankml
