#include "par/pool.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "core/cli.h"

#include <climits>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

// Raw futexes: libstdc++ 12's std::atomic::wait loses wake-ups under this pattern (seen as a
// deadlock here), and a futex is the OS primitive it would wrap anyway.
static void futex_wait(std::atomic<uint32_t>& a, uint32_t val) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&a), FUTEX_WAIT_PRIVATE, val, nullptr, nullptr, 0);
}
static void futex_wake_all(std::atomic<uint32_t>& a) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax() { _mm_pause(); }
#else
static inline void cpu_relax() {}
#endif

namespace bankml::par {

// Returns once counter >= target. Spins a while, then gives up its time slice at each check (more
// threads than cores: the thread it waits for may need the core).
static void spin_until(const std::atomic<int>& counter, int target) {
    for (int spins = 0; counter.load(std::memory_order_acquire) < target; ++spins)
        if (spins < 256) cpu_relax();
        else std::this_thread::yield();
}

void Phases::first(FnRef<void()> f) {
    try {
        f();
    } catch (...) {
        done_.fetch_add(1, std::memory_order_release);
        throw;
    }
    done_.fetch_add(1, std::memory_order_release);
    spin_until(done_, workers_);
}

// How long a worker (or the waiting caller) spins before it sleeps. Matmuls in a decode step come
// back to back, a few microseconds apart: a short spin catches the next one without a futex wake-up.
static constexpr auto SPIN = std::chrono::microseconds(50);

int Pool::env_threads() {
    unsigned hw = std::thread::hardware_concurrency();
    int dflt = hw ? int(hw) : 1;
    const char* v = std::getenv("BANKML_THREADS");
    if (!v) return dflt;
    auto n = cli::parse_int(v);
    if (!n || *n < 1 || *n > 4096) {
        static std::once_flag once;
        std::call_once(once, [&] {
            std::fprintf(stderr, "bankml: ignoring BANKML_THREADS='%s' (wants a positive integer); using %d threads\n",
                         v, dflt);
        });
        return dflt;
    }
    return int(*n);
}

Pool Pool::from_env() { return Pool(env_threads()); }

Pool::Pool(int threads) : n_(threads < 1 ? 1 : threads), errors_(size_t(n_)) {
    workers_.reserve(size_t(n_ - 1));
    for (int i = 1; i < n_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

Pool::~Pool() {
    quit_.store(true);
    gen_.fetch_add(1);
    futex_wake_all(gen_);
    for (auto& t : workers_) t.join();
}

void Pool::worker_loop(int id) {
    uint32_t seen = 0;  // the generation at construction: a job posted before this thread started is still new
    while (true) {
        uint32_t g = gen_.load();
        if (g == seen) {
            auto t0 = std::chrono::steady_clock::now();
            int spins = 0;
            while ((g = gen_.load()) == seen) {
                cpu_relax();
                if (++spins % 64 == 0 && std::chrono::steady_clock::now() - t0 > SPIN) {
                    // Dekker-style handshake with run(): either run() sees us sleeping and notifies,
                    // or our wait sees the new generation. Both sides use seq_cst.
                    sleepers_.fetch_add(1);
                    futex_wait(gen_, seen);
                    sleepers_.fetch_sub(1);
                    t0 = std::chrono::steady_clock::now();
                }
            }
        }
        seen = g;
        if (quit_.load()) return;
        try {
            (*job_)(id);
        } catch (...) {
            errors_[size_t(id)] = std::current_exception();
        }
        if (remaining_.fetch_sub(1) == 1 && caller_sleeping_.load()) futex_wake_all(remaining_);
    }
}

void Pool::wait_for_workers() {
    auto t0 = std::chrono::steady_clock::now();
    int spins = 0;
    uint32_t r;
    while ((r = remaining_.load()) != 0) {
        cpu_relax();
        if (++spins % 64 == 0 && std::chrono::steady_clock::now() - t0 > SPIN) {
            caller_sleeping_.store(1);
            while ((r = remaining_.load()) != 0) futex_wait(remaining_, r);
            caller_sleeping_.store(0);
            break;
        }
    }
}

void Pool::run(FnRef<void(int)> f) {
    if (n_ == 1) {
        f(0);
        return;
    }
    job_ = &f;
    remaining_.store(uint32_t(n_ - 1));
    gen_.fetch_add(1);
    if (sleepers_.load() > 0) futex_wake_all(gen_);
    std::exception_ptr mine;
    try {
        f(0);
    } catch (...) {
        mine = std::current_exception();
    }
    wait_for_workers();
    job_ = nullptr;
    std::exception_ptr first = mine;
    for (auto& e : errors_) {
        if (e && !first) first = e;
        e = nullptr;
    }
    if (first) std::rethrow_exception(first);
}

void Pool::chunks(size_t items, size_t chunk, FnRef<void(size_t, size_t)> f) {
    if (chunk == 0) chunk = 1;
    if (n_ == 1 || items <= chunk) {
        if (items) f(0, items);
        return;
    }
    std::atomic<size_t> next{0};
    run([&](int) {
        while (true) {
            size_t i0 = next.fetch_add(chunk);
            if (i0 >= items) break;
            size_t i1 = i0 + chunk < items ? i0 + chunk : items;
            f(i0, i1);
        }
    });
}

void Pool::rows(size_t rows, std::span<float> out, FnRef<void(size_t, std::span<float>)> f) {
    if (rows > out.size())
        throw std::out_of_range("Pool::rows: " + std::to_string(rows) + " rows into an output of " +
                                std::to_string(out.size()));
    if (n_ == 1 || rows <= CHUNK_ROWS) {
        f(0, out.subspan(0, rows));
        return;
    }
    chunks(rows, CHUNK_ROWS, [&](size_t r0, size_t r1) { f(r0, out.subspan(r0, r1 - r0)); });
}

}  // namespace bankml::par
