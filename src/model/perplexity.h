// Perplexity as llama-perplexity computes it: the tokens are cut into chunks of the context size
// (as many whole chunks as fit; at least two are needed), each chunk is evaluated from an empty
// cache, and the tokens of its second half are scored: position j's logits predict token j+1 for
// j = n_ctx/2 .. n_ctx-2. Perplexity is exp(mean negative log-likelihood), reported after every
// chunk; the final uncertainty is ppl * sqrt(var(nll) / (count - 1)), llama.cpp's "+/-".
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace bankml::model {

// -log softmax(logits)[tok], with llama.cpp's arithmetic: float max and differences, expf, the
// sum of exponentials in double.
double token_nll(std::span<const float> logits, int32_t tok);

class PerplexityAccumulator {
public:
    void add(double nll) {
        nll_ += nll;
        nll2_ += nll * nll;
        ++count_;
    }
    int64_t count() const { return count_; }
    double ppl() const;    // exp(mean nll)
    double error() const;  // llama.cpp's +/- (0 when undefined: fewer than two values)

private:
    double nll_ = 0, nll2_ = 0;
    int64_t count_ = 0;
};

struct PerplexityResult {
    std::vector<double> running;  // the perplexity after each chunk
    double ppl = 0, error = 0;
    int n_chunks = 0;
    int64_t n_scored = 0;
};

// Evaluates one chunk from an empty cache and returns the logits of every position
// (n_ctx * n_vocab floats, position-major).
using ChunkEval = std::function<std::vector<float>(std::span<const int32_t> chunk)>;

// bos >= 0: the first token of each chunk is replaced by BOS, as llama.cpp does when the
// vocabulary adds one (Qwen3's does not). on_chunk(i, running_ppl) after each chunk.
PerplexityResult perplexity(std::span<const int32_t> tokens, int n_ctx, int n_vocab, const ChunkEval& eval,
                            int32_t bos = -1, const std::function<void(int, double)>& on_chunk = {});

}  // namespace bankml::model
