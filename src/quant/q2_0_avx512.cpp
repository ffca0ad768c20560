// The AVX-512 Q2_0 x Q8_0 kernel (levels avx512 and avx512vnni): eight rows at a time, one row per
// f32 lane as in the AVX2 loop (q2_0_fast.cpp), with the reference's float steps lane by lane:
// sumi = 0 + d1a*sa, sumi += d1b*sb, sumf += d0*sumi (contraction is off in this file).
//
// A whole 64-weight block of a row is one register: its 16 bytes broadcast to the four 128-bit
// lanes and shifted right by 0, 2, 4 and 6 per lane, then masked, so that qword p holds the codes of
// sub-block h = p % 2 at shift s = p / 2: byte b of qword p is the code of weight 4b + s of
// sub-block h. The activations are laid out once per call to match (part 2, q2_0_interleave), with each int32
// lane's negated quant sum -T (part 1), so that a lane's (c - 1)·q sum is one instruction; the
// eight rows' sixteen lanes each are then summed per (row, sub-block) by a tree of permutes and
// adds (exact integers, any order), and the two sub-blocks' scales are pre-broadcast (part 0).
#pragma GCC optimize("fp-contract=off")
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* idiom).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/f16.h"
#include "quant/kernels_impl.h"

namespace bankml::quant::detail {

void q2_0_prepare_avx512(const BlockQ8_0* x, size_t cols, size_t ncols, Prepared& p) {
    const size_t nb = cols / QK2_0 * ncols;  // Q2_0-sized blocks of all columns
    p.layout({nb * 16 * sizeof(float), nb * 16 * sizeof(int32_t), nb * 64});
    float* d1v = p.part<float>(0);
    int32_t* negt = p.part<int32_t>(1);
    int8_t* y = p.part<int8_t>(2);
    q2_0_interleave(x, nb, y);
    for (size_t bi = 0; bi < nb; ++bi) {
        for (size_t h = 0; h < 2; ++h) {
            const float d = f16_to_f32(x[bi * 2 + h].d);
            for (size_t l = 0; l < 8; ++l) d1v[bi * 16 + h * 8 + l] = d;
        }
        for (size_t lane = 0; lane < 16; ++lane) {
            int32_t t = 0;
            for (size_t e = 0; e < 4; ++e) t += y[bi * 64 + 4 * lane + e];
            negt[bi * 16 + lane] = -t;
        }
    }
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
namespace {
inline __m256 high256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
namespace bw {
#define Q2_VNNI 0
#include "quant/q2_0_avx512.inc"
#undef Q2_VNNI
}  // namespace bw
}  // namespace
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace {
namespace vnni {
#define Q2_VNNI 1
#include "quant/q2_0_avx512.inc"
#undef Q2_VNNI
}  // namespace vnni
}  // namespace
#pragma GCC pop_options

void q2_0_rows_avx512(const BlockQ2_0* wb, size_t cols, size_t r0, size_t r1, const Prepared& p, size_t ncols,
                      float* y, size_t ldy) {
    const size_t nb = cols / QK2_0;
    static thread_local std::vector<float> sumf;
    if (sumf.size() < 8 * ncols) sumf.resize(8 * ncols);
    const bool vnni = p.isa == Isa::Avx512Vnni;
    for (size_t g = r0; g < r1; g += 8) {
        const BlockQ2_0* rowp[8];
        for (size_t r = 0; r < 8; ++r) rowp[r] = wb + (g + r < r1 ? g + r : r1 - 1) * nb;
        if (vnni) vnni::rows8(rowp, nb, p, ncols, sumf.data());
        else bw::rows8(rowp, nb, p, ncols, sumf.data());
        for (size_t c = 0; c < ncols; ++c)
            for (size_t r = 0; r < 8 && g + r < r1; ++r) y[c * ldy + g + r] = sumf[8 * c + r];
    }
}

}  // namespace bankml::quant::detail
#endif
