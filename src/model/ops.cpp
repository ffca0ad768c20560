#include "model/ops.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/f16.h"
#include "core/kernels.h"
#include "quant/avx2.h"
#include "quant/dot.h"
#include "quant/matmul.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define BANKML_OPS_X86 1
#endif

namespace bankml::model::ops {

// The path the ops run on, as the kernels choose one (quant::Path): Auto follows the CPU and
// BANKML_KERNELS; tests set Reference to compare.
static std::atomic<quant::Path> g_path{quant::Path::Auto};

bool fast_paths() { return quant::use_fast(g_path.load(std::memory_order_relaxed)); }
bool set_fast_paths(bool on) {
    const bool old = fast_paths();
    g_path.store(on ? quant::Path::Auto : quant::Path::Reference);
    return old;
}

static inline float h2f(uint16_t h) { return f16_to_f32(h); }
static inline uint16_t f2h(float f) { return f32_to_f16(f); }

// ---------------------------------------------------------------- RMS norm

// ggml's mean of the squares: the float squares added into a double one by one, in order (no
// vectorisation without fast-math), then (float)(sum / n).
static float mean_square_chain(const float* x, size_t n) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    return (float)(sum / (double)(int64_t)n);
}

#if BANKML_OPS_X86
// The same squares added in any order: eight running sums of four doubles, 16 values a step.
BANKML_AVX2 static double sum_squares_avx2(const float* x, size_t n) {
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        const __m256 qa = _mm256_mul_ps(a, a), qb = _mm256_mul_ps(b, b);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(qa)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(qa, 1)));
        s2 = _mm256_add_pd(s2, _mm256_cvtps_pd(_mm256_castps256_ps128(qb)));
        s3 = _mm256_add_pd(s3, _mm256_cvtps_pd(_mm256_extractf128_ps(qb, 1)));
    }
    const __m256d t = _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3));
    alignas(32) double l[4];
    _mm256_store_pd(l, t);
    double sum = (l[0] + l[1]) + (l[2] + l[3]);
    for (; i < n; i++) sum += (double)(x[i] * x[i]);
    return sum;
}

// The chain's float mean from an unordered sum a of the same n squares. Any order of adding n
// nonnegative doubles lands within (n - 1)·2^-53 of their exact sum, relatively, the chain's and
// a alike, so the chain's sum lies within n·2^-52 of a (plus a rounding of a·(1 ± rel), inside the
// slack of rel = n·2^-50). Its float mean, (float)(sum / n), is monotone in the sum: where both
// ends of that interval give the same float, the chain gives it too, without being run (an
// infinite a comes from an infinite square, which makes the chain's sum infinite too: no double
// sum of float squares overflows). Elsewhere (a mean near a float's rounding boundary, a NaN, a
// row too long for the bound) the chain runs.
static float mean_square_fast(const float* x, size_t n) {
    if (n == 0 || n > (size_t(1) << 24)) return mean_square_chain(x, n);
    const double a = sum_squares_avx2(x, n), rel = (double)n * 0x1p-50, dn = (double)(int64_t)n;
    const float lo = (float)(a * (1.0 - rel) / dn), hi = (float)(a * (1.0 + rel) / dn);
    if (lo == hi) return lo;
    return mean_square_chain(x, n);
}
#endif

// y = (x·scale)·w: the norm and llama.cpp's weight multiply are separate products (fused or
// not, the same bits). y may be x (heads are normed in place).
static void scale_mul_ref(const float* x, float scale, const float* w, float* y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}
#if BANKML_OPS_X86
BANKML_AVX2 static void scale_mul_avx2(const float* x, float scale, const float* w, float* y, size_t n) {
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
    scale_mul_ref(x + i, scale, w + i, y + i, n - i);
}
#endif

