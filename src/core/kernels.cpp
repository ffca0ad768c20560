#include "core/kernels.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cpu.h"

namespace bankml {

enum class Choice { Auto, Scalar, Avx2 };

static Choice choice() {
    static const Choice c = [] {
        const char* v = std::getenv("BANKML_KERNELS");
        if (!v || !*v || std::strcmp(v, "auto") == 0) return Choice::Auto;
        if (std::strcmp(v, "scalar") == 0) return Choice::Scalar;
        if (std::strcmp(v, "avx2") == 0) return Choice::Avx2;
        std::fprintf(stderr, "bankml: ignoring BANKML_KERNELS='%s' (wants scalar, avx2 or auto)\n", v);
        return Choice::Auto;
    }();
    return c;
}

static bool forced_scalar() { return choice() == Choice::Scalar; }

bool vnni_allowed() { return cpu().avxvnni && choice() != Choice::Avx2; }

bool fast_kernels() {
    static const bool fast = !forced_scalar() && cpu_has_avx2_fma_f16c();
    return fast;
}

std::string kernels_description() {
    if (fast_kernels()) return vnni_allowed() ? "avx2+fma+f16c, avx-vnni for Q1_0 batches" : "avx2+fma+f16c";
    if (forced_scalar()) return "scalar (BANKML_KERNELS=scalar)";
    return "scalar (cpu lacks avx2/fma/f16c)";
}

}  // namespace bankml
