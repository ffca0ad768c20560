#include "model/sampler.h"

#include <algorithm>
#include <cmath>

#include <emmintrin.h>

#include "core/error.h"

namespace bankml::model {

uint64_t SplitMix64::next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool before(const Candidate& a, const Candidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {
    if (std::isnan(p.temp) || std::isnan(p.top_p) || std::isnan(p.min_p) || std::isnan(p.repeat_penalty))
        throw Error("sampler: a parameter is NaN");
    if (p_.temp < 0.0f) p_.temp = 0.0f;  // negative temperature: greedy, as llama.cpp
    if (p.repeat_penalty <= 0.0f) throw Error("sampler: repeat penalty must be > 0, got " + std::to_string(p.repeat_penalty));
}

void Sampler::reset() {
    rng_ = SplitMix64(p_.seed);
    window_.clear();
    counts_.clear();
}

void Sampler::accept(int32_t id) {
    if (p_.repeat_last_n <= 0) return;
    ++counts_[id];
    window_.push_back(id);
    if (int32_t(window_.size()) > p_.repeat_last_n) {
        int32_t old = window_.front();
        window_.pop_front();
        if (--counts_[old] == 0) counts_.erase(old);
    }
}

// Dividing a negative logit would make it likelier: multiply those instead (as llama.cpp).
static void penalize(float& logit, float penalty) {
    if (logit <= 0) logit *= penalty;
    else logit /= penalty;
}

void Sampler::apply_penalty(std::vector<Candidate>& cand) const {
    if (p_.repeat_last_n <= 0 || p_.repeat_penalty == 1.0f) return;
    // The window has at most repeat_last_n distinct tokens: visit those, not the whole vocabulary
    // (candidates arrive in id order; anything else is searched).
    for (const auto& [id, count] : counts_) {
        if (id >= 0 && size_t(id) < cand.size() && cand[size_t(id)].id == id) {
            penalize(cand[size_t(id)].logit, p_.repeat_penalty);
        } else {
            for (Candidate& c : cand)
                if (c.id == id) penalize(c.logit, p_.repeat_penalty);
        }
    }
}

void Sampler::top_k(std::vector<Candidate>& cand, int32_t k, bool& sorted) {
    if (k <= 0) return;
    size_t keep = std::min<size_t>(size_t(k), cand.size());
    std::partial_sort(cand.begin(), cand.begin() + keep, cand.end(), before);
    cand.resize(keep);
    sorted = true;
}

bool Sampler::top_k_fast(std::span<const float> logits, std::vector<Candidate>& cand) {
    const size_t n = logits.size();
    if (p_.top_k <= 0 || size_t(p_.top_k) >= n) return false;
    std::span<const float> v = logits;
    if (p_.repeat_last_n > 0 && p_.repeat_penalty != 1.0f && !counts_.empty()) {
        // The penalized logits in a copy (the window's tokens only).
        penalized_.assign(logits.begin(), logits.end());
        for (const auto& [id, count] : counts_)
            if (id >= 0 && size_t(id) < n) penalize(penalized_[size_t(id)], p_.repeat_penalty);
        v = penalized_;
    }
    // The k best by (logit, then id) in one pass: a heap whose top is the worst kept. Candidates
    // come in id order, so one that only ties the worst kept never displaces it.
    const size_t k = size_t(p_.top_k);
    cand.clear();
    for (size_t i = 0; i < k; ++i) {
        if (std::isnan(v[i])) return false;  // NaN has no order: the full sort's path decides
        cand.push_back({int32_t(i), v[i], 0.0f});
    }
    std::make_heap(cand.begin(), cand.end(), before);
    float worst = cand.front().logit;
    auto consider = [&](size_t i) {
        const float l = v[i];
        if (!(l > worst)) return;
        std::pop_heap(cand.begin(), cand.end(), before);
        cand.back() = {int32_t(i), l, 0.0f};
        std::push_heap(cand.begin(), cand.end(), before);
        worst = cand.front().logit;
    };
    // Blocks of 16 where no logit beats the worst kept are skipped whole, four SSE2 compares a
    // block; the few others are looked at one by one.
    constexpr size_t B = 16;
    size_t i = k;
    for (; i + B <= n; i += B) {
        const __m128 w = _mm_set1_ps(worst);
        __m128 gt = _mm_setzero_ps(), un = _mm_setzero_ps();
        for (size_t j = 0; j < B; j += 4) {
            const __m128 x = _mm_loadu_ps(&v[i + j]);
            gt = _mm_or_ps(gt, _mm_cmpgt_ps(x, w));
            un = _mm_or_ps(un, _mm_cmpunord_ps(x, x));
        }
        if (_mm_movemask_ps(un)) return false;
        if (_mm_movemask_ps(gt))
            for (size_t j = 0; j < B; ++j) consider(i + j);
    }
    for (; i < n; ++i) {
        if (std::isnan(v[i])) return false;
        consider(i);
    }
    std::sort(cand.begin(), cand.end(), before);
    return true;
}

void Sampler::softmax(std::vector<Candidate>& cand) {
    float max_l = -INFINITY;
    for (const Candidate& c : cand) max_l = std::max(max_l, c.logit);
    float sum = 0.0f;
    for (Candidate& c : cand) {
        c.p = std::exp(c.logit - max_l);
        sum += c.p;
    }
    for (Candidate& c : cand) c.p /= sum;
}

void Sampler::top_p(std::vector<Candidate>& cand, float p, bool& sorted) {
    if (p >= 1.0f || cand.empty()) return;
    softmax(cand);
    if (!sorted) std::sort(cand.begin(), cand.end(), before);
    sorted = true;
    // The smallest prefix whose probability reaches p (at least one token).
    float cum = 0.0f;
    for (size_t i = 0; i < cand.size(); ++i) {
        cum += cand[i].p;
        if (cum >= p) {
            cand.resize(i + 1);
            return;
        }
    }
}

void Sampler::min_p(std::vector<Candidate>& cand, float p) {
    if (p <= 0.0f || cand.empty()) return;
    float max_l = -INFINITY;
    for (const Candidate& c : cand) max_l = std::max(max_l, c.logit);
    // p_i >= p * p_max  <=>  logit_i >= max_logit + log(p); the best token always stays.
    const float min_logit = max_l + std::log(p);
    std::erase_if(cand, [&](const Candidate& c) { return c.logit < min_logit; });
}

int32_t argmax(std::span<const float> logits) {
    const float* v = logits.data();
    const size_t n = logits.size();
    if (n == 0) throw Error("argmax: no logits");
    if (std::isnan(v[0])) return 0;
    // The largest value: 16 lanes, each max(x, lane) keeping the lane for a NaN x and for equal
    // zeros (maxps' rule), so each lane holds its first largest non-NaN value.
    __m128 a[4];
    for (__m128& l : a) l = _mm_set1_ps(v[0]);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 4; ++j) a[j] = _mm_max_ps(_mm_loadu_ps(v + i + 4 * j), a[j]);
    float lane[16];
    for (int j = 0; j < 4; ++j) _mm_storeu_ps(lane + 4 * j, a[j]);
    float m = v[0];
    for (float l : lane) m = l > m ? l : m;
    for (; i < n; ++i) m = v[i] > m ? v[i] : m;
    // Its first index (-0 and +0 compare equal, as in the scan).
    const __m128 mm = _mm_set1_ps(m);
    for (i = 0; i + 16 <= n; i += 16) {
        int hit = 0;
        for (int j = 0; j < 4; ++j) hit |= _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(v + i + 4 * j), mm)) << (4 * j);
        if (hit) return int32_t(i + size_t(__builtin_ctz(unsigned(hit))));
    }
    for (; i < n; ++i)
        if (v[i] == m) break;
    return int32_t(i);
}