void rms_norm_mul(const float* x, const float* w, float* y, size_t n, float eps) {
#if BANKML_OPS_X86
    const bool fast = fast_paths();
    const float mean = fast ? mean_square_fast(x, n) : mean_square_chain(x, n);
#else
    const float mean = mean_square_chain(x, n);
#endif
    const float scale = 1.0f / sqrtf(mean + eps);
#if BANKML_OPS_X86
    if (fast) return scale_mul_avx2(x, scale, w, y, n);
#endif
    scale_mul_ref(x, scale, w, y, n);
}

// ---------------------------------------------------------------- rope

Rope::Rope(int n_dims, float base) : n_dims_(n_dims), theta_scale_(powf(base, -2.0f / (float)n_dims)) {}

void Rope::cache(int64_t pos, float* cs) const {
    float theta = (float)pos;
    for (int i = 0; i < n_dims_; i += 2) {
        cs[i] = cosf(theta);
        cs[i + 1] = sinf(theta);
        theta *= theta_scale_;
    }
}

// Pairs [i0, half) of a head.
static void rope_pairs(float* head, const float* cs, size_t half, size_t i0) {
    for (size_t i = i0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = head[i], x1 = head[i + half];
        // ggml's C++ is built with FMA contraction: GCC fuses the first product of each
        // expression and rounds the second on its own.
        head[i] = std::fma(x0, c, -(x1 * s));
        head[i + half] = std::fma(x0, s, x1 * c);
    }
}
static void rope_ref(float* head, const float* cs, size_t half) { rope_pairs(head, cs, half, 0); }

#if BANKML_OPS_X86
// rope_ref eight pairs at a time, lane by lane the same multiply, negation and fma.
BANKML_AVX2 static void rope_avx2(float* head, const float* cs, size_t half) {
    // shuffle_ps of two vectors of (cos, sin) pairs leaves pairs 0 1 4 5 2 3 6 7: put them in order.
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    size_t i = 0;
    for (; i + 8 <= half; i += 8) {
        const __m256 a = _mm256_loadu_ps(cs + 2 * i), b = _mm256_loadu_ps(cs + 2 * i + 8);
        const __m256 c = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), order);
        const __m256 s = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)), order);
        const __m256 x0 = _mm256_loadu_ps(head + i), x1 = _mm256_loadu_ps(head + i + half);
        _mm256_storeu_ps(head + i, _mm256_fmadd_ps(x0, c, _mm256_xor_ps(_mm256_mul_ps(x1, s), sign)));
        _mm256_storeu_ps(head + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
    }
    rope_pairs(head, cs, half, i);
}
#endif

// ---------------------------------------------------------------- SiLU

static inline uint32_t fbits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
static inline float bitsf(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

float v_expf(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    const uint32_t e = fbits(z) << 23;
    const float k = bitsf(e + fbits(1.0f));
    const bool c = std::fabs(n) > 126.0f;
    const float u = b * b;
    const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                      std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                             u, 0x1.ffffecp-1f * b);
    if (!c) return std::fma(k, j, k);
    const uint32_t g = (n <= 0.0f) ? 0x82000000u : 0u;
    const float s1 = bitsf(g + 0x7f000000u);
    const float s2 = bitsf(e - g);
    if (std::fabs(n) > 192.0f) return s1 * s1;
    return std::fma(s2, j, s2) * s1;
}

float v_silu(float x) {
    const float neg = 0.0f - x;
    return x / (1.0f + v_expf(neg));
}

static void swiglu_ref(const float* gate, const float* up, float* y, size_t n) {
    size_t i = 0;
    for (; i + 7 < n; i += 8)
        for (size_t l = 0; l < 8; l++) y[i + l] = v_silu(gate[i + l]) * up[i + l];
    for (; i < n; i++) y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

#if BANKML_OPS_X86
BANKML_AVX2 static inline __m256 v_expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.f), n);
    const __m256 c = _mm256_cmp_ps(absn, _mm256_set1_ps(126), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    const __m256 plain = _mm256_fmadd_ps(k, j, k);
    if (!_mm256_movemask_ps(c)) return plain;
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 d = _mm256_cmp_ps(absn, _mm256_set1_ps(192), _CMP_GT_OQ);
    const __m256 big = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
    return _mm256_blendv_ps(_mm256_blendv_ps(plain, big, c), _mm256_mul_ps(s1, s1), d);
}

