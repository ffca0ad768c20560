#include "model/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace bankml::model {

const char* stop_reason_name(StopReason r) {
    switch (r) {
        case StopReason::EndOfGeneration: return "eog";
        case StopReason::Length: return "length";
        case StopReason::StopString: return "stop";
        case StopReason::ContextFull: return "context_full";
    }
    return "?";
}

namespace {

// Holds back text that could still become a stop string; reports when one appears.
class StopMatcher {
public:
    explicit StopMatcher(const std::vector<std::string>& stops) : stops_(stops) {}
    // Adds text; returns what can be shown now. `hit` is set when a stop string completed (the
    // returned text then ends just before it).
    std::string push(std::string_view s, bool& hit) {
        pending_ += s;
        hit = false;
        size_t cut = std::string::npos;
        for (const auto& st : stops_) {
            if (st.empty()) continue;
            size_t p = pending_.find(st);
            if (p != std::string::npos) cut = std::min(cut, p);
        }
        if (cut != std::string::npos) {
            hit = true;
            std::string out = pending_.substr(0, cut);
            pending_.clear();
            return out;
        }
        // Keep the longest tail that is a proper prefix of some stop string.
        size_t keep = 0;
        for (const auto& st : stops_)
            for (size_t n = std::min(st.size() - (st.empty() ? 0 : 1), pending_.size()); n > keep; --n)
                if (pending_.compare(pending_.size() - n, n, st, 0, n) == 0) {
                    keep = n;
                    break;
                }
        std::string out = pending_.substr(0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return out;
    }
    std::string flush() {
        std::string out;
        out.swap(pending_);
        return out;
    }

private:
    const std::vector<std::string>& stops_;
    std::string pending_;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

GenerateResult generate(LogitSource& model, const Tokenizer& tok, Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& opt, const std::function<void(std::string_view)>& on_text) {
    GenerateResult r;
    r.n_prompt = int(prompt.size());
    if (prompt.empty()) throw Error("generate: the prompt is empty");
    if (model.n_vocab() != tok.n_vocab())
        throw Error("generate: the model has " + std::to_string(model.n_vocab()) + " logits but the tokenizer " +
                    std::to_string(tok.n_vocab()) + " tokens");
    if (int64_t(model.n_past()) + int64_t(prompt.size()) > model.n_ctx())
        throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens and the context holds " +
                    std::to_string(model.n_ctx() - model.n_past()) + " more (context size " + std::to_string(model.n_ctx()) +
                    "; raise it with -c)");
    for (int32_t t : prompt) {
        if (t < 0 || t >= tok.n_vocab()) throw Error("generate: prompt token " + std::to_string(t) + " is outside the vocabulary");
        sampler.accept(t);
    }

    const int32_t think_open = tok.find("<think>"), think_close = tok.find("</think>");
    bool in_think = false, after_think = false;
    StreamDecoder dec(tok);
    StopMatcher stops(opt.stop);
    auto show = [&](const std::string& s) {
        if (s.empty()) return;
        r.text += s;
        if (on_text) on_text(s);
    };

    auto t0 = Clock::now();
    std::vector<float> logits;
    model.eval(prompt, logits);
    r.prompt_seconds = since(t0);
    auto t1 = Clock::now();
    bool stopped = false;
    while (!stopped) {
        if (opt.n_predict >= 0 && int(r.ids.size()) >= opt.n_predict) {
            r.reason = StopReason::Length;
            break;
        }
        int32_t id = sampler.sample(logits);
        sampler.accept(id);
        if (tok.is_eog(id) && !opt.ignore_eos) {
            r.eog_token = id;
            r.reason = StopReason::EndOfGeneration;
            break;
        }
        r.ids.push_back(id);
        std::string piece = dec.push(id);
        if (opt.hide_think) {
            // Reasoning is hidden token by token (<think> and </think> are single tokens in Qwen3),
            // and so are the newlines that separate it from the answer.
            if (id == think_open) in_think = true;
            if (in_think) {
                if (id == think_close) in_think = false, after_think = true;
                piece.clear();
            } else if (after_think) {
                size_t k = piece.find_first_not_of('\n');
                piece.erase(0, k == std::string::npos ? piece.size() : k);
                if (!piece.empty()) after_think = false;
            }
        }
        bool hit = false;
        show(stops.push(piece, hit));
        if (hit) {
            r.reason = StopReason::StopString;
            stopped = true;
            break;
        }
        if (opt.n_predict >= 0 && int(r.ids.size()) >= opt.n_predict) {
            r.reason = StopReason::Length;
            break;
        }
        if (model.n_past() >= model.n_ctx()) {
            r.reason = StopReason::ContextFull;
            break;
        }
        model.eval(std::span<const int32_t>(&id, 1), logits);
    }
    if (!stopped) {
        bool hit = false;
        std::string tail = dec.flush();
        if (opt.hide_think && in_think) tail.clear();
        show(stops.push(tail, hit));
        if (!hit) show(stops.flush());
        else r.reason = StopReason::StopString;
    }
    r.gen_seconds = since(t1);
    return r;
}

}  // namespace bankml::model
