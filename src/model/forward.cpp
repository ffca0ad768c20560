#include "model/forward.h"


#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <new>

#include "core/error.h"
#include "model/forward_gpu.h"
#include "model/forward_impl.h"
#include "model/layer.h"
#include "model/ops.h"
#include "model/products.h"
#include "par/pool.h"
#include "quant/blocks.h"

namespace bankml::model {

namespace {

std::string shape_str(std::initializer_list<int64_t> s) {
    std::string r = "[";
    for (int64_t v : s) r += (r.size() > 1 ? ", " : "") + std::to_string(v);
    return r + "]";
}

// A tensor that must exist with exactly this shape.
const gguf::Tensor& expect(const gguf::File& f, const std::string& name, std::initializer_list<int64_t> shape) {
    const gguf::Tensor* t = f.find(name);
    if (!t) throw Error(f.path() + ": missing tensor " + name);
    bool ok = t->n_dims == shape.size();
    size_t i = 0;
    for (int64_t v : shape) ok = ok && t->ne[i++] == v;
    for (; i < 4; i++) ok = ok && t->ne[i] == 1;
    if (!ok)
        throw Error(f.path() + ": tensor " + name + " has shape " + t->shape_string() + ", expected " +
                    shape_str(shape));
    return *t;
}

const float* norm_weight(const gguf::File& f, const std::string& name, int64_t n) {
    const gguf::Tensor& t = expect(f, name, {n});
    if (t.type != gguf::Type::F32)
        throw Error(f.path() + ": tensor " + name + " has type " + gguf::type_name(t.type) + ", expected f32");
    if (reinterpret_cast<uintptr_t>(t.data) % alignof(float))
        throw Error(f.path() + ": tensor " + name + " is not 4-byte aligned");
    return reinterpret_cast<const float*>(t.data);
}

Matrix matrix(const gguf::File& f, const std::string& name, int64_t cols, int64_t rows) {
    const gguf::Tensor& t = expect(f, name, {cols, rows});
    if (!product_type_supported(t.type))
        throw Error(f.path() + ": tensor " + name + " has type " + gguf::type_name(t.type) +
                    ", expected " + product_type_names());
    const gguf::TypeInfo* ti = gguf::type_info((uint32_t)t.type);
    // Rows split into the type's blocks and its dot type's; and into Q8_0 blocks whatever the type,
    // since a width is shared by matrices of every type the model mixes.
    const gguf::TypeInfo* dot = ti ? gguf::type_info((uint32_t)ti->dot_type) : nullptr;
    if (!ti || !dot || cols % ti->block != 0 || cols % dot->block != 0 || cols % (int64_t)quant::QK8_0 != 0)
        throw Error(f.path() + ": tensor " + name + " has rows of " + std::to_string(cols) +
                    " weights, not a multiple of the block size");
    if (t.type == gguf::Type::F32 && reinterpret_cast<uintptr_t>(t.data) % alignof(float))
        throw Error(f.path() + ": tensor " + name + " is not 4-byte aligned");
    Matrix m;
    m.type = t.type;
    m.rows = rows;
    m.cols = cols;
    m.data = t.data;
    m.row_bytes = (size_t)gguf::row_bytes(t.type, cols);
    return m;
}

int meta_int(const gguf::File& f, const std::string& key, int64_t lo, int64_t hi) {
    const int64_t v = f.require_i64(key);
    if (v < lo || v > hi)
        throw Error(f.path() + ": metadata " + key + " = " + std::to_string(v) + " is out of range [" +
                    std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return (int)v;
}

}  // namespace

void Model::Impl::load() {
    const gguf::File& f = file;
    auto arch = f.require_str("general.architecture");
    if (arch != "qwen3")
        throw Error(f.path() + ": general.architecture is '" + std::string(arch) + "', bankml runs qwen3");
    hp.n_embd = meta_int(f, "qwen3.embedding_length", 1, 1 << 20);
    hp.n_layer = meta_int(f, "qwen3.block_count", 1, 4096);
    hp.n_head = meta_int(f, "qwen3.attention.head_count", 1, 4096);
    hp.n_head_kv = f.has("qwen3.attention.head_count_kv") ? meta_int(f, "qwen3.attention.head_count_kv", 1, 4096)
                                                          : hp.n_head;
    if (hp.n_head % hp.n_head_kv)
        throw Error(f.path() + ": qwen3.attention.head_count " + std::to_string(hp.n_head) +
                    " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
    hp.head_dim = f.has("qwen3.attention.key_length") ? meta_int(f, "qwen3.attention.key_length", 2, 4096)
                                                      : hp.n_embd / hp.n_head;
    if (f.has("qwen3.attention.value_length") &&
        meta_int(f, "qwen3.attention.value_length", 1, 4096) != hp.head_dim)
        throw Error(f.path() + ": qwen3.attention.value_length differs from key_length");
    if (hp.head_dim % 2) throw Error(f.path() + ": qwen3.attention.key_length must be even");
    // llama.cpp's qwen3 graph rotates whole heads (n_rot == head_dim) and asserts it.
    if (f.has("qwen3.rope.dimension_count") &&
        meta_int(f, "qwen3.rope.dimension_count", 1, 4096) != hp.head_dim)
        throw Error(f.path() + ": qwen3.rope.dimension_count differs from the head size " +
                    std::to_string(hp.head_dim) + " (partial rotary embedding is not qwen3)");
    hp.n_ff = meta_int(f, "qwen3.feed_forward_length", 1, 1 << 22);
    // Present but 0 or negative is a broken file, not a context of one token.
    hp.n_ctx_train = f.has("qwen3.context_length") ? meta_int(f, "qwen3.context_length", 1, INT32_MAX) : 4096;
    hp.rms_eps = f.get_f32("qwen3.attention.layer_norm_rms_epsilon").value_or(1e-6f);
    hp.rope_base = f.get_f32("qwen3.rope.freq_base").value_or(10000.0f);
    if (!(hp.rms_eps >= 0.0f) || !(hp.rope_base > 0.0f) || !std::isfinite(hp.rope_base))
        throw Error(f.path() + ": bad RMS epsilon or rope base");

    const gguf::Tensor* te = f.find("token_embd.weight");
    if (!te) throw Error(f.path() + ": missing tensor token_embd.weight");
    if (te->ne[1] < 1 || te->ne[1] > (1 << 24))
        throw Error(f.path() + ": tensor token_embd.weight has shape " + te->shape_string());
    hp.n_vocab = (int)te->ne[1];
    const int64_t E = hp.n_embd, D = hp.head_dim, NQ = (int64_t)hp.n_head * D, NKV = (int64_t)hp.n_head_kv * D;
    tok_embd = matrix(f, "token_embd.weight", E, hp.n_vocab);
    output_norm = norm_weight(f, "output_norm.weight", E);
    hp.tied_output = f.find("output.weight") == nullptr;
    output = hp.tied_output ? tok_embd : matrix(f, "output.weight", E, hp.n_vocab);
    hp.n_params = E * hp.n_vocab * (hp.tied_output ? 1 : 2) + E;
    layers.resize((size_t)hp.n_layer);
    for (int il = 0; il < hp.n_layer; il++) {
        const std::string p = "blk." + std::to_string(il) + ".";
        Layer& L = layers[(size_t)il];
        L.attn_norm = norm_weight(f, p + "attn_norm.weight", E);
        L.wq = matrix(f, p + "attn_q.weight", E, NQ);
        L.wk = matrix(f, p + "attn_k.weight", E, NKV);
        L.wv = matrix(f, p + "attn_v.weight", E, NKV);
        L.q_norm = norm_weight(f, p + "attn_q_norm.weight", D);
        L.k_norm = norm_weight(f, p + "attn_k_norm.weight", D);
        L.wo = matrix(f, p + "attn_output.weight", NQ, E);
        L.ffn_norm = norm_weight(f, p + "ffn_norm.weight", E);
        L.gate = matrix(f, p + "ffn_gate.weight", E, hp.n_ff);
        L.up = matrix(f, p + "ffn_up.weight", E, hp.n_ff);
        L.down = matrix(f, p + "ffn_down.weight", hp.n_ff, E);
        hp.n_params += 2 * E + 2 * D + E * (NQ + 2 * NKV) + NQ * E + 3 * E * hp.n_ff;
    }
    rope = std::make_unique<ops::Rope>(hp.head_dim, hp.rope_base);
}

void Model::Impl::alloc(const ModelOptions& opt) {
    pool = std::make_unique<par::Pool>(opt.threads > 0 ? opt.threads : par::Pool::env_threads());
    if (opt.ctx < 0) throw UsageError("context size " + std::to_string(opt.ctx) + " is negative");
    n_ctx = opt.ctx > 0 ? opt.ctx : (int)std::min<int64_t>(hp.n_ctx_train, 4096);
    if (n_ctx < 1) n_ctx = 1;
    kv_f32 = opt.kv_f32;
    const size_t kv_elems = (size_t)hp.n_layer * hp.n_head_kv * (size_t)n_ctx * hp.head_dim;
    try {
        if (kv_f32) {
            k32.reset(new float[kv_elems]);
            v32.reset(new float[kv_elems]);
        } else {
            k16.reset(new uint16_t[kv_elems]);
            v16.reset(new uint16_t[kv_elems]);
        }
    } catch (const std::bad_alloc&) {
        throw Error("cannot allocate the key/value cache for a context of " + std::to_string(n_ctx) + " (" +
                    std::to_string(2 * kv_elems * (kv_f32 ? 4 : 2) >> 20) + " MiB)");
    }
    const size_t E = hp.n_embd, NQ = (size_t)hp.n_head * hp.head_dim, NKV = (size_t)hp.n_head_kv * hp.head_dim;
    x.resize(MAX_BATCH * E);
    xn.resize(MAX_BATCH * E);
    o.resize(MAX_BATCH * E);
    q.resize(MAX_BATCH * NQ);
    att.resize(MAX_BATCH * NQ);
    k.resize(MAX_BATCH * NKV);
    v.resize(MAX_BATCH * NKV);
    g.resize(MAX_BATCH * (size_t)hp.n_ff);
    u.resize(MAX_BATCH * (size_t)hp.n_ff);
    h.resize(MAX_BATCH * (size_t)hp.n_ff);
    rope_cs.resize(MAX_BATCH * (size_t)hp.head_dim);
    att_scratch.resize((size_t)pool->threads() * ops::attend_scratch_bytes((size_t)hp.head_dim) + 64);
}

// One token's head j of Q and K (j < n_head: query head j; else key head j - n_head) normed and
// rotated in place, a key head written to the cache at `pos` with its value head (q: n_head heads,
// k and v: n_head_kv heads of head_dim values). Each head is its own: any order, any thread.
void Model::Impl::store_head(int il, size_t j, float* qt, float* kt, const float* vt, const float* cs, int pos) {
    const size_t D = hp.head_dim, NH = hp.n_head;
    const Layer& L = layers[(size_t)il];
    if (j < NH) {
        float* qh = qt + j * D;
        ops::rms_norm_mul(qh, L.q_norm, qh, D, hp.rms_eps);
        rope->apply(qh, cs);
        return;
    }
    const size_t hk = j - NH;
    float* kh = kt + hk * D;
    const float* vh = vt + hk * D;
    ops::rms_norm_mul(kh, L.k_norm, kh, D, hp.rms_eps);
    rope->apply(kh, cs);
    const size_t at = kv_index(il, (int)hk, pos);
    if (kv_f32) {
        std::memcpy(k32.get() + at, kh, D * sizeof(float));
        std::memcpy(v32.get() + at, vh, D * sizeof(float));
    } else {
        ops::round_f16(kh, k16.get() + at, D);
        ops::round_f16(vh, v16.get() + at, D);
    }
}

void Model::Impl::store_token(int il, float* qt, float* kt, const float* vt, const float* cs, int pos) {
    for (size_t j = 0; j < (size_t)(hp.n_head + hp.n_head_kv); j++) store_head(il, j, qt, kt, vt, cs, pos);
}

// Query head hq of one token over the first n_kv cached positions of layer il.
void Model::Impl::attend_head(int il, int hq, size_t n_kv, const float* qh, float* out, void* scratch) const {
    const size_t D = (size_t)hp.head_dim;
    const float scale = 1.0f / sqrtf((float)hp.head_dim);
    const size_t base = kv_index(il, hq / (hp.n_head / hp.n_head_kv), 0);
    if (kv_f32)
        ops::attend_f32(qh, k32.get() + base, v32.get() + base, n_kv, D, scale, out, scratch);
    else
        ops::attend_f16(qh, k16.get() + base, v16.get() + base, n_kv, D, scale, out, scratch);
}

// Attention of the chunk's tokens t0..n-1 (positions p0+t, already in the cache) for layer il, into
// rows 0..n-t0-1 of att: one job per (token, query head), spread over the pool; each job's
// arithmetic is fixed. heads (one token, n = 1): its heads are normed, rotated and cached first, in
// the same pool run (store_head), and every worker waits for all of them before attending.
void Model::Impl::attention(int il, size_t t0, size_t n, int p0, bool heads) {
    const size_t D = (size_t)hp.head_dim, NH = (size_t)hp.n_head, NKV = (size_t)hp.n_head_kv;
    const size_t jobs = (n - t0) * NH;
    // A decoded token over a short cache is less work than a pool barrier: run it here.
    const bool here = attention_here(jobs * ((size_t)p0 + n) * D, pool->threads());
    const int workers = here ? 1 : pool->threads();
    std::atomic<size_t> next{0}, next_head{0};
    par::Phases stored(workers);
    auto work = [&](int worker) {
        if (heads)
            stored.first([&] {
                for (size_t j; (j = next_head.fetch_add(1, std::memory_order_relaxed)) < NH + NKV;)
                    store_head(il, j, q.data(), k.data(), v.data(), rope_cs.data(), p0);
            });
        void* scratch = att_scratch.data() + (size_t)worker * ops::attend_scratch_bytes(D);
        for (size_t j; (j = next.fetch_add(1, std::memory_order_relaxed)) < jobs;) {
            const size_t row = j / NH, t = t0 + row, hq = j % NH;
            attend_head(il, (int)hq, (size_t)p0 + t + 1, q.data() + t * NH * D + hq * D,
                        att.data() + row * NH * D + hq * D, scratch);
        }
    };
    if (here) work(0);
    else pool->run(work);
}

void Model::Impl::run_chunk(const int32_t* tok, size_t n, float* logits, bool all_logits) {
    const size_t E = hp.n_embd, D = hp.head_dim, NH = hp.n_head, NKV = hp.n_head_kv, FF = hp.n_ff;
    const int p0 = n_past;
    par::Pool& P = *pool;
    for (size_t t = 0; t < n; t++) {
        dequantize_row(tok_embd, tok[t], x.data() + t * E);
        rope->cache(p0 + (int64_t)t, rope_cs.data() + t * D);
    }
    // A prompt's per-token steps (norms, rope and the cache, SwiGLU) over the pool, a token per
    // item: each token's arithmetic is its own, so the bits are the same; one token runs here.
    auto per_token = [&](size_t rows, auto&& f) {
        if (rows == 1) return f(size_t(0));
        P.chunks(rows, 1, [&](size_t t0, size_t t1) {
            for (size_t t = t0; t < t1; t++) f(t);
        });
    };
    // The residual stream x gains each block's output o (o + x, float adds) in the next norm's
    // per-token step: over the pool with it, a token per item.
    auto add_and_norm = [&](size_t rows, bool add, const float* w) {
        per_token(rows, [&](size_t t) {
            float* xt = x.data() + t * E;
            if (add)
                for (size_t i = 0; i < E; i++) xt[i] = o[t * E + i] + xt[i];
            ops::rms_norm_mul(xt, w, xn.data() + t * E, E, hp.rms_eps);
        });
    };
    for (int il = 0; il < hp.n_layer; il++) {
        const Layer& L = layers[(size_t)il];
        add_and_norm(n, il > 0, L.attn_norm);  // the previous layer's down product added
        const Products::Out qkv[] = {{&L.wq, q.data()}, {&L.wk, k.data()}, {&L.wv, v.data()}};
        prod.group(P, qkv, xn.data(), n);
        // One token attended in this layer: its heads are made in attention's pool run.
        const bool heads_in_attention = n == 1 && !(il == hp.n_layer - 1 && !logits);
        if (!heads_in_attention)
            per_token(n, [&](size_t t) {
                store_token(il, q.data() + t * NH * D, k.data() + t * NKV * D, v.data() + t * NKV * D,
                            rope_cs.data() + t * D, p0 + (int)t);
            });
        // In the last layer only the rows whose logits are wanted matter past this point (the
        // cache already holds every token's K and V): llama.cpp's inp_out_ids. Rows are
        // independent, so the kept rows' bits do not change.
        size_t rows = n;
        if (il == hp.n_layer - 1 && !(logits && all_logits)) {
            if (!logits) break;
            rows = 1;
            std::memmove(x.data(), x.data() + (n - 1) * E, E * sizeof(float));
        }
        attention(il, n - rows, n, p0, heads_in_attention);
        const Products::Out wo[] = {{&L.wo, o.data()}};
        prod.group(P, wo, att.data(), rows);
        add_and_norm(rows, true, L.ffn_norm);
        const Products::Out gate_up[] = {{&L.gate, g.data()}, {&L.up, u.data()}};
        prod.group(P, gate_up, xn.data(), rows);
        const Products::Out down[] = {{&L.down, o.data()}};
        if (rows == 1) {
            // One token: SwiGLU made by the down product's workers, each on the values it quantizes
            // (elementwise, in whole blocks: the same bits).
            auto swiglu_range = [&](size_t i0, size_t i1) { ops::swiglu(g.data() + i0, u.data() + i0, h.data() + i0, i1 - i0); };
            const Products::Make swiglu(swiglu_range);
            prod.group(P, down, h.data(), 1, &swiglu);
        } else {
            per_token(rows, [&](size_t t) { ops::swiglu(g.data() + t * FF, u.data() + t * FF, h.data() + t * FF, FF); });
            prod.group(P, down, h.data(), rows);
        }
    }
    // Logits: every token's (rows 0..n-1 of x), or only the last one's (moved to row 0), after the
    // last layer's down product is added.
    if (logits) {
        const size_t rows = all_logits ? n : 1;
        add_and_norm(rows, hp.n_layer > 0, output_norm);
        const Products::Out out[] = {{&output, logits}};
        prod.group(P, out, xn.data(), rows);
    }
    n_past += (int)n;
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::open(const std::string& path, const ModelOptions& opt) {
    auto impl = std::make_unique<Impl>(gguf::File::open(path));
    impl->load();
    impl->alloc(opt);
    return std::unique_ptr<Model>(new Model(std::move(impl)));
}

int Model::n_vocab() const { return impl_->hp.n_vocab; }
int Model::n_ctx() const { return impl_->n_ctx; }
int Model::n_past() const { return impl_->n_past; }
void Model::set_offload(std::shared_ptr<Offload> o) { impl_->prod.set_offload(std::move(o)); }
bool Model::has_offload() const { return impl_->prod.has_offload(); }
bool Model::has_q1_0() const {
    for (const auto& t : impl_->file.tensors())
        if (t.type == gguf::Type::Q1_0) return true;
    return false;
}
int Model::threads() const { return impl_->pool->threads(); }
const Hparams& Model::hparams() const { return impl_->hp; }
const gguf::File& Model::file() const { return impl_->file; }
void Model::reset() {
    impl_->n_past = 0;
    impl_->history.clear();
    impl_->cpu_upto = impl_->card_upto = 0;
}

void Model::Impl::eval_cpu(std::span<const int32_t> tokens, std::vector<float>& out, size_t out_at, bool all_logits) {
    const size_t V = (size_t)hp.n_vocab;
    for (size_t i = 0; i < tokens.size(); i += MAX_BATCH) {
        const size_t n = std::min(MAX_BATCH, tokens.size() - i);
        const bool last = i + n == tokens.size();
        float* dst = all_logits ? out.data() + (out_at + i) * V : (last && !out.empty() ? out.data() : nullptr);
        run_chunk(tokens.data() + i, n, dst, all_logits);
    }
}

// Token by token on the card, or on the CPU while the card rests. A failure hands the rest to the
// CPU with the same bits: its cache is completed from the tokens so far, then it runs the tokens
// the card did not.
void Model::Impl::eval_gpu(std::span<const int32_t> tokens, std::vector<float>& out, bool all_logits) {
    const size_t V = (size_t)hp.n_vocab;
    for (size_t i = 0; i < tokens.size(); i++) {
        const bool last = i + 1 == tokens.size();
        float* dst = all_logits ? out.data() + i * V : (last ? out.data() : nullptr);
        gpu::CardUse& use = gpu->use();
        // A rest runs the token on the CPU where the card's cache can be copied; where it cannot
        // (not host-visible), the rest is waited out rather than paid with a rebuild.
        bool on_cpu = false;
        if (use.resting()) {
            on_cpu = gpu->copy_cache(false, cpu_upto, n_past, k16.get(), v16.get());
            while (!on_cpu && use.resting()) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        if (on_cpu) {
            run_chunk(tokens.data() + i, 1, dst, false);  // n_past advances
            cpu_upto = n_past;
            history.push_back(tokens[i]);
            use.tokens_on_cpu_resting++;
            continue;
        }
        try {
            if (card_upto < n_past && !gpu->copy_cache(true, card_upto, n_past, k16.get(), v16.get()))
                throw Error("the card's cache is not host-visible");
            card_upto = n_past;
            rope->cache(n_past, gcs.data());
            const auto t0 = std::chrono::steady_clock::now();
            gpu->step(tokens[i], gcs.data(), n_past, dst);
            const double us = gpu->last_token_us();
            use.ran(us > 0 ? us * 1e-6 : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            use.tokens_on_card++;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "bankml: GPU: %s failed (%s); the CPU continues with the same tokens\n",
                         gpu->device().c_str(), e.what());
            gpu.reset();
            // The CPU's cache holds [0, cpu_upto): it computes the positions after from history.
            const std::vector<int32_t> done(history.begin() + cpu_upto, history.end());
            history.clear();
            n_past = cpu_upto;
            std::vector<float> none;
            if (!done.empty()) eval_cpu(done, none, 0, false);
            eval_cpu(tokens.subspan(i), out, i, all_logits);
            return;
        }
        history.push_back(tokens[i]);
        n_past++;
        card_upto = n_past;
    }
}

void Model::eval_into(std::span<const int32_t> tokens, std::vector<float>& out, bool all_logits) {
    Impl& m = *impl_;
    if (tokens.empty()) throw Error("eval: no tokens");
    for (size_t i = 0; i < tokens.size(); i++)
        if (tokens[i] < 0 || tokens[i] >= m.hp.n_vocab)
            throw Error("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                        " is out of range [0, " + std::to_string(m.hp.n_vocab) + ")");
    if ((size_t)m.n_past + tokens.size() > (size_t)m.n_ctx)
        throw Error("context full: " + std::to_string(m.n_past) + " cached + " + std::to_string(tokens.size()) +
                    " new tokens exceed the context of " + std::to_string(m.n_ctx));
    const size_t V = (size_t)m.hp.n_vocab;
    out.resize(all_logits ? tokens.size() * V : V);
    if (m.gpu) return m.eval_gpu(tokens, out, all_logits);
    m.eval_cpu(tokens, out, 0, all_logits);
}

std::string Model::use_gpu(gpu::Gpu card, const gpu::ops::Build& build, bool q1_0_native) {
    Impl& m = *impl_;
    if (m.n_past) throw Error("the card takes a model before its first token");
    if (m.kv_f32) throw Error("an f32 cache was asked for (the card keeps an f16 cache)");
    GpuModel gm{&m.hp, m.layers, &m.output, m.output_norm, m.n_ctx, &m.tok_embd};
    m.gpu = std::make_unique<GpuForward>(std::move(card), gm, build, q1_0_native);
    m.gcs.resize((size_t)m.hp.head_dim);
    m.history.clear();
    m.cpu_upto = m.card_upto = 0;
    char line[256];
    std::snprintf(line, sizeof line, "%s runs the model (%.2f GiB weights, %.2f GiB cache)", m.gpu->device().c_str(),
                  double(m.gpu->weight_bytes()) / (1 << 30), double(m.gpu->cache_bytes()) / (1 << 30));
    return line;
}

bool Model::on_gpu() const { return impl_->gpu != nullptr; }
uint64_t Model::gpu_bytes() const {
    const Impl& m = *impl_;
    return GpuForward::bytes_for(GpuModel{&m.hp, m.layers, &m.output, m.output_norm, m.n_ctx, &m.tok_embd});
}
std::string Model::device() const { return impl_->gpu ? impl_->gpu->device() : std::string(); }
GpuForward* Model::gpu_forward() { return impl_->gpu.get(); }

std::vector<float> Model::eval(std::span<const int32_t> tokens, bool all_logits) {
    std::vector<float> out;
    eval_into(tokens, out, all_logits);
    return out;
}

}  // namespace bankml::model
