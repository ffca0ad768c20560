// The table of tensor types. A computed type's entry names its kernels; the others carry only
// their block layout (as ggml's type_traits defines it), so `bankml info` reads any llama.cpp model.
// Ids ggml retired (4, 5, 31-33, 36-38) and ids newer than bankml are absent: unknown.
#include "quant/traits.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <numeric>
#include <string>

#include "core/error.h"
#include "core/f16.h"
#include "core/kernels.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/kernels_impl.h"
#include "quant/q8_0.h"

namespace bankml::quant {

namespace {

// The reference rows of any type: each element is its reference dot product (dot.h), W rows of
// cols / QW blocks, X columns of cols / QX blocks.
template <class W, class X, size_t QW, size_t QX, float (*Dot)(size_t, const W*, const X*)>
void rows_ref(const void* w, size_t cols, size_t r0, size_t r1, const void* x, size_t ncols, float* y, size_t ldy) {
    const auto* wb = static_cast<const W*>(w);
    const auto* xb = static_cast<const X*>(x);
    const size_t nbw = cols / QW, nbx = cols / QX;
    for (size_t c = 0; c < ncols; ++c)
        for (size_t r = r0; r < r1; ++r) y[c * ldy + r] = Dot(cols, wb + r * nbw, xb + c * nbx);
}

void q8_0_from_float(const float* x, void* y, size_t n, Path path) {
    quantize_row_q8_0(x, static_cast<BlockQ8_0*>(y), n, path);
}

void f16_from_float(const float* x, void* y, size_t n, Path path) {
    auto* h = static_cast<uint16_t*>(y);
    if (use_fast(path)) f32_to_f16_row(x, h, n);
    else for (size_t i = 0; i < n; ++i) h[i] = f32_to_f16(x[i]);
}

void f32_to_float(const void* x, float* y, size_t n) { std::memcpy(y, x, n * sizeof(float)); }
void f32_from_float(const float* x, void* y, size_t n, Path) { std::memcpy(y, x, n * sizeof(float)); }

void f16_to_float(const void* x, float* y, size_t n) {
    const auto* h = static_cast<const uint16_t*>(x);
    for (size_t i = 0; i < n; ++i) y[i] = f16_to_f32(h[i]);
}

// Bit j of a block set: +d, clear: -d.
void q1_0_to_float(const void* x, float* y, size_t n) {
    const auto* b = static_cast<const BlockQ1_0*>(x);
    for (size_t ib = 0; ib < n / QK1_0; ++ib) {
        const float d = f16_to_f32(b[ib].d), nd = -d;
        for (size_t j = 0; j < QK1_0; ++j) y[ib * QK1_0 + j] = ((b[ib].qs[j / 8] >> (j % 8)) & 1) ? d : nd;
    }
}

// Code q (two bits, low bits first): (q - 1) * d.
void q2_0_to_float(const void* x, float* y, size_t n) {
    const auto* b = static_cast<const BlockQ2_0*>(x);
    for (size_t ib = 0; ib < n / QK2_0; ++ib) {
        const float d = f16_to_f32(b[ib].d);
        for (size_t j = 0; j < QK2_0; ++j) {
            const int q = (b[ib].qs[j / 4] >> ((j % 4) * 2)) & 3;
            y[ib * QK2_0 + j] = float(q - 1) * d;
        }
    }
}

#if defined(__x86_64__)
#define BANKML_FAST(f) f
void q1_0_prepare(const void* x, detail::Prepared& p, size_t c0, size_t c1) {
    detail::q1_0_prepare(static_cast<const BlockQ8_0*>(x), p, c0, c1);
}
void q2_0_prepare(const void* x, detail::Prepared& p, size_t c0, size_t c1) {
    detail::q2_0_prepare(static_cast<const BlockQ8_0*>(x), p, c0, c1);
}
void f32_prepare(const void*, detail::Prepared&, size_t, size_t) {}  // the columns are read as they are
// One column reads the f16 values directly; several share their f32 widening.
void f16_prepare(const void* x, detail::Prepared& p, size_t c0, size_t c1) {
    detail::f16_prepare(static_cast<const uint16_t*>(x), p, c0, c1);
}
#else
#define BANKML_FAST(f) nullptr
#endif

// A type bankml knows only by its layout.
constexpr TypeTraits layout(Type t, const char* name, uint32_t block, uint32_t bytes) {
    return {t, name, block, bytes, t, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, -1};
}

constexpr TypeTraits TABLE[] = {
    // llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7; Q1_0 and Q2_0 as the tiny oracle files.
    {Type::F32, "f32", 1, 4, Type::F32, f32_from_float, f32_to_float,
     rows_ref<float, float, 1, 1, vec_dot_f32_ref>, BANKML_FAST(detail::f32_layout),
     BANKML_FAST(f32_prepare), BANKML_FAST(detail::f32_rows_fast), 0},
    {Type::F16, "f16", 1, 2, Type::F16, f16_from_float, f16_to_float,
     rows_ref<uint16_t, uint16_t, 1, 1, vec_dot_f16_ref>, BANKML_FAST(detail::f16_layout), BANKML_FAST(f16_prepare),
     BANKML_FAST(detail::f16_rows_fast), 1},
    layout(Type::Q4_0, "q4_0", 32, 18),
    layout(Type::Q4_1, "q4_1", 32, 20),
    layout(Type::Q5_0, "q5_0", 32, 22),
    layout(Type::Q5_1, "q5_1", 32, 24),
    {Type::Q8_0, "q8_0", QK8_0, sizeof(BlockQ8_0), Type::Q8_0, q8_0_from_float, nullptr, nullptr, nullptr, nullptr, nullptr, 7},
    layout(Type::Q8_1, "q8_1", 32, 36),
    layout(Type::Q2_K, "q2_K", 256, 84),
    layout(Type::Q3_K, "q3_K", 256, 110),
    layout(Type::Q4_K, "q4_K", 256, 144),
    layout(Type::Q5_K, "q5_K", 256, 176),
    layout(Type::Q6_K, "q6_K", 256, 210),
    layout(Type::Q8_K, "q8_K", 256, 292),
    layout(Type::IQ2_XXS, "iq2_xxs", 256, 66),
    layout(Type::IQ2_XS, "iq2_xs", 256, 74),
    layout(Type::IQ3_XXS, "iq3_xxs", 256, 98),
    layout(Type::IQ1_S, "iq1_s", 256, 50),
    layout(Type::IQ4_NL, "iq4_nl", 32, 18),
    layout(Type::IQ3_S, "iq3_s", 256, 110),
    layout(Type::IQ2_S, "iq2_s", 256, 82),
    layout(Type::IQ4_XS, "iq4_xs", 256, 136),
    layout(Type::I8, "i8", 1, 1),
    layout(Type::I16, "i16", 1, 2),
    layout(Type::I32, "i32", 1, 4),
    layout(Type::I64, "i64", 1, 8),
    layout(Type::F64, "f64", 1, 8),
    layout(Type::IQ1_M, "iq1_m", 256, 56),
    layout(Type::BF16, "bf16", 1, 2),
    layout(Type::TQ1_0, "tq1_0", 256, 54),
    layout(Type::TQ2_0, "tq2_0", 256, 66),
    layout(Type::MXFP4, "mxfp4", 32, 17),
    {Type::Q1_0, "q1_0", QK1_0, sizeof(BlockQ1_0), Type::Q8_0, nullptr, q1_0_to_float,
     rows_ref<BlockQ1_0, BlockQ8_0, QK1_0, QK8_0, vec_dot_q1_0_ref>, BANKML_FAST(detail::q1_0_layout), BANKML_FAST(q1_0_prepare),
     BANKML_FAST(detail::q1_0_rows_fast), 40},
    {Type::Q2_0, "q2_0", QK2_0, sizeof(BlockQ2_0), Type::Q8_0, nullptr, q2_0_to_float,
     rows_ref<BlockQ2_0, BlockQ8_0, QK2_0, QK8_0, vec_dot_q2_0_ref>, BANKML_FAST(detail::q2_0_layout), BANKML_FAST(q2_0_prepare),
     BANKML_FAST(detail::q2_0_rows_fast), 41},
};

}  // namespace

const TypeTraits* find_traits(uint32_t id) {
    for (const TypeTraits& t : TABLE)
        if (uint32_t(t.type) == id) return &t;
    return nullptr;
}

const TypeTraits& traits(Type t) {
    const TypeTraits* tt = find_traits(uint32_t(t));
    if (!tt) throw Error("quant::traits: unknown type " + std::to_string(uint32_t(t)));
    return *tt;
}

std::span<const TypeTraits> all_traits() { return TABLE; }

std::optional<Type> type_from_name(std::string_view name) {
    for (const TypeTraits& t : TABLE) {
        std::string_view n = t.name;
        if (n.size() == name.size() &&
            std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
            return t.type;
    }
    return std::nullopt;
}

size_t block_size(Type t) { return traits(t).block; }

size_t row_bytes(Type t, size_t cols) {
    const TypeTraits& tt = traits(t);
    return cols / tt.block * tt.block_bytes;
}

size_t act_bytes(Type t, size_t cols) { return row_bytes(traits(t).dot_type, cols); }

void check_cols(Type t, size_t cols, const char* caller) {
    const TypeTraits* tt = find_traits(uint32_t(t));
    if (!tt || !tt->rows_ref)
        throw Error(std::string(caller) + ": unsupported weight type " + std::to_string(uint32_t(t)));
    const size_t need = std::lcm(size_t(tt->block), size_t(traits(tt->dot_type).block));
    if (cols == 0 || cols % need != 0)
        throw Error(std::string(caller) + ": " + tt->name + " product with " + std::to_string(cols) +
                    " columns (wants a positive multiple of " + std::to_string(need) + ")");
}

}  // namespace bankml::quant
