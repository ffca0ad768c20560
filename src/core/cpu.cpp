#include "core/cpu.h"

namespace bankml {

static CpuFeatures detect() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.sse42 = __builtin_cpu_supports("sse4.2");
    f.avx = __builtin_cpu_supports("avx");
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = __builtin_cpu_supports("f16c");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512vnni = __builtin_cpu_supports("avx512vnni");
    f.avxvnni = __builtin_cpu_supports("avxvnni");
#endif
    return f;
}

const CpuFeatures& cpu() {
    static const CpuFeatures f = detect();
    return f;
}

std::string cpu_features_string() {
    const auto& f = cpu();
    std::string s;
    auto add = [&](bool on, const char* n) {
        if (on) s += (s.empty() ? "" : " ") + std::string(n);
    };
    add(f.sse42, "sse4.2");
    add(f.avx, "avx");
    add(f.avx2, "avx2");
    add(f.fma, "fma");
    add(f.f16c, "f16c");
    add(f.avx512f, "avx512f");
    add(f.avx512bw, "avx512bw");
    add(f.avx512vl, "avx512vl");
    add(f.avx512vnni, "avx512vnni");
    add(f.avxvnni, "avxvnni");
    return s.empty() ? "none" : s;
}

bool cpu_has_avx2_fma_f16c() {
    const auto& f = cpu();
    return f.avx2 && f.fma && f.f16c;
}

}  // namespace bankml
