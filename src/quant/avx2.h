// What the AVX2 paths share: their target attribute (the binary stays baseline x86-64; these
// functions run only where core/cpu.h found AVX2, FMA and F16C), eight f16 widened to f32 (exact),
// and ggml's GGML_F32x8_REDUCE order for four accumulators, which the bits depend on.
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#define BANKML_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace bankml::quant::avx2 {

BANKML_AVX2 inline __m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

// (s0 + s2) + (s1 + s3), then the two halves, then two horizontal adds.
BANKML_AVX2 inline float reduce4(__m256 s0, __m256 s1, __m256 s2, __m256 s3) {
    s0 = _mm256_add_ps(s0, s2);
    s1 = _mm256_add_ps(s1, s3);
    s0 = _mm256_add_ps(s0, s1);
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// ggml's f32 dot loop (vec_dot_f32, and vec_dot_f16 on widened values): four 8-lane fma
// accumulators over the first np values (a multiple of 32), reduced as reduce4 does.
BANKML_AVX2 inline float fma_loop_reduce(size_t np, const float* w, const float* x) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < np; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    return reduce4(s0, s1, s2, s3);
}

}  // namespace bankml::quant::avx2

#endif
