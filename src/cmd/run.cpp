// `bankml run`: greedy continuation of a prompt given as token ids.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "cmd/commands.h"
#include "cmd/json_text.h"
#include "core/error.h"
#include "model/forward.h"

namespace bankml::cmd {

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static std::string join_ids(const std::vector<int32_t>& v, const char* sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); i++) s += (i ? sep : "") + std::to_string(v[i]);
    return s;
}

static int run_run(const std::vector<std::string>& args) {
    cli::Args a(args, {{"-m|--model", true},
                       {"--tokens", true},
                       {"-n|--n-predict", true},
                       {"-t|--threads", true},
                       {"-c|--ctx-size", true},
                       {"--kv", true},
                       {"--json", false}});
    if (!a.has("model")) throw UsageError("-m FILE is required");
    if (!a.has("tokens")) throw UsageError("--tokens 1,2,3 is required");
    auto list = cli::parse_int_list(a.get("tokens", ""));
    if (!list || list->empty()) throw UsageError("--tokens wants a comma list of token ids, got '" + a.get("tokens", "") + "'");
    std::vector<int32_t> prompt;
    for (int64_t v : *list) {
        if (v < INT32_MIN || v > INT32_MAX) throw UsageError("--tokens: token id " + std::to_string(v) + " is out of range");
        prompt.push_back((int32_t)v);
    }
    const int64_t n = a.get_int("n-predict", 64, 0, 1 << 20);
    model::ModelOptions opt;
    opt.threads = (int)a.get_int("threads", 0, 0, 4096);
    opt.ctx = (int)a.get_int("ctx-size", 0, 0, 1 << 24);
    const std::string kv = a.get("kv", "f16");
    if (kv != "f16" && kv != "f32") throw UsageError("--kv wants f16 or f32, got '" + kv + "'");
    opt.kv_f32 = kv == "f32";

    auto t0 = std::chrono::steady_clock::now();
    auto m = model::Model::open(a.get("model", ""), opt);
    const double load_s = seconds_since(t0);
    if ((int64_t)prompt.size() > m->n_ctx())
        throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens, more than the context of " +
                    std::to_string(m->n_ctx()));

    t0 = std::chrono::steady_clock::now();
    auto logits = m->eval(prompt);
    const double prompt_s = seconds_since(t0);
    std::vector<int32_t> out;
    double decode_s = 0;
    bool full = false;
    for (int64_t i = 0; i < n; i++) {
        const int32_t tok = (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
        out.push_back(tok);
        if (i + 1 == n) break;
        if (m->n_past() >= m->n_ctx()) {
            full = true;
            break;
        }
        t0 = std::chrono::steady_clock::now();
        logits = m->eval(std::span<const int32_t>(&tok, 1));
        decode_s += seconds_since(t0);
    }
    const double pp = prompt_s > 0 ? (double)prompt.size() / prompt_s : 0;
    const double tg = decode_s > 0 ? (double)(out.size() - 1) / decode_s : 0;
    if (a.has("json")) {
        std::printf("{\"model\": %s, \"threads\": %d, \"ctx\": %d, \"kv\": \"%s\", \"prompt\": [%s], \"tokens\": [%s], "
                    "\"context_full\": %s, \"timings\": {\"load_ms\": %.3f, \"prompt_ms\": %.3f, \"prompt_tokens_per_s\": %.3f, "
                    "\"decode_ms\": %.3f, \"decode_tokens_per_s\": %.3f}}\n",
                    json_quote(m->file().path()).c_str(), m->threads(), m->n_ctx(), kv.c_str(), join_ids(prompt, ", ").c_str(),
                    join_ids(out, ", ").c_str(), full ? "true" : "false", load_s * 1e3, prompt_s * 1e3, pp,
                    decode_s * 1e3, tg);
    } else {
        std::printf("%s\n", join_ids(out, " ").c_str());
        if (full) std::fprintf(stderr, "bankml run: stopped after %zu tokens: the context of %d is full\n", out.size(), m->n_ctx());
        std::fprintf(stderr, "bankml run: load %.1f ms, prompt %zu tokens at %.2f t/s, decode %zu tokens at %.2f t/s (%d threads)\n",
                     load_s * 1e3, prompt.size(), pp, out.size() ? out.size() - 1 : 0, tg, m->threads());
    }
    return 0;
}

const cli::Command run_command = {
    "run", "greedy continuation of a prompt of token ids with a qwen3 GGUF model",
    "usage: bankml run -m FILE --tokens 1,2,3 [-n 64] [-t THREADS] [-c CTX] [--kv f16|f32] [--json]\n\n"
    "Runs the prompt's token ids through the model in one batch, then appends the most likely token\n"
    "n times (greedy), and prints the generated ids on one line (timings on stderr). --json prints one\n"
    "object: the prompt, the tokens and the timings (load, prompt tokens/s, decode tokens/s).\n\n"
    "  -m FILE       a qwen3 GGUF (Q1_0, Q2_0, F16 or F32 matrices)\n"
    "  --tokens IDS  the prompt, comma-separated token ids\n"
    "  -n N          tokens to generate (default 64; stops early if the context fills)\n"
    "  -t N          threads (default: BANKML_THREADS, else every core)\n"
    "  -c N          context size (default: the model's, at most 4096)\n"
    "  --kv f16|f32  the key/value cache's precision (default f16, as llama.cpp)\n",
    run_run};

}  // namespace bankml::cmd
