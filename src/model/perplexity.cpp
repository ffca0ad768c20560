#include "model/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace bankml::model {

double token_nll(std::span<const float> logits, int32_t tok) {
    float max_l = logits[0];
    for (float v : logits) max_l = std::max(max_l, v);
    double sum = 0.0;
    for (float v : logits) sum += std::exp(v - max_l);
    return -(double(logits[tok] - max_l) - std::log(sum));
}

double PerplexityAccumulator::ppl() const { return count_ ? std::exp(nll_ / double(count_)) : 0.0; }

double PerplexityAccumulator::error() const {
    if (count_ < 2) return 0.0;
    double mean = nll_ / double(count_), var = nll2_ / double(count_) - mean * mean;
    if (!(var > 0)) return 0.0;
    return std::sqrt(var / double(count_ - 1)) * std::exp(mean);
}

PerplexityResult perplexity(std::span<const int32_t> tokens, int n_ctx, int n_vocab, const ChunkEval& eval,
                            int32_t bos, const std::function<void(int, double)>& on_chunk) {
    if (n_ctx < 4) throw Error("perplexity: the context must be at least 4 tokens, got " + std::to_string(n_ctx));
    if (int64_t(tokens.size()) < 2 * int64_t(n_ctx))
        throw Error("perplexity: the text has " + std::to_string(tokens.size()) + " tokens; a context of " +
                    std::to_string(n_ctx) + " needs at least " + std::to_string(2 * n_ctx));
    PerplexityResult r;
    r.n_chunks = int(tokens.size() / size_t(n_ctx));
    const int first = n_ctx / 2;
    PerplexityAccumulator acc;
    std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
    for (int c = 0; c < r.n_chunks; ++c) {
        std::copy_n(tokens.begin() + size_t(c) * size_t(n_ctx), n_ctx, chunk.begin());
        if (bos >= 0) chunk[0] = bos;
        std::vector<float> logits = eval(chunk);
        if (logits.size() != size_t(n_ctx) * size_t(n_vocab))
            throw Error("perplexity: the model returned " + std::to_string(logits.size()) + " logits for a chunk, expected " +
                        std::to_string(size_t(n_ctx) * size_t(n_vocab)));
        // Scored against the text's tokens (the BOS replacement only changes the model's input).
        const int32_t* text = tokens.data() + size_t(c) * size_t(n_ctx);
        for (int j = first; j < n_ctx - 1; ++j)
            acc.add(token_nll(std::span<const float>(logits).subspan(size_t(j) * size_t(n_vocab), size_t(n_vocab)), text[j + 1]));
        r.running.push_back(acc.ppl());
        if (on_chunk) on_chunk(c, acc.ppl());
    }
    r.ppl = acc.ppl();
    r.error = acc.error();
    r.n_scored = acc.count();
    return r;
}

}  // namespace bankml::model
