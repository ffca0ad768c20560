// The tensor types as one table, in the manner of ggml's type_traits: a type is one entry (its
// name, block layout, the activation type its dot product takes, and its kernels), and code that
// handles "any type" asks the table instead of switching on the id. Adding a computed type is one
// entry in traits.cpp plus its kernels (dot.h reference, optional fast rows) and their tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "quant/path.h"

namespace bankml::quant {

namespace detail {
class Prepared;
}

// ggml's tensor types (the numbers are GGUF's on-disk ids). The table knows every id below so that
// any llama.cpp model can be inspected; bankml computes with F32, F16, Q8_0, Q1_0 and Q2_0.
enum class Type : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35,
    MXFP4 = 39,
    Q1_0 = 41, Q2_0 = 42,
};

// n values of a row from f32 into this type (an activation type: quantize_row_q8_0, f32 -> f16,
// f32 as it is).
using FromFloat = void (*)(const float* x, void* y, size_t n, Path path);
// n values of a row of this type to f32 (ggml's dequantize_row / get_rows).
using ToFloat = void (*)(const void* x, float* y, size_t n);
// y[c * ldy + r] = row r of w (rows of `cols` values) . activation column c, for r in [r0, r1),
// c < ncols; x holds ncols columns of the dot type, one after another.
using RowsRef = void (*)(const void* w, size_t cols, size_t r0, size_t r1, const void* x, size_t ncols, float* y,
                         size_t ldy);
// The fast path's once-per-call work on the activation columns (scales to f32, sums) for a level
// (not scalar), and the rows kernel that reads it (it runs at the level the layout recorded). Same
// bits as rows_ref at every level. LayoutFn sizes p for ncols columns of cols values; PrepareFn
// then fills columns [c0, c1) of it from x (all ncols columns): each column's part is its own, so
// ranges may be filled in any order, on any threads, each column once.
using LayoutFn = void (*)(size_t cols, size_t ncols, Isa isa, detail::Prepared& p);
using PrepareFn = void (*)(const void* x, detail::Prepared& p, size_t c0, size_t c1);
using RowsFast = void (*)(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const detail::Prepared& p,
                          size_t ncols, float* y, size_t ldy);

struct TypeTraits {
    Type type;
    const char* name;          // as ggml names it: "q1_0"
    uint32_t block;            // values per block (1 for plain floats)
    uint32_t block_bytes;      // bytes per block
    Type dot_type;             // the activation type of its dot product (ggml's vec_dot_type)
    FromFloat from_float;      // null unless it is an activation type
    ToFloat to_float;          // null: bankml does not read it as f32
    RowsRef rows_ref;          // null: no product kernel (mat_vec / mat_mat refuse it)
    LayoutFn prepare_layout;   // set with rows_fast
    PrepareFn prepare;         // set with rows_fast
    RowsFast rows_fast;        // null: the reference runs on every path
    int32_t file_type;         // llama.cpp's general.file_type for a model of this type; -1: none
};

// The entry of a GGUF type id; nullptr when bankml does not know the id.
const TypeTraits* find_traits(uint32_t id);
// The entry of a known type (throws bankml::Error for an unknown id).
const TypeTraits& traits(Type t);
// Every entry, in id order.
std::span<const TypeTraits> all_traits();
// Parses "f32", "q1_0", ... (case-insensitive); nullopt if unknown.
std::optional<Type> type_from_name(std::string_view name);
inline const char* type_name(Type t) {
    const TypeTraits* tt = find_traits(uint32_t(t));
    return tt ? tt->name : "unknown";
}

// Values per block of t, and bytes of one row of `cols` values (cols a multiple of the block).
size_t block_size(Type t);
size_t row_bytes(Type t, size_t cols);
// Bytes of one activation column for weights of type t (a row of its dot type).
size_t act_bytes(Type t, size_t cols);
// Throws bankml::Error unless t has a product kernel and cols is a positive multiple of both its
// block and its dot type's block.
void check_cols(Type t, size_t cols, const char* caller);

}  // namespace bankml::quant
