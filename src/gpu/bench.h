// `bankml bench gpu`: what the first selected card costs and delivers, beside the CPU kernel —
// the round trip of one empty dispatch and the cost of one more inside a recorded sequence, each
// Q1_0 kernel's time and effective bandwidth, the card's own device-to-device copy bandwidth, and
// quant::mat_vec_par on all threads; then whatever the caller adds on the same card (bankml's
// command adds every op kernel's card time, measured through the oracle in model/).
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/json.h"

namespace bankml::gpu {

class Gpu;

struct BenchOptions {
    bool quick = false;  // small shapes and few repetitions, for lavapipe and tests
    int reps = 10;       // repetitions of each timed kernel (best and median)
    bool json = false;   // --json: the text goes to stderr, one JSON document to stdout at the end
    FILE* text = stdout;  // where the text lines go
};

// Flags: --quick, --copy-mib N, --reps N (default 10, 3 with --quick), --json. `more` runs last,
// on the opened card: it writes its lines to opt.text and its results into the JSON document.
using BenchMore = std::function<void(Gpu&, const BenchOptions& opt, json::Value& doc)>;
int bench_gpu_main(const std::vector<std::string>& args, const BenchMore& more = {});

}  // namespace bankml::gpu