BANKML_AVX2 static void swiglu_avx2(const float* gate, const float* up, float* y, size_t n) {
    size_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 7 < n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 ex = v_expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
        const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, ex));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}
#endif


// ---------------------------------------------------------------- f16 rows

// The f32 dot is quant's (ggml_vec_dot_f32's order), shared with f32 weight matrices.
static float dot_f32_ref(const float* x, const float* y, size_t n) { return quant::vec_dot_f32_ref(n, x, y); }

#if BANKML_OPS_X86
static float dot_f32_avx2(const float* x, const float* y, size_t n) { return quant::vec_dot_f32_avx2(n, x, y); }

BANKML_AVX2 static void round_f16_avx2(const float* x, uint16_t* y, size_t n) {
    size_t i = 0;
    for (; i + 7 < n; i += 8)
        _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = f2h(x[i]);
}
#endif

static void round_f16_ref(const float* x, uint16_t* y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = f2h(x[i]);
}

// ---------------------------------------------------------------- attention's row loops

// ggml_vec_scale_f16 and ggml_vec_mad_f16 for rows whose length is a multiple of 32 (their SIMD
// loops); ggml's scalar tails (y + x*v, contracted) are the same arithmetic element by element.
static void scale_h_ref(uint16_t* y, size_t n, float v) {
    for (size_t i = 0; i < n; i++) y[i] = f2h(h2f(y[i]) * v);
}
static void mad_h_ref(uint16_t* y, const uint16_t* x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) y[i] = f2h(std::fma(h2f(x[i]), v, h2f(y[i])));
}
static void scale_f_ref(float* y, size_t n, float v) {
    for (size_t i = 0; i < n; i++) y[i] *= v;
}
static void mad_f_ref(float* y, const float* x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) y[i] = std::fma(x[i], v, y[i]);
}

