// The AVX2+F16C F16 x f16 kernel. Same bits as vec_dot_f16_ref: f16 -> f32 is exact (F16C or
// software alike), the four accumulators take the same fmas in the same order, the reduction is
// the same pairs (0+2, 1+3, 0+1, then low+high halves and two horizontal adds) and the tail is the
// same double sum. For several columns the weight row is widened to f32 once and reused.
#pragma GCC optimize("fp-contract=off")
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* idiom).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__x86_64__)
#include <immintrin.h>

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
    const size_t np = n & ~size_t(31);
    double sumf = double(avx2::fma_loop_reduce(np, w, x));
    for (size_t i = np; i < n; ++i) sumf += double(w[i] * x[i]);
    return float(sumf);
}

float f16_dot_fast(size_t n, const uint16_t* w, const uint16_t* x, Isa isa) {
    return isa >= Isa::Avx512 ? f16_dot_avx512(n, w, x) : dot_h(n, w, x);
}

// Part 0, for several columns only: the columns widened to f32 (exact).
void f16_layout(size_t cols, size_t ncols, Isa isa, Prepared& p) {
    p.isa = isa, p.cols = cols, p.ncols = ncols;
    if (ncols >= 2) p.layout({cols * ncols * sizeof(float)});
}
void f16_prepare(const uint16_t* x, Prepared& p, size_t c0, size_t c1) {
    if (p.ncols < 2 || c0 >= c1) return;
    f16_to_f32_row(x + c0 * p.cols, p.part<float>(0) + c0 * p.cols, (c1 - c0) * p.cols);
}

void f16_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                   float* y, size_t ldy) {
    const auto* wh = static_cast<const uint16_t*>(w);
    const auto* xh = static_cast<const uint16_t*>(x);
    const bool wide = p.isa >= Isa::Avx512;
    if (ncols == 1) {
        if (wide) for (size_t r = r0; r < r1; ++r) y[r] = f16_dot_avx512(cols, wh + r * cols, xh);
        else for (size_t r = r0; r < r1; ++r) y[r] = dot_h(cols, wh + r * cols, xh);
        return;
    }
    // Per worker thread, grown to the widest row seen: no allocation per chunk.
    static thread_local AlignedScratch wf_mem;
    float* const wf = wf_mem.get<float>(cols);
    const float* xf = p.part<float>(0);
    for (size_t r = r0; r < r1; ++r) {
        f16_to_f32_row(wh + r * cols, wf, cols);
        for (size_t c = 0; c < ncols; ++c)
            y[c * ldy + r] = wide ? f16_dotf_avx512(cols, wf, xf + c * cols) : dot_f(cols, wf, xf + c * cols);
    }
}

// AVX-512: the four accumulators as two 512-bit registers (accumulators 0 and 1 in one, 2 and 3 in
// the other), lane by lane the same fmas; the reduction splits them back and runs the AVX2 order.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")

static inline __m256 high256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

float f16_dot_avx512(size_t n, const uint16_t* w, const uint16_t* x) {
    __m512 s01 = _mm512_setzero_ps(), s23 = s01;
    const size_t np = n & ~size_t(31);
    for (size_t i = 0; i < np; i += 32) {
        s01 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(w + i))),
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + i))), s01);
        s23 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(w + i + 16))),
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + i + 16))), s23);
    }
    double sumf = double(avx2::reduce4(_mm512_castps512_ps256(s01), high256(s01), _mm512_castps512_ps256(s23), high256(s23)));
    for (size_t i = np; i < n; ++i) sumf += double(_cvtsh_ss(w[i]) * _cvtsh_ss(x[i]));
    return float(sumf);
}

float f16_dotf_avx512(size_t n, const float* w, const float* x) {
    __m512 s01 = _mm512_setzero_ps(), s23 = s01;
    const size_t np = n & ~size_t(31);
    for (size_t i = 0; i < np; i += 32) {
        s01 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), s01);
        s23 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), s23);
    }
    double sumf = double(avx2::reduce4(_mm512_castps512_ps256(s01), high256(s01), _mm512_castps512_ps256(s23), high256(s23)));
    for (size_t i = np; i < n; ++i) sumf += double(w[i] * x[i]);
    return float(sumf);
}

#pragma GCC pop_options

}  // namespace bankml::quant::detail
#endif
