// The pool's benchmarks: the byte counts behind the per-token floor, and that the measurements
// run, cover every thread count and print what they promise (times are never asserted).
#include <cmath>

#include "core/json.h"
#include "par/bench.h"
#include "quant/bench.h"
#include "test.h"

using namespace bankml;

TEST(par_bench_bytes_per_token_follow_the_qwen3_shapes) {
    // q, k, v, o, gate, up, down per layer, then the vocab x d output matrix (tied or not, it is read).
    uint64_t w17 = 28ull * (2048ull * 2048 * 2 + 2 * 2048ull * 1024 + 3 * 2048ull * 6144) + 151936ull * 2048;
    uint64_t w8 = 36ull * (4096ull * 4096 * 2 + 2 * 4096ull * 1024 + 3 * 4096ull * 12288) + 151936ull * 4096;
    CHECK_EQ(par::quantized_weights(par::QWEN3_1_7B), w17);
    CHECK_EQ(par::quantized_weights(par::QWEN3_8B), w8);
    CHECK(par::QWEN3_1_7B.tied);
    CHECK(!par::QWEN3_8B.tied);
    // One 8B token reads 2.13 GB ternary, 1.06 GB 1-bit (docs/modules/par.md).
    uint64_t t8 = par::bytes_per_token(par::QWEN3_8B, quant::weight_format(quant::Type::Q2_0));
    uint64_t b8 = par::bytes_per_token(par::QWEN3_8B, quant::weight_format(quant::Type::Q1_0));
    CHECK_NEAR(double(t8) / 1e9, 2.13, 0.005);
    CHECK_NEAR(double(b8) / 1e9, 1.065, 0.005);
    // Quantized bytes are exact multiples of the block; norms add a little f32 on top.
    uint64_t q17 = (w17 + 2048) / 128 * 18;
    uint64_t norms17 = (28ull * (2 * 2048 + 2 * 128) + 2048) * 4;
    CHECK_EQ(par::bytes_per_token(par::QWEN3_1_7B, quant::weight_format(quant::Type::Q1_0)), q17 + norms17);
    CHECK_EQ(par::bytes_per_token(par::QWEN3_1_7B, quant::weight_format(quant::Type::Q2_0)), (w17 + 2048) / 64 * 18 + norms17);
}

TEST(par_bench_pool_overhead_has_a_row_per_thread_count) {
    auto rows = par::bench_pool_overhead(3, 40, 2);
    REQUIRE_EQ(rows.size(), size_t(3));
    for (int i = 0; i < 3; ++i) {
        CHECK_EQ(rows[size_t(i)].threads, i + 1);
        CHECK(std::isfinite(rows[size_t(i)].pool_us) && rows[size_t(i)].pool_us >= 0);
        CHECK(std::isfinite(rows[size_t(i)].asleep_us) && rows[size_t(i)].asleep_us >= 0);
        CHECK(std::isfinite(rows[size_t(i)].spawn_us) && rows[size_t(i)].spawn_us >= 0);
    }
}

TEST(par_bench_memory_reads_the_whole_buffer_at_each_thread_count) {
    auto bw = par::bench_memory_bandwidth(8 << 20, 2, 1);  // checks the buffer's sum itself
    REQUIRE_EQ(bw.size(), size_t(2));
    CHECK_EQ(bw[0].threads, 1);
    CHECK_EQ(bw[1].threads, 2);
    CHECK(bw[0].gb_per_s > 0 && std::isfinite(bw[0].gb_per_s));
    CHECK_THROWS(par::bench_memory_bandwidth(63, 1, 1), "too small");
}

TEST(par_bench_commands_print_json_and_reject_bad_flags) {
    auto p = bt::run_cmd(bt::bankml_bin() + " bench pool --threads 2 --runs 40 --json");
    REQUIRE_EQ(p.code, 0);
    auto doc = json::parse(p.out);
    CHECK_EQ(doc["bench"].as_string(), "pool");
    REQUIRE_EQ(doc["rows"].size(), size_t(2));
    CHECK_EQ(doc["rows"][1]["threads"].as_int(), 2);
    CHECK(doc["rows"][1]["spawn_us"].is_number());
    auto m = bt::run_cmd(bt::bankml_bin() + " bench memory --threads 2 --mib 4 --reps 1 --json");
    REQUIRE_EQ(m.code, 0);
    auto md = json::parse(m.out);
    CHECK_EQ(md["bandwidth"].size(), size_t(2));
    REQUIRE_EQ(md["floors"].size(), size_t(4));
    CHECK_EQ(md["floors"][3]["model"].as_string(), "Qwen3-8B");
    CHECK_EQ(md["floors"][3]["format"].as_string(), "Q2_0");
    CHECK_EQ(md["floors"][3]["bytes_per_token"].as_uint(), par::bytes_per_token(par::QWEN3_8B, quant::weight_format(quant::Type::Q2_0)));
    auto t = bt::run_cmd(bt::bankml_bin() + " bench memory --mib 4 --threads 1");
    CHECK_EQ(t.code, 0);
    CHECK(t.out.find("Qwen3-1.7B   Q1_0") != std::string::npos);
    CHECK_EQ(bt::run_cmd(bt::bankml_bin() + " bench pool --runs x").code, 2);
    CHECK_EQ(bt::run_cmd(bt::bankml_bin() + " bench frob").code, 2);
}