int32_t Sampler::sample(std::span<const float> logits) {
    if (logits.empty()) throw Error("sampler: no logits");
    if (p_.temp <= 0.0f && (p_.repeat_last_n <= 0 || p_.repeat_penalty == 1.0f)) {
        // Greedy without a penalty: the first largest logit, with no candidate list to build.
        return argmax(logits);
    }
    // One buffer reused from token to token: a fresh 1.8 MB vector per token costs page faults.
    std::vector<Candidate>& cand = cand_;
    bool sorted = false;
    if (p_.temp > 0.0f && one_pass_top_k && top_k_fast(logits, cand)) {
        sorted = true;
    } else {
        cand.resize(logits.size());
        for (size_t i = 0; i < logits.size(); ++i) cand[i] = {int32_t(i), logits[i], 0.0f};
        apply_penalty(cand);
        if (p_.temp > 0.0f) top_k(cand, p_.top_k, sorted);
    }
    if (p_.temp <= 0.0f) {
        // Greedy: the best candidate (the lowest id among equal logits: candidates are in id
        // order here). top-k, top-p and min-p always keep it, so they need not run.
        size_t best = 0;
        for (size_t i = 1; i < cand.size(); ++i)
            if (cand[i].logit > cand[best].logit) best = i;
        return cand[best].id;
    }
    top_p(cand, p_.top_p, sorted);
    min_p(cand, p_.min_p);
    for (Candidate& c : cand) c.logit /= p_.temp;
    if (cand.size() == 1) return cand[0].id;
    float max_l = -INFINITY;
    for (const Candidate& c : cand) max_l = std::max(max_l, c.logit);
    double total = 0.0;
    for (Candidate& c : cand) {
        c.p = std::exp(c.logit - max_l);
        total += c.p;
    }
    const double target = total * rng_.uniform();
    double run = 0.0;
    for (const Candidate& c : cand) {
        run += c.p;
        if (run >= target && c.p > 0.0f) return c.id;
    }
    return cand.back().id;  // rounding left the target just out of reach
}

}  // namespace bankml::model
