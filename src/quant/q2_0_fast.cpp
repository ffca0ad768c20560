// The AVX2 Q2_0 x Q8_0 kernel: eight rows at a time, one row per f32 lane. Same bits as
// vec_dot_q2_0_ref because the two per-block integer sums are exact whatever the order
// (sum (c-1)q = sum c*q - sum q, with c*q from maddubs, no saturation: |c*q + c'*q'| <= 768) and the
// float steps are the reference's, lane by lane: sumi = 0 + d1a*sa, sumi += d1b*sb, sumf += d0*sumi,
// separate multiplies and adds (contraction is off in this file).
//
// Interleaved order: a 64-weight block's 16 bytes broadcast to both 128-bit halves of a register
// and shifted right by (0, 0, 2, 2) or (4, 4, 6, 6) per qword, then masked, give in qword p the
// codes of sub-block h = p % 2 at shift s: byte b is the code of weight 4b + s of sub-block h. Each
// column's quants are laid out once per call in that order (q2_0_interleave, shared with the
// AVX-512 kernel), so a block's codes need one load, two shifts and two masks per row, and the
// int32 lanes of sub-block 0 and 1 alternate in pairs: one horizontal add per two rows and one
// add of the halves give each row's two sums.
#pragma GCC optimize("fp-contract=off")
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/f16.h"
#include "quant/avx2.h"
#include "quant/kernels_impl.h"


