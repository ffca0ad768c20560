// The AVX2 Q1_0 x Q8_0 kernels. Same bits as vec_dot_q1_0_ref because each step is the same
// operation on the same values: the eight int32 lanes are exact sums of the same four +-q bytes
// (xor/sub negation wraps -128 to -128 like the reference's int8 negation), converted exactly to
// f32; then the same mul, fma(d1, s, ab), fma(d0, ab, acc) per lane and the same horizontal order.
// Only the bookkeeping differs: Q8_0 scales are converted to f32 once per call, and for several
// columns a row's sign bits are decoded once into byte masks reused by every column.
#pragma GCC optimize("fp-contract=off")
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/f16.h"
#include "quant/kernels_impl.h"

#define TARGET __attribute__((target("avx2,fma,f16c")))

namespace bankml::quant::detail {

void q1_0_prepare(const BlockQ8_0* x, size_t cols, size_t ncols, Prepared& p) {
    const size_t n = cols / QK8_0 * ncols;
    p.d.resize(n);
    for (size_t i = 0; i < n; ++i) p.d[i] = f16_to_f32(x[i].d);
}

// 0xFF in byte e where bit e of the sub-block's 32 sign bits is clear (weight -d), else 0.
TARGET static inline __m256i clear_mask(const uint8_t* bits4) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    uint32_t b;
    std::memcpy(&b, bits4, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(b)), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), _mm256_setzero_si256());
}

// Eight exact lane sums of the sub-block's +-q: lane j sums bytes 4j..4j+3.
TARGET static inline __m256 lane_sums(const int8_t* qs, __m256i clear) {
    const __m256i q = _mm256_loadu_si256((const __m256i*)qs);
    const __m256i sq = _mm256_sub_epi8(_mm256_xor_si256(q, clear), clear);  // -q where clear (wraps)
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), sq);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
}

TARGET static inline float hsum(__m256 acc) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));  // a_i + a_{i+4}
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));                                               // (0+4)+(2+6), (1+5)+(3+7)
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// One row, one column: decode each sub-block's bits as it goes (decode-shaped products).
TARGET static float dot_row(size_t nb, const BlockQ1_0* w, const BlockQ8_0* x, const float* xd) {
    __m256 acc = _mm256_setzero_ps();
    for (size_t ib = 0; ib < nb; ++ib) {
        const __m256 d0 = _mm256_set1_ps(_cvtsh_ss(w[ib].d));
        const BlockQ8_0* xb = x + ib * 4;
        const float* db = xd + ib * 4;
        __m256 ab = _mm256_mul_ps(_mm256_set1_ps(db[0]), lane_sums(xb[0].qs, clear_mask(w[ib].qs)));
        ab = _mm256_fmadd_ps(_mm256_set1_ps(db[1]), lane_sums(xb[1].qs, clear_mask(w[ib].qs + 4)), ab);
        ab = _mm256_fmadd_ps(_mm256_set1_ps(db[2]), lane_sums(xb[2].qs, clear_mask(w[ib].qs + 8)), ab);
        ab = _mm256_fmadd_ps(_mm256_set1_ps(db[3]), lane_sums(xb[3].qs, clear_mask(w[ib].qs + 12)), ab);
        acc = _mm256_fmadd_ps(d0, ab, acc);
    }
    return hsum(acc);
}

// One row whose masks and scales were decoded once, against one column.
TARGET static float dot_decoded(size_t nb, const uint8_t* masks, const float* d0s, const BlockQ8_0* x,
                                const float* xd) {
    __m256 acc = _mm256_setzero_ps();
    for (size_t ib = 0; ib < nb; ++ib) {
        const BlockQ8_0* xb = x + ib * 4;
        const float* db = xd + ib * 4;
        const __m256i* m = (const __m256i*)(masks + ib * 128);
        __m256 ab = _mm256_mul_ps(_mm256_set1_ps(db[0]), lane_sums(xb[0].qs, _mm256_loadu_si256(m)));
        ab = _mm256_fmadd_ps(_mm256_set1_ps(db[1]), lane_sums(xb[1].qs, _mm256_loadu_si256(m + 1)), ab);
        ab = _mm256_fmadd_ps(_mm256_set1_ps(db[2]), lane_sums(xb[2].qs, _mm256_loadu_si256(m + 2)), ab);
        ab = _mm256_fmadd_ps(_mm256_set1_ps(db[3]), lane_sums(xb[3].qs, _mm256_loadu_si256(m + 3)), ab);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d0s[ib]), ab, acc);
    }
    return hsum(acc);
}

TARGET void q1_0_rows_avx2(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p,
                           size_t ncols, float* y, size_t ldy) {
    const auto* wb = static_cast<const BlockQ1_0*>(w);
    const auto* xb = static_cast<const BlockQ8_0*>(x);
    const size_t nb = cols / QK1_0, nbx = cols / QK8_0;
    if (ncols == 1) {
        for (size_t r = r0; r < r1; ++r) y[r] = dot_row(nb, wb + r * nb, xb, p.d.data());
        return;
    }
    // Several columns: decode each row's sign bits once (32 bytes of mask per 32 weights).
    std::vector<uint8_t> masks(nb * 128);
    std::vector<float> d0s(nb);
    for (size_t r = r0; r < r1; ++r) {
        const BlockQ1_0* row = wb + r * nb;
        for (size_t ib = 0; ib < nb; ++ib) {
            d0s[ib] = _cvtsh_ss(row[ib].d);
            for (size_t k = 0; k < 4; ++k)
                _mm256_storeu_si256((__m256i*)(masks.data() + ib * 128 + k * 32), clear_mask(row[ib].qs + 4 * k));
        }
        for (size_t c = 0; c < ncols; ++c)
            y[c * ldy + r] = dot_decoded(nb, masks.data(), d0s.data(), xb + c * nbx, p.d.data() + c * nbx);
    }
}

}  // namespace bankml::quant::detail
#endif
