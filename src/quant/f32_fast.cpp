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
    const size_t np = n & ~size_t(31);
    float sum = avx2::fma_loop_reduce(np, w, x);
    for (size_t i = np; i < n; ++i) sum = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(w[i]), _mm_set_ss(x[i]), _mm_set_ss(sum)));
    return sum;
}

namespace detail {

// Nothing to prepare: the columns are read as they are.
void f32_layout(size_t cols, size_t ncols, Isa isa, Prepared& p) {
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
