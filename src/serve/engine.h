// The generation engine behind `bankml serve`: N slots, each a model with its own key/value cache,
// fed from one FIFO queue of jobs. A job is one request's prompt, sampler and stopping options; it
// runs model::generate() on whichever slot takes it, from an empty cache, with its own sampler, so
// its tokens depend on nothing but the request (the forward pass gives a row the same bits at any
// thread count, and no state crosses from one request to the next).
//
// Slots take turns on the machine's cores, one batched evaluation (model::decode_batch) at a time:
// each turn runs the decoded token of every slot waiting, plus pieces of waiting prompts in
// arrival order, up to 64 tokens, as one product per matrix for all of them. A turn starts once
// every generating slot has asked (or a short gather window has passed), so it is as full as the
// load allows. A column's bits depend neither on the batch nor on where a prompt is cut, so
// batching changes no token.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
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
    uint64_t steps = 0, step_tokens = 0;  // turns of the batched forward pass, and the tokens they ran
    int last_batch = 0, max_batch = 0;    // sequences in the last turn and in the fullest one
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

    // The turn: evaluations waiting in the order they asked, whether one is running, and how many
    // slots are inside generate() (each will ask again soon, unless it finishes).
    struct Eval;
    void run_turn(std::unique_lock<std::mutex>& l);
    mutable std::mutex turn_mu_;
    std::condition_variable turn_cv_;
    std::deque<Eval*> waiting_;
    bool evaluating_ = false;
    int generating_ = 0;
    uint64_t steps_ = 0, step_tokens_ = 0;
    int last_batch_ = 0, max_batch_ = 0;

public:
    // Evaluates tokens on slot model m when its turn comes (see above); sets logits to the last
    // token's. Rethrows the evaluation's error.
    void evaluate(model::Model& m, std::span<const int32_t> tokens, std::vector<float>& logits);
    void generating(int delta);
};

}  // namespace bankml::serve
