#include "par/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "core/cli.h"
#include "core/error.h"
#include "core/json.h"
#include "par/pool.h"

namespace bankml::par {

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<PoolOverhead> bench_pool_overhead(int max_threads, int runs, int batches) {
    max_threads = std::max(1, max_threads);
    runs = std::max(10, runs);
    batches = std::max(1, batches);
    std::vector<PoolOverhead> out;
    for (int t = 1; t <= max_threads; ++t) {
        std::atomic<uint64_t> calls{0};
        auto job = [&](int) { calls.fetch_add(1, std::memory_order_relaxed); };
        std::vector<double> pool_us, spawn_us, asleep_us;
        int asleep_runs = std::max(5, runs / 40);
        {
            Pool pool(t);
            for (int i = 0; i < runs / 10; ++i) pool.run(job);  // wake every worker once first
            for (int b = 0; b < batches; ++b) {
                auto t0 = Clock::now();
                for (int i = 0; i < runs; ++i) pool.run(job);
                pool_us.push_back(seconds_since(t0) * 1e6 / runs);
            }
            // Past the pool's 50 us spin the workers sleep on the futex: the cost of a run after a pause.
            for (int i = 0; i < asleep_runs; ++i) {
                std::this_thread::sleep_for(std::chrono::microseconds(300));
                auto t0 = Clock::now();
                pool.run(job);
                asleep_us.push_back(seconds_since(t0) * 1e6);
            }
        }
        int spawn_runs = std::max(10, runs / 10);
        for (int b = 0; b < batches; ++b) {
            auto t0 = Clock::now();
            for (int i = 0; i < spawn_runs; ++i) {
                std::vector<std::thread> ts;
                ts.reserve(size_t(t - 1));
                for (int w = 1; w < t; ++w) ts.emplace_back(job, w);
                job(0);
                for (auto& th : ts) th.join();
            }
            spawn_us.push_back(seconds_since(t0) * 1e6 / spawn_runs);
        }
        uint64_t expected = uint64_t(t) * (uint64_t(runs / 10) + uint64_t(runs) * batches + uint64_t(asleep_runs) + uint64_t(spawn_runs) * batches);
        if (calls.load() != expected)
            throw Error("bench_pool_overhead: " + std::to_string(calls.load()) + " job calls, expected " +
                        std::to_string(expected));
        out.push_back({t, median(pool_us), median(asleep_us), median(spawn_us)});
    }
    return out;
}

// Sums 64-bit words with four independent accumulators: the loop is bound by loads, not adds.
static uint64_t sum_words(const uint64_t* p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        a += p[i] ^ p[i + 4];
        b += p[i + 1] ^ p[i + 5];
        c += p[i + 2] ^ p[i + 6];
        d += p[i + 3] ^ p[i + 7];
    }
    for (; i < n; ++i) a += p[i];
    return a + b + c + d;
}

std::vector<Bandwidth> bench_memory_bandwidth(size_t bytes, int max_threads, int reps) {
    constexpr size_t CHUNK_WORDS = (1u << 20) / 8;  // 1 MiB per claim: far above one chunk's claim cost
    size_t words = bytes / 64 * 8;
    if (words == 0) throw Error("bench_memory_bandwidth: a buffer of " + std::to_string(bytes) + " bytes is too small");
    max_threads = std::max(1, max_threads);
    reps = std::max(1, reps);
    std::unique_ptr<uint64_t[]> buf(new uint64_t[words]);
    uint64_t* p = buf.get();
    std::vector<Bandwidth> out;
    {
        // Written before any timing, so that every page is mapped; the pool spreads the first touch.
        Pool pool(max_threads);
        pool.chunks(words, CHUNK_WORDS, [&](size_t i0, size_t i1) {
            for (size_t i = i0; i < i1; ++i) p[i] = i * 0x9E3779B97F4A7C15ull;
        });
    }
    uint64_t expected = 0;
    for (size_t i = 0; i < words; i += 8)
        for (size_t k = 0; k < 4; ++k) expected += ((i + k) * 0x9E3779B97F4A7C15ull) ^ ((i + k + 4) * 0x9E3779B97F4A7C15ull);
    for (int t = 1; t <= max_threads; ++t) {
        Pool pool(t);
        double best = 0;
        for (int r = 0; r < reps; ++r) {
            std::vector<uint64_t> partial(size_t(t) * 8, 0);  // one cache line per worker
            std::atomic<size_t> next{0};
            auto t0 = Clock::now();
            pool.run([&](int id) {
                uint64_t s = 0;
                while (true) {
                    size_t i0 = next.fetch_add(CHUNK_WORDS);
                    if (i0 >= words) break;
                    s += sum_words(p + i0, std::min(CHUNK_WORDS, words - i0));
                }
                partial[size_t(id) * 8] = s;
            });
            double sec = seconds_since(t0);
            uint64_t total = 0;
            for (int w = 0; w < t; ++w) total += partial[size_t(w) * 8];
            if (total != expected) throw Error("bench_memory_bandwidth: the sum of the buffer is wrong");
            best = std::max(best, double(words * 8) / sec / 1e9);
        }
        out.push_back({t, best});
    }
    return out;
}


uint64_t quantized_weights(const ModelShape& m) {
    uint64_t d = uint64_t(m.embd), q = uint64_t(m.q_rows()),
             kv = uint64_t(m.kv_rows()), ff = uint64_t(m.ff);
    uint64_t per_layer = d * q + 2 * d * kv + q * d + 3 * d * ff;  // q, k, v, o; gate, up, down
    // The output matmul reads a vocab x d matrix whether it is token_embd (tied) or its own.
    return uint64_t(m.layers) * per_layer + uint64_t(m.vocab) * d;
}

