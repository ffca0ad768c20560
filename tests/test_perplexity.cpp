// Perplexity: llama-perplexity's chunking (whole chunks, second half scored), its per-token
// negative log-likelihood and its "+/-", on constructed logits. (The comparison with
// llama.cpp's values for the tiny models is in the command test, with the forward pass.)
#include <cmath>

#include "model/perplexity.h"
#include "test.h"

using namespace bankml::model;

TEST(perplexity_token_nll_is_minus_log_softmax) {
    std::vector<float> uniform(1000, 0.25f);
    CHECK_NEAR(token_nll(uniform, 17), std::log(1000.0), 1e-12);
    std::vector<float> l = {1.0f, 2.0f, 3.0f};
    double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    CHECK_NEAR(token_nll(l, 0), -std::log(std::exp(1.0) / z), 1e-6);
    CHECK_NEAR(token_nll(l, 2), -std::log(std::exp(3.0) / z), 1e-6);
    // Large logits do not overflow (the maximum is subtracted first).
    std::vector<float> big = {1000.0f, 999.0f};
    CHECK_NEAR(token_nll(big, 1), std::log(1.0 + std::exp(1.0)), 1e-5);
}

TEST(perplexity_scores_the_second_half_of_whole_chunks) {
    const int V = 8, n_ctx = 16;
    std::vector<int32_t> tokens(int(2.5 * n_ctx));  // 2 whole chunks and a leftover half
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 5 + 3) % V);
    // The model puts logit a_j = 0.1 * j + 0.01 * chunk on the true next token at position j.
    int calls = 0;
    auto eval = [&](std::span<const int32_t> chunk) {
        CHECK_EQ(chunk.size(), size_t(n_ctx));
        std::vector<float> out(size_t(n_ctx) * V, 0.0f);
        for (int j = 0; j + 1 < n_ctx; ++j) {
            int32_t next = tokens[size_t(calls) * n_ctx + j + 1];
            out[size_t(j) * V + next] = 0.1f * j + 0.01f * calls;
        }
        ++calls;
        return out;
    };
    std::vector<std::pair<int, double>> seen;
    auto r = perplexity(tokens, n_ctx, V, eval, -1, [&](int c, double p) { seen.push_back({c, p}); });
    CHECK_EQ(calls, 2);
    CHECK_EQ(r.n_chunks, 2);
    CHECK_EQ(r.n_scored, int64_t(2 * (n_ctx / 2 - 1)));
    // The same numbers computed plainly in double (the code uses expf: 1e-6 relative), positions
    // n_ctx/2 .. n_ctx-2 of each chunk (a shift by one position moves the result by percents).
    double sum = 0, sum2 = 0;
    int count = 0;
    std::vector<double> running;
    for (int c = 0; c < 2; ++c) {
        for (int j = n_ctx / 2; j <= n_ctx - 2; ++j) {
            double a = double(0.1f * j + 0.01f * c);
            double nll = -(a - std::log(double(V - 1) + std::exp(a)));
            sum += nll;
            sum2 += nll * nll;
            ++count;
        }
        running.push_back(std::exp(sum / count));
    }
    REQUIRE_EQ(r.running.size(), 2u);
    CHECK_NEAR(r.running[0], running[0], 1e-6 * running[0]);
    CHECK_NEAR(r.running[1], running[1], 1e-6 * running[1]);
    CHECK_NEAR(r.ppl, running[1], 1e-6 * running[1]);
    double mean = sum / count, var = sum2 / count - mean * mean;
    CHECK_NEAR(r.error, std::sqrt(var / (count - 1)) * std::exp(mean), 1e-6);
    CHECK_GT(r.error, 0.0);
    REQUIRE_EQ(seen.size(), 2u);
    CHECK_EQ(seen[1].first, 1);
    CHECK_EQ(seen[1].second, r.running[1]);
}

TEST(perplexity_uniform_model_has_perplexity_of_the_vocabulary) {
    const int V = 50, n_ctx = 8;
    std::vector<int32_t> tokens(40, 3);
    auto r = perplexity(tokens, n_ctx, V, [&](std::span<const int32_t>) { return std::vector<float>(size_t(n_ctx) * V, 1.5f); });
    CHECK_EQ(r.n_chunks, 5);
    CHECK_NEAR(r.ppl, 50.0, 1e-9);
    CHECK_EQ(r.error, 0.0);  // no spread: llama.cpp prints no estimate
}

TEST(perplexity_bos_replaces_the_first_token_of_each_chunk) {
    const int V = 10, n_ctx = 8;
    std::vector<int32_t> tokens(16);
    for (int i = 0; i < 16; ++i) tokens[i] = i % V;
    std::vector<int32_t> firsts;
    perplexity(tokens, n_ctx, V, [&](std::span<const int32_t> c) {
        firsts.push_back(c[0]);
        CHECK_EQ(c[1], tokens[size_t(firsts.size() - 1) * n_ctx + 1]);
        return std::vector<float>(size_t(n_ctx) * V, 0.0f);
    }, 9);
    CHECK(firsts == (std::vector<int32_t>{9, 9}));
}

TEST(perplexity_rejects_short_text_and_wrong_logit_counts) {
    std::vector<int32_t> tokens(31, 1);
    auto eval = [](std::span<const int32_t>) { return std::vector<float>(16 * 4, 0.0f); };
    CHECK_THROWS(perplexity(tokens, 16, 4, eval), "needs at least 32");
    std::vector<int32_t> enough(32, 1);
    CHECK_THROWS(perplexity(enough, 16, 5, eval), "returned 64 logits");
    CHECK_THROWS(perplexity(enough, 2, 4, eval), "at least 4");
}
