// The batched forward pass: pieces of several sequences, each with its own cache and position,
// through the layers together; typically one decoded token per generating sequence plus a piece of
// a new prompt. Row r of the scratch is one token of one sequence at that sequence's next
// position; the products take the rows as columns (mat_mat), which gives each column mat_vec's
// bits, and everything else is per row, with the row's own model (its cache, its position) where
// the sequences differ:
//
//   x[r] = embedding(token[r])                                      [rows, n_embd]
//   per layer: xn = rms_norm(x) * attn_norm
//              q, k, v = xn Wq, xn Wk, xn Wv                         [rows, heads * head_dim]
//              per r: norm and rotate q[r], k[r] at position p[r]; k[r], v[r] into its cache
//              (the last layer keeps only the rows whose logits are wanted from here on)
//              att[r] = attention of q[r] over its cache[0..p[r]] (causal within a piece)
//              x += att Wo;  x += down(silu(xn Wgate) * (xn Wup)) with xn = rms_norm(x) * ffn_norm
//   logits = rms_norm(x[kept]) * output_norm . Woutput               [kept, n_vocab]
//
// The weights, pool and scratch are the first CPU sequence's model's: all models map the same file.
#include <algorithm>
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

// A piece of one sequence in a pass: n tokens at the model's n_past.., and where its last token's
// logits go (null: none).
struct Piece {
    Impl* m;
    const int32_t* tok;
    size_t n;
    std::vector<float>* logits;
};

// Pieces of distinct models, MAX_BATCH rows at most, through the layers on lead's weights.
void step(Impl& lead, const Piece* ps, size_t np) {
    const Hparams& hp = lead.hp;
    const size_t E = hp.n_embd, D = hp.head_dim, NH = hp.n_head, NKV = hp.n_head_kv, FF = hp.n_ff,
                 V = hp.n_vocab;
    par::Pool& P = *lead.pool;
    float *x = lead.x.data(), *xn = lead.xn.data(), *q = lead.q.data(), *k = lead.k.data(), *v = lead.v.data(),
          *att = lead.att.data(), *o = lead.o.data(), *g = lead.g.data(), *u = lead.u.data(), *h = lead.h.data(),
          *cs = lead.rope_cs.data();
    // Row r: token j of piece piece[r], at position pos[r]. keep: the rows whose logits are wanted.
    size_t piece[MAX_BATCH], keep[MAX_BATCH], all[MAX_BATCH];
    int pos[MAX_BATCH];
    size_t R = 0, kept = 0;
    for (size_t p = 0; p < np; p++) {
        for (size_t j = 0; j < ps[p].n; j++, R++) {
            piece[R] = p;
            pos[R] = ps[p].m->n_past + (int)j;
            all[R] = R;
            dequantize_row(lead.tok_embd, ps[p].tok[j], x + R * E);
            lead.rope->cache(pos[R], cs + R * D);
        }
        if (ps[p].logits) keep[kept++] = R - 1;
    }
    for (int il = 0; il < hp.n_layer; il++) {
        const Layer& L = lead.layers[(size_t)il];
        for (size_t r = 0; r < R; r++) ops::rms_norm_mul(x + r * E, L.attn_norm, xn + r * E, E, hp.rms_eps);
        const Products::Out qkv[] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
        lead.prod.group(P, qkv, xn, R);
        for (size_t r = 0; r < R; r++)
            ps[piece[r]].m->store_token(il, q + r * NH * D, k + r * NKV * D, v + r * NKV * D, cs + r * D, pos[r]);
        // In the last layer only the kept rows matter past this point (every K and V is cached):
        // they move to the front of x, in order. Rows are independent, so their bits do not change.
        size_t rows = R;
        const size_t* src = all;
        if (il == hp.n_layer - 1) {
            if (!kept) break;
            for (size_t i = 0; i < kept; i++)
                if (keep[i] != i) std::memcpy(x + i * E, x + keep[i] * E, E * sizeof(float));
            rows = kept;
            src = keep;
        }
        // One job per (row, query head), each over its own sequence's cache.
        size_t kv_total = 0;
        for (size_t i = 0; i < rows; i++) kv_total += (size_t)pos[src[i]] + 1;
        const size_t jobs = rows * NH;
        std::atomic<size_t> next{0};
        auto work = [&](int worker) {
            void* scratch = lead.att_scratch.data() + (size_t)worker * ops::attend_scratch_bytes(D);
            for (size_t j; (j = next.fetch_add(1, std::memory_order_relaxed)) < jobs;) {
                const size_t i = j / NH, hq = j % NH, r = src[i];
                ps[piece[r]].m->attend_head(il, (int)hq, (size_t)pos[r] + 1, q + r * NH * D + hq * D,
                                            att + i * NH * D + hq * D, scratch);
            }
        };
        if (attention_here(NH * kv_total * D, P.threads())) work(0);
        else P.run(work);

        const Products::Out wo[] = {{&L.wo, o}};
        lead.prod.group(P, wo, att, rows);
        for (size_t i = 0; i < rows * E; i++) x[i] = o[i] + x[i];
        for (size_t t = 0; t < rows; t++) ops::rms_norm_mul(x + t * E, L.ffn_norm, xn + t * E, E, hp.rms_eps);
        const Products::Out gate_up[] = {{&L.gate, g}, {&L.up, u}};
        lead.prod.group(P, gate_up, xn, rows);
        for (size_t t = 0; t < rows; t++) ops::swiglu(g + t * FF, u + t * FF, h + t * FF, FF);
        const Products::Out down[] = {{&L.down, o}};
        lead.prod.group(P, down, h, rows);
        for (size_t i = 0; i < rows * E; i++) x[i] = o[i] + x[i];
    }
    if (kept) {
        for (size_t t = 0; t < kept; t++) ops::rms_norm_mul(x + t * E, lead.output_norm, xn + t * E, E, hp.rms_eps);
        lead.batch_logits.resize(kept * V);
        const Products::Out out[] = {{&lead.output, lead.batch_logits.data()}};
        lead.prod.group(P, out, xn, kept);
        for (size_t i = 0; i < kept; i++) {
            std::vector<float>& l = *ps[piece[keep[i]]].logits;
            l.resize(V);
            std::memcpy(l.data(), lead.batch_logits.data() + i * V, V * sizeof(float));
        }
    }
    for (size_t p = 0; p < np; p++) ps[p].m->n_past += (int)ps[p].n;
}

}  // namespace

