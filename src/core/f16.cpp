#include "core/f16.h"

#include <cstring>

#include "core/cpu.h"
#include "core/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bankml {

static uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
static float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        // Zero or subnormal: mant * 2^-24 is exact in f32.
        return float_of(sign | bits_of(float(mant) * 0x1p-24f));
    }
    if (exp == 31) {
        // Infinity, or NaN: F16C sets the quiet bit and keeps the payload.
        return float_of(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
    }
    return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_f16(float x) {
    uint32_t u = bits_of(x);
    uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a & 0x7fffffu) >> 13));  // NaN, quieted
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to infinity
    uint32_t e = a >> 23;
    if (a < 0x38800000u) {  // below 2^-14: a half subnormal (or zero)
        if (e < 102) return sign;  // below 2^-25: rounds to zero (and f32 subnormals)
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t s = 126 - e;  // 14 .. 24
        uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
        if (rem > half || (rem == half && (q & 1))) ++q;
        return uint16_t(sign | q);
    }
    uint32_t h = ((e - 112) << 10) | ((a & 0x7fffffu) >> 13);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // a carry into the exponent is right
    return uint16_t(sign | h);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static float hw_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("avx2,fma,f16c"))) static uint16_t hw_to_f16(float x) {
    return uint16_t(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("avx2,fma,f16c"))) static void hw_row_to_f32(const uint16_t* h, float* out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(h + i))));
    for (; i < n; ++i) out[i] = _cvtsh_ss(h[i]);
}
__attribute__((target("avx2,fma,f16c"))) static void hw_row_to_f16(const float* x, uint16_t* out, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) out[i] = uint16_t(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}
#endif

float f16_to_f32_f16c(uint16_t h) {
#if defined(__x86_64__)
    if (cpu_has_avx2_fma_f16c()) return hw_to_f32(h);
#endif
    return f16_to_f32(h);
}

uint16_t f32_to_f16_f16c(float x) {
#if defined(__x86_64__)
    if (cpu_has_avx2_fma_f16c()) return hw_to_f16(x);
#endif
    return f32_to_f16(x);
}

void f16_to_f32_row(const uint16_t* h, float* out, size_t n) {
#if defined(__x86_64__)
    if (fast_kernels()) return hw_row_to_f32(h, out, n);
#endif
    for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
}

void f32_to_f16_row(const float* x, uint16_t* out, size_t n) {
#if defined(__x86_64__)
    if (fast_kernels()) return hw_row_to_f16(x, out, n);
#endif
    for (size_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

}  // namespace bankml
