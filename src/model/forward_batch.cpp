// The batched decode step: one new token for each of n sequences, each with its own cache and
// position, through the layers together. Row t of the scratch is sequence t's token; the products
// take the n rows as n columns (mat_mat), which gives each column mat_vec's bits, and everything
// else is per row, with the row's own model (its cache, its position) where the sequences differ:
//
//   x[t] = embedding(token[t])                                      [n, n_embd]
//   per layer: xn = rms_norm(x) * attn_norm
//              q, k, v = xn Wq, xn Wk, xn Wv                         [n, heads * head_dim]
//              per t: norm and rotate q[t], k[t] at position p[t], k[t], v[t] into cache[t]
//              att[t] = attention of q[t] over cache[t][0..p[t]]
//              x += att Wo;  x += down(silu(xn Wgate) * (xn Wup)) with xn = rms_norm(x) * ffn_norm
//   logits[t] = rms_norm(x[t]) * output_norm . Woutput            [n, n_vocab]
//
// The weights, pool and scratch are the first sequence's model's: all models map the same file.
#include <atomic>
#include <cstring>
#include <string>

#include "core/error.h"
#include "model/forward.h"
#include "model/forward_impl.h"

namespace bankml::model {

namespace {

using Impl = Model::Impl;

bool same_shape(const Hparams& a, const Hparams& b) {
    return a.n_embd == b.n_embd && a.n_layer == b.n_layer && a.n_head == b.n_head && a.n_head_kv == b.n_head_kv &&
           a.head_dim == b.head_dim && a.n_ff == b.n_ff && a.n_vocab == b.n_vocab && a.n_params == b.n_params &&
           a.tied_output == b.tied_output && a.rms_eps == b.rms_eps && a.rope_base == b.rope_base;
}

// Up to MAX_BATCH sequences (all on the CPU, checked) through the layers on lead's weights.
void step(Impl& lead, Impl* const* ms, const int32_t* tok, std::vector<float>* const* logits, size_t n) {
    const Hparams& hp = lead.hp;
    const size_t E = hp.n_embd, D = hp.head_dim, NH = hp.n_head, NKV = hp.n_head_kv, FF = hp.n_ff,
                 V = hp.n_vocab;
    par::Pool& P = *lead.pool;
    float *x = lead.x.data(), *xn = lead.xn.data(), *q = lead.q.data(), *k = lead.k.data(), *v = lead.v.data(),
          *att = lead.att.data(), *o = lead.o.data(), *g = lead.g.data(), *u = lead.u.data(), *h = lead.h.data(),
          *cs = lead.rope_cs.data();
    size_t kv_total = 0;  // cached positions the attention reads, over all sequences
    for (size_t t = 0; t < n; t++) {
        dequantize_row(lead.tok_embd, tok[t], x + t * E);
        lead.rope->cache(ms[t]->n_past, cs + t * D);
        kv_total += (size_t)ms[t]->n_past + 1;
    }
    for (int il = 0; il < hp.n_layer; il++) {
        const Layer& L = lead.layers[(size_t)il];
        for (size_t t = 0; t < n; t++) ops::rms_norm_mul(x + t * E, L.attn_norm, xn + t * E, E, hp.rms_eps);
        const Products::Out qkv[] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
        lead.prod.group(P, qkv, xn, n);
        for (size_t t = 0; t < n; t++)
            ms[t]->store_token(il, q + t * NH * D, k + t * NKV * D, v + t * NKV * D, cs + t * D, ms[t]->n_past);

        // One job per (sequence, query head), each over its own sequence's cache.
        const size_t jobs = n * NH;
        std::atomic<size_t> next{0};
        auto work = [&](int worker) {
            void* scratch = lead.att_scratch.data() + (size_t)worker * ops::attend_scratch_bytes(D);
            for (size_t j; (j = next.fetch_add(1, std::memory_order_relaxed)) < jobs;) {
                const size_t t = j / NH, hq = j % NH;
                ms[t]->attend_head(il, (int)hq, (size_t)ms[t]->n_past + 1, q + t * NH * D + hq * D,
                                   att + t * NH * D + hq * D, scratch);
            }
        };
        if (NH * kv_total * D < SMALL_ATTENTION) work(0);
        else P.run(work);

        const Products::Out wo[] = {{&L.wo, o}};
        lead.prod.group(P, wo, att, n);
        for (size_t i = 0; i < n * E; i++) x[i] = o[i] + x[i];
        for (size_t t = 0; t < n; t++) ops::rms_norm_mul(x + t * E, L.ffn_norm, xn + t * E, E, hp.rms_eps);
        const Products::Out gate_up[] = {{&L.gate, g}, {&L.up, u}};
        lead.prod.group(P, gate_up, xn, n);
        for (size_t t = 0; t < n; t++) ops::swiglu(g + t * FF, u + t * FF, h + t * FF, FF);
        const Products::Out down[] = {{&L.down, o}};
        lead.prod.group(P, down, h, n);
        for (size_t i = 0; i < n * E; i++) x[i] = o[i] + x[i];
    }
    for (size_t t = 0; t < n; t++) ops::rms_norm_mul(x + t * E, lead.output_norm, xn + t * E, E, hp.rms_eps);
    lead.batch_logits.resize(n * V);
    const Products::Out out[] = {{&lead.output, lead.batch_logits.data()}};
    lead.prod.group(P, out, xn, n);
    for (size_t t = 0; t < n; t++) {
        logits[t]->resize(V);
        std::memcpy(logits[t]->data(), lead.batch_logits.data() + t * V, V * sizeof(float));
        ms[t]->n_past++;
    }
}

}  // namespace

void decode_batch(std::span<const DecodeSeq> seqs) {
    // Check everything first: a refused step changes no cache.
    const Impl* first_cpu = nullptr;
    for (size_t i = 0; i < seqs.size(); i++) {
        const DecodeSeq& s = seqs[i];
        if (!s.model || !s.logits) throw Error("decode_batch: sequence " + std::to_string(i) + " has no model or logits");
        const Impl& m = *s.model->impl_;
        const std::string which = "decode_batch: sequence " + std::to_string(i) + ": ";
        if (s.token < 0 || s.token >= m.hp.n_vocab)
            throw Error(which + "token id " + std::to_string(s.token) + " is out of range [0, " +
                        std::to_string(m.hp.n_vocab) + ")");
        if (m.n_past + 1 > m.n_ctx)
            throw Error(which + "context full: " + std::to_string(m.n_past) + " cached + 1 new token exceed the context of " +
                        std::to_string(m.n_ctx));
        for (size_t j = 0; j < i; j++)
            if (seqs[j].model == s.model) throw Error(which + "the same model as sequence " + std::to_string(j));
        if (m.gpu) continue;
        if (!first_cpu) first_cpu = &m;
        else if (m.file.path() != first_cpu->file.path() || !same_shape(m.hp, first_cpu->hp))
            throw Error(which + m.file.path() + " is not the file of the others (" + first_cpu->file.path() + ")");
    }
    // The card's sequences one token at a time, as eval_into runs them.
    for (const DecodeSeq& s : seqs)
        if (s.model->impl_->gpu) s.model->eval_into(std::span<const int32_t>(&s.token, 1), *s.logits);
    Impl* ms[MAX_BATCH];
    int32_t tok[MAX_BATCH];
    std::vector<float>* logits[MAX_BATCH];
    Impl* lead = nullptr;
    size_t n = 0;
    auto flush = [&] {
        if (n) step(*lead, ms, tok, logits, n);
        n = 0;
    };
    for (const DecodeSeq& s : seqs) {
        Impl& m = *s.model->impl_;
        if (m.gpu) continue;
        if (!lead) lead = &m;
        ms[n] = &m;
        tok[n] = s.token;
        logits[n] = s.logits;
        if (++n == MAX_BATCH) flush();
    }
    flush();
}

}  // namespace bankml::model