void decode_batch(std::span<const DecodeSeq> seqs) {
    // Check everything first: a refused step changes no cache.
    const Impl* first_cpu = nullptr;
    for (size_t i = 0; i < seqs.size(); i++) {
        const DecodeSeq& s = seqs[i];
        const std::string which = "decode_batch: sequence " + std::to_string(i);
        if (!s.model) throw Error(which + " has no model");
        if (s.tokens.empty()) throw Error(which + " has no tokens");
        const Impl& m = *s.model->impl_;
        for (size_t j = 0; j < s.tokens.size(); j++)
            if (s.tokens[j] < 0 || s.tokens[j] >= m.hp.n_vocab)
                throw Error(which + ": token id " + std::to_string(s.tokens[j]) + " at index " + std::to_string(j) +
                            " is out of range [0, " + std::to_string(m.hp.n_vocab) + ")");
        if ((size_t)m.n_past + s.tokens.size() > (size_t)m.n_ctx)
            throw Error(which + ": context full: " + std::to_string(m.n_past) + " cached + " +
                        std::to_string(s.tokens.size()) + " new tokens exceed the context of " + std::to_string(m.n_ctx));
        for (size_t j = 0; j < i; j++)
            if (seqs[j].model == s.model) throw Error(which + ": the same model as sequence " + std::to_string(j));
        if (m.gpu) continue;
        if (!first_cpu) first_cpu = &m;
        else if (m.file.path() != first_cpu->file.path() || !same_shape(m.hp, first_cpu->hp))
            throw Error(which + ": " + m.file.path() + " is not the file of the others (" + first_cpu->file.path() + ")");
    }
    // The card's sequences alone, as eval_into runs them.
    for (const DecodeSeq& s : seqs) {
        if (!s.model->impl_->gpu) continue;
        std::vector<float> none;
        s.model->eval_into(s.tokens, s.logits ? *s.logits : none);
    }
    // The others in passes of at most MAX_BATCH rows. A longer piece is cut into MAX_BATCH-token
    // chunks, each of which fills a pass, so no pass holds two chunks of one model.
    Piece ps[MAX_BATCH];
    size_t np = 0, rows = 0;
    Impl* lead = const_cast<Impl*>(first_cpu);
    auto flush = [&] {
        if (np) step(*lead, ps, np);
        np = rows = 0;
    };
    for (const DecodeSeq& s : seqs) {
        Impl& m = *s.model->impl_;
        if (m.gpu) continue;
        for (size_t at = 0; at < s.tokens.size(); at += MAX_BATCH) {
            const size_t n = std::min(MAX_BATCH, s.tokens.size() - at);
            const bool last = at + n == s.tokens.size();
            if (rows + n > MAX_BATCH) flush();
            ps[np++] = {&m, s.tokens.data() + at, n, last ? s.logits : nullptr};
            rows += n;
        }
    }
    flush();
}

}  // namespace bankml::model
