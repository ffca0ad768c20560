// `bankml bench sample`: what one draw of the sampling chain costs on a vocabulary of V random
// logits (Qwen3's 151,936 by default), with the default chain (temperature 0.8, top-k 40, top-p
// 0.95, min-p 0.05) and its one-pass top-k against the same chain with the full sort, alternating
// rounds in one process so that both see the same machine state.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cmd/bench.h"
#include "core/cli.h"
#include "core/error.h"
#include "model/sampler.h"

namespace bankml::cmd {

int run_sample_bench(const std::vector<std::string>& args) {
    cli::Args f(args, {{"--vocab", true}, {"--draws", true}, {"-r|--rounds", true}});
    const size_t vocab = size_t(f.get_int("vocab", 151936, 2, 1 << 24));
    const int draws = int(f.get_int("draws", 100, 1, 1000000));
    const int rounds = int(f.get_int("rounds", 3, 1, 1000));
    // Logits of a model's spread: normal, sigma 3 (a few tokens far above the rest).
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(vocab);
    for (float& x : logits) x = normal(rng);
    using clock = std::chrono::steady_clock;
    struct Way {
        const char* name;
        bool one_pass;
        std::vector<double> us;
    } ways[] = {{"one-pass top-k", true, {}}, {"full sort", false, {}}};
    for (int r = 0; r < rounds; ++r)
        for (Way& w : ways) {
            model::SamplerParams p;
            p.seed = 11;
            model::Sampler s(p);
            s.one_pass_top_k = w.one_pass;
            for (int i = 0; i < draws; ++i) {
                const auto t0 = clock::now();
                const int32_t id = s.sample(logits);
                w.us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
                s.accept(id);
            }
        }
    std::printf("sampling draws on %zu random logits (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), %d rounds of %d:\n",
                vocab, rounds, draws);
    std::printf("%-16s %10s %10s %10s\n", "top-k", "best us", "median us", "mean us");
    for (Way& w : ways) {
        std::vector<double> v = w.us;
        std::sort(v.begin(), v.end());
        double mean = 0;
        for (double x : v) mean += x;
        mean /= double(v.size());
        std::printf("%-16s %10.1f %10.1f %10.1f\n", w.name, v.front(), v[v.size() / 2], mean);
    }
    return 0;
}

}  // namespace bankml::cmd
