// `bankml run`: greedy continuation of a prompt given as token ids.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include <fstream>
#include <iterator>

#include "cmd/commands.h"
#include "cmd/gpu_offload.h"
#include "cmd/text_gen.h"
#include "model/sampler.h"
#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "model/chat.h"
#include "model/forward.h"
#include "model/tokenizer.h"

namespace bankml::cmd {

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static std::string join_ids(const std::vector<int32_t>& v, const char* sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); i++) s += (i ? sep : "") + std::to_string(v[i]);
    return s;
}

// --tokens: the prompt as ids, greedy ids out (the forward pass's check against llama.cpp).
static int run_tokens(const cli::Args& a) {
    // Commas and/or spaces separate the ids, as detokenize takes them ("1,2,3", "1 2 3").
    std::string ids = a.get("tokens", "");
    for (char& c : ids)
        if (c == ' ' || c == '\t' || c == '\n') c = ',';
    const size_t b = ids.find_first_not_of(','), e = ids.find_last_not_of(',');
    ids = b == std::string::npos ? "" : ids.substr(b, e - b + 1);
    std::string squeezed;
    for (char c : ids)
        if (!(c == ',' && !squeezed.empty() && squeezed.back() == ',')) squeezed += c;
    auto list = cli::parse_int_list(squeezed);
    if (!list || list->empty()) throw UsageError("--tokens wants token ids separated by commas or spaces, got '" + a.get("tokens", "") + "'");
    std::vector<int32_t> prompt;
    for (int64_t v : *list) {
        if (v < INT32_MIN || v > INT32_MAX) throw UsageError("--tokens: token id " + std::to_string(v) + " is out of range");
        prompt.push_back((int32_t)v);
    }
    // -1: until the context is full, as llama.cpp's -n -1.
    int64_t n = a.get_int("n-predict", 64, -1, 1 << 20);
    model::ModelOptions opt;
    opt.threads = (int)a.get_int("threads", 0, 0, 4096);
    opt.ctx = (int)a.get_int("ctx-size", 0, 0, 1 << 24);
    const std::string kv = kv_type(a);
    opt.kv_f32 = kv == "f32";
    llama_model_notes(a, "run");

    auto t0 = std::chrono::steady_clock::now();
    auto m = model::Model::open(a.get("model", ""), opt);
    attach_gpu(*m, opt.threads);
    const double load_s = seconds_since(t0);
    if ((int64_t)prompt.size() > m->n_ctx())
        throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens, more than the context of " +
                    std::to_string(m->n_ctx()));
    if (n < 0) n = int64_t(m->n_ctx()) - int64_t(prompt.size()) + 1;

    ModelLogits src(*m);
    if (a.has("logits")) src.write_logits_to(a.get("logits", ""));
    t0 = std::chrono::steady_clock::now();
    std::vector<float> logits;
    src.eval(prompt, logits);
    const double prompt_s = seconds_since(t0);
    std::vector<int32_t> out;
    double decode_s = 0;
    bool full = false;
    for (int64_t i = 0; i < n; i++) {
        const int32_t tok = model::argmax(logits);
        out.push_back(tok);
        if (i + 1 == n) break;
        if (m->n_past() >= m->n_ctx()) {
            full = true;
            break;
        }
        t0 = std::chrono::steady_clock::now();
        src.eval(std::span<const int32_t>(&tok, 1), logits);
        decode_s += seconds_since(t0);
    }
    const double pp = prompt_s > 0 ? (double)prompt.size() / prompt_s : 0;
    const double tg = decode_s > 0 ? (double)(out.size() - 1) / decode_s : 0;
    if (a.has("json")) {
        json::Value jprompt = json::Value::array(), jout = json::Value::array(), timings;
        for (int32_t id : prompt) jprompt.push(id);
        for (int32_t id : out) jout.push(id);
        timings.set("load_ms", load_s * 1e3)
            .set("prompt_ms", prompt_s * 1e3)
            .set("prompt_tokens_per_s", pp)
            .set("decode_ms", decode_s * 1e3)
            .set("decode_tokens_per_s", tg);
        json::Value doc;
        doc.set("model", m->file().path())
            .set("threads", m->threads())
            .set("ctx", m->n_ctx())
            .set("kv", kv)
            .set("prompt", std::move(jprompt))
            .set("tokens", std::move(jout))
            .set("context_full", full);
        set_backend(doc, *m);
        doc.set("timings", std::move(timings));
        std::printf("%s\n", json::write(doc).c_str());
    } else {
        std::printf("%s\n", join_ids(out, " ").c_str());
        if (full) std::fprintf(stderr, "bankml run: stopped after %zu tokens: the context of %d is full\n", out.size(), m->n_ctx());
        std::fprintf(stderr, "bankml run: load %.1f ms, prompt %zu tokens at %.2f t/s, decode %zu tokens at %.2f t/s (%d threads)\n",
                     load_s * 1e3, prompt.size(), pp, out.size() ? out.size() - 1 : 0, tg, m->threads());
    }
    return 0;
}

// Flags that only make sense with a text prompt.
static const char* const TEXT_ONLY[] = {"temp", "top-k", "top-p", "min-p", "repeat-penalty", "repeat-last-n",
                                        "seed", "stop", "ignore-eos", "chat", "system", "no-think"};

