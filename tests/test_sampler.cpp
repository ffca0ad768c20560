// The sampler on constructed logits: each step's meaning, the chain's order, greedy ties, the
// repetition window, the generator, and that a seed fixes the tokens.
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "model/sampler.h"
#include "test.h"

using namespace bankml::model;

namespace {

std::vector<float> log_probs(std::initializer_list<double> ps) {
    std::vector<float> l;
    for (double p : ps) l.push_back(float(std::log(p)));
    return l;
}

SamplerParams plain(float temp) {
    SamplerParams p;
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = 42;
    return p;
}

std::vector<int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
    std::vector<int> h(logits.size(), 0);
    for (int i = 0; i < n; ++i) ++h[s.sample(logits)];
    return h;
}

std::vector<int32_t> ids(const std::vector<Candidate>& c) {
    std::vector<int32_t> out;
    for (auto& x : c) out.push_back(x.id);
    return out;
}

std::vector<Candidate> cands(const std::vector<float>& logits) {
    std::vector<Candidate> c;
    for (size_t i = 0; i < logits.size(); ++i) c.push_back({int32_t(i), logits[i], 0.0f});
    return c;
}

}  // namespace

TEST(sampler_splitmix64_known_outputs) {
    SplitMix64 g(0);
    uint64_t x0 = g.next(), x1 = g.next();  // the published first outputs for seed 0
    CHECK_EQ(x0, 0xE220A8397B1DCDAFull);
    CHECK_EQ(x1, 0x6E789E6AA1B965F4ull);
    SplitMix64 u(7);
    for (int i = 0; i < 1000; ++i) {
        double x = u.uniform();
        if (!CHECK(x >= 0.0 && x < 1.0)) break;
    }
}

TEST(sampler_greedy_takes_the_highest_logit_lowest_id_on_ties) {
    Sampler s(plain(0.0f));
    CHECK_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -2.0f, 2.9f}), 1);
    CHECK_EQ(s.sample(std::vector<float>{1.0f, 5.0f, 5.0f, 5.0f}), 1);
    CHECK_EQ(s.sample(std::vector<float>{-7.0f}), 0);
    SamplerParams neg = plain(-1.0f);  // a negative temperature is greedy too
    Sampler g(neg);
    CHECK_EQ(g.sample(std::vector<float>{0.0f, 0.5f, 0.25f}), 1);
    // Greedy ignores top-k/top-p/min-p (the best token always survives them) and the seed.
    SamplerParams q = plain(0.0f);
    q.top_k = 1;
    q.top_p = 0.1f;
    q.min_p = 0.9f;
    q.seed = 999;
    Sampler h(q);
    CHECK_EQ(h.sample(std::vector<float>{0.0f, 0.5f, 0.25f}), 1);
}

// The vectorized argmax against the scan it replaces (first index whose value is greater than every
// earlier one), on random rows of every length around its 16-lane blocks and on adversarial ones:
// NaNs (first, inside, everywhere), signed zeros, infinities, ties across lanes and in the tail.
TEST(sampler_argmax_equals_the_first_largest_scan) {
    auto scan = [](const std::vector<float>& v) {
        size_t best = 0;
        for (size_t i = 1; i < v.size(); ++i)
            if (v[i] > v[best]) best = i;
        return int32_t(best);
    };
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    const float nan = std::nanf(""), inf = INFINITY;
    size_t rows = 0, bad = 0;
    auto check = [&](const std::vector<float>& v) {
        ++rows;
        if (argmax(v) != scan(v) && bad++ < 5) std::printf("    n=%zu: argmax %d, scan %d\n", v.size(), argmax(v), scan(v));
    };
    for (size_t n = 1; n <= 70; ++n)
        for (int kind = 0; kind < 9; ++kind)
            for (int rep = 0; rep < 8; ++rep) {
                std::vector<float> v(n);
                for (float& x : v) x = nd(rng);
                const size_t a = rng() % n, b = rng() % n;
                switch (kind) {
                    case 1: v[a] = nan; break;
                    case 2: v[0] = nan; break;
                    case 3: for (float& x : v) x = rng() % 3 ? nan : nd(rng); break;
                    case 4: for (float& x : v) x = rng() % 2 ? 0.0f : -0.0f; break;
                    case 5: for (float& x : v) x = rng() % 2 ? -1.0f : (rng() % 2 ? 0.0f : -0.0f); break;
                    case 6: v[a] = v[b] = 100.0f; break;  // a tie, possibly in different lanes
                    case 7: for (float& x : v) x = -inf; v[a] = rng() % 2 ? inf : -inf; break;
                    case 8: for (float& x : v) x = std::round(nd(rng)); break;  // many ties
                }
                check(v);
            }
    std::vector<float> big(151936);
    for (int rep = 0; rep < 20; ++rep) {
        for (float& x : big) x = nd(rng);
        big[rng() % big.size()] = 9.0f;
        if (rep % 2) big[rng() % big.size()] = 9.0f;
        if (rep % 5 == 0) big[big.size() - 1 - rng() % 15] = 10.0f;  // the tail past the blocks
        check(big);
    }
    CHECK_EQ(bad, 0u);
    CHECK_GT(rows, 5000u);
    CHECK_THROWS(argmax(std::vector<float>{}), "no logits");
}

