// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* idiom).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "quant/q1_0_lut.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/f16.h"

namespace bankml::quant::lut {

void pack(const BlockQ1_0* w, size_t rows, size_t cols, uint8_t* out) {
    const size_t nb = cols / QK1_0;
    for (size_t g = 0; g < groups(rows); ++g)
        for (size_t ib = 0; ib < nb; ++ib, out += GROUP_BLOCK_BYTES) {
            std::memset(out, 0, GROUP_BLOCK_BYTES);
            for (size_t r = 0; r < ROWS && g * ROWS + r < rows; ++r) {
                const BlockQ1_0& b = w[(g * ROWS + r) * nb + ib];
                std::memcpy(out + 2 * r, &b.d, 2);
                for (size_t i = 0; i < QK1_0 / 8; ++i) out[2 * ROWS + i * ROWS + r] = b.qs[i];
            }
        }
}

#if defined(__x86_64__)
#define BANKML_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))

// Entry n of a lane's table adds q_i where bit i of n is set and -q_i (int8) where clear: the
// masks below pick, for the 16 entries at once, which of the two each quant gives.
BANKML_AVX512 void tables(const BlockQ8_0* x, size_t cols, float* t) {
    const __mmask16 bit[4] = {0xAAAA, 0xCCCC, 0xF0F0, 0xFF00};
    for (size_t i = 0; i < cols / QK8_0; ++i) {
        const __m512 d1 = _mm512_set1_ps(f16_to_f32(x[i].d));
        for (size_t j = 0; j < 8; ++j) {
            __m512i s = _mm512_setzero_si512();
            for (size_t e = 0; e < 4; ++e) {
                const int8_t q = x[i].qs[4 * j + e];
                s = _mm512_add_epi32(s, _mm512_mask_blend_epi32(bit[e], _mm512_set1_epi32(int8_t(-q)), _mm512_set1_epi32(q)));
            }
            _mm512_store_ps(t + (i * 8 + j) * 16, _mm512_mul_ps(d1, _mm512_cvtepi32_ps(s)));
        }
    }
}

BANKML_AVX512 void rows(const uint8_t* packed, size_t rows, size_t cols, size_t g0, size_t g1, const float* t, float* y) {
    const size_t nb = cols / QK1_0;
    for (size_t g = g0; g < g1; ++g) {
        const uint8_t* p = packed + g * nb * GROUP_BLOCK_BYTES;
        __m512 acc[8];
        for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_ps();
        for (size_t ib = 0; ib < nb; ++ib, p += GROUP_BLOCK_BYTES) {
            const __m512 d0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
            const float* tb = t + ib * 4 * 8 * 16;
            __m512 ab[8];
            // Sign byte 4k + jj of each row holds lane 2jj (low nibble) and lane 2jj + 1 (high) of
            // sub-block k; vpermps reads an index's low four bits only.
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k)
#pragma GCC unroll 4
                for (int jj = 0; jj < 4; ++jj) {
                    const __m512i by = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * ROWS + (4 * k + jj) * ROWS)));
                    const __m512 lo = _mm512_permutexvar_ps(by, _mm512_load_ps(tb + (k * 8 + 2 * jj) * 16));
                    const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(by, 4), _mm512_load_ps(tb + (k * 8 + 2 * jj + 1) * 16));
                    if (k == 0) {
                        ab[2 * jj] = lo, ab[2 * jj + 1] = hi;
                    } else {
                        ab[2 * jj] = _mm512_add_ps(ab[2 * jj], lo);
                        ab[2 * jj + 1] = _mm512_add_ps(ab[2 * jj + 1], hi);
                    }
                }
            for (int j = 0; j < 8; ++j) acc[j] = _mm512_fmadd_ps(d0, ab[j], acc[j]);
        }
        // The reference's order: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
        const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
                                       _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
        const size_t left = rows - g * ROWS;
        const __mmask16 m = left >= ROWS ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        _mm512_mask_storeu_ps(y + g * ROWS, m, s);
    }
}
#endif

}  // namespace bankml::quant::lut
