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

void pack(const BlockQ1_0* w, size_t rows, size_t cols, uint8_t* out, size_t g0, size_t g1) {
    const size_t nb = cols / QK1_0;
    g1 = g1 < groups(rows) ? g1 : groups(rows);
    out += g0 * nb * GROUP_BLOCK_BYTES;
    for (size_t g = g0; g < g1; ++g)
        for (size_t ib = 0; ib < nb; ++ib, out += GROUP_BLOCK_BYTES) {
            const size_t n = rows - g * ROWS < ROWS ? rows - g * ROWS : ROWS;  // rows in this group
#if defined(__x86_64__)
            if (n == ROWS) {
                // The 16 rows' 16 sign bytes as a 16×16 byte matrix, transposed by four rounds of
                // interleaving row i with row i + 8 (SSE2).
                __m128i x[ROWS], y[ROWS];
                for (size_t r = 0; r < ROWS; ++r) {
                    const BlockQ1_0& b = w[(g * ROWS + r) * nb + ib];
                    std::memcpy(out + 2 * r, &b.d, 2);
                    x[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
                }
                for (int round = 0; round < 4; ++round) {
                    for (size_t i = 0; i < ROWS / 2; ++i) {
                        y[2 * i] = _mm_unpacklo_epi8(x[i], x[i + ROWS / 2]);
                        y[2 * i + 1] = _mm_unpackhi_epi8(x[i], x[i + ROWS / 2]);
                    }
                    std::memcpy(x, y, sizeof x);
                }
                for (size_t i = 0; i < QK1_0 / 8; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * ROWS + i * ROWS), x[i]);
                continue;
            }
#endif
            std::memset(out, 0, GROUP_BLOCK_BYTES);
            for (size_t r = 0; r < n; ++r) {
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

// G groups (G·16 rows) at once, each lane's chain over the sub-blocks finished before the next
// lane's starts (so that few registers hold partial sums and each table load serves G groups);
// per row, the same steps in the same order as vec_dot_q1_0_ref. `left`: rows to store (the last
// group may be short).
constexpr size_t PREFETCH_BLOCKS = 8;

template <int G>
BANKML_AVX512 static inline void group_rows(const uint8_t* p, size_t nb, const float* t, float* y, size_t left) {
    const size_t stride = nb * GROUP_BLOCK_BYTES;  // from one group to the next
    __m512 acc[8 * G];
    for (int j = 0; j < 8 * G; ++j) acc[j] = _mm512_setzero_ps();
    for (size_t ib = 0; ib < nb; ++ib, p += GROUP_BLOCK_BYTES) {
        // Each group's blocks are one stream; many threads share the memory, so its next blocks
        // are asked for well ahead (past a job's end: a few unused lines).
        for (int h = 0; h < G; ++h)
            for (size_t b = 0; b < GROUP_BLOCK_BYTES; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + h * stride + PREFETCH_BLOCKS * GROUP_BLOCK_BYTES + b), _MM_HINT_T0);
        __m512 d0[G];
        for (int h = 0; h < G; ++h) d0[h] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + h * stride)));
        const float* tb = t + ib * 4 * 8 * 16;
        // Sign byte 4k + jj of each row holds lane 2jj (low nibble) and lane 2jj + 1 (high) of
        // sub-block k; vpermps reads an index's low four bits only.
#pragma GCC unroll 4
        for (int jj = 0; jj < 4; ++jj) {
            __m512 lo_ab[G], hi_ab[G];
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
                const __m512 tl = _mm512_load_ps(tb + (k * 8 + 2 * jj) * 16), th = _mm512_load_ps(tb + (k * 8 + 2 * jj + 1) * 16);
                for (int h = 0; h < G; ++h) {
                    const __m512i by = _mm512_cvtepu8_epi32(
                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + h * stride + 2 * ROWS + (4 * k + jj) * ROWS)));
                    const __m512 lo = _mm512_permutexvar_ps(by, tl), hi = _mm512_permutexvar_ps(_mm512_srli_epi32(by, 4), th);
                    if (k == 0) {
                        lo_ab[h] = lo, hi_ab[h] = hi;
                    } else {
                        lo_ab[h] = _mm512_add_ps(lo_ab[h], lo);
                        hi_ab[h] = _mm512_add_ps(hi_ab[h], hi);
                    }
                }
            }
            for (int h = 0; h < G; ++h) {
                acc[8 * h + 2 * jj] = _mm512_fmadd_ps(d0[h], lo_ab[h], acc[8 * h + 2 * jj]);
                acc[8 * h + 2 * jj + 1] = _mm512_fmadd_ps(d0[h], hi_ab[h], acc[8 * h + 2 * jj + 1]);
            }
        }
    }
    for (int h = 0; h < G; ++h) {
        // The reference's order: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
        const __m512* a = acc + 8 * h;
        const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                                       _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
        const size_t n = left > h * ROWS ? left - h * ROWS : 0;
        const __mmask16 m = n >= ROWS ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
        _mm512_mask_storeu_ps(y + h * ROWS, m, s);
    }
}

