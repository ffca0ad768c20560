#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "par/pool.h"
#include "test.h"

using bankml::par::Pool;

TEST(rows_cover_every_row_once_at_any_thread_count) {
    for (int threads : {1, 2, 3, 5}) {
        Pool pool(threads);
        for (int rep = 0; rep < 200; ++rep) {
            size_t rows = size_t(rep * 37 % 1001);  // 0 .. 1000, reusing the pool 200 times
            if (rep == 1) rows = 1000;
            std::vector<float> out(rows + 8, -1.0f);
            std::vector<std::atomic<int>> hits(rows + 8);
            pool.rows(rows, std::span<float>(out.data(), rows), [&](size_t r0, std::span<float> chunk) {
                for (size_t i = 0; i < chunk.size(); ++i) {
                    hits[r0 + i].fetch_add(1);
                    chunk[i] = float(r0 + i);
                }
            });
            bool ok = true;
            for (size_t r = 0; r < rows; ++r) ok &= hits[r].load() == 1 && out[r] == float(r);
            for (size_t r = rows; r < rows + 8; ++r) ok &= hits[r].load() == 0 && out[r] == -1.0f;
            if (!CHECK(ok)) return;
        }
    }
}

TEST(pool_run_calls_each_worker_id_once) {
    for (int threads : {0, 1, 2, 3, 5}) {
        Pool pool(threads);
        int n = threads < 1 ? 1 : threads;
        CHECK_EQ(pool.threads(), n);
        for (int rep = 0; rep < 100; ++rep) {
            std::vector<std::atomic<int>> ids(size_t(n) + 1);
            pool.run([&](int id) { ids[size_t(id)].fetch_add(1); });
            for (int i = 0; i < n; ++i) CHECK_EQ(ids[size_t(i)].load(), 1);
            CHECK_EQ(ids[size_t(n)].load(), 0);
        }
    }
}

// Phase two of every worker sees every worker's phase-one writes, also with more threads than
// this machine has cores (the waiting workers yield).
TEST(phases_order_the_two_phases_of_one_run) {
    for (int threads : {1, 2, 3, 8}) {
        Pool pool(threads);
        for (int rep = 0; rep < 50; ++rep) {
            std::vector<int> first(size_t(threads), -1);  // plain ints: the barrier orders them
            std::vector<int> seen(size_t(threads), 0);
            bankml::par::Phases phases(threads);
            pool.run([&](int w) {
                phases.first([&] { first[size_t(w)] = rep * 100 + w; });
                int ok = 0;
                for (int i = 0; i < threads; ++i) ok += first[size_t(i)] == rep * 100 + i;
                seen[size_t(w)] = ok;
            });
            for (int w = 0; w < threads; ++w)
                if (!CHECK_EQ(seen[size_t(w)], threads)) return;
        }
    }
}

// A first-phase share that throws: the others pass the barrier (no worker waits forever), run()
// rethrows the error, and the pool stays usable.
TEST(phases_a_throwing_share_reaches_the_caller_without_a_hang) {
    for (int threads : {2, 3, 8}) {
        Pool pool(threads);
        std::atomic<int> second{0};
        bankml::par::Phases phases(threads);
        bool caught = false;
        try {
            pool.run([&](int w) {
                phases.first([&] {
                    if (w == threads - 1) throw std::runtime_error("share failed");
                });
                second.fetch_add(1);
            });
        } catch (const std::runtime_error& e) {
            caught = std::string(e.what()) == "share failed";
        }
        CHECK(caught);
        CHECK_EQ(second.load(), threads - 1);
        std::atomic<int> again{0};
        pool.run([&](int) { again.fetch_add(1); });
        CHECK_EQ(again.load(), threads);
    }
}

TEST(pool_exception_reaches_caller_after_all_workers_and_pool_stays_usable) {
    for (int threads : {1, 2, 3}) {
        Pool pool(threads);
        for (int thrower = 0; thrower < threads; ++thrower) {
            std::atomic<int> finished{0};
            bool caught = false;
            try {
                pool.run([&](int id) {
                    if (id == thrower) throw std::runtime_error("worker " + std::to_string(id));
                    finished.fetch_add(1);
                });
            } catch (const std::runtime_error& e) {
                caught = std::string(e.what()) == "worker " + std::to_string(thrower);
            }
            CHECK(caught);
            CHECK_EQ(finished.load(), threads - 1);
            std::atomic<int> after{0};
            pool.run([&](int) { after.fetch_add(1); });
            CHECK_EQ(after.load(), threads);
        }
    }
}

TEST(pool_rows_rejects_an_output_too_small) {
    Pool pool(2);
    std::vector<float> out(10);
    CHECK_THROWS(pool.rows(11, std::span<float>(out), [](size_t, std::span<float>) {}), "11 rows");
}
