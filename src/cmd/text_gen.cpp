#include "cmd/text_gen.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <unistd.h>
#include <random>

#include "core/error.h"
#include "core/json.h"
#include "gpu/limiter.h"

namespace bankml::cmd {

std::vector<cli::Flag> text_gen_flags() {
    return {{"-n|--n-predict", true}, {"--temp", true},           {"--top-k", true},     {"--top-p", true},
            {"--min-p", true},        {"--repeat-penalty", true}, {"--repeat-last-n", true},
            {"-s|--seed", true},      {"--stop|-r|--reverse-prompt", true}, {"--ignore-eos", false},
            {"-t|--threads", true},   {"-c|--ctx-size", true},    {"--kv", true},
            {"-ngl|--n-gpu-layers|--gpu-layers", true}, {"-fa|--flash-attn", false, "on|off|auto"},
            {"-ctk|--cache-type-k", true}, {"-ctv|--cache-type-v", true}};
}

std::vector<cli::Flag> llama_model_flags() {
    return {{"-ngl|--n-gpu-layers|--gpu-layers", true}, {"-fa|--flash-attn", false, "on|off|auto"},
            {"-ctk|--cache-type-k", true}, {"-ctv|--cache-type-v", true}};
}

std::string kv_type(const cli::Args& a) {
    std::string kv;
    for (const char* k : {"kv", "cache-type-k", "cache-type-v"}) {
        auto v = a.value(k);
        if (!v) continue;
        if (*v != "f16" && *v != "f32")
            throw UsageError("--" + std::string(k) + " wants f16 or f32 (bankml's cache has no quantized types), got '" +
                             *v + "'");
        if (!kv.empty() && kv != *v)
            throw UsageError("--kv, -ctk and -ctv must agree: bankml keeps keys and values in one type");
        kv = *v;
    }
    return kv.empty() ? "f16" : kv;
}

void llama_model_notes(const cli::Args& a, const char* command) {
    (void)command;
    // llama.cpp's -ngl: 0 keeps every layer on the CPU; any other count lets a verified card run
    // the whole decode (bankml puts all layers or none on a card).
    if (a.has("n-gpu-layers") && a.get_int("n-gpu-layers", 0, -1, 1 << 20) == 0) setenv("BANKML_GPU", "off", 1);
}

static std::string unescape(const std::string& s) {
    std::string o;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) {
            char c = s[++i];
            if (c == 'n') o += '\n';
            else if (c == 't') o += '\t';
            else if (c == '\\') o += '\\';
            else o += '\\', o += c;
        } else {
            o += s[i];
        }
    }
    return o;
}

TextGenSettings parse_text_gen(const cli::Args& a) {
    TextGenSettings s;
    auto& p = s.sampling;
    p.temp = float(a.get_double("temp", 0.8, -1e9, 1e9));
    p.top_k = int32_t(a.get_int("top-k", 40, -1, INT32_MAX));
    p.top_p = float(a.get_double("top-p", 0.95, 0.0, 1.0));
    p.min_p = float(a.get_double("min-p", 0.05, 0.0, 1.0));
    p.repeat_penalty = float(a.get_double("repeat-penalty", 1.0, 1e-6, 1e6));
    p.repeat_last_n = int32_t(a.get_int("repeat-last-n", 64, 0, INT32_MAX));
    auto seed = a.value("seed");
    if (seed && *seed != "-1") {  // -1: random, as llama.cpp
        auto v = cli::parse_int(*seed);
        if (!v && cli::is_digits(*seed) && (*seed)[0] != '-')
            throw UsageError("--seed " + *seed + " is too large (at most " + std::to_string(INT64_MAX) + ")");
        if (!v || *v < 0) throw UsageError("--seed wants a non-negative integer or -1 (random), got '" + *seed + "'");
        p.seed = uint64_t(*v);
        s.seed_given = true;
    } else {
        std::random_device rd;
        p.seed = rd();  // 32 bits, as llama.cpp: short enough to retype
    }
    s.gen.n_predict = int(a.get_int("n-predict", -1, -1, INT32_MAX));
    if (auto st = a.value("stop")) {
        std::string stop = unescape(*st);
        if (stop.empty()) throw UsageError("--stop wants a non-empty string");
        s.gen.stop.push_back(stop);
    }
    s.gen.ignore_eos = a.has("ignore-eos");
    s.model.threads = int(a.get_int("threads", 0, 0, 4096));
    s.model.ctx = int(a.get_int("ctx-size", 0, 0, 1 << 24));
    s.model.kv_f32 = kv_type(a) == "f32";
    return s;
}