TEST(sampler_repetition_penalty_divides_positive_multiplies_negative) {
    SamplerParams p = plain(0.0f);
    p.repeat_penalty = 1.1f;
    Sampler s(p);
    s.accept(0);
    CHECK_EQ(s.sample(std::vector<float>{2.0f, 1.9f}), 1);      // 2.0 / 1.1 = 1.82 < 1.9
    CHECK_EQ(s.sample(std::vector<float>{-1.0f, -1.05f}), 1);   // -1.0 * 1.1 = -1.1 < -1.05
    CHECK_EQ(s.sample(std::vector<float>{2.0f, 1.7f}), 0);      // 1.82 > 1.7
    auto c = cands({4.0f, -2.0f, 1.0f});
    s.accept(1);
    s.apply_penalty(c);
    CHECK_EQ(c[0].logit, 4.0f / 1.1f);
    CHECK_EQ(c[1].logit, -2.0f * 1.1f);
    CHECK_EQ(c[2].logit, 1.0f);  // not seen: untouched
    // A token counts once however often it was seen (the penalty is not compounded).
    s.accept(0);
    s.accept(0);
    auto d = cands({4.0f});
    s.apply_penalty(d);
    CHECK_EQ(d[0].logit, 4.0f / 1.1f);
}

TEST(sampler_repetition_window_forgets_old_tokens) {
    SamplerParams p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    Sampler s(p);
    const std::vector<float> logits = {2.0f, 1.5f, 0.0f, 0.0f};
    s.accept(0);
    CHECK_EQ(s.sample(logits), 1);
    s.accept(2);
    CHECK_EQ(s.sample(logits), 1);  // 0 still in the last two
    s.accept(3);
    CHECK_EQ(s.sample(logits), 0);  // 0 has left the window
    s.accept(0);
    s.reset();
    CHECK_EQ(s.sample(logits), 0);  // reset forgets
    p.repeat_last_n = 0;            // window 0: penalty off
    Sampler off(p);
    off.accept(0);
    CHECK_EQ(off.sample(logits), 0);
}

TEST(sampler_top_k_top_p_min_p_keep_what_llama_cpp_keeps) {
    const auto l = log_probs({0.05, 0.5, 0.15, 0.3});
    bool sorted = false;
    auto c = cands(l);
    Sampler::top_k(c, 2, sorted);
    CHECK(sorted);
    CHECK(ids(c) == (std::vector<int32_t>{1, 3}));
    c = cands(l);
    sorted = false;
    Sampler::top_k(c, 0, sorted);  // off
    CHECK_EQ(c.size(), 4u);
    CHECK(!sorted);
    Sampler::top_k(c, 100, sorted);  // more than there are: all, sorted
    CHECK(ids(c) == (std::vector<int32_t>{1, 3, 2, 0}));

    // top-p: the smallest prefix (by probability) whose sum reaches p.
    for (auto [p, n] : std::vector<std::pair<float, size_t>>{{0.4f, 1}, {0.75f, 2}, {0.9f, 3}, {0.99f, 4}, {1.0f, 4}}) {
        c = cands(l);
        sorted = false;
        Sampler::top_p(c, p, sorted);
        CHECK_EQ(c.size(), n);
        if (p < 1.0f) CHECK_EQ(c[0].id, 1);  // sorted by probability; 1.0 is off
    }
    c = cands(l);
    sorted = false;
    Sampler::top_p(c, 0.75f, sorted);
    CHECK_NEAR(c[0].p, 0.5, 1e-6);  // probabilities over all candidates present
    CHECK_NEAR(c[1].p, 0.3, 1e-6);

    // min-p: keep p_i >= min_p * p_max, in the order given.
    c = cands(l);
    Sampler::min_p(c, 0.2f);  // threshold 0.1
    CHECK(ids(c) == (std::vector<int32_t>{1, 2, 3}));
    c = cands(l);
    Sampler::min_p(c, 1.0f);  // only the best
    CHECK(ids(c) == (std::vector<int32_t>{1}));
    c = cands(l);
    Sampler::min_p(c, 0.0f);  // off
    CHECK_EQ(c.size(), 4u);
}

