#include "quant/matmul.h"

#include <span>
#include <string>

#include "core/kernels.h"
#include "core/error.h"
#include "core/f16.h"
#include "quant/dot.h"
#include "quant/kernels_impl.h"
#include "quant/traits.h"

namespace bankml::quant {

void prepare_activations(Type t, const float* x, size_t cols, size_t ncols, void* out, Path path) {
    check_cols(t, cols, "prepare_activations");
    const TypeTraits& at = traits(traits(t).dot_type);
    const size_t bytes = act_bytes(t, cols);
    for (size_t c = 0; c < ncols; ++c) at.from_float(x + c * cols, static_cast<uint8_t*>(out) + c * bytes, cols, path);
}

float dot_f16(size_t n, const uint16_t* w, const uint16_t* x, Path path) {
#if defined(__x86_64__)
    if (const Isa l = path_isa(path); l != Isa::Scalar) return detail::f16_dot_fast(n, w, x, l);
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

Columns lay_out_columns(Type t, const void* x, size_t cols, size_t ncols, Path path) {
    check_cols(t, cols, "prepare_columns");
    const TypeTraits& tt = traits(t);
    const Isa isa = path_isa(path);
    Columns a{&tt, x, cols, ncols, nullptr};
    if (tt.rows_fast && isa != Isa::Scalar && ncols > 0) {
        detail::Prepared& prep = caller_scratch();
        tt.prepare_layout(cols, ncols, isa, prep);
        a.prep = &prep;
    }
    return a;
}

void fill_columns(const Columns& a, size_t c0, size_t c1) {
    if (a.prep && c0 < c1 && c1 <= a.ncols) a.tt->prepare(a.x, *a.prep, c0, c1);
}

Columns prepare_columns(Type t, const void* x, size_t cols, size_t ncols, Path path) {
    const Columns a = lay_out_columns(t, x, cols, ncols, path);
    fill_columns(a, 0, ncols);
    return a;
}

void rows(const Columns& a, const void* w, size_t r0, size_t r1, float* y, size_t ldy) {
    if (r0 >= r1 || a.ncols == 0) return;
    if (a.prep) a.tt->rows_fast(w, a.cols, r0, r1, a.x, *a.prep, a.ncols, y, ldy);
    else a.tt->rows_ref(w, a.cols, r0, r1, a.x, a.ncols, y, ldy);
}

// The one entry behind all four public functions: the columns prepared once, then the rows in
// chunks (on the pool or not), every column of a chunk computed by the same per-element arithmetic:
// the type's fast rows when the path allows and the table has them, else its reference rows.
static void run(par::Pool* pool, Type t, const void* w, size_t rows, size_t cols, const void* x,
                size_t ncols, float* y, Path path, const char* caller) {
    check_cols(t, cols, caller);
    if (rows == 0 || ncols == 0) return;
    if (!w || !x || !y) throw Error(std::string(caller) + ": null weights, activations or output");
    const Columns a = prepare_columns(t, x, cols, ncols, path);
    if (!pool || pool->threads() == 1) return quant::rows(a, w, 0, rows, y, rows);
    pool->chunks(rows, par::CHUNK_ROWS, [&](size_t r0, size_t r1) { quant::rows(a, w, r0, r1, y, rows); });
}

void mat_vec(Type t, const void* w, size_t rows, size_t cols, const void* x, float* y, Path path) {
    run(nullptr, t, w, rows, cols, x, 1, y, path, "mat_vec");
}
void mat_vec_par(par::Pool& pool, Type t, const void* w, size_t rows, size_t cols, const void* x, float* y,
                 Path path) {
    run(&pool, t, w, rows, cols, x, 1, y, path, "mat_vec_par");
}
void mat_mat(Type t, const void* w, size_t rows, size_t cols, const void* x, size_t ncols, float* y,
             Path path) {
    run(nullptr, t, w, rows, cols, x, ncols, y, path, "mat_mat");
}
void mat_mat_par(par::Pool& pool, Type t, const void* w, size_t rows, size_t cols, const void* x, size_t ncols,
                 float* y, Path path) {
    run(&pool, t, w, rows, cols, x, ncols, y, path, "mat_mat_par");
}

}  // namespace bankml::quant
