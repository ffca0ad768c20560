// Matrix products of GGUF weights by activation columns: y = W x, with ggml's x86 bits.
//
// Weights: `rows` rows of `cols` weights, row-major as GGUF stores them (Q1_0 / Q2_0 blocks, or
// f16 values). Activations: one column is `act_bytes(t, cols)` bytes: Q8_0 blocks for Q1_0 and
// Q2_0 weights, the f32 column rounded to f16 for F16 weights (ggml's vec_dot_type); make it with
// prepare_activations. Every output element is the reference dot product of its row and column
// (dot.h), whichever path, thread count or batch size computes it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "par/pool.h"
#include "quant/traits.h"
#include "quant/path.h"

namespace bankml::quant {

// Turns ncols f32 columns (each `cols` floats, consecutive) into activation columns for weights of
// type t: Q8_0 (quantize_row_q8_0) or f16 (round to nearest even). out: ncols * act_bytes(t, cols).
void prepare_activations(Type t, const float* x, size_t cols, size_t ncols, void* out,
                         Path path = Path::Auto);

// One f16 row by one f16 column (vec_dot_f16_ref's bits, AVX2 when the path allows), for callers
// whose rows are not a weight matrix (the f16 KV cache's attention scores).
float dot_f16(size_t n, const uint16_t* w, const uint16_t* x, Path path = Path::Auto);

// y[r] = row r . x for r in [0, rows). One thread.
void mat_vec(Type t, const void* w, size_t rows, size_t cols, const void* x, float* y,
             Path path = Path::Auto);
// The same on the pool (rows shared in chunks of par::CHUNK_ROWS); same bits at any thread count.
void mat_vec_par(par::Pool& pool, Type t, const void* w, size_t rows, size_t cols, const void* x,
                 float* y, Path path = Path::Auto);

// Several columns (a prompt): x holds ncols activation columns one after another; output column c
// is y[c * rows .. c * rows + rows). Each element has the same bits as mat_vec of that column.
void mat_mat(Type t, const void* w, size_t rows, size_t cols, const void* x, size_t ncols, float* y,
             Path path = Path::Auto);
void mat_mat_par(par::Pool& pool, Type t, const void* w, size_t rows, size_t cols, const void* x,
                 size_t ncols, float* y, Path path = Path::Auto);

// Activation columns prepared once for many row ranges: several matrices of one type and width that
// share their input (Q, K and V; gate and up), each cut into chunks for the pool's workers. Made on
// the calling thread (in its scratch: valid until that thread's next product or prepare_columns);
// rows() may then run on any thread. Every element has mat_vec's bits.
struct Columns {
    const TypeTraits* tt = nullptr;
    const void* x = nullptr;
    size_t cols = 0, ncols = 0;
    detail::Prepared* prep = nullptr;  // null: the reference rows run (the calling thread's scratch)
};
Columns prepare_columns(Type t, const void* x, size_t cols, size_t ncols, Path path = Path::Auto);
// The same in two steps, so that several threads may share the work: lay_out_columns sizes the
// calling thread's scratch (valid as prepare_columns's), then fill_columns prepares columns
// [c0, c1) of x, on any thread; every column is filled once before rows() reads any.
Columns lay_out_columns(Type t, const void* x, size_t cols, size_t ncols, Path path = Path::Auto);
void fill_columns(const Columns& a, size_t c0, size_t c1);
// y[c * ldy + r] = row r of w (rows of a.cols values) . column c of a, for r in [r0, r1).
void rows(const Columns& a, const void* w, size_t r0, size_t r1, float* y, size_t ldy);

}  // namespace bankml::quant