uint64_t bytes_per_token(const ModelShape& m, const QuantFormat& q) {
    uint64_t d = uint64_t(m.embd);
    uint64_t weights = quantized_weights(m) + d;  // + the token's embedding row
    uint64_t quant = weights / uint64_t(q.block_weights) * uint64_t(q.block_bytes);
    // f32 norms: attn_norm and ffn_norm (d each), q_norm and k_norm (head_dim each); output_norm.
    uint64_t norms = (uint64_t(m.layers) * (2 * d + 2 * uint64_t(m.head_dim)) + d) * 4;
    return quant + norms;
}

// ---------------------------------------------------------------------------------------------
// The command-line side: `bankml bench pool` / `bankml bench memory`.

static int default_max_threads() {
    unsigned hw = std::thread::hardware_concurrency();
    return std::max(2, int(hw));
}

int bench_pool_main(const std::vector<std::string>& args) {
    cli::Args a(args, {{"--json", false}, {"--threads", true}, {"--runs", true}});
    int maxt = int(a.get_int("threads", default_max_threads(), 1, 256));
    int runs = int(a.get_int("runs", 20000, 10, 10000000));
    auto rows = bench_pool_overhead(maxt, runs);
    if (a.has("json")) {
        json::Value arr = json::Value::array();
        for (const auto& r : rows)
            arr.push(json::Value().set("threads", r.threads).set("pool_us", r.pool_us).set("asleep_us", r.asleep_us)
                         .set("spawn_us", r.spawn_us)
                         .set("ratio", r.spawn_us / r.pool_us));
        json::Value doc;
        doc.set("bench", "pool").set("runs", runs).set("hardware_threads", int(std::thread::hardware_concurrency()))
            .set("rows", arr);
        std::printf("%s\n", json::write(doc, 2).c_str());
        return 0;
    }
    std::printf("pool overhead: microseconds per call of an empty job (medians; %d back-to-back runs x 5 batches,\n"
                "%d runs after a 300 us pause, %d spawns x 5 batches)\n",
                runs, std::max(5, runs / 40), std::max(10, runs / 10));
    std::printf("%8s %14s %14s %14s %10s\n", "threads", "Pool::run", "after pause", "spawn+join", "spawn/run");
    for (const auto& r : rows) {
        if (r.threads == 1)  // both are a direct call: no ratio to speak of
            std::printf("%8d %11.2f us %11.2f us %11.2f us %10s\n", r.threads, r.pool_us, r.asleep_us, r.spawn_us, "-");
        else
            std::printf("%8d %11.2f us %11.2f us %11.2f us %9.1fx\n", r.threads, r.pool_us, r.asleep_us, r.spawn_us,
                        r.spawn_us / r.pool_us);
    }
    std::printf("(spawn+join: threads-1 std::threads per call, the caller as worker 0, as the pool does)\n");
    return 0;
}

int bench_memory_main(const std::vector<std::string>& args, const std::vector<QuantFormat>& formats) {
    cli::Args a(args, {{"--json", false}, {"--threads", true}, {"--mib", true}, {"--reps", true}});
    int maxt = int(a.get_int("threads", default_max_threads(), 1, 256));
    size_t mib = size_t(a.get_int("mib", 768, 1, 1 << 20));
    int reps = int(a.get_int("reps", 3, 1, 1000));
    auto bw = bench_memory_bandwidth(mib << 20, maxt, reps);
    double best = 0;
    for (const auto& b : bw) best = std::max(best, b.gb_per_s);
    struct Case { const ModelShape* m; const QuantFormat* q; };
    std::vector<Case> cases;
    for (const ModelShape* m : {&QWEN3_1_7B, &QWEN3_8B})
        for (const QuantFormat& q : formats) cases.push_back({m, &q});
    if (a.has("json")) {
        json::Value doc;
        doc.set("bench", "memory").set("buffer_mib", (unsigned long long)mib).set("reps", reps);
        json::Value rows = json::Value::array();
        for (const auto& b : bw) rows.push(json::Value().set("threads", b.threads).set("gb_per_s", b.gb_per_s));
        doc.set("bandwidth", rows);
        json::Value floors = json::Value::array();
        for (const auto& c : cases) {
            uint64_t bytes = bytes_per_token(*c.m, *c.q);
            floors.push(json::Value().set("model", c.m->title).set("format", c.q->name).set("bytes_per_token", bytes)
                            .set("ms_per_token", double(bytes) / (best * 1e9) * 1e3)
                            .set("tokens_per_s", best * 1e9 / double(bytes)));
        }
        doc.set("floors", floors);
        std::printf("%s\n", json::write(doc, 2).c_str());
        return 0;
    }
    std::printf("memory bandwidth: streaming reads of a %zu MiB buffer on the pool (best of %d)\n", mib, reps);
    std::printf("%8s %10s\n", "threads", "GB/s");
    for (const auto& b : bw) std::printf("%8d %10.2f\n", b.threads, b.gb_per_s);
    std::printf("\nper-token floor at %.2f GB/s (the weights one decode step reads, zero context)\n", best);
    std::printf("%-12s %-6s %16s %12s %12s\n", "model", "format", "bytes/token", "ms/token", "tokens/s");
    for (const auto& c : cases) {
        uint64_t bytes = bytes_per_token(*c.m, *c.q);
        std::printf("%-12s %-6s %16llu %12.2f %12.1f\n", c.m->title, c.q->name.c_str(), (unsigned long long)bytes,
                    double(bytes) / (best * 1e9) * 1e3, best * 1e9 / double(bytes));
    }
    return 0;
}

}  // namespace bankml::par
