// The AVX2+F16C F16 x f16 kernel. Same bits as vec_dot_f16_ref: f16 -> f32 is exact (F16C or
// software alike), the four accumulators take the same fmas in the same order, the reduction is
// the same pairs (0+2, 1+3, 0+1, then low+high halves and two horizontal adds) and the tail is the
// same double sum. For several columns the weight row is widened to f32 once and reused.
#pragma GCC optimize("fp-contract=off")
#if defined(__x86_64__)
#include <immintrin.h>

#include <vector>

#include "core/f16.h"
#include "quant/avx2.h"
#include "quant/kernels_impl.h"


namespace bankml::quant::detail {

BANKML_AVX2 static float dot_h(size_t n, const uint16_t* w, const uint16_t* x) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const size_t np = n & ~size_t(31);
    for (size_t i = 0; i < np; i += 32) {
        s0 = _mm256_fmadd_ps(avx2::load_f16x8(w + i), avx2::load_f16x8(x + i), s0);
        s1 = _mm256_fmadd_ps(avx2::load_f16x8(w + i + 8), avx2::load_f16x8(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(avx2::load_f16x8(w + i + 16), avx2::load_f16x8(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(avx2::load_f16x8(w + i + 24), avx2::load_f16x8(x + i + 24), s3);
    }
    double sumf = double(avx2::reduce4(s0, s1, s2, s3));
    for (size_t i = np; i < n; ++i) sumf += double(_cvtsh_ss(w[i]) * _cvtsh_ss(x[i]));
    return float(sumf);
}

// The same arithmetic on operands already widened to f32 (exact), for the several-column case.
BANKML_AVX2 static float dot_f(size_t n, const float* w, const float* x) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const size_t np = n & ~size_t(31);
    for (size_t i = 0; i < np; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    double sumf = double(avx2::reduce4(s0, s1, s2, s3));
    for (size_t i = np; i < n; ++i) sumf += double(w[i] * x[i]);
    return float(sumf);
}

BANKML_AVX2 float f16_dot_avx2(size_t n, const uint16_t* w, const uint16_t* x) { return dot_h(n, w, x); }

void f16_prepare(const uint16_t* x, size_t cols, size_t ncols, Prepared& p) {
    p.xf.resize(cols * ncols);
    f16_to_f32_row(x, p.xf.data(), cols * ncols);
}

BANKML_AVX2 void f16_rows_avx2(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p,
                          size_t ncols, float* y, size_t ldy) {
    const auto* wh = static_cast<const uint16_t*>(w);
    const auto* xh = static_cast<const uint16_t*>(x);
    if (ncols == 1) {
        for (size_t r = r0; r < r1; ++r) y[r] = dot_h(cols, wh + r * cols, xh);
        return;
    }
    // Per worker thread, grown to the widest row seen: no allocation per chunk.
    static thread_local std::vector<float> wf;
    if (wf.size() < cols) wf.resize(cols);
    for (size_t r = r0; r < r1; ++r) {
        f16_to_f32_row(wh + r * cols, wf.data(), cols);
        for (size_t c = 0; c < ncols; ++c) y[c * ldy + r] = dot_f(cols, wf.data(), p.xf.data() + c * cols);
    }
}

}  // namespace bankml::quant::detail
#endif
