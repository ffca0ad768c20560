#include "quant/matmul.h"

#include <span>
#include <string>

#include "core/kernels.h"
#include "core/error.h"
#include "core/f16.h"
#include "quant/dot.h"
#include "quant/kernels_impl.h"
#include "quant/q8_0.h"

namespace bankml::quant {

namespace detail {

void q1_0_rows_ref(const void* w, size_t cols, size_t r0, size_t r1, const void* x, size_t ncols, float* y,
                   size_t ldy) {
    const auto* wb = static_cast<const BlockQ1_0*>(w);
    const auto* xb = static_cast<const BlockQ8_0*>(x);
    const size_t nbw = cols / QK1_0, nbx = cols / QK8_0;
    for (size_t c = 0; c < ncols; ++c)
        for (size_t r = r0; r < r1; ++r) y[c * ldy + r] = vec_dot_q1_0_ref(cols, wb + r * nbw, xb + c * nbx);
}

void q2_0_rows_ref(const void* w, size_t cols, size_t r0, size_t r1, const void* x, size_t ncols, float* y,
                   size_t ldy) {
    const auto* wb = static_cast<const BlockQ2_0*>(w);
    const auto* xb = static_cast<const BlockQ8_0*>(x);
    const size_t nbw = cols / QK2_0, nbx = cols / QK8_0;
    for (size_t c = 0; c < ncols; ++c)
        for (size_t r = r0; r < r1; ++r) y[c * ldy + r] = vec_dot_q2_0_ref(cols, wb + r * nbw, xb + c * nbx);
}

void f16_rows_ref(const void* w, size_t cols, size_t r0, size_t r1, const void* x, size_t ncols, float* y,
                  size_t ldy) {
    const auto* wh = static_cast<const uint16_t*>(w);
    const auto* xh = static_cast<const uint16_t*>(x);
    for (size_t c = 0; c < ncols; ++c)
        for (size_t r = r0; r < r1; ++r) y[c * ldy + r] = vec_dot_f16_ref(cols, wh + r * cols, xh + c * cols);
}

}  // namespace detail

void prepare_activations(WeightType t, const float* x, size_t cols, size_t ncols, void* out, Path path) {
    check_cols(t, cols, "prepare_activations");
    for (size_t c = 0; c < ncols; ++c) {
        if (t == WeightType::F16) {
            auto* h = static_cast<uint16_t*>(out) + c * cols;
            if (use_fast(path)) f32_to_f16_row(x + c * cols, h, cols);
            else for (size_t i = 0; i < cols; ++i) h[i] = f32_to_f16(x[c * cols + i]);
        } else {
            quantize_row_q8_0(x + c * cols, static_cast<BlockQ8_0*>(out) + c * (cols / QK8_0), cols, path);
        }
    }
}

float dot_f16(size_t n, const uint16_t* w, const uint16_t* x, Path path) {
#if defined(__x86_64__)
    if (use_fast(path)) return detail::f16_dot_avx2(n, w, x);
#endif
    (void)path;
    return vec_dot_f16_ref(n, w, x);
}

// The calling thread's prepared activations, kept between calls: the vectors only grow, so after
// the first product of each size a decode step allocates nothing. run() holds it by reference so
// that the pool's workers read the caller's copy (a thread_local named inside the chunk lambda
// would be each worker's own); run() never re-enters itself on one thread.
static detail::Prepared& caller_scratch() {
    static thread_local detail::Prepared p;
    return p;
}

// The one entry behind all four public functions: rows in chunks (on the pool or not), every
// column of a chunk computed by the same per-element arithmetic.
static void run(par::Pool* pool, WeightType t, const void* w, size_t rows, size_t cols, const void* x,
                size_t ncols, float* y, Path path, const char* caller) {
    check_cols(t, cols, caller);
    if (rows == 0 || ncols == 0) return;
    if (!w || !x || !y) throw Error(std::string(caller) + ": null weights, activations or output");
    [[maybe_unused]] const bool fast = use_fast(path);
    [[maybe_unused]] detail::Prepared& prep = caller_scratch();
#if defined(__x86_64__)
    if (fast && t == WeightType::Q1_0) detail::q1_0_prepare(static_cast<const BlockQ8_0*>(x), cols, ncols, prep, vnni_allowed());
    if (fast && t == WeightType::Q2_0) detail::q2_0_prepare(static_cast<const BlockQ8_0*>(x), cols, ncols, prep);
    if (fast && t == WeightType::F16 && ncols > 1) detail::f16_prepare(static_cast<const uint16_t*>(x), cols, ncols, prep);
#endif
    auto chunk = [&](size_t r0, size_t r1) {
#if defined(__x86_64__)
        if (fast) {
            switch (t) {
                case WeightType::Q1_0: return detail::q1_0_rows_avx2(w, cols, r0, r1, x, prep, ncols, y, rows);
                case WeightType::Q2_0: return detail::q2_0_rows_avx2(w, cols, r0, r1, x, prep, ncols, y, rows);
                case WeightType::F16: return detail::f16_rows_avx2(w, cols, r0, r1, x, prep, ncols, y, rows);
            }
        }
#endif
        switch (t) {
            case WeightType::Q1_0: return detail::q1_0_rows_ref(w, cols, r0, r1, x, ncols, y, rows);
            case WeightType::Q2_0: return detail::q2_0_rows_ref(w, cols, r0, r1, x, ncols, y, rows);
            case WeightType::F16: return detail::f16_rows_ref(w, cols, r0, r1, x, ncols, y, rows);
        }
    };
    if (!pool || pool->threads() == 1) return chunk(0, rows);
    pool->chunks(rows, par::CHUNK_ROWS, [&](size_t r0, size_t r1) { chunk(r0, r1); });
}

void mat_vec(WeightType t, const void* w, size_t rows, size_t cols, const void* x, float* y, Path path) {
    run(nullptr, t, w, rows, cols, x, 1, y, path, "mat_vec");
}
void mat_vec_par(par::Pool& pool, WeightType t, const void* w, size_t rows, size_t cols, const void* x, float* y,
                 Path path) {
    run(&pool, t, w, rows, cols, x, 1, y, path, "mat_vec_par");
}
void mat_mat(WeightType t, const void* w, size_t rows, size_t cols, const void* x, size_t ncols, float* y,
             Path path) {
    run(nullptr, t, w, rows, cols, x, ncols, y, path, "mat_mat");
}
void mat_mat_par(par::Pool& pool, WeightType t, const void* w, size_t rows, size_t cols, const void* x, size_t ncols,
                 float* y, Path path) {
    run(&pool, t, w, rows, cols, x, ncols, y, path, "mat_mat_par");
}

}  // namespace bankml::quant
