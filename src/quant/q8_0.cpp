#include "quant/q8_0.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/cpu.h"
#include "core/f16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bankml::quant {

Isa path_isa(Path p) {
    switch (p) {
        case Path::Auto: return kernel_isa();
        case Path::Reference: return Isa::Scalar;
        case Path::Fast: return cpu_isa();
        case Path::Avx2: return isa_clamp(Isa::Avx2);
        case Path::AvxVnni: return isa_clamp(Isa::AvxVnni);
        case Path::Avx512: return isa_clamp(Isa::Avx512);
        case Path::Avx512Vnni: return isa_clamp(Isa::Avx512Vnni);
    }
    return Isa::Scalar;
}

Path path_of(Isa l) {
    switch (l) {
        case Isa::Scalar: return Path::Reference;
        case Isa::Avx2: return Path::Avx2;
        case Isa::AvxVnni: return Path::AvxVnni;
        case Isa::Avx512: return Path::Avx512;
        case Isa::Avx512Vnni: return Path::Avx512Vnni;
    }
    return Path::Reference;
}

// cvtps_epi32 turns NaN and out-of-range values into INT32_MIN; packs then saturate to int8.
static int8_t to_int8_like_avx2(float r) {
    int32_t i = (r != r || r >= 2147483648.0f || r < -2147483648.0f) ? INT32_MIN : int32_t(r);
    return int8_t(i > 127 ? 127 : i < -128 ? -128 : i);
}

void quantize_row_q8_0_ref(const float* x, BlockQ8_0* y, size_t n) {
    for (size_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        float amax = 0.0f;
        for (size_t j = 0; j < QK8_0; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = f32_to_f16(d);
        for (size_t j = 0; j < QK8_0; ++j) y[b].qs[j] = to_int8_like_avx2(std::nearbyint(xb[j] * id));
    }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static void quantize_avx2(const float* x, BlockQ8_0* y, size_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        y[b].d = uint16_t(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        const int r = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), r));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), r));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), r));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), r));
        // packs work within 128-bit lanes; the permute restores the element order.
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i*)y[b].qs, _mm256_permutevar8x32_epi32(p, perm));
    }
}
#endif

void quantize_row_q8_0(const float* x, BlockQ8_0* y, size_t n, Path path) {
#if defined(__x86_64__)
    if (use_fast(path)) return quantize_avx2(x, y, n);
#endif
    quantize_row_q8_0_ref(x, y, n);
}

}  // namespace bankml::quant