// -p / -f: text in, streamed text out.
static int run_text(const cli::Args& a) {
    std::string prompt_text;
    if (auto f = a.value("file")) {
        if (a.has("prompt")) throw UsageError("give -p TEXT or -f FILE, not both");
        prompt_text = file::read_all(*f);
    } else {
        prompt_text = a.get("prompt", "");
    }
    if (!a.has("chat") && (a.has("system") || a.has("no-think")))
        throw UsageError("--system and --no-think go with --chat");
    TextGenSettings st = parse_text_gen(a);
    llama_model_notes(a, "run");
    const bool json = a.has("json"), think = !a.has("no-think");

    auto t0 = std::chrono::steady_clock::now();
    auto m = model::Model::open(a.get("model", ""), st.model);
    attach_gpu(*m, st.model.threads);
    auto tok = model::Tokenizer::from_gguf(m->file());
    const double load_s = seconds_since(t0);
    std::vector<int32_t> prompt;
    if (a.has("chat")) {
        std::vector<model::ChatMessage> msgs;
        if (a.has("system")) msgs.push_back({"system", a.get("system", "")});
        msgs.push_back({"user", prompt_text});
        prompt = tok.encode(model::chatml_render(msgs, true, think), true);
        st.gen.hide_think = !think;
    } else {
        // A completion prompt: control tokens written in it are parsed, as llama-cli does.
        prompt = tok.encode(prompt_text, true, true);
    }
    if (prompt.empty()) throw UsageError("the prompt is empty (-p TEXT)");

    model::Sampler sampler(st.sampling);
    ModelLogits src(*m);
    if (a.has("logits")) src.write_logits_to(a.get("logits", ""));
    auto r = model::generate(src, tok, sampler, prompt, st.gen, [&](std::string_view t) {
        if (!json) file::put(t);
    });
    if (json) {
        std::printf("%s\n", result_json(r, st.sampling.seed, load_s, *m).c_str());
        return 0;
    }
    if (!r.text.empty() && r.text.back() != '\n') std::fputc('\n', stdout);
    std::fflush(stdout);
    if (r.reason == model::StopReason::ContextFull)
        std::fprintf(stderr, "bankml run: the context is full (%d tokens); raise it with -c\n", m->n_ctx());
    std::fprintf(stderr, "bankml run: %s\n", timing_line(r, st.sampling.seed).c_str());
    return 0;
}

static int run_run(const std::vector<std::string>& args) {
    std::vector<cli::Flag> flags = {{"-m|--model", true}, {"--tokens", true}, {"-p|--prompt", true},
                                    {"-f|--file", true},  {"--chat", false},  {"--system|-sys|--system-prompt", true},
                                    {"--no-think", false}, {"--json", false}, {"--logits", true}};
    for (const auto& f : text_gen_flags()) flags.push_back(f);
    cli::Args a(args, flags);
    if (!a.has("model")) throw UsageError("-m FILE is required");
    const int sources = int(a.has("tokens")) + int(a.has("prompt") || a.has("file"));
    if (sources == 0) throw UsageError("give a prompt: -p TEXT, -f FILE or --tokens 1,2,3");
    if (a.has("tokens")) {
        if (sources > 1) throw UsageError("give -p/-f or --tokens, not both");
        for (const char* k : TEXT_ONLY)
            if (a.has(k)) throw UsageError(std::string("--") + k + " needs a text prompt (-p); --tokens runs greedy");
        return run_tokens(a);
    }
    return run_text(a);
}

// The matrix types in the help are those the products compute (quant's traits table).
static const std::string RUN_HELP =
    "usage: bankml run -m FILE -p TEXT [--chat [--system TEXT] [--no-think]] [OPTIONS]\n"
    "       bankml run -m FILE --tokens 1,2,3 [-n 64] [-t N] [-c N] [--kv f16|f32] [--json]\n\n"
    "With -p (or -f FILE), completes the text: the model's continuation is streamed to stdout as it\n"
    "is generated (never half a character), then the timings go to stderr (prompt and generation\n"
    "tokens/s, why it stopped, the seed). It stops at an end-of-generation token (<|im_end|>,\n"
    "<|endoftext|>, the file's EOS), after -n tokens, before a --stop string, or when the context is\n"
    "full (and says so). --chat wraps the text as one ChatML user turn (the Qwen3 template) and\n"
    "prints the assistant's reply; --no-think asks for an answer without reasoning (the empty think\n"
    "block) and hides any that comes. --json prints one object at the end instead: text, ids,\n"
    "stop_reason (eog, length, stop, context_full), n_prompt, n_gen, seed, threads, ctx, timings.\n\n"
    "With --tokens, runs the ids through the model and appends the most likely token n times\n"
    "(greedy, default 64, -1: until the context is full; end tokens included), printing the ids (the\n"
    "forward pass's check against llama.cpp; --json: the prompt, the tokens and the timings).\n\n"
    "  -m FILE       a qwen3 GGUF (" + model::product_type_names(", ", " or ", true) + " matrices) with its tokenizer\n"
    "  -p TEXT       the prompt; -f FILE reads it from a file\n"
    "  --tokens IDS  the prompt, token ids separated by commas or spaces\n"
    "  --chat        one chat turn: -p is the user's message\n"
    "  --system TEXT the system message (with --chat; also -sys, --system-prompt)\n"
    "  --no-think    no reasoning (with --chat)\n"
    "  --json        one JSON object instead of the stream (with \"backend\": cpu or vulkan and the\n"
    "                \"device\" that ran the model)\n"
    BANKML_LOGITS_HELP
    BANKML_TEXT_GEN_HELP;

const cli::Command run_command = {"run", "generate text (or greedy token ids) from a prompt with a qwen3 GGUF model",
                                  RUN_HELP.c_str(), run_run};

}  // namespace bankml::cmd
