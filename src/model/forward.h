// The qwen3 forward pass on the CPU, with llama.cpp's bits: embedding row, then per layer RMS norm,
// Q/K/V products, per-head RMS norm of Q and K, NEOX rotary embedding, flash attention over an f16
// cache (grouped heads, causal), output product and residual; RMS norm, gated SiLU feed-forward and
// residual; final norm and the output product (the output matrix or the tied token embedding).
// Every product goes through the kernels one token column at a time (mat-vec) or several (a
// prompt), with the same per-element arithmetic, so a token's logits do not depend on the batch or
// the thread count. Weights stay in the mapped file.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu/compute.h"
#include "gpu/op_kernels.h"
#include "model/gguf.h"
#include "model/products.h"

namespace bankml::model {

class GpuForward;
struct DecodeSeq;

struct ModelOptions {
    int threads = 0;  // 0: Pool::from_env()
    int ctx = 0;      // 0: min(file's, 4096)
    bool kv_f32 = false;
};

// The dimensions of a qwen3 model, from its metadata and tensors.
struct Hparams {
    int n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
    int64_t n_ctx_train = 0;
    float rms_eps = 1e-6f, rope_base = 10000.0f;
    bool tied_output = false;
    // Parameters of the matrices and norms (the count llama-bench prints).
    int64_t n_params = 0;
};

class Model {
public:
    // Opens and checks a qwen3 GGUF: every tensor present with its shape and a supported type, else
    // a bankml::Error naming the file and the tensor.
    static std::unique_ptr<Model> open(const std::string& path, const ModelOptions& opt);
    ~Model();

    int n_vocab() const;
    int n_ctx() const;
    int n_past() const;
    int threads() const;
    const Hparams& hparams() const;
    const gguf::File& file() const;
    void reset();
    // Gives Q1_0 one-column products (decoding) an offload (a verified card: see Products), or
    // none (nullptr). Every bit stays the CPU's.
    void set_offload(std::shared_ptr<Offload> o);
    bool has_offload() const;
    // Whether any matrix of the model is Q1_0 (whether an offload could take anything).
    bool has_q1_0() const;

    // Hands decoding to a card (model/forward_gpu.h): every later token runs there, the CPU's
    // bits. Returns "NVIDIA H200 runs the model (1.07 GiB weights, 0.60 GiB cache)"; throws
    // bankml::Error with the reason the card cannot run this model (then nothing changed).
    std::string use_gpu(gpu::Gpu card, const gpu::ops::Build& build, bool q1_0_native);
    bool on_gpu() const;
    // What the whole-token forward pass would take on a card (GpuForward::bytes_for).
    uint64_t gpu_bytes() const;
    std::string device() const;  // the card's name, "" on the CPU
    GpuForward* gpu_forward();   // tests: the card's forward pass, or nullptr

    // Runs tokens at positions n_past().., appending them to the cache. Returns the last token's
    // logits (n_vocab floats), or with all_logits every token's (tokens.size() * n_vocab).
    // Throws bankml::Error on a token id out of range or a full context.
    std::vector<float> eval(std::span<const int32_t> tokens, bool all_logits = false);
    // The same into the caller's vector (resized to fit): a decode loop that keeps one vector
    // allocates nothing per token.
    void eval_into(std::span<const int32_t> tokens, std::vector<float>& logits, bool all_logits = false);

    struct Impl;

private:
    friend void decode_batch(std::span<const DecodeSeq> seqs);
    explicit Model(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// One pass of several sequences through the model, each a Model with its own cache and position
// (the models open on the same file): the decoded token of each generating sequence, and pieces of
// prompts, together. Every matrix product runs once over all their tokens, one column per token, so
// N streams read and decode each weight row once per step instead of N times. A column's bits do
// not depend on the others, nor a prompt's on where it is cut, so each sequence gets the logits
// its own eval_into() would give (forward_batch.cpp). Models run by a card evaluate alone, on the
// card. Checks every sequence (token ids, room in its context, same file, no model twice) before
// it changes anything; throws bankml::Error naming the first that fails.
struct DecodeSeq {
    Model* model = nullptr;
    std::span<const int32_t> tokens;       // appended at the model's n_past()
    std::vector<float>* logits = nullptr;  // the last token's (resized to n_vocab); null: none wanted
};
void decode_batch(std::span<const DecodeSeq> seqs);

}  // namespace bankml::model
