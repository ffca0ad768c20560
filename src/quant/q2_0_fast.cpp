// The AVX2 Q2_0 x Q8_0 kernel: eight rows at a time, one row per f32 lane. Same bits as
// vec_dot_q2_0_ref because the two per-block integer sums are exact whatever the order
// (sum (c-1)q = sum c*q - sum q, with c*q from maddubs, no saturation: |c*q + c'*q'| <= 768) and the
// float steps are the reference's, lane by lane: sumi = 0 + d1a*sa, sumi += d1b*sb, sumf += d0*sumi,
// separate multiplies and adds (contraction is off in this file).
//
// Bit-plane order: the 2-bit codes of 8 bytes, shifted by 0, 2, 4, 6 in the four 64-bit quarters of
// a register and masked, give code (4b + s) at byte 8s + b. Each Q8_0 block's quants are stored
// once per call in that order (Prepared::perm), so the codes need no shuffle.
#pragma GCC optimize("fp-contract=off")
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/f16.h"
#include "quant/avx2.h"
#include "quant/kernels_impl.h"


namespace bankml::quant::detail {

// AVX2 parts: 0 the f32 of every Q8_0 scale, 1 the sum of each Q8_0 block's quants, 2 each Q8_0
// block's quants in bit-plane order. AVX-512 parts: see q2_0_avx512.cpp.
void q2_0_prepare(const BlockQ8_0* x, size_t cols, size_t ncols, Prepared& p, Isa isa) {
    p.isa = isa, p.cols = cols, p.ncols = ncols;
    if (isa >= Isa::Avx512) return q2_0_prepare_avx512(x, cols, ncols, p);
    const size_t n = cols / QK8_0 * ncols;
    p.layout({n * sizeof(float), n * sizeof(int32_t), n * QK8_0});
    float* d = p.part<float>(0);
    int32_t* sum = p.part<int32_t>(1);
    int8_t* perm = p.part<int8_t>(2);
    for (size_t i = 0; i < n; ++i) {
        d[i] = f16_to_f32(x[i].d);
        int32_t s = 0;
        for (size_t j = 0; j < QK8_0; ++j) {
            s += x[i].qs[j];
            perm[i * QK8_0 + (j % 4) * 8 + j / 4] = x[i].qs[j];
        }
        sum[i] = s;
    }
}

// The 32 codes (0..3) of one Q8_0 block's worth of weights (8 bytes), in bit-plane order.
BANKML_AVX2 static inline __m256i codes(const uint8_t* q8) {
    uint64_t v;
    std::memcpy(&v, q8, 8);
    const __m256i sh = _mm256_srlv_epi64(_mm256_set1_epi64x(int64_t(v)), _mm256_setr_epi64x(0, 2, 4, 6));
    return _mm256_and_si256(sh, _mm256_set1_epi8(3));
}

// Row r's eight partial sums in p[r] -> one vector of the eight rows' totals (exact integers).
BANKML_AVX2 static inline __m256i sum_rows(const __m256i* p) {
    const __m256i a = _mm256_hadd_epi32(p[0], p[1]), b = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i c = _mm256_hadd_epi32(p[4], p[5]), d = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

// Eight rows (pointers; a short group repeats its last row) against every column.
BANKML_AVX2 static void rows8(const BlockQ2_0* const* rowp, size_t nb, const Prepared& p, size_t ncols, size_t nbx,
                         float* sumf) {
    const __m256i ones = _mm256_set1_epi16(1);
    const float* xd = p.part<float>(0);
    const int32_t* xsum = p.part<int32_t>(1);
    const int8_t* perm = p.part<int8_t>(2);
    for (size_t c = 0; c < ncols; ++c) _mm256_storeu_ps(sumf + 8 * c, _mm256_setzero_ps());
    // Rows longer than 2 KiB are eight separate streams; prefetching ahead in each helps (measured
    // 3.3 -> 2.0 ms on 4096x12288); short rows make one contiguous stream the hardware follows.
    const bool far = nb * sizeof(BlockQ2_0) > 2048;
    for (size_t ib = 0; ib < nb; ++ib) {
        alignas(16) uint16_t dh[8];
        __m256i cd[2][8];
        for (int r = 0; r < 8; ++r) {
            if (far) _mm_prefetch((const char*)(rowp[r] + ib) + 512, _MM_HINT_T0);
            dh[r] = rowp[r][ib].d;
            cd[0][r] = codes(rowp[r][ib].qs);
            cd[1][r] = codes(rowp[r][ib].qs + 8);
        }
        const __m256 d0 = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)dh));
        for (size_t c = 0; c < ncols; ++c) {
            __m256 sumi = _mm256_setzero_ps();
            for (size_t k = 0; k < 2; ++k) {
                const size_t bx = c * nbx + ib * 2 + k;
                const __m256i y = _mm256_loadu_si256((const __m256i*)(perm + bx * QK8_0));
                __m256i part[8];
                for (int r = 0; r < 8; ++r) part[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(cd[k][r], y), ones);
                const __m256i s = _mm256_sub_epi32(sum_rows(part), _mm256_set1_epi32(xsum[bx]));
                sumi = _mm256_add_ps(sumi, _mm256_mul_ps(_mm256_set1_ps(xd[bx]), _mm256_cvtepi32_ps(s)));
            }
            _mm256_storeu_ps(sumf + 8 * c, _mm256_add_ps(_mm256_loadu_ps(sumf + 8 * c), _mm256_mul_ps(d0, sumi)));
        }
    }
}

void q2_0_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* /*x*/, const Prepared& p,
                    size_t ncols, float* y, size_t ldy) {
    const auto* wb = static_cast<const BlockQ2_0*>(w);
    if (p.isa >= Isa::Avx512) return q2_0_rows_avx512(wb, cols, r0, r1, p, ncols, y, ldy);
    const size_t nb = cols / QK2_0, nbx = cols / QK8_0;
    static thread_local std::vector<float> sumf;
    if (sumf.size() < 8 * ncols) sumf.resize(8 * ncols);
    for (size_t g = r0; g < r1; g += 8) {
        const BlockQ2_0* rowp[8];
        for (size_t r = 0; r < 8; ++r) rowp[r] = wb + (g + r < r1 ? g + r : r1 - 1) * nb;
        rows8(rowp, nb, p, ncols, nbx, sumf.data());
        for (size_t c = 0; c < ncols; ++c) {
            const float* out = sumf.data() + 8 * c;
            for (size_t r = 0; r < 8 && g + r < r1; ++r) y[c * ldy + g + r] = out[r];
        }
    }
}

}  // namespace bankml::quant::detail
#endif