TEST(sampler_draws_follow_the_distribution) {
    Sampler s(plain(1.0f));
    const int n = 20000;
    auto h = histogram(s, log_probs({0.5, 0.3, 0.2}), n);
    CHECK_NEAR(h[0] / double(n), 0.5, 0.02);
    CHECK_NEAR(h[1] / double(n), 0.3, 0.02);
    CHECK_NEAR(h[2] / double(n), 0.2, 0.02);
    // Temperature 0.5 squares the odds: 25 : 9 : 4.
    Sampler t(plain(0.5f));
    h = histogram(t, log_probs({0.5, 0.3, 0.2}), n);
    CHECK_NEAR(h[0] / double(n), 25.0 / 38, 0.02);
    CHECK_NEAR(h[2] / double(n), 4.0 / 38, 0.02);
    // Temperature 2 takes square roots.
    Sampler w(plain(2.0f));
    h = histogram(w, log_probs({0.64, 0.36}), n);
    CHECK_NEAR(h[0] / double(n), 0.8 / 1.4, 0.02);
}

TEST(sampler_chain_order_is_llama_cpp_order) {
    // top-k before top-p: after top-k=2 the survivors are renormalized (4/7, 3/7), so top-p 0.5
    // keeps one token. Applied to the full set, top-p 0.5 would keep two.
    SamplerParams p = plain(1.0f);
    p.top_k = 2;
    p.top_p = 0.5f;
    Sampler a(p);
    auto h = histogram(a, log_probs({0.4, 0.3, 0.2, 0.1}), 2000);
    CHECK_EQ(h[0], 2000);
    p.top_k = 0;
    Sampler b(p);
    h = histogram(b, log_probs({0.4, 0.3, 0.2, 0.1}), 2000);
    CHECK_GT(h[1], 500);
    CHECK_EQ(h[2] + h[3], 0);
    // min-p before temperature: a cold temperature applied first would push token 1 (ratio
    // 0.4^5 = 0.01) under min-p 0.3; in llama.cpp's order min-p sees 0.4 and keeps it.
    SamplerParams q = plain(0.2f);
    q.min_p = 0.3f;
    Sampler c(q);
    h = histogram(c, log_probs({0.5, 0.2}), 5000);
    CHECK_GT(h[1], 10);
    CHECK_LT(h[1], 120);  // about 1 % of 5000
    // The penalty comes first: it can push a token out of top-k.
    SamplerParams r = plain(1.0f);
    r.top_k = 1;
    r.repeat_penalty = 2.0f;
    Sampler d(r);
    d.accept(0);
    h = histogram(d, std::vector<float>{3.0f, 2.0f, 0.0f}, 200);
    CHECK_EQ(h[1], 200);
}