namespace bankml::quant::detail {

void q2_0_interleave(const BlockQ8_0* x, size_t nb, int8_t* y) {
    for (size_t bi = 0; bi < nb; ++bi)
        for (size_t h = 0; h < 2; ++h)
            for (size_t s = 0; s < 4; ++s)
                for (size_t b = 0; b < 8; ++b) y[bi * 64 + 8 * (2 * s + h) + b] = x[bi * 2 + h].qs[4 * b + s];
}

// AVX2 parts: 0 the f32 of every Q8_0 scale, 1 the sum of each Q8_0 block's quants, 2 the quants
// in interleaved order. AVX-512 parts: see q2_0_avx512.cpp.
void q2_0_prepare(const BlockQ8_0* x, size_t cols, size_t ncols, Prepared& p, Isa isa) {
    p.isa = isa, p.cols = cols, p.ncols = ncols;
    if (isa >= Isa::Avx512) return q2_0_prepare_avx512(x, cols, ncols, p);
    const size_t n = cols / QK8_0 * ncols;
    p.layout({n * sizeof(float), n * sizeof(int32_t), n * QK8_0});
    float* d = p.part<float>(0);
    int32_t* sum = p.part<int32_t>(1);
    for (size_t i = 0; i < n; ++i) {
        d[i] = f16_to_f32(x[i].d);
        int32_t s = 0;
        for (size_t j = 0; j < QK8_0; ++j) s += x[i].qs[j];
        sum[i] = s;
    }
    q2_0_interleave(x, n / 2, p.part<int8_t>(2));
}

// The rows behind the eight f32 lanes: the order the horizontal adds and the shuffle leave them in.
static constexpr int LANE_ROW[8] = {0, 1, 4, 5, 2, 3, 6, 7};

// Eight rows (pointers; a short group repeats its last row) against every column: lane l of
// sumf + 8c is row LANE_ROW[l].
BANKML_AVX2 static void rows8(const BlockQ2_0* const* rowp, size_t nb, const Prepared& p, size_t ncols, float* sumf) {
    const float* xd = p.part<float>(0);
    const int32_t* xsum = p.part<int32_t>(1);
    const int8_t* yv = p.part<int8_t>(2);
    const __m256i ones = _mm256_set1_epi16(1), three = _mm256_set1_epi8(3);
    const __m256i sh_a = _mm256_setr_epi64x(0, 0, 2, 2), sh_b = _mm256_setr_epi64x(4, 4, 6, 6);
    for (size_t c = 0; c < ncols; ++c) _mm256_storeu_ps(sumf + 8 * c, _mm256_setzero_ps());
    // Rows longer than 2 KiB are eight separate streams; prefetching ahead in each helps (measured
    // 3.3 -> 2.0 ms on 4096x12288); short rows make one contiguous stream the hardware follows.
    const bool far = nb * sizeof(BlockQ2_0) > 2048;
    for (size_t ib = 0; ib < nb; ++ib) {
        alignas(16) uint16_t dh[8];
        __m256i ca[8], cb[8];
        for (int r = 0; r < 8; ++r) {
            if (far) _mm_prefetch((const char*)(rowp[r] + ib) + 512, _MM_HINT_T0);
            dh[r] = rowp[LANE_ROW[r]][ib].d;
            const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)rowp[r][ib].qs));
            ca[r] = _mm256_and_si256(_mm256_srlv_epi64(v, sh_a), three);
            cb[r] = _mm256_and_si256(_mm256_srlv_epi64(v, sh_b), three);
        }
        const __m256 d0 = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)dh));
        for (size_t c = 0; c < ncols; ++c) {
            const size_t bi = c * nb + ib, bx = 2 * bi;  // the Q2_0-sized block and its first Q8_0 block
            const __m256i ya = _mm256_loadu_si256((const __m256i*)(yv + bi * 64));
            const __m256i yb = _mm256_loadu_si256((const __m256i*)(yv + bi * 64 + 32));
            __m256i part[8];
            for (int r = 0; r < 8; ++r)
                part[r] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ca[r], ya), ones),
                                           _mm256_madd_epi16(_mm256_maddubs_epi16(cb[r], yb), ones));
            // Lanes of part[r]: sub-block 0, 0, 1, 1, 0, 0, 1, 1. After the horizontal adds: row r
            // sub-block 0, row r sub-block 1, row r+1 likewise, in each half; the halves then add.
            const __m256i x01 = _mm256_hadd_epi32(part[0], part[1]), x23 = _mm256_hadd_epi32(part[2], part[3]);
            const __m256i x45 = _mm256_hadd_epi32(part[4], part[5]), x67 = _mm256_hadd_epi32(part[6], part[7]);
            const __m256 s03 = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_permute2x128_si256(x01, x23, 0x20),
                                                                    _mm256_permute2x128_si256(x01, x23, 0x31)));
            const __m256 s47 = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_permute2x128_si256(x45, x67, 0x20),
                                                                    _mm256_permute2x128_si256(x45, x67, 0x31)));
            const __m256i sa = _mm256_sub_epi32(_mm256_castps_si256(_mm256_shuffle_ps(s03, s47, _MM_SHUFFLE(2, 0, 2, 0))),
                                                _mm256_set1_epi32(xsum[bx]));
            const __m256i sb = _mm256_sub_epi32(_mm256_castps_si256(_mm256_shuffle_ps(s03, s47, _MM_SHUFFLE(3, 1, 3, 1))),
                                                _mm256_set1_epi32(xsum[bx + 1]));
            __m256 sumi = _mm256_add_ps(_mm256_setzero_ps(), _mm256_mul_ps(_mm256_set1_ps(xd[bx]), _mm256_cvtepi32_ps(sa)));
            sumi = _mm256_add_ps(sumi, _mm256_mul_ps(_mm256_set1_ps(xd[bx + 1]), _mm256_cvtepi32_ps(sb)));
            _mm256_storeu_ps(sumf + 8 * c, _mm256_add_ps(_mm256_loadu_ps(sumf + 8 * c), _mm256_mul_ps(d0, sumi)));
        }
    }
}

void q2_0_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* /*x*/, const Prepared& p,
                    size_t ncols, float* y, size_t ldy) {
    const auto* wb = static_cast<const BlockQ2_0*>(w);
    if (p.isa >= Isa::Avx512) return q2_0_rows_avx512(wb, cols, r0, r1, p, ncols, y, ldy);
    const size_t nb = cols / QK2_0;
    static thread_local std::vector<float> sumf;
    if (sumf.size() < 8 * ncols) sumf.resize(8 * ncols);
    for (size_t g = r0; g < r1; g += 8) {
        const BlockQ2_0* rowp[8];
        for (size_t r = 0; r < 8; ++r) rowp[r] = wb + (g + r < r1 ? g + r : r1 - 1) * nb;
        rows8(rowp, nb, p, ncols, sumf.data());
        for (size_t c = 0; c < ncols; ++c)
            for (size_t l = 0; l < 8; ++l)
                if (g + LANE_ROW[l] < r1) y[c * ldy + g + LANE_ROW[l]] = sumf[8 * c + l];
    }
}

}  // namespace bankml::quant::detail
#endif
