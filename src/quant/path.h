// Which implementation a kernel call uses. Auto: the level BANKML_KERNELS and the CPU allow
// (core/kernels.h). Reference: the scalar reference. Fast: the widest level the CPU has. Avx2 ...
// Avx512Vnni: that level, or the widest supported one below it. All give the same bits.
#pragma once

#include "core/kernels.h"

namespace bankml::quant {

enum class Path { Auto, Reference, Fast, Avx2, AvxVnni, Avx512, Avx512Vnni };

// The level a call with this path runs at.
Isa path_isa(Path p);
// True when a call with this path runs a fast (non-scalar) kernel.
inline bool use_fast(Path p) { return path_isa(p) != Isa::Scalar; }
// The path that forces a level (Scalar: Reference).
Path path_of(Isa l);

}  // namespace bankml::quant
