// `bankml bench SUB`: the micro-benchmarks each module offers. A module adds one line to BENCHES
// in bench.cpp; `bankml bench` with no sub-benchmark name benchmarks a model.
#pragma once
#include <string>
#include <vector>

namespace bankml::cmd {

struct SubBench {
    const char* name;
    const char* summary;
    int (*run)(const std::vector<std::string>& args);
};

// `bankml bench [-m FILE | --shape S --type T] ...`: the model benchmark (bench_model.cpp).
int run_model_bench(const std::vector<std::string>& args);
// `bankml bench batch -m FILE ...`: batched decode steps against one-stream steps (bench_batch.cpp).
int run_batch_bench(const std::vector<std::string>& args);
// `bankml bench sample ...`: a sampling draw's cost, one-pass top-k against the full sort (bench_sample.cpp).
int run_sample_bench(const std::vector<std::string>& args);
// `bankml bench gpu ...`: gpu/bench.h's measurements, then every op kernel's card time (bench_gpu.cpp).
int run_gpu_bench(const std::vector<std::string>& args);

}  // namespace bankml::cmd
