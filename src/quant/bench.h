// `bankml bench kernels`: speed of the CPU kernels on the 1.7B and 8B matrix shapes. Prints GB/s of
// weights and microseconds per call, reference vs fast path, 1 thread vs the pool, a ggml-shaped
// AVX2 baseline beside them (see bench.cpp), the DRAM floor, and mat_mat at 1, 8 and 64 columns.
#pragma once
#include "par/bench.h"
#include "quant/traits.h"

namespace bankml::quant {

// A weight type's block layout from the traits table, named as the tables print it ("Q1_0").
par::QuantFormat weight_format(Type t);

struct KernelBenchOptions {
    double seconds = 0.15;  // per measurement (each runs at least 2 calls)
    bool quick = false;     // only the 1.7B shapes, for a smoke run
};

int bench_kernels(const KernelBenchOptions& opt);

}  // namespace bankml::quant