BANKML_AVX512 void rows(const uint8_t* packed, size_t rows, size_t cols, size_t g0, size_t g1, const float* t, float* y) {
    const size_t nb = cols / QK1_0;
    size_t g = g0;
    for (; g + 2 <= g1; g += 2) group_rows<2>(packed + g * nb * GROUP_BLOCK_BYTES, nb, t, y + g * ROWS, rows - g * ROWS);
    if (g < g1) group_rows<1>(packed + g * nb * GROUP_BLOCK_BYTES, nb, t, y + g * ROWS, rows - g * ROWS);
}
#define BANKML_LUT_AVX2 __attribute__((target("avx2,fma,f16c")))

// Entry n of a lane's table is base + the sum of q_i - (-q)_i over the set bits i of n, base the sum
// of the (-q)_i (int8 negation): the masks pick, for the 16 entries at once, which terms each
// adds. Then the words' low bytes and high bytes gathered into the two planes.
BANKML_LUT_AVX2 void tables_avx2(const BlockQ8_0* x, size_t cols, uint8_t* t) {
    const __m256i bit[4] = {_mm256_setr_epi16(0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1, 0, -1),
                            _mm256_setr_epi16(0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1),
                            _mm256_setr_epi16(0, 0, 0, 0, -1, -1, -1, -1, 0, 0, 0, 0, -1, -1, -1, -1),
                            _mm256_setr_epi16(0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1)};
    // Per 128-bit half: the 8 words' low bytes, then their high bytes.
    const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10,
                                           12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (size_t i = 0; i < cols / QK8_0; ++i, t += TABLE_AVX2_BYTES) {
        const float d1 = _cvtsh_ss(x[i].d) * (1.0f / 65536.0f);
        std::memcpy(t + 256, &d1, 4);
        for (size_t j = 0; j < 8; ++j) {
            const int8_t* q = x[i].qs + 4 * j;
            int base = 0;
            __m256i s = _mm256_setzero_si256();
            for (int e = 0; e < 4; ++e) {
                const int nq = int8_t(-q[e]);
                base += nq;
                s = _mm256_add_epi16(s, _mm256_and_si256(bit[e], _mm256_set1_epi16(int16_t(q[e] - nq))));
            }
            s = _mm256_add_epi16(s, _mm256_set1_epi16(int16_t(base)));
            // [low 0-7, high 0-7 | low 8-15, high 8-15] -> [low 0-15 | high 0-15]
            s = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(s, split), 0xD8);
            uint8_t* o = t + (j / 2) * 64 + (j % 2) * 16;
            _mm_store_si128(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(s));
            _mm_store_si128(reinterpret_cast<__m128i*>(o + 32), _mm256_extracti128_si256(s, 1));
        }
    }
}

