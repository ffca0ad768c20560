// The pool's two benchmarks (par.md): what one wake-up costs against spawning threads per call,
// and the streaming read bandwidth that bounds a token, with the per-token floor it implies for
// 1-bit and ternary Qwen3 shapes. `bankml bench pool` / `bankml bench memory` print them.
#pragma once
#include "core/model_shapes.h"
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bankml::par {

struct PoolOverhead {
    int threads;
    double pool_us;   // one Pool::run of an empty job, back to back (workers spinning), median over batches
    double asleep_us; // one Pool::run after the workers have gone to sleep on the futex, median
    double spawn_us;  // threads-1 std::threads spawned and joined per call, the caller as worker 0
};
// One row per thread count 1..max_threads; `runs` pool calls per batch (spawning gets runs/10,
// the asleep case runs/40 calls, each after a pause longer than the pool's spin).
std::vector<PoolOverhead> bench_pool_overhead(int max_threads, int runs, int batches = 5);

struct Bandwidth {
    int threads;
    double gb_per_s;  // 1e9 bytes per second, best of the repetitions
};
// Streams a buffer of `bytes` (rounded down to whole 64-byte lines), split in 1 MiB chunks handed out
// by Pool::chunks, at 1..max_threads. The sum is checked so the reads cannot be optimised away.
std::vector<Bandwidth> bench_memory_bandwidth(size_t bytes, int max_threads, int reps);

// A Qwen3 decoder's shape, enough to count the bytes one token reads.
// The shapes come from core/model_shapes.h; these two are the floors' rows.
inline const ModelShape& QWEN3_1_7B = *model_shape("1.7b");
inline const ModelShape& QWEN3_8B = *model_shape("8b");

// A weight format's block layout. The numbers come from quant's traits table
// (quant::weight_format); this layer sits below quant and holds none of its own.
struct QuantFormat {
    std::string name;  // "Q1_0"
    int block_bytes = 0, block_weights = 0;
};

// Bytes one decode step reads from the weights at zero context: every matmul weight of every layer
// and the output matrix in the quantized format, one embedding row, the f32 norm vectors.
// (The KV cache adds 2 * layers * kv_heads * head_dim * 4 bytes per cached position on top.)
uint64_t bytes_per_token(const ModelShape& m, const QuantFormat& q);
// The matmul weights alone (what the weights-read floor counts), for the documentation's table.
uint64_t quantized_weights(const ModelShape& m);

// `bankml bench pool|memory [--json] ...`: print the tables (or one JSON document).
int bench_pool_main(const std::vector<std::string>& args);
// The floors are printed for each format given, on the 1.7B and 8B shapes.
int bench_memory_main(const std::vector<std::string>& args, const std::vector<QuantFormat>& formats);

}  // namespace bankml::par
