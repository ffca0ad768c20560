// Picking the next token from the logits, in llama.cpp's default chain order and meaning:
//   repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw
// (llama.cpp's common defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, penalty 1.0 over the
// last 64 tokens). Temperature <= 0 is greedy: the highest logit after the penalty. Candidates
// are ordered by logit, then by id, so ties never depend on a sort's whims.
// The draw uses SplitMix64 seeded with --seed: one 64-bit output per sampled token, taken as
// u = (x >> 11) * 2^-53 in [0, 1); the token is the first whose running probability reaches u
// times the total. Same seed and same logits give the same tokens on any machine and thread count
// (the forward pass gives the same logits at any thread count; sampling runs on one thread).
#pragma once
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

namespace bankml::model {

struct SamplerParams {
    float temp = 0.8f;
    int32_t top_k = 40;            // <= 0: off
    float top_p = 0.95f;           // >= 1: off
    float min_p = 0.05f;           // <= 0: off
    float repeat_penalty = 1.0f;   // 1: off
    int32_t repeat_last_n = 64;    // window of recent tokens the penalty looks at; 0: off
    uint64_t seed = 0;
};

// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit counter passed through a mixing function.
class SplitMix64 {
public:
    explicit SplitMix64(uint64_t seed) : state_(seed) {}
    uint64_t next();
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)

private:
    uint64_t state_;
};

struct Candidate {
    int32_t id;
    float logit;
    float p;
};

// Greedy decoding's choice: the first index of the largest logit, as a scan that keeps the first of
// equal values does (a NaN never wins; one at index 0 stays). Vectorized: no branch per logit.
int32_t argmax(std::span<const float> logits);

class Sampler {
public:
    explicit Sampler(const SamplerParams& p);
    // Records a token (prompt or generated) in the repetition window, as llama.cpp accepts both.
    void accept(int32_t id);
    // The next token. Does not accept it: the caller does, after deciding to keep it.
    int32_t sample(std::span<const float> logits);
    void reset();
    const SamplerParams& params() const { return p_; }
    // Tests: false runs top-k as a full sort of every token (the same result as top_k_fast's).
    bool one_pass_top_k = true;

    // The chain's steps, exposed for tests; each works on `cand` in place.
    void apply_penalty(std::vector<Candidate>& cand) const;
    static void top_k(std::vector<Candidate>& cand, int32_t k, bool& sorted);
    // The penalty and top-k in one pass over the logits, without a candidate for every token: the
    // same k candidates in the same order as apply_penalty then top_k. False (cand unspecified)
    // where top-k is off or keeps every token, or a logit is NaN: the full path runs instead.
    bool top_k_fast(std::span<const float> logits, std::vector<Candidate>& cand);
    static void top_p(std::vector<Candidate>& cand, float p, bool& sorted);
    static void min_p(std::vector<Candidate>& cand, float p);
    static void softmax(std::vector<Candidate>& cand);

private:
    SamplerParams p_;
    SplitMix64 rng_;
    std::deque<int32_t> window_;
    std::unordered_map<int32_t, int> counts_;
    std::vector<Candidate> cand_;
    std::vector<float> penalized_;  // top_k_fast's logits where the penalty applies
};

}  // namespace bankml::model
