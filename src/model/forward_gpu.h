// The qwen3 decode on the card, one token at a time, with the CPU forward pass's bits: the weights
// uploaded once into the card's memory, the f16 cache on the card, and every layer recorded once
// into one sequence of dispatches that is submitted once per token. What changes per token (the
// token id, the position, the rope table) is written into a small host-visible buffer before the
// submission; the sequence's first step dequantizes the token's embedding row from token_embd on
// the card (embed_q1_0, embed_q2_0, embed_f16: the CPU's bits); the logits come back in
// host-cached memory.
//
// The CPU keeps what needs no card: the rope table (cosf/sinf, as ops::Rope::cache computes
// them), so no transcendental but expf is evaluated on the card, and that one as the C library
// does (gpu::ops); and the embedding row of a token_embd type without a kernel on the card, which
// it dequantizes into the card's input.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "gpu/compute.h"
#include "gpu/limiter.h"
#include "gpu/op_kernels.h"
#include "model/forward.h"
#include "model/layer.h"

namespace bankml::model {

struct GpuModel {
    const Hparams* hp = nullptr;
    std::span<const Layer> layers;
    const Matrix* output = nullptr;
    const float* output_norm = nullptr;
    int n_ctx = 0;
    const Matrix* tok_embd = nullptr;  // the same matrix as output where they are tied
};

class GpuForward {
public:
    // Uploads the model and records its sequence; throws bankml::Error with the reason the card
    // cannot run it (a matrix type without a kernel, a head size the kernels do not take, memory,
    // or more than BANKML_GPU_LIMIT of the card's memory: checked before the upload against
    // bytes_for() and after it against what the buffers hold).
    GpuForward(gpu::Gpu gpu, const GpuModel& m, const gpu::ops::Build& build, bool q1_0_native);
    ~GpuForward();

    // One token at position pos: its id (in [0, n_vocab)), cs the rope table for pos (head_dim
    // floats). logits: n_vocab floats, or nullptr when nobody reads them.
    void step(int32_t token, const float* cs, int pos, float* logits);

    const std::string& device() const;
    // Bytes of weights and of cache on the card.
    uint64_t weight_bytes() const;
    uint64_t cache_bytes() const;
    // Dispatches per token.
    size_t dispatches() const;
    // Whether the token runs the guarded build (a card that flushes f32 subnormals), the tokens
    // run, and how many of them ran again with the exact build because the guard's flag was up.
    bool guarded() const;
    size_t tokens() const;
    size_t replays() const;
    // Whether flags came often enough that the guarded token now runs the exact attention.
    bool attention_exact() const;
    // What the model takes on a card (weights as packed, cache, activations, logits), estimated
    // from its shapes without a card: the upload's own total is within a few percent of it.
    static uint64_t bytes_for(const GpuModel& m);
    // The card's limiter (BANKML_GPU_LIMIT): the caller asks resting() before each token, reports
    // each token's card time with ran(), and counts tokens for gpu::status().
    gpu::CardUse& use();
    // The card's own time for the last token (its timestamps), in microseconds; negative where
    // the queue has none.
    double last_token_us() const;
    // Copies positions [p0, p1) of every layer's and KV head's cache between the card and the
    // host's f16 cache (k, v as the CPU forward pass lays them out: [layer][kv head][position]
    // [head_dim] over the same n_ctx positions). False where the card's cache is not host-visible.
    bool copy_cache(bool to_card, int p0, int p1, uint16_t* k, uint16_t* v);
    // Tests: the step numbered `at` (0: the next) fails as `what` says ("device lost", "out of
    // memory", "submit") before it reaches the card, or ("subnormal") raises the guard's flag
    // after its guarded run, so that the exact build runs it again ("subnormals": at that step
    // and every guarded step after it; "subnormal burst": at that step and the next three).
    void inject_failure(int at, const std::string& what);

    struct Impl;

private:
    std::unique_ptr<Impl> d_;
};

}  // namespace bankml::model