#if BANKML_OPS_X86
BANKML_AVX2 static void scale_h_avx2(uint16_t* y, size_t n, float v) {
    const __m256 vv = _mm256_set1_ps(v);
    size_t i = 0;
    for (; i + 7 < n; i += 8)
        _mm_storeu_si128((__m128i*)(y + i),
                         _mm256_cvtps_ph(_mm256_mul_ps(quant::avx2::load_f16x8(y + i), vv), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = f2h(h2f(y[i]) * v);
}
BANKML_AVX2 static void mad_h_avx2(uint16_t* y, const uint16_t* x, size_t n, float v) {
    const __m256 vv = _mm256_set1_ps(v);
    size_t i = 0;
    for (; i + 7 < n; i += 8)
        _mm_storeu_si128((__m128i*)(y + i), _mm256_cvtps_ph(_mm256_fmadd_ps(quant::avx2::load_f16x8(x + i), vv, quant::avx2::load_f16x8(y + i)),
                                                            _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = f2h(std::fma(h2f(x[i]), v, h2f(y[i])));
}
BANKML_AVX2 static void scale_f_avx2(float* y, size_t n, float v) {
    const __m256 vv = _mm256_set1_ps(v);
    size_t i = 0;
    for (; i + 7 < n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), vv));
    for (; i < n; i++) y[i] *= v;
}
BANKML_AVX2 static void mad_f_avx2(float* y, const float* x, size_t n, float v) {
    const __m256 vv = _mm256_set1_ps(v);
    size_t i = 0;
    for (; i + 7 < n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vv, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = std::fma(x[i], v, y[i]);
}
#endif

// ---------------------------------------------------------------- dispatch

// The ops' loops at one level, chosen as the kernels are (the path's level: scalar runs the
// references, any wider level the AVX2 loops; both give the same bits).
struct OpsKernels {
    void (*swiglu)(const float*, const float*, float*, size_t);
    float (*dot_f32)(const float*, const float*, size_t);
    void (*round_f16)(const float*, uint16_t*, size_t);
    void (*scale_h)(uint16_t*, size_t, float);
    void (*mad_h)(uint16_t*, const uint16_t*, size_t, float);
    void (*scale_f)(float*, size_t, float);
    void (*mad_f)(float*, const float*, size_t, float);
    void (*rope)(float*, const float*, size_t);
};
static constexpr OpsKernels REFERENCE = {swiglu_ref, dot_f32_ref, round_f16_ref, scale_h_ref, mad_h_ref, scale_f_ref, mad_f_ref, rope_ref};
#if BANKML_OPS_X86
static constexpr OpsKernels AVX2 = {swiglu_avx2, dot_f32_avx2, round_f16_avx2, scale_h_avx2, mad_h_avx2, scale_f_avx2, mad_f_avx2, rope_avx2};
#else
static constexpr OpsKernels AVX2 = REFERENCE;
#endif

static const OpsKernels& kernels() { return fast_paths() ? AVX2 : REFERENCE; }

void swiglu(const float* gate, const float* up, float* y, size_t n) { kernels().swiglu(gate, up, y, n); }
float dot_f32(const float* x, const float* y, size_t n) { return kernels().dot_f32(x, y, n); }
void round_f16(const float* x, uint16_t* y, size_t n) { kernels().round_f16(x, y, n); }
void Rope::apply(float* head, const float* cs) const { kernels().rope(head, cs, size_t(n_dims_ / 2)); }
float dot_f16(const uint16_t* x, const uint16_t* y, size_t n) {
    // The same loop as an F16 weight row's product: the kernel's, on the ops' path.
    return quant::dot_f16(n, x, y, g_path.load(std::memory_order_relaxed));
}

// ---------------------------------------------------------------- attention

// The running sum of the softmax: S*ms + vs, fused as GCC 12 -O3 -mfma compiles ggml's C++ (one of
// ms and vs is always 1: only the new-maximum step, fma(S, ms, 1), differs from the unfused form;
// the tiny oracles cannot tell the two apart).
static inline float softmax_sum(float S, float ms, float vs) { return std::fma(S, ms, vs); }

void attend_f16(const float* q, const uint16_t* k, const uint16_t* v, size_t n_kv, size_t d, float scale,
                float* out, void* scratch) {
    uint16_t* acc = (uint16_t*)scratch;
    uint16_t* qh = acc + d;
    const OpsKernels& kern = kernels();
    kern.round_f16(q, qh, d);
    std::memset(acc, 0, d * sizeof(uint16_t));
    float S = 0.0f, M = -std::numeric_limits<float>::infinity();
    for (size_t ic = 0; ic < n_kv; ic++) {
        float s = dot_f16(k + ic * d, qh, d);
        s = s * scale;
        s += 0.0f;  // the causal mask's value for a visible position
        const float Mold = M;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            M = s;
            ms = expf(Mold - M);
            kern.scale_h(acc, d, ms);
        } else {
            vs = expf(s - M);
        }
        kern.mad_h(acc, v + ic * d, d, vs);
        S = softmax_sum(S, ms, vs);
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (size_t i = 0; i < d; i++) out[i] = h2f(acc[i]) * inv;
}

void attend_f32(const float* q, const float* k, const float* v, size_t n_kv, size_t d, float scale, float* out,
                void* scratch) {
    (void)scratch;
    const OpsKernels& kern = kernels();
    float* acc = out;
    std::memset(acc, 0, d * sizeof(float));
    float S = 0.0f, M = -std::numeric_limits<float>::infinity();
    for (size_t ic = 0; ic < n_kv; ic++) {
        float s = kern.dot_f32(k + ic * d, q, d);
        s = s * scale;
        s += 0.0f;
        const float Mold = M;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            M = s;
            ms = expf(Mold - M);
            kern.scale_f(acc, d, ms);
        } else {
            vs = expf(s - M);
        }
        kern.mad_f(acc, v + ic * d, d, vs);
        S = softmax_sum(S, ms, vs);
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (size_t i = 0; i < d; i++) acc[i] *= inv;
}

}  // namespace bankml::model::ops
