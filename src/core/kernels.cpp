#include "core/kernels.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cpu.h"

namespace bankml {

static constexpr Isa LEVELS[] = {Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Avx512Vnni};

const char* isa_name(Isa l) {
    switch (l) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::AvxVnni: return "avxvnni";
        case Isa::Avx512: return "avx512";
        case Isa::Avx512Vnni: return "avx512vnni";
    }
    return "?";
}

bool isa_supported(Isa l) {
    const CpuFeatures& f = cpu();
    const bool avx2 = cpu_has_avx2_fma_f16c(), avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl;
    switch (l) {
        case Isa::Scalar: return true;
        case Isa::Avx2: return avx2;
        case Isa::AvxVnni: return avx2 && f.avxvnni;
        case Isa::Avx512: return avx512;
        case Isa::Avx512Vnni: return avx512 && f.avx512vnni;
    }
    return false;
}

Isa isa_clamp(Isa want) {
    Isa best = Isa::Scalar;
    for (Isa l : LEVELS)
        if (l <= want && isa_supported(l)) best = l;
    return best;
}

Isa cpu_isa() {
    static const Isa l = isa_clamp(Isa::Avx512Vnni);
    return l;
}

std::vector<Isa> supported_isas() {
    std::vector<Isa> v;
    for (Isa l : LEVELS)
        if (isa_supported(l)) v.push_back(l);
    return v;
}

// The level BANKML_KERNELS caps the kernels at; false when unset, empty or "auto" (no cap).
static bool env_cap(Isa& cap) {
    static const int c = [] {
        const char* v = std::getenv("BANKML_KERNELS");
        if (!v || !*v || std::strcmp(v, "auto") == 0) return -1;
        for (Isa l : LEVELS)
            if (std::strcmp(v, isa_name(l)) == 0) return int(l);
        std::fprintf(stderr,
                     "bankml: ignoring BANKML_KERNELS='%s' (wants scalar, avx2, avxvnni, avx512, avx512vnni or auto)\n", v);
        return -1;
    }();
    if (c >= 0) cap = Isa(c);
    return c >= 0;
}

Isa kernel_isa() {
    static const Isa l = [] {
        Isa cap = Isa::Avx512Vnni;
        env_cap(cap);
        return isa_clamp(cap);
    }();
    return l;
}

bool fast_kernels() { return kernel_isa() != Isa::Scalar; }

std::string kernels_description() {
    Isa cap = Isa::Avx512Vnni;
    const bool capped = env_cap(cap);
    std::string s = isa_name(kernel_isa());
    if (capped) s += std::string(" (BANKML_KERNELS=") + isa_name(cap) + ")";
    else if (!cpu_has_avx2_fma_f16c()) s += " (cpu lacks avx2/fma/f16c)";
    return s;
}

}  // namespace bankml
