// The generation engine behind `bankml serve`: N slots, each a model with its own key/value cache,
// fed from one FIFO queue of jobs. A job is one request's prompt, sampler and stopping options; it
// runs model::generate() on whichever slot takes it, from an empty cache, with its own sampler, so
// its tokens depend on nothing but the request (the forward pass gives a row the same bits at any
// thread count, and no state crosses from one request to the next).
//
// Busy slots take turns one evaluation at a time (a prompt, or one decoded token) in arrival
// order: the machine's cores serve one product at a time instead of N pools fighting for them.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/forward.h"
#include "model/generate.h"
#include "model/sampler.h"
#include "model/tokenizer.h"

namespace bankml::serve {

struct Job {
    // In: set before submit().
    std::vector<int32_t> prompt;
    model::SamplerParams sampling;
    model::GenerateOptions gen;
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();

    // Set by the connection: stop generating now (the client left).
    std::atomic<bool> cancel{false};

    // Out, under mu: text as it becomes final, then done.
    std::mutex mu;
    std::condition_variable cv;
    std::string pending;           // text not yet taken by the connection
    bool started = false;          // a slot took it
    bool done = false;
    bool timed_out = false;        // stopped at the deadline
    bool cancelled = false;
    std::string error;             // non-empty: generation failed
    model::GenerateResult result;  // valid when done and error is empty

    // Takes the text produced so far; waits up to `ms` for some. Returns whether the job is done.
    bool take(std::string& out, int ms);
};

struct Stats {
    uint64_t requests = 0, tokens_in = 0, tokens_out = 0, cancelled = 0, failed = 0;
    int queue = 0, slots_busy = 0, slots = 0;
    std::vector<double> recent_tps;  // decode tokens/s of the last requests, newest last
    double uptime_s = 0;
};

class Engine {
public:
    // The models must be open on the same file (one per slot).
    Engine(std::vector<std::unique_ptr<model::Model>> models, const model::Tokenizer& tok);
    ~Engine();
    void submit(const std::shared_ptr<Job>& job);
    // Finishes every queued and running job, then joins the slots.
    void stop();
    Stats stats() const;
    int slots() const { return int(models_.size()); }
    int n_ctx() const;
    const model::Tokenizer& tokenizer() const { return tok_; }

private:
    void slot_loop(int i);
    void run_job(int i, Job& job);

    std::vector<std::unique_ptr<model::Model>> models_;
    const model::Tokenizer& tok_;
    std::vector<std::thread> threads_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> queue_;
    bool stopping_ = false;
    int busy_ = 0;
    Stats totals_;
    std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();

    // The turn: a ticket lock, so busy slots evaluate in the order they asked.
    std::mutex turn_mu_;
    std::condition_variable turn_cv_;
    uint64_t next_ticket_ = 0, serving_ = 0;

public:
    void turn_lock();
    void turn_unlock();
};

}  // namespace bankml::serve
