#include "cmd/bench.h"

#include <cstdio>

#include "cmd/commands.h"
#include "core/error.h"
#include "model/products.h"
#include "par/bench.h"
#include "quant/bench.h"

namespace bankml::cmd {

static int run_kernels(const std::vector<std::string>& args) {
    cli::Args f(args, {{"--time", true}, {"--quick", false}});
    return quant::bench_kernels({f.get_double("time", 0.15, 0.01, 10.0), f.has("quick")});
}

// The per-token floors of the 1-bit and ternary formats, their layouts from quant's table.
static int run_memory(const std::vector<std::string>& args) {
    return par::bench_memory_main(args, {quant::weight_format(quant::Type::Q1_0), quant::weight_format(quant::Type::Q2_0)});
}

static const SubBench BENCHES[] = {
    {"pool", "Pool::run wake-up cost against spawning threads, 1..N threads", par::bench_pool_main},
    {"memory", "streaming read bandwidth on the pool and the per-token floor it implies", run_memory},
    {"kernels", "CPU kernels: Q1_0/Q2_0/F16 products, reference vs fast, 1 vs all threads", run_kernels},
    {"batch", "a decode step of N streams (serve --parallel N) against a one-stream step, on the CPU", run_batch_bench},
    {"sample", "one draw of the default sampling chain on a large vocabulary, one-pass top-k against the full sort", run_sample_bench},
    {"gpu", "dispatch costs, Q1_0 kernels beside the CPU, copy bandwidth and every op kernel's card time on the first card", run_gpu_bench},
};

static int run_bench(const std::vector<std::string>& args) {
    if (!args.empty() && args[0].size() && args[0][0] != '-') {
        for (const auto& b : BENCHES)
            if (args[0] == b.name) return b.run({args.begin() + 1, args.end()});
        throw UsageError("unknown benchmark '" + args[0] + "'");
    }
    return run_model_bench(args);
}

// The synthetic model's types are those the products compute (quant's traits table).
static const std::string BENCH_HELP =
    "usage: bankml bench [-m FILE | --shape 1.7b --type q1_0] [-p 64] [-n 32] [-t 1,2] [-r 3] [--kv f16|f32]\n"
    "                    [--gpu on|off|share|on,share,off] [-o md|json|csv] [--json]\n"
    "       bankml bench SUB [ARGS]\n\n"
    "With no SUB, benchmarks a model as llama-bench does and prints llama-bench's markdown table\n"
    "(model, size, params, backend, threads, test, t/s): a prompt of -p random tokens in one batch\n"
    "(ppP) and -n tokens generated one at a time (tgN), -r repetitions after a warm-up run of each\n"
    "test, for each thread count of -t (default: BANKML_THREADS, else every core); the rate is\n"
    "mean ± deviation.\n"
    "--gpu on (the default) runs on a card that verifies (backend Vulkan; else the CPU), off on the\n"
    "CPU alone; a list gives both rows in one run, as llama-bench's -ngl 99,0. share: the card takes\n"
    "a share of each Q1_0 product's rows, per matrix shape where it measured faster (backend\n"
    "CPU+Vulkan; what it decided is the JSON rows' \"gpu\".shapes).\n"
    "Without -m it writes a synthetic model of --shape (tiny, 1.7b, 4b, 8b; default 1.7b) and --type\n"
    "(" + model::product_type_names(", ", ", ") + "; default q1_0) to a temporary file, seeded by --seed (default 7).\n"
    "-o json (or --json) prints llama-bench's JSON fields, -o csv its CSV columns; llama-bench's\n"
    "-ngl, -fa and -ctk/-ctv (f16 or f32) are accepted as in `bankml help run`.\n\n"
    "  pool    [--threads N] [--runs N] [--json]   Pool::run against spawning threads, 1..N threads\n"
    "  memory  [--threads N] [--mib N] [--reps N] [--json]   read bandwidth, per-token floor\n"
    "  kernels [--time S] [--quick]   CPU kernels: reference vs fast vs a ggml-shaped baseline, 1 and all threads\n"
    "  batch   -m FILE [-t N] [--streams 2,4] [-r 4]   decode steps of N streams against one stream\n"
    "  sample  [--vocab 151936] [--draws 100] [-r 3]   a sampling draw: one-pass top-k against the full sort\n"
    "  gpu     [--quick] [--copy-mib N] [--reps N] [--json]   the first selected card: dispatch round trip and\n"
    "          cost in a sequence, Q1_0 kernels, copy, each op kernel's card time (8B shapes; --quick: small);\n"
    "          --json: the lines on stderr, one JSON document of the results on stdout\n";

const cli::Command bench_command = {"bench", "benchmarks: the pool, memory bandwidth, the kernels, a model", BENCH_HELP.c_str(),
                                    run_bench};

}  // namespace bankml::cmd
