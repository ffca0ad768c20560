// The AVX-512 Q1_0 x Q8_0 kernels (levels avx512 and avx512vnni). Same bits as vec_dot_q1_0_ref
// for the reasons q1_0_fast.cpp gives for the AVX2 loops: per row, eight int32 lanes holding the
// exact sums of the same four +-q bytes, then the same float steps in the same order; a 512-bit
// register carries two rows side by side (q1_0_avx512.inc). The loops are compiled twice, without
// and with AVX-512 VNNI, each under its own target (no VNNI instruction can reach the first copy).
#pragma GCC optimize("fp-contract=off")
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* idiom).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "quant/kernels_impl.h"

namespace bankml::quant::detail {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
namespace {

// q1_0_fast.cpp's hsum: (0+4)+(2+6), (1+5)+(3+7), then the two.
inline float hsum8(__m256 acc) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
inline __m256 high256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
// Row A's f16 scale in the low eight lanes, row B's in the high eight.
inline __m512 pair_scales(uint16_t a, uint16_t b) {
    const __m256 lo = _mm256_set1_ps(_cvtsh_ss(a)), hi = _mm256_set1_ps(_cvtsh_ss(b));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

namespace bw {
#define Q1_VNNI 0
#include "quant/q1_0_avx512.inc"
#undef Q1_VNNI
}  // namespace bw

}  // namespace
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace {
namespace vnni {
#define Q1_VNNI 1
#include "quant/q1_0_avx512.inc"
#undef Q1_VNNI
}  // namespace vnni
}  // namespace
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
namespace {

// Several columns: the bits of 2P rows decoded once (a-bytes for VNNI, clear-bit masks, and the
// rows' scales as pair vectors), then every column over them; a short last group repeats its
// last row.
template <int P>
void batch(const BlockQ1_0* wb, size_t nb, size_t r0, size_t r1, const BlockQ8_0* xb, size_t nbx, const float* xd,
           const int32_t* negt, const uint8_t* has_m128, size_t ncols, float* y, size_t ldy) {
    static thread_local std::vector<uint8_t> twos;
    static thread_local std::vector<uint64_t> clear;
    static thread_local std::vector<float> d0v;
    const bool vnni = negt != nullptr;
    if (vnni && twos.size() < P * nb * 4 * 64) twos.resize(P * nb * 4 * 64);
    if (clear.size() < P * nb * 4) clear.resize(P * nb * 4);
    if (d0v.size() < P * nb * 16) d0v.resize(P * nb * 16);
    const __m512i two = _mm512_set1_epi8(2);
    for (size_t g = r0; g < r1; g += 2 * P) {
        for (int j = 0; j < P; ++j) {
            const BlockQ1_0* ra = wb + (g + 2 * j < r1 ? g + 2 * j : r1 - 1) * nb;
            const BlockQ1_0* rb = wb + (g + 2 * j + 1 < r1 ? g + 2 * j + 1 : r1 - 1) * nb;
            for (size_t ib = 0; ib < nb; ++ib) {
                _mm512_storeu_ps(d0v.data() + (j * nb + ib) * 16, pair_scales(ra[ib].d, rb[ib].d));
                for (size_t k = 0; k < 4; ++k) {
                    uint32_t ba, bb;
                    std::memcpy(&ba, ra[ib].qs + 4 * k, 4);
                    std::memcpy(&bb, rb[ib].qs + 4 * k, 4);
                    const uint64_t bits = uint64_t(ba) | uint64_t(bb) << 32;
                    const size_t at = (j * nb + ib) * 4 + k;
                    clear[at] = ~bits;
                    if (vnni) _mm512_storeu_si512(twos.data() + at * 64, _mm512_maskz_mov_epi8(_cvtu64_mask64(bits), two));
                }
            }
        }
        for (size_t c = 0; c < ncols; ++c) {
            float out[2 * P];
            if (vnni && !has_m128[c])
                vnni::decoded_rows<P>(nb, twos.data(), nullptr, d0v.data(), xb + c * nbx, xd + c * nbx,
                                      negt + c * nbx * 8, out);
            else
                bw::decoded_rows<P>(nb, nullptr, clear.data(), d0v.data(), xb + c * nbx, xd + c * nbx, nullptr, out);
            for (size_t j = 0; j < 2 * P && g + j < r1; ++j) y[c * ldy + g + j] = out[j];
        }
    }
}

}  // namespace

void q1_0_rows_avx512(const BlockQ1_0* wb, size_t cols, size_t r0, size_t r1, const BlockQ8_0* xb, const Prepared& p,
                      size_t ncols, float* y, size_t ldy) {
    const size_t nb = cols / QK1_0, nbx = cols / QK8_0;
    const bool vnni = p.isa == Isa::Avx512Vnni;
    const float* xd = p.part<float>(0);
    const int32_t* negt = vnni ? p.part<int32_t>(1) : nullptr;
    const uint8_t* has_m128 = vnni ? p.part<uint8_t>(2) : nullptr;
    if (ncols > 1) {
        // Eight rows share each column load while their decoded bits fit in about 16 KiB.
        if (nb <= 16) batch<4>(wb, nb, r0, r1, xb, nbx, xd, negt, has_m128, ncols, y, ldy);
        else batch<2>(wb, nb, r0, r1, xb, nbx, xd, negt, has_m128, ncols, y, ldy);
        return;
    }
    // One column: four rows at a time (two registers of two rows), each activation load shared.
    const bool use_vnni = vnni && !has_m128[0];
    for (size_t g = r0; g < r1; g += 4) {
        const BlockQ1_0* rows[4];
        for (size_t j = 0; j < 4; ++j) rows[j] = wb + (g + j < r1 ? g + j : r1 - 1) * nb;
        float out[4];
        if (use_vnni) vnni::decode_rows<2>(nb, rows, xb, xd, negt, out);
        else bw::decode_rows<2>(nb, rows, xb, xd, nullptr, out);
        for (size_t j = 0; j < 4 && g + j < r1; ++j) y[g + j] = out[j];
    }
}

}  // namespace bankml::quant::detail
#pragma GCC pop_options
#endif
