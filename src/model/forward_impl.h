// The CPU forward pass's state, shared by forward.cpp (one sequence: a prompt in chunks, or a
// token) and forward_batch.cpp (one token of each of several sequences): the mapped weights, the
// pool, the key/value cache and the scratch of one chunk. Internal to src/model/.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned.h"
#include "model/forward.h"
#include "model/forward_gpu.h"
#include "model/layer.h"
#include "model/ops.h"
#include "model/products.h"
#include "par/pool.h"

namespace bankml::model {

// Tokens per pass through the layers: bounds the scratch (a prompt runs in chunks of this many,
// a batched decode step in groups of this many sequences).
inline constexpr size_t MAX_BATCH = 64;
// Whether attention of `work` (query, key) element products runs on the calling thread rather
// than over the pool: below what a pool run's wake-up and barrier cost, which the pool repays
// only as far as its threads share the work (so more threads take smaller attention).
inline constexpr size_t SMALL_ATTENTION = 1 << 17;
inline bool attention_here(size_t work, int threads) { return threads <= 1 || work * (size_t)threads < SMALL_ATTENTION; }

struct Model::Impl {
    gguf::File file;
    Hparams hp;
    std::vector<Layer> layers;
    Matrix tok_embd, output;
    const float* output_norm = nullptr;

    std::unique_ptr<par::Pool> pool;
    Products prod;
    std::unique_ptr<ops::Rope> rope;
    int n_ctx = 0, n_past = 0;
    bool kv_f32 = false;

    // The cache: [layer][kv head][position][head_dim], f16 or f32. Allocated without touching it,
    // so pages become resident only as positions are written.
    std::unique_ptr<uint16_t[]> k16, v16;
    std::unique_ptr<float[]> k32, v32;

    // Scratch for one chunk of up to MAX_BATCH (B) tokens, allocated once; token t's row at t·width.
    AlignedVector<float> x;        // [B][n_embd] the residual stream
    AlignedVector<float> xn;       // [B][n_embd] a normed x
    AlignedVector<float> q;        // [B][n_head·head_dim] queries
    AlignedVector<float> k, v;     // [B][n_head_kv·head_dim] this chunk's keys and values
    AlignedVector<float> att;      // [B][n_head·head_dim] attention's output
    AlignedVector<float> o;        // [B][n_embd] an output product, added to x
    AlignedVector<float> g, u, h;  // [B][n_ff] gate, up, and SwiGLU(gate, up)
    AlignedVector<float> rope_cs;  // [B][head_dim] each token's rope table (cos, sin pairs)
    AlignedVector<uint8_t> att_scratch;  // [threads] attention's per-thread scratch
    std::vector<float> batch_logits;  // a batched decode step's logits, one row per sequence

    // The card's forward pass, when one runs the decode. Then each cache holds what its device
    // computed: positions [0, cpu_upto) are valid in the CPU's, [0, card_upto) in the card's.
    // A token that arrives while the card rests (BANKML_GPU_LIMIT) runs on the CPU after the
    // positions it lacks are copied from the card, and the card gets the CPU's positions back
    // before its next token: a rest costs the copy of the few new positions, never a rebuild.
    // `history` holds every token so far so the CPU can rebuild what it lacks if the card fails.
    std::unique_ptr<GpuForward> gpu;
    std::vector<int32_t> history;
    int cpu_upto = 0, card_upto = 0;
    std::vector<float> gcs;  // one token's rope table for the card

    explicit Impl(gguf::File f) : file(std::move(f)) {}

    size_t kv_index(int il, int kvh, int pos) const {
        return (((size_t)il * hp.n_head_kv + kvh) * n_ctx + pos) * hp.head_dim;
    }

    void load();
    void alloc(const ModelOptions& opt);
    void run_chunk(const int32_t* tok, size_t n, float* logits, bool all_logits);
    void attention(int il, size_t t0, size_t n, int p0, bool heads = false);
    void store_head(int il, size_t j, float* qt, float* kt, const float* vt, const float* cs, int pos);
    void store_token(int il, float* qt, float* kt, const float* vt, const float* cs, int pos);
    void attend_head(int il, int hq, size_t n_kv, const float* qh, float* out, void* scratch) const;
    void eval_cpu(std::span<const int32_t> tokens, std::vector<float>& out, size_t out_at, bool all_logits);
    void eval_gpu(std::span<const int32_t> tokens, std::vector<float>& out, bool all_logits);
};

}  // namespace bankml::model
