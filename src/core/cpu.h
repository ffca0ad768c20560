// The CPU features bankml can use, detected once at run time (never assumed at build time).
#pragma once
#include <string>

namespace bankml {

struct CpuFeatures {
    bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avxvnni = false;
};

const CpuFeatures& cpu();
// "avx2 fma f16c avx512f ..." (only those present), or "none" on a machine without them.
std::string cpu_features_string();
// True when the AVX2 + FMA + F16C kernels may run.
bool cpu_has_avx2_fma_f16c();

}  // namespace bankml
