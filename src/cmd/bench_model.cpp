// `bankml bench [-m FILE | --shape 1.7b --type q1_0] ...`: llama-bench's table for a model, so
// scripts that read llama-bench read bankml. Without -m it writes a synthetic model to a temporary
// file (the gguf module's synth) and removes it afterwards.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cmd/bench.h"
#include "cmd/text_gen.h"
#include "cmd/gpu_offload.h"
#include "core/cli.h"
#include "core/error.h"
#include "core/json.h"
#include "gpu/limiter.h"
#include "model/forward.h"
#include "model/synth.h"
#include "par/pool.h"

namespace bankml::cmd {

namespace {

struct Row {
    std::string backend;  // "CPU" or "Vulkan"
    int threads;
    std::string test;
    int n_prompt, n_gen;
    std::vector<double> samples;  // tokens/s per repetition
    json::Value gpu;              // gpu::status() after the row's runs (null without a card)
    double mean() const {
        double s = 0;
        for (double v : samples) s += v;
        return samples.empty() ? 0 : s / (double)samples.size();
    }
    double stddev() const {
        if (samples.size() < 2) return 0;
        const double m = mean();
        double s = 0;
        for (double v : samples) s += (v - m) * (v - m);
        return std::sqrt(s / (double)(samples.size() - 1));
    }
};

// Removes the temporary model (and its directory) however the benchmark ends.
struct TempModel {
    std::string dir, path;
    ~TempModel() {
        if (!path.empty()) std::remove(path.c_str());
        if (!dir.empty()) rmdir(dir.c_str());
    }
};

std::string human_size(uint64_t bytes) {
    char b[32];
    if (bytes < (1ull << 30)) std::snprintf(b, sizeof b, "%.2f MiB", (double)bytes / (1 << 20));
    else std::snprintf(b, sizeof b, "%.2f GiB", (double)bytes / (1 << 30));
    return b;
}

std::string human_params(uint64_t n) {
    char b[32];
    if (n >= 1000000000ull) std::snprintf(b, sizeof b, "%.2f B", (double)n / 1e9);
    else if (n >= 1000000ull) std::snprintf(b, sizeof b, "%.2f M", (double)n / 1e6);
    else std::snprintf(b, sizeof b, "%.2f K", (double)n / 1e3);
    return b;
}

// llama.cpp's size label for the qwen3 shapes it knows (by layers and width), else "?B".
std::string size_label(const model::Hparams& hp) {
    if (hp.n_layer == 28) return hp.n_embd == 1024 ? "0.6B" : "1.7B";
    if (hp.n_layer == 36) return hp.n_embd == 2560 ? "4B" : "8B";
    if (hp.n_layer == 40) return "14B";
    if (hp.n_layer == 64) return "32B";
    return "?B";
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int run_model_bench(const std::vector<std::string>& args) {
    cli::Args a(args, {{"-m|--model", true},
                       {"--shape", true},
                       {"--type", true},
                       {"--seed", true},
                       {"-p|--n-prompt", true},
                       {"-n|--n-gen", true},
                       {"-t|--threads", true},
                       {"-r|--repetitions", true},
                       {"--kv", true},
                       {"--gpu", true},
                       {"--json", false},
                       {"-o|--output", true},
                       {"-ngl|--n-gpu-layers", true},
                       {"-fa|--flash-attn", true},
                       {"-ctk|--cache-type-k", true},
                       {"-ctv|--cache-type-v", true}});
    // llama-bench's -o: md (the default), json, csv; --json is -o json.
    const std::string out = a.has("json") ? "json" : a.get("output", "md");
    if (out != "md" && out != "json" && out != "csv")
        throw UsageError("-o wants md, json or csv, got '" + out + "'" + (out == "jsonl" || out == "sql" ? " (llama-bench's " + out + " is not supported by bankml)" : ""));
    if (a.has("json") && a.has("output") && a.get("output", "") != "json") throw UsageError("--json and -o " + a.get("output", "") + " disagree");
    if (auto fa = a.value("flash-attn"); fa && *fa != "0" && *fa != "1" && *fa != "on" && *fa != "off" && *fa != "auto")
        throw UsageError("-fa wants 0, 1, on, off or auto, got '" + *fa + "'");
    const int n_prompt = (int)a.get_int("n-prompt", 64, 0, 1 << 16);
    const int n_gen = (int)a.get_int("n-gen", 32, 0, 1 << 16);
    const int reps = (int)a.get_int("repetitions", 3, 1, 1000);
    if (n_prompt == 0 && n_gen == 0) throw UsageError("-p and -n are both 0: nothing to measure");
    std::vector<int> threads;
    if (a.has("threads")) {
        auto l = cli::parse_int_list(a.get("threads", ""));
        if (!l || l->empty()) throw UsageError("-t wants a comma list of thread counts, got '" + a.get("threads", "") + "'");
        for (int64_t t : *l) {
            if (t < 1 || t > 4096) throw UsageError("-t: thread count " + std::to_string(t) + " is out of range");
            threads.push_back((int)t);
        }
    } else {
        threads.push_back(par::Pool::env_threads());
    }
    const std::string kv = kv_type(a);
    // --gpu on,off: each mode a row set, as llama-bench's -ngl 99,0 (on: the card when one verifies).
    // share: the card takes a share of the Q1_0 products per shape (gpu::Worker), never the token.
    enum class Use { off, on, share };
    std::vector<Use> gpu_modes;
    if (a.has("gpu") && a.has("n-gpu-layers")) throw UsageError("give --gpu or -ngl, not both");
    if (a.has("n-gpu-layers")) {
        auto l = cli::parse_int_list(a.get("n-gpu-layers", ""));
        if (!l || l->empty()) throw UsageError("-ngl wants a comma list of layer counts, got '" + a.get("n-gpu-layers", "") + "'");
        for (int64_t v : *l) gpu_modes.push_back(v != 0 ? Use::on : Use::off);
    } else {
        const std::string g = a.get("gpu", "on");
        size_t at = 0;
        while (at <= g.size()) {
            const size_t comma = std::min(g.find(',', at), g.size());
            const std::string v = g.substr(at, comma - at);
            if (v != "on" && v != "off" && v != "share")
                throw UsageError("--gpu wants on, off, share or a list of them, got '" + g + "'");
            gpu_modes.push_back(v == "on" ? Use::on : v == "share" ? Use::share : Use::off);
            at = comma + 1;
        }
    }

    TempModel tmp;
    std::string path = a.get("model", "");
    if (path.empty()) {
        const std::string shape_name = a.get("shape", "1.7b");
        auto shape = synth::shape_named(shape_name);
        if (!shape) throw UsageError("--shape: unknown shape '" + shape_name + "'");
        const std::string type_name = a.get("type", "q1_0");
        auto type = gguf::type_from_name(type_name);
        if (!type) throw UsageError("--type: unknown type '" + type_name + "'");
        synth::Spec spec;
        spec.shape = *shape;
        spec.type = *type;
        spec.seed = (uint64_t)a.get_int("seed", 7, 0, INT64_MAX);
        const char* td = std::getenv("TMPDIR");
        std::string templ = std::string(td && *td ? td : "/tmp") + "/bankml-bench-XXXXXX";
        if (!mkdtemp(templ.data())) throw Error("mkdtemp(" + templ + ") failed");
        tmp.dir = templ;
        tmp.path = tmp.dir + "/model.gguf";
        std::fprintf(stderr, "bankml bench: writing a synthetic %s %s model to %s\n", shape_name.c_str(),
                     type_name.c_str(), tmp.path.c_str());
        synth::check(spec);
        synth::write(tmp.path, spec);
        path = tmp.path;
    } else if (a.has("shape") || a.has("type")) {
        throw UsageError("give either -m FILE or --shape/--type, not both");
    }

    std::vector<Row> rows;
    std::string model_desc;
    uint64_t size = 0, params = 0;
    std::mt19937 rng(1234);
    std::string card;
    for (Use use_gpu : gpu_modes)
    for (int t : threads) {
        model::ModelOptions opt;
        opt.threads = t;
        opt.ctx = std::max(n_prompt, n_gen) + 1;
        opt.kv_f32 = kv == "f32";
        auto m = model::Model::open(path, opt);
        if (use_gpu == Use::on) attach_gpu(*m, t);
        if (use_gpu == Use::share) attach_share(*m, t);
        // "CPU+Vulkan": the card takes a share of the products where it pays (gpu::Worker).
        const std::string backend = m->on_gpu() ? "Vulkan" : m->has_offload() ? "CPU+Vulkan" : "CPU";
        if (m->on_gpu()) card = m->device();
        if (model_desc.empty()) {
            gguf::Type mt = gguf::Type::F32;
            if (auto* q = m->file().find("blk.0.attn_q.weight")) mt = q->type;
            std::string tn = gguf::type_name(mt);
            for (char& c : tn) c = (char)std::toupper((unsigned char)c);
            model_desc = "qwen3 " + size_label(m->hparams()) + " " + tn;
            for (const auto& te : m->file().tensors()) {
                size += te.nbytes;
                params += (uint64_t)te.nelements();
            }
        }
        std::uniform_int_distribution<int32_t> tok(0, m->n_vocab() - 1);
        std::vector<int32_t> prompt((size_t)n_prompt);
        auto prompt_run = [&]() {
            for (auto& v : prompt) v = tok(rng);
            m->reset();
            const double t0 = now_s();
            m->eval(prompt);
            return now_s() - t0;
        };
        std::vector<float> logits;  // one vector for every decoded token, as a generation loop keeps
        auto gen_run = [&]() {
            m->reset();
            int32_t x = tok(rng);
            const double t0 = now_s();
            for (int i = 0; i < n_gen; i++) {
                m->eval_into(std::span<const int32_t>(&x, 1), logits);
                x = tok(rng);
            }
            return now_s() - t0;
        };
        // A warm-up of each test first (page in the weights, wake the pool and the card).
        if (n_prompt > 0) {
            prompt_run();
            Row r{backend, t, "pp" + std::to_string(n_prompt), n_prompt, 0, {}, {}};
            for (int i = 0; i < reps; i++) r.samples.push_back(n_prompt / prompt_run());
            r.gpu = gpu::status_value();
            rows.push_back(r);
        }
        if (n_gen > 0) {
            // The warm-up is a whole run of the test: a card idles at a low clock and takes a
            // fraction of a second of steady work to reach its own.
            gen_run();
            Row r{backend, t, "tg" + std::to_string(n_gen), 0, n_gen, {}, {}};
            for (int i = 0; i < reps; i++) r.samples.push_back(n_gen / gen_run());
            r.gpu = gpu::status_value();
            rows.push_back(r);
        }
    }

    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    const double peak_mib = (double)ru.ru_maxrss / 1024.0;
    if (out == "csv") {
        // llama-bench's csv columns, those bankml has.
        std::printf("model_type,model_size,model_n_params,backends,n_threads,type_k,n_prompt,n_gen,test,avg_ts,stddev_ts\n");
        for (const Row& r : rows)
            std::printf("\"%s\",%llu,%llu,\"CPU\",%d,\"%s\",%d,%d,\"%s\",%.6f,%.6f\n", model_desc.c_str(),
                        (unsigned long long)size, (unsigned long long)params, r.threads, kv.c_str(), r.n_prompt, r.n_gen,
                        r.test.c_str(), r.mean(), r.stddev());
    } else if (out == "json") {
        json::Value doc = json::Value::array();
        for (const Row& r : rows) {
            json::Value samples = json::Value::array();
            for (double v : r.samples) samples.push(v);
            json::Value row;
            row.set("model_type", model_desc)
                .set("model_filename", a.get("model", ""))
                .set("model_size", (unsigned long long)size)
                .set("model_n_params", (unsigned long long)params)
                .set("backends", r.backend)
                .set("gpu_info", r.backend == "CPU" ? std::string() : card)
                .set("n_threads", r.threads)
                .set("type_k", kv)
                .set("n_prompt", r.n_prompt)
                .set("n_gen", r.n_gen)
                .set("test", r.test)
                .set("avg_ts", r.mean())
                .set("stddev_ts", r.stddev())
                .set("samples_ts", std::move(samples))
                .set("peak_rss_mib", peak_mib)
                .set("gpu", r.gpu);
            doc.push(std::move(row));
        }
        std::printf("%s\n", json::write(doc, 2).c_str());
    } else {
        std::printf("| %-30s | %10s | %10s | %-10s | %7s | %15s | %20s |\n", "model", "size", "params", "backend",
                    "threads", "test", "t/s");
        std::printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: "
                    "| -------------------: |\n");
        for (const Row& r : rows) {
            char ts[64];
            std::snprintf(ts, sizeof ts, "%.2f ± %.2f", r.mean(), r.stddev());
            // "±" is two bytes in UTF-8 but one column: pad by one more.
            std::printf("| %-30s | %10s | %10s | %-10s | %7d | %15s | %21s |\n", model_desc.c_str(),
                        human_size(size).c_str(), human_params(params).c_str(), r.backend.c_str(), r.threads, r.test.c_str(), ts);
        }
        if (!card.empty()) std::fprintf(stderr, "bankml bench: Vulkan is %s (the whole decode on the card)\n", card.c_str());
        std::fprintf(stderr, "bankml bench: peak resident memory %.1f MiB (weights %s, %s cache)\n", peak_mib,
                     human_size(size).c_str(), kv.c_str());
    }
    return 0;
}

}  // namespace bankml::cmd
