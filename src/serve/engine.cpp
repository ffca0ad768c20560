#include "serve/engine.h"

#include <algorithm>
#include <exception>

#include "core/error.h"

namespace bankml::serve {

namespace {

using Clock = std::chrono::steady_clock;

// Thrown from inside generate() to leave it: the client left or the deadline passed.
struct Interrupted {
    bool deadline;
};

constexpr size_t RECENT = 16;
// How long a turn of decode steps waits at most for generating slots that have not asked yet. A
// slot samples and streams its last token between two steps, which takes a few milliseconds, but
// on a loaded machine its thread may wait that long again for a core: a shorter window splits
// the batch, and each part then costs nearly a whole step.
constexpr auto GATHER = std::chrono::milliseconds(250);
// Tokens per turn: one pass of the batched forward pass (model::decode_batch's).
constexpr size_t TURN_TOKENS = 64;

// A slot's model as generate() sees it: each evaluation waits for its turn, and a cancelled or
// expired job stops before its next one.
class SlotLogits : public model::LogitSource {
public:
    SlotLogits(model::Model& m, Engine& e, Job& j) : m_(m), e_(e), j_(j) {}
    int n_vocab() const override { return m_.n_vocab(); }
    int n_ctx() const override { return m_.n_ctx(); }
    int n_past() const override { return m_.n_past(); }
    void eval(std::span<const int32_t> tokens, std::vector<float>& logits) override {
        if (j_.cancel.load()) throw Interrupted{false};
        if (Clock::now() >= j_.deadline) throw Interrupted{true};
        if (!first_) ++decoded_;
        first_ = false;
        e_.evaluate(m_, tokens, logits);
    }
    // Tokens sampled so far when generate() was left by an interruption: every sampled token but
    // the last was evaluated, and the interruption came instead of the last one's evaluation.
    int sampled_at_interrupt() const { return decoded_ + 1; }

private:
    model::Model& m_;
    Engine& e_;
    Job& j_;
    bool first_ = true;
    int decoded_ = 0;
};

}  // namespace

bool Job::take(std::string& out, int ms) {
    std::unique_lock<std::mutex> l(mu);
    if (pending.empty() && !done) cv.wait_for(l, std::chrono::milliseconds(ms), [&] { return !pending.empty() || done; });
    out.swap(pending);
    pending.clear();
    return done && pending.empty();
}

Engine::Engine(std::vector<std::unique_ptr<model::Model>> models, const model::Tokenizer& tok)
    : models_(std::move(models)), tok_(tok) {
    if (models_.empty()) throw Error("serve: no slots");
    totals_.slots = int(models_.size());
    for (int i = 0; i < int(models_.size()); ++i) threads_.emplace_back([this, i] { slot_loop(i); });
}

Engine::~Engine() { stop(); }

int Engine::n_ctx() const { return models_[0]->n_ctx(); }

struct Engine::Eval {
    model::Model* m;
    std::span<const int32_t> tokens;
    std::vector<float>* logits;
    Clock::time_point asked;
    size_t at = 0;  // tokens evaluated so far (a prompt goes in pieces)
    bool done = false;
    std::exception_ptr error;
};

void Engine::generating(int delta) {
    {
        std::lock_guard<std::mutex> l(turn_mu_);
        generating_ += delta;
    }
    turn_cv_.notify_all();
}

// Whichever waiting slot finds the cores free and the turn ready runs it (its own evaluation may
// or may not be in it); the others sleep until theirs is done.
void Engine::evaluate(model::Model& m, std::span<const int32_t> tokens, std::vector<float>& logits) {
    Eval e{&m, tokens, &logits, Clock::now(), 0, false, nullptr};
    std::unique_lock<std::mutex> l(turn_mu_);
    waiting_.push_back(&e);
    turn_cv_.notify_all();
    while (!e.done) {
        if (evaluating_) {
            turn_cv_.wait(l);
            continue;
        }
        // Not done and no turn running: e is waiting, so the queue is not empty.
        Clock::time_point until = Clock::time_point::max();
        for (const Eval* w : waiting_) until = std::min(until, w->asked + GATHER);
        if (int(waiting_.size()) >= generating_ || Clock::now() >= until) run_turn(l);
        else turn_cv_.wait_until(l, until);
    }
    if (e.error) std::rethrow_exception(e.error);
}

// One turn, entered and left with l held (released while the cores work): every waiting decoded
// token, then pieces of the waiting prompts in the order they came, up to TURN_TOKENS tokens, as
// one model::decode_batch. A prompt's rest waits for the next turn.
void Engine::run_turn(std::unique_lock<std::mutex>& l) {
    evaluating_ = true;
    struct Part {
        Eval* e;
        size_t n;
        bool last;
    };
    std::vector<Part> turn;
    size_t budget = TURN_TOKENS;
    for (Eval* e : waiting_)
        if (e->tokens.size() == 1) {
            turn.push_back({e, 1, true});
            budget -= std::min<size_t>(budget, 1);
        }
    for (Eval* e : waiting_) {
        if (e->tokens.size() == 1) continue;
        if (!budget && !turn.empty()) break;
        // A card runs its prompt whole (decode_batch hands it to eval_into).
        const size_t left = e->tokens.size() - e->at, n = e->m->on_gpu() ? left : std::min(left, std::max<size_t>(budget, 1));
        turn.push_back({e, n, n == left});
        budget -= std::min(budget, n);
    }
    l.unlock();
    std::vector<model::DecodeSeq> seqs;
    std::vector<int> before;
    size_t tokens = 0;
    for (const Part& p : turn) {
        seqs.push_back({p.e->m, p.e->tokens.subspan(p.e->at, p.n), p.last ? p.e->logits : nullptr});
        before.push_back(p.e->m->n_past());
        tokens += p.n;
    }
    try {
        model::decode_batch(seqs);
    } catch (...) {
        // A refused step changed nothing: each part again on its own, so that the error reaches
        // only the slot it belongs to (a step that stopped half way has advanced the parts it
        // finished).
        for (size_t i = 0; i < turn.size(); ++i) {
            if (turn[i].e->m->n_past() != before[i]) continue;
            try {
                model::decode_batch(std::span<const model::DecodeSeq>(&seqs[i], 1));
            } catch (...) {
                turn[i].e->error = std::current_exception();
            }
        }
    }
    l.lock();
    steps_++;
    step_tokens_ += tokens;
    last_batch_ = int(turn.size());
    max_batch_ = std::max(max_batch_, last_batch_);
    const Clock::time_point now = Clock::now();
    for (const Part& p : turn) {
        p.e->at += p.n;
        p.e->asked = now;  // a prompt's rest gathers the next turn's decoded tokens too
        if (p.last || p.e->error) {
            p.e->done = true;
            waiting_.erase(std::find(waiting_.begin(), waiting_.end(), p.e));
        }
    }
    evaluating_ = false;
    turn_cv_.notify_all();
}

void Engine::submit(const std::shared_ptr<Job>& job) {
    {
        std::lock_guard<std::mutex> l(mu_);
        if (stopping_) throw Error("serve: the server is stopping");
        queue_.push_back(job);
    }
    cv_.notify_one();
}

void Engine::stop() {
    {
        std::lock_guard<std::mutex> l(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
}

Stats Engine::stats() const {
    Stats s;
    {
        std::lock_guard<std::mutex> l(mu_);
        s = totals_;
        s.queue = int(queue_.size());
        s.slots_busy = busy_;
        s.uptime_s = std::chrono::duration<double>(Clock::now() - t0_).count();
    }
    std::lock_guard<std::mutex> l(turn_mu_);
    s.steps = steps_;
    s.step_tokens = step_tokens_;
    s.last_batch = last_batch_;
    s.max_batch = max_batch_;
    return s;
}

void Engine::slot_loop(int i) {
    for (;;) {
        std::shared_ptr<Job> job;
        {
            std::unique_lock<std::mutex> l(mu_);
            cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping, nothing left to do
            job = queue_.front();
            queue_.pop_front();
            ++busy_;
        }
        run_job(i, *job);
        std::lock_guard<std::mutex> l(mu_);
        --busy_;
    }
}

void Engine::run_job(int i, Job& job) {
    model::Model& m = *models_[i];
    {
        std::lock_guard<std::mutex> l(job.mu);
        job.started = true;
    }
    m.reset();
    model::Sampler sampler(job.sampling);
    SlotLogits src(m, *this, job);
    std::string text;  // what was streamed, for an interrupted job's result
    model::GenerateResult r;
    std::string error;
    bool interrupted = false, by_deadline = false;
    // While inside generate(), the slot counts among those a decode turn waits for.
    struct Generating {
        Engine& e;
        explicit Generating(Engine& eng) : e(eng) { e.generating(1); }
        ~Generating() { e.generating(-1); }
    };
    try {
        Generating g(*this);
        r = model::generate(src, tok_, sampler, job.prompt, job.gen, [&](std::string_view t) {
            text += t;
            {
                std::lock_guard<std::mutex> l(job.mu);
                job.pending += t;
            }
            job.cv.notify_all();
        });
    } catch (const Interrupted& e) {
        interrupted = true;
        by_deadline = e.deadline;
        r = model::GenerateResult{};
        r.text = text;
        r.n_prompt = int(job.prompt.size());
        r.ids.resize(size_t(src.sampled_at_interrupt()));
        r.reason = model::StopReason::Length;
    } catch (const std::exception& e) {
        error = e.what();
    }
    {
        std::lock_guard<std::mutex> l(mu_);
        totals_.requests++;
        if (error.empty()) {
            totals_.tokens_in += uint64_t(r.n_prompt);
            totals_.tokens_out += uint64_t(r.ids.size());
            if (!interrupted && r.gen_seconds > 0) {
                totals_.recent_tps.push_back(r.gen_tps());
                if (totals_.recent_tps.size() > RECENT) totals_.recent_tps.erase(totals_.recent_tps.begin());
            }
        } else {
            totals_.failed++;
        }
        if (interrupted && !by_deadline) totals_.cancelled++;
    }
    {
        std::lock_guard<std::mutex> l(job.mu);
        job.result = std::move(r);
        job.error = error;
        job.cancelled = interrupted && !by_deadline;
        job.timed_out = by_deadline;
        job.done = true;
    }
    job.cv.notify_all();
}

}  // namespace bankml::serve
