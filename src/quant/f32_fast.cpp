// The AVX2 F32 x f32 kernel (f32 weight matrices, and the f32 cache's attention scores). Same bits
// as vec_dot_f32_ref: the four accumulators take the same fmas in the same order, the reduction is
// avx2::reduce4's pairs (the reference's), and the tail is fused one product at a time.
#pragma GCC optimize("fp-contract=off")
#if defined(__x86_64__)
#include <immintrin.h>

#include "quant/avx2.h"
#include "quant/dot.h"
#include "quant/kernels_impl.h"

namespace bankml::quant {

BANKML_AVX2 float vec_dot_f32_avx2(size_t n, const float* w, const float* x) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const size_t np = n & ~size_t(31);
    for (size_t i = 0; i < np; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), s3);
    }
    float sum = avx2::reduce4(s0, s1, s2, s3);
    for (size_t i = np; i < n; ++i) sum = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(w[i]), _mm_set_ss(x[i]), _mm_set_ss(sum)));
    return sum;
}

namespace detail {

// Nothing to prepare: the columns are read as they are.
void f32_prepare(const float*, size_t cols, size_t ncols, Prepared& p, Isa isa) {
    p.isa = isa, p.cols = cols, p.ncols = ncols;
}

void f32_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared&, size_t ncols,
                   float* y, size_t ldy) {
    const auto* wf = static_cast<const float*>(w);
    const auto* xf = static_cast<const float*>(x);
    for (size_t c = 0; c < ncols; ++c)
        for (size_t r = r0; r < r1; ++r) y[c * ldy + r] = vec_dot_f32_avx2(cols, wf + r * cols, xf + c * cols);
}

}  // namespace detail
}  // namespace bankml::quant
#endif
