#include "core/kernels.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cpu.h"

namespace bankml {

static bool forced_scalar() {
    const char* v = std::getenv("BANKML_KERNELS");
    if (!v || !*v || std::strcmp(v, "auto") == 0) return false;
    if (std::strcmp(v, "scalar") == 0) return true;
    std::fprintf(stderr, "bankml: ignoring BANKML_KERNELS='%s' (wants scalar or auto)\n", v);
    return false;
}

bool fast_kernels() {
    static const bool fast = !forced_scalar() && cpu_has_avx2_fma_f16c();
    return fast;
}

std::string kernels_description() {
    if (fast_kernels()) return "avx2+fma+f16c";
    if (forced_scalar()) return "scalar (BANKML_KERNELS=scalar)";
    return "scalar (cpu lacks avx2/fma/f16c)";
}

}  // namespace bankml
