// `bankml bench batch`: what a batched decode step (model::decode_batch, as `serve --parallel N`
// runs it) costs against a one-stream step, in one process: N sequences of one file, each with a
// short prompt; rounds alternate eight one-stream steps and eight N-stream steps, and the best step
// of each kind gives the ratio, so that both see the same machine state. No HTTP, no sampling: the
// forward pass alone.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cmd/bench.h"
#include "core/cli.h"
#include "core/error.h"
#include "model/forward.h"

namespace bankml::cmd {

int run_batch_bench(const std::vector<std::string>& args) {
    cli::Args f(args, {{"-m|--model", true}, {"-t|--threads", true}, {"--streams", true}, {"-r|--rounds", true}});
    const std::string path = f.get("model", "");
    if (path.empty()) throw UsageError("bench batch: -m FILE is required");
    const int threads = int(f.get_int("threads", 0, 0, 1024));
    const int rounds = int(f.get_int("rounds", 4, 1, 1000));
    const auto streams = cli::parse_int_list(f.get("streams", "2,4"));
    if (!streams || streams->empty()) throw UsageError("bench batch: --streams wants a comma list of counts, as 2,4");
    for (int64_t n : *streams)
        if (n < 1 || n > 64) throw UsageError("bench batch: --streams " + std::to_string(n) + " is outside 1..64");
    const size_t most = size_t(*std::max_element(streams->begin(), streams->end()));
    constexpr int STEPS = 8;  // steps per kind per round
    model::ModelOptions o;
    o.threads = threads;
    o.ctx = 8 + rounds * STEPS * 2 * int(streams->size()) + 8;
    std::vector<std::unique_ptr<model::Model>> ms;
    std::vector<std::vector<float>> logits(most);
    std::vector<int32_t> tok(most);
    for (size_t i = 0; i < most; ++i) {
        ms.push_back(model::Model::open(path, o));
        tok[i] = int32_t((7 + 13 * i) % size_t(ms[i]->n_vocab()));
        ms[i]->eval_into(std::vector<int32_t>{1, 2, 3, tok[i]}, logits[i]);  // a short prompt each
    }
    using Clock = std::chrono::steady_clock;
    auto step = [&](size_t n) {
        std::vector<model::DecodeSeq> seqs;
        for (size_t i = 0; i < n; ++i) seqs.push_back({ms[i].get(), std::span<const int32_t>(&tok[i], 1), &logits[i]});
        const auto t0 = Clock::now();
        model::decode_batch(seqs);
        return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    std::printf("bankml bench batch: %s, %d threads, %d rounds of %d one-stream and %d N-stream steps each\n",
                path.c_str(), ms[0]->threads(), rounds, STEPS, STEPS);
    std::printf("%8s %16s %16s %14s %16s\n", "streams", "1-stream ms", "N-stream ms", "N / 1 step", "aggregate / 1");
    for (int64_t n : *streams) {
        double one = 1e300, many = 1e300;
        for (int r = 0; r < rounds; ++r) {
            for (int s = 0; s < STEPS; ++s) one = std::min(one, step(1));
            for (int s = 0; s < STEPS; ++s) many = std::min(many, step(size_t(n)));
        }
        std::printf("%8lld %16.2f %16.2f %13.2fx %15.2fx\n", (long long)n, one * 1e3, many * 1e3, many / one,
                    double(n) * one / many);
    }
    return 0;
}

}  // namespace bankml::cmd