ModelLogits::ModelLogits(model::Model& m, const volatile std::sig_atomic_t* stop)
    : m_(m), stop_(stop), progress_(isatty(2)) {}

void ModelLogits::eval(std::span<const int32_t> tokens, std::vector<float>& logits) {
    eval_model(tokens, logits);
    // Flushed and checked every step: a full disk fails the run at once, not silently at exit.
    if (logits_ && (std::fwrite(logits.data(), sizeof(float), logits.size(), logits_.get()) != logits.size() ||
                    std::fflush(logits_.get()) != 0))
        throw Error(logits_path_ + ": write error: " + std::strerror(errno));
}

void ModelLogits::eval_model(std::span<const int32_t> tokens, std::vector<float>& logits) {
    constexpr size_t SLICE = 64;  // tokens per step of a prompt whose progress is shown
    if (stop_ && *stop_) throw Interrupted{};
    if (!progress_ || tokens.size() <= SLICE) {
        m_.eval_into(tokens, logits);
        return;
    }
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    bool shown = false;
    for (size_t i = 0; i < tokens.size(); i += SLICE) {
        if (stop_ && *stop_) {
            if (shown) std::fputc('\n', stderr);
            throw Interrupted{};
        }
        const size_t n = std::min(SLICE, tokens.size() - i);
        m_.eval_into(tokens.subspan(i, n), logits);
        const double s = std::chrono::duration<double>(clock::now() - t0).count();
        if (s > 2.0 && i + n < tokens.size()) {
            std::fprintf(stderr, "\rbankml: prompt %zu of %zu tokens (%.0f%%)", i + n, tokens.size(),
                         100.0 * double(i + n) / double(tokens.size()));
            shown = true;
        }
    }
    if (shown) std::fprintf(stderr, "\r%*s\r", 60, "");
}

std::string timing_line(const model::GenerateResult& r, uint64_t seed) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "prompt %d tokens at %.2f t/s, generated %zu tokens at %.2f t/s (stop: %s, seed %llu)",
                  r.n_prompt, r.prompt_tps(), r.ids.size(), r.gen_tps(), model::stop_reason_name(r.reason),
                  (unsigned long long)seed);
    return buf;
}

void ModelLogits::write_logits_to(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw Error(path + ": " + std::strerror(errno));
    logits_.reset(f, [](std::FILE* p) { std::fclose(p); });
    logits_path_ = path;
}

void set_backend(json::Value& doc, const model::Model& m) {
    doc.set("backend", m.on_gpu() ? "vulkan" : "cpu");
    if (m.on_gpu()) doc.set("device", m.device());
    else doc.set("device", json::Value());
    // What the card did (whole tokens, or a share of the products), null when no card works.
    doc.set("gpu", gpu::status_value());
}

std::string result_json(const model::GenerateResult& r, uint64_t seed, double load_seconds, const model::Model& m) {
    const int threads = m.threads(), n_ctx = m.n_ctx();
    json::Value ids = json::Value::array();
    for (int32_t id : r.ids) ids.push(id);
    json::Value timings;
    timings.set("load_ms", load_seconds * 1e3)
        .set("prompt_ms", r.prompt_seconds * 1e3)
        .set("prompt_tokens_per_s", r.prompt_tps())
        .set("gen_ms", r.gen_seconds * 1e3)
        .set("gen_tokens_per_s", r.gen_tps());
    json::Value doc;
    doc.set("text", r.text)
        .set("ids", std::move(ids))
        .set("stop_reason", model::stop_reason_name(r.reason))
        .set("n_prompt", r.n_prompt)
        .set("n_gen", r.ids.size())
        .set("seed", seed)
        .set("threads", threads)
        .set("ctx", n_ctx);
    set_backend(doc, m);
    doc.set("timings", std::move(timings));
    return json::write(doc);
}

}  // namespace bankml::cmd
