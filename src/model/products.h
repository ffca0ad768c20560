// The forward pass's matrix products, through the CPU kernels: a weight matrix (used in place in the
// mapped file) times one activation column (decoding) or several (a prompt). Each output element
// is the same arithmetic whatever the batch or the thread count: the column is quantized to the
// matrix's dot type (Q8_0 for Q1_0/Q2_0, f16 for F16, as ggml's mul_mat does) and every row is one
// dot product in ggml's order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "par/pool.h"

namespace bankml::model {

struct Matrix {
    gguf::Type type = gguf::Type::F32;
    int64_t rows = 0, cols = 0;
    const uint8_t* data = nullptr;
    size_t row_bytes = 0;
};

// Another device that computes a leading share of a Q1_0 matrix's rows in a one-column product
// (gpu::Worker through src/cmd/gpu_offload.*: this module knows no card). Each row it returns must
// be the CPU kernel's exact dot product (the card proved that before it was offered here).
class Offload {
public:
    virtual ~Offload() = default;
    // Starts rows [0, k) of w (rows × cols Q1_0, row-major; `key` names the matrix for its
    // upload) times act_q8; returns k (0: nothing started). Throws on a device failure.
    virtual size_t begin(const void* key, const uint8_t* w, size_t rows, size_t cols, const uint8_t* act_q8) = 0;
    // Called after every begin(), once the CPU's rows are done (also when begin returned 0: the
    // offload times the whole product): waits for the started rows and writes them to out[0..k).
    virtual void finish(float* out) = 0;
    // False when the offload will take no row of this shape (decided for the CPU): the products
    // then use their grouped CPU path.
    virtual bool takes(size_t rows, size_t cols) const {
        (void)rows, (void)cols;
        return true;
    }
};

// Whether the products support a type: F32, and every type with a kernel in quant's table.
bool product_type_supported(gguf::Type t);
// Their names for messages: "f32, f16, q1_0 or q2_0".
std::string product_type_names();
// The same joined by `sep` (and `last` before the last one), upper case if asked: for help texts
// ("q1_0|q2_0|f16|f32" is product_type_names("|", "|")).
std::string product_type_names(const char* sep, const char* last, bool upper = false);

// Reusable scratch for the quantized activations, so that products allocate nothing per token.
class Products {
public:
    // Y[c*rows + r] = row r of W times column c of X (X[c*cols + k]), for c < n.
    void mm(par::Pool& pool, const Matrix& w, const float* x, size_t n, float* y);

    // Several matrices of one type and width times the same column(s) (Q, K, V; gate, up): the
    // columns are quantized and prepared once (quant::prepare_columns) and the rows of all the
    // matrices are shared out in one pool job, so that a decoded token or a prompt chunk waits for
    // one pool barrier per group instead of one per matrix. Every element has mm's bits.
    struct Out {
        const Matrix* w;
        float* y;
    };
    // make, where given, writes the values [v0, v1) of the one column x (n == 1) before they are
    // read: with the lane tables on the pool, a range of blocks by each worker as it quantizes
    // them (an elementwise step such as SwiGLU, in ranges of whole Q8_0 blocks); otherwise here,
    // the whole column first.
    using Make = par::FnRef<void(size_t, size_t)>;
    void group(par::Pool& pool, std::span<const Out> outs, const float* x, size_t n, const Make* make = nullptr);

    // With an offload, each Q1_0 one-column product gives it a leading share of its rows while
    // the pool computes the rest (same bits). A failure drops it (one stderr line) and the CPU
    // computes the whole product. Prompts (several columns) stay on the CPU.
    void set_offload(std::shared_ptr<Offload> o) { offload_ = std::move(o); }
    bool has_offload() const { return offload_ != nullptr; }

private:
    void offloaded(par::Pool& pool, std::span<const Out> outs, const float* x);
    // One column by Q1_0 matrices through the lane tables (quant/q1_0_lut.h), where the kernels'
    // level has AVX2 (the AVX2 decode at avx2 and avxvnni, the AVX-512 one above), every matrix's
    // rows are whole groups and BANKML_LANE_TABLES is not "off"; false: not taken.
    bool lane_tables(par::Pool& pool, std::span<const Out> outs, const float* x, const Make* make);
    // A Q1_0 matrix's decode layout, made on its first use and kept (the weights' bytes again).
    const uint8_t* decode_layout(par::Pool& pool, const Matrix& w);

    std::shared_ptr<Offload> offload_;
    std::vector<uint8_t> act_;  // the prepared activation columns (Q8_0 blocks or f16)
    std::map<const uint8_t*, std::unique_ptr<uint8_t[]>> decode_;  // by the matrix's data
    std::vector<float> tables_;  // one column's lane tables (64-byte aligned inside)
    std::vector<const uint8_t*> packed_;  // a group's decode layouts, in its order
};

// Row `row` of a matrix as f32 (the embedding lookup: ggml's get_rows dequantizes it).
void dequantize_row(const Matrix& w, int64_t row, float* out);

}  // namespace bankml::model