TEST(sampler_same_seed_same_tokens_other_seed_other_tokens) {
    std::vector<float> logits(500);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i) * 0.37) * 3.0);
    auto run = [&](uint64_t seed) {
        SamplerParams p;  // llama.cpp's defaults
        p.seed = seed;
        p.repeat_penalty = 1.1f;
        Sampler s(p);
        std::vector<int32_t> out;
        for (int i = 0; i < 300; ++i) {
            int32_t t = s.sample(logits);
            s.accept(t);
            out.push_back(t);
        }
        return out;
    };
    auto a = run(1234), b = run(1234), c = run(1235);
    CHECK(a == b);
    CHECK(a != c);
    std::map<int32_t, int> distinct;
    for (int32_t t : a) ++distinct[t];
    CHECK_GT(distinct.size(), 3u);  // it really sampled, not always the argmax
    // reset() restarts the generator: the same tokens again.
    SamplerParams p;
    p.seed = 77;
    Sampler s(p);
    std::vector<int32_t> first, second;
    for (int i = 0; i < 50; ++i) first.push_back(s.sample(logits));
    s.reset();
    for (int i = 0; i < 50; ++i) second.push_back(s.sample(logits));
    CHECK(first == second);
}

TEST(sampler_rejects_bad_parameters) {
    SamplerParams p;
    p.temp = NAN;
    CHECK_THROWS(Sampler{p}, "NaN");
    p = SamplerParams{};
    p.repeat_penalty = 0.0f;
    CHECK_THROWS(Sampler{p}, "repeat penalty");
    Sampler s{SamplerParams{}};
    CHECK_THROWS(s.sample(std::span<const float>{}), "no logits");
}

// The one-pass top-k (no candidate for every token) keeps the same candidates in the same order as
// the penalty then the full top-k, on logits with many ties, signed zeros, infinities and
// penalized tokens; with a NaN it declines and the full path runs; and a seeded chain draws the
// same tokens either way.
TEST(sampler_one_pass_top_k_equals_the_full_sort) {
    std::mt19937_64 rng(7);
    for (int round = 0; round < 200; ++round) {
        const size_t n = 1 + rng() % 3000;
        std::vector<float> l(n);
        for (float& x : l) {
            switch (rng() % 6) {
                case 0: x = float(int(rng() % 5)) - 2.0f; break;  // few values: many ties
                case 1: x = rng() % 2 ? 0.0f : -0.0f; break;
                case 2: x = rng() % 8 ? float(rng() % 1000) / 7.0f : (rng() % 2 ? INFINITY : -INFINITY); break;
                default: x = float(int64_t(rng() % 2000000) - 1000000) / 1000.0f; break;
            }
        }
        SamplerParams p = plain(0.7f);
        p.top_k = int32_t(1 + rng() % 60);
        p.repeat_penalty = rng() % 2 ? 1.0f : (rng() % 2 ? 1.3f : 0.8f);
        p.repeat_last_n = 16;
        Sampler s(p);
        for (int i = 0; i < 20; ++i) s.accept(int32_t(rng() % n));
        std::vector<Candidate> fast, full = cands(l);
        const bool took = s.top_k_fast(l, fast);
        CHECK_EQ(took, size_t(p.top_k) < n);
        if (!took) continue;
        s.apply_penalty(full);
        bool sorted = false;
        Sampler::top_k(full, p.top_k, sorted);
        REQUIRE_EQ(fast.size(), full.size());
        for (size_t i = 0; i < fast.size(); ++i) {
            CHECK_EQ(fast[i].id, full[i].id);
            CHECK_EQ(std::memcmp(&fast[i].logit, &full[i].logit, 4), 0);
        }
    }
    std::vector<float> l(100, 1.0f);
    l[50] = NAN;
    SamplerParams p = plain(0.7f);
    p.top_k = 5;
    Sampler s(p);
    std::vector<Candidate> c;
    CHECK(!s.top_k_fast(l, c));
    // Whole chains (penalty, top-k, top-p, min-p, temperature, draw): the same tokens with the
    // one-pass top-k as with the full sort, on logits with ties.
    for (float penalty : {1.0f, 1.1f, 0.9f}) {
        SamplerParams d;
        d.seed = 11;
        d.repeat_penalty = penalty;
        Sampler fast(d), full(d);
        full.one_pass_top_k = false;
        for (int i = 0; i < 200; ++i) {
            std::vector<float> big(4000);
            for (float& x : big) x = float(int(rng() % 613)) / 50.0f;
            const int32_t t1 = fast.sample(big), t2 = full.sample(big);
            REQUIRE_EQ(t1, t2);
            fast.accept(t1), full.accept(t2);
        }
    }
}