// One group (16 rows), each lane pair's chain over the sub-blocks finished before the next pair's
// starts, so that few registers hold partial sums; per row, the same steps in the same order as
// vec_dot_q1_0_ref. Sign byte 4k + jj holds lanes 2jj (low nibble) and 2jj + 1 (high) of sub-block
// k. A ymm's low half carries lane 2jj and its high half lane 2jj + 1, and the words' unpacking
// leaves four rows a vector, vector 0 holding rows 0, 2, 4, 6; 1: 1, 3, 5, 7;
// 2: 8, 10, 12, 14; 3: 9, 11, 13, 15; the row scales are permuted to match.
BANKML_LUT_AVX2 static void group_rows_avx2(const uint8_t* p, size_t nb, const uint8_t* t, float* y, size_t left) {
    const __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i top = _mm256_set1_epi32(int(0xFFFF0000u));
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6), odd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int jj = 0; jj < 4; ++jj)
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) acc[jj][v] = _mm256_setzero_ps();
    for (size_t ib = 0; ib < nb; ++ib, p += GROUP_BLOCK_BYTES) {
        // As in group_rows: the group's next blocks asked for well ahead.
        for (size_t b = 0; b < GROUP_BLOCK_BYTES; b += 64)
            _mm_prefetch(reinterpret_cast<const char*>(p + PREFETCH_BLOCKS * GROUP_BLOCK_BYTES + b), _MM_HINT_T0);
        const __m256 dlo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        const __m256 dhi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
        const __m256 d0[4] = {_mm256_permutevar8x32_ps(dlo, even), _mm256_permutevar8x32_ps(dlo, odd),
                              _mm256_permutevar8x32_ps(dhi, even), _mm256_permutevar8x32_ps(dhi, odd)};
        const uint8_t* tb = t + ib * 4 * TABLE_AVX2_BYTES;
#pragma GCC unroll 4
        for (int jj = 0; jj < 4; ++jj) {
            __m256 ab[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
                const uint8_t* tk = tb + k * TABLE_AVX2_BYTES;
                const __m256i tl = _mm256_load_si256(reinterpret_cast<const __m256i*>(tk + jj * 64));
                const __m256i th = _mm256_load_si256(reinterpret_cast<const __m256i*>(tk + jj * 64 + 32));
                const __m256 d1 = _mm256_broadcast_ss(reinterpret_cast<const float*>(tk + 256));
                const __m256i by = _mm256_broadcastsi128_si256(
                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * ROWS + (4 * k + jj) * ROWS)));
                const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(by, shift), low4);
                const __m256i lo = _mm256_shuffle_epi8(tl, idx), hi = _mm256_shuffle_epi8(th, idx);
                const __m256i w0 = _mm256_unpacklo_epi8(lo, hi), w1 = _mm256_unpackhi_epi8(lo, hi);
                // s·2^16 for the even rows (shifted up) and the odd rows (already on top).
                const __m256 s[4] = {_mm256_cvtepi32_ps(_mm256_slli_epi32(w0, 16)),
                                     _mm256_cvtepi32_ps(_mm256_and_si256(w0, top)),
                                     _mm256_cvtepi32_ps(_mm256_slli_epi32(w1, 16)),
                                     _mm256_cvtepi32_ps(_mm256_and_si256(w1, top))};
#pragma GCC unroll 4
                for (int v = 0; v < 4; ++v) ab[v] = k == 0 ? _mm256_mul_ps(d1, s[v]) : _mm256_fmadd_ps(d1, s[v], ab[v]);
            }
#pragma GCC unroll 4
            for (int v = 0; v < 4; ++v) acc[jj][v] = _mm256_fmadd_ps(d0[v], ab[v], acc[jj][v]);
        }
    }
    // Lane pairs (0, 1) + (4, 5) and (2, 3) + (6, 7), summed, then the halves: the reference's
    // ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
    __m128 r[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
        const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[0][v], acc[2][v]), _mm256_add_ps(acc[1][v], acc[3][v]));
        r[v] = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    }
    alignas(16) float out[ROWS];
    _mm_store_ps(out, _mm_unpacklo_ps(r[0], r[1]));
    _mm_store_ps(out + 4, _mm_unpackhi_ps(r[0], r[1]));
    _mm_store_ps(out + 8, _mm_unpacklo_ps(r[2], r[3]));
    _mm_store_ps(out + 12, _mm_unpackhi_ps(r[2], r[3]));
    std::memcpy(y, out, (left < ROWS ? left : ROWS) * sizeof(float));
}

BANKML_LUT_AVX2 void rows_avx2(const uint8_t* packed, size_t rows, size_t cols, size_t g0, size_t g1, const uint8_t* t,
                               float* y) {
    const size_t nb = cols / QK1_0;
    for (size_t g = g0; g < g1; ++g) group_rows_avx2(packed + g * nb * GROUP_BLOCK_BYTES, nb, t, y + g * ROWS, rows - g * ROWS);
}
#endif

}  // namespace bankml::quant::lut
