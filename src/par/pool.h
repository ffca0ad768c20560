// The persistent thread pool and row scheduler (docs/modules/par.md). Workers are spawned once and woken
// for each job; rows() hands out chunks of CHUNK_ROWS rows from an atomic counter. The scheduler
// only decides which thread computes a row, so results never depend on the thread count.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace bankml::par {

inline constexpr size_t CHUNK_ROWS = 16;

// A non-owning reference to a callable, so that a job costs no allocation.
template <class Sig>
class FnRef;
template <class R, class... A>
class FnRef<R(A...)> {
public:
    template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FnRef>>>
    FnRef(F&& f) : obj_((void*)std::addressof(f)), call_([](void* o, A... a) -> R {
        return (*(std::remove_reference_t<F>*)o)(std::forward<A>(a)...);
    }) {}
    R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

private:
    void* obj_;
    R (*call_)(void*, A...);
};

class Pool {
public:
    // threads below 1 is taken as 1; the caller's thread is worker 0, so Pool(1) spawns nothing.
    explicit Pool(int threads);
    // BANKML_THREADS if it parses as a positive integer, else the machine's available parallelism.
    // An unparsable value is reported once on stderr and ignored.
    static Pool from_env();
    static int env_threads();
    ~Pool();
    Pool(const Pool&) = delete;
    Pool& operator=(const Pool&) = delete;

    int threads() const { return n_; }

    // Calls f(worker_id) once on every worker (ids 0..threads-1) and returns when all are done.
    // An exception thrown by f on any worker is rethrown here after every worker has finished.
    // Not reentrant: f must not call run() or rows() on the same pool.
    void run(FnRef<void(int)> f);

    // Fills out[0..rows): f(r0, chunk) computes rows r0 .. r0 + chunk.size(). Chunks of CHUNK_ROWS
    // are claimed dynamically. One thread, or rows <= CHUNK_ROWS: a direct call f(0, out[0..rows)).
    void rows(size_t rows, std::span<float> out, FnRef<void(size_t, std::span<float>)> f);

    // The same schedule over an abstract range of items (no output span): f(i0, i1).
    void chunks(size_t items, size_t chunk, FnRef<void(size_t, size_t)> f);

private:
    void worker_loop(int id);
    void wait_for_workers();

    int n_;
    std::vector<std::thread> workers_;
    // The job: a pointer to the caller's FnRef, valid while run() has not returned.
    const FnRef<void(int)>* job_ = nullptr;
    alignas(64) std::atomic<uint32_t> gen_{0};
    alignas(64) std::atomic<uint32_t> remaining_{0};
    alignas(64) std::atomic<int> sleepers_{0};
    std::atomic<int> caller_sleeping_{0};
    std::atomic<bool> quit_{false};
    std::vector<std::exception_ptr> errors_;
};

// A barrier between two phases of one Pool::run, whose workers all run: each worker calls
// first(f) with its share of the first phase, which returns once every worker's share has returned.
// A share that throws still counts as done and rethrows at once (run() then rethrows it to the
// caller), so no worker waits forever for it.
class Phases {
public:
    explicit Phases(int workers) : workers_(workers) {}
    void first(FnRef<void()> f);

private:
    std::atomic<int> done_{0};
    int workers_;
};

}  // namespace bankml::par
