// Which kernels run. The fast paths are written for instruction-set levels, narrowest first:
// scalar (the references), avx2 (AVX2+FMA+F16C), avxvnni (avx2 plus the 256-bit AVX-VNNI loops),
// avx512 (AVX-512 F/BW/VL) and avx512vnni (avx512 plus AVX-512 VNNI). Each level runs only where
// the CPU has its instructions (detected at run time; the binary is baseline x86-64) and every
// level gives the reference's bits. BANKML_KERNELS=LEVEL caps the level (auto: the widest the CPU
// has), so that each narrower path can be forced and tested on a wide machine.
#pragma once
#include <string>
#include <vector>

namespace bankml {

enum class Isa { Scalar, Avx2, AvxVnni, Avx512, Avx512Vnni };

// "scalar", "avx2", "avxvnni", "avx512", "avx512vnni".
const char* isa_name(Isa l);
// Whether the CPU has the level's instructions (scalar: always).
bool isa_supported(Isa l);
// The widest supported level not above `want` (the levels are not nested on every CPU: one may
// have AVX-512 without AVX-VNNI).
Isa isa_clamp(Isa want);
// The widest level the CPU supports.
Isa cpu_isa();
// Every distinct level the CPU supports, narrowest first (scalar included): what tests sweep.
std::vector<Isa> supported_isas();
// The level kernels run at by default: cpu_isa() capped by BANKML_KERNELS. Read once per process.
Isa kernel_isa();
// True when kernel_isa() is not scalar.
bool fast_kernels();
// "avx512vnni", "avx2 (BANKML_KERNELS=avx2)", "scalar (cpu lacks avx2/fma/f16c)", ...
std::string kernels_description();

}  // namespace bankml
