// `bankml serve`: the OpenAI-compatible HTTP server (src/serve/, src/net/).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "cmd/commands.h"
#include "cmd/gpu_offload.h"
#include "cmd/text_gen.h"
#include "core/error.h"
#include "model/forward.h"
#include "model/tokenizer.h"
#include "serve/server.h"

namespace bankml::cmd {

namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler stores to it");

void on_signal(int) { g_stop.store(true); }

// /bankml/usage's "gpu": what bankml knows of the card in use, null when decoding runs on the CPU
// alone. A card that verifies runs each slot's whole decode (run_on_card, one copy of the model
// per slot); otherwise, for a Q1_0 model (as `bankml run`), one verified worker takes a share of
// every slot's products where it pays (slots take turns, so one product runs at a time).
json::Value attach_gpu_to_slots(std::vector<std::unique_ptr<model::Model>>& models, int threads) {
    if (!models.empty() && run_on_card(*models[0])) {
        size_t on_card = 1;
        for (size_t i = 1; i < models.size(); ++i) on_card += run_on_card(*models[i]);
        json::Value g;
        g.set("backend", "vulkan").set("device", models[0]->device()).set("mode", "forward");
        g.set("slots_on_card", (unsigned long long)on_card);
        return g;
    }
    if (models.empty() || !models[0]->has_q1_0()) return nullptr;
    gpu::WorkerOptions wo;
    wo.cpu_threads = threads > 0 ? threads : models[0]->threads();
    auto w = gpu::Worker::open(wo);
    if (!w) return nullptr;
    std::string detail = w->describe();
    json::Value g;
    g.set("backend", "vulkan").set("device", detail.substr(0, detail.find(" (q1_0"))).set("mode", "share").set("share", w->share());
    g.set("detail", detail);
    std::fprintf(stderr, "bankml serve: GPU: %s\n", detail.c_str());
    auto off = as_offload(std::move(w));
    for (auto& m : models) m->set_offload(off);
    return g;
}

std::string model_name(const std::string& path) {
    std::string n = path.substr(path.find_last_of('/') + 1);
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".gguf") == 0) n.resize(n.size() - 5);
    return n;
}

int run_serve(const std::vector<std::string>& args) {
    std::vector<cli::Flag> flags = {{"-m|--model", true},   {"--host", true},         {"--port", true},
                                    {"--parallel", true},   {"--api-key", true},      {"--max-body", true},
                                    {"--max-conns", true},  {"--timeout", true},      {"--idle-timeout", true},
                                    {"--alias", true}};
    for (const auto& f : text_gen_flags()) flags.push_back(f);
    cli::Args a(args, flags);
    if (!a.has("model")) throw UsageError("-m FILE is required");
    TextGenSettings st = parse_text_gen(a);
    serve::ServerOptions so;
    so.host = a.get("host", "127.0.0.1");
    so.port = int(a.get_int("port", 8080, 0, 65535));
    so.api_key = a.get("api-key", "");
    if (a.has("api-key") && so.api_key.empty()) throw UsageError("--api-key wants a non-empty key");
    so.limits.max_body = size_t(a.get_int("max-body", 1 << 20, 1024, int64_t(1) << 30));
    so.max_conns = int(a.get_int("max-conns", 64, 1, 100000));
    so.request_s = int(a.get_int("timeout", 600, 1, 86400));
    so.limits.idle_ms = int(a.get_int("idle-timeout", 30, 1, 86400)) * 1000;
    const int parallel = int(a.get_int("parallel", 1, 1, 256));
    const std::string path = a.get("model", "");
    so.model_name = a.get("alias", model_name(path));
    so.defaults.sampling = st.sampling;
    so.defaults.seed_given = st.seed_given;
    so.defaults.n_predict = st.gen.n_predict;

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    // Listen first: /health answers 503 while the model loads.
    serve::Server server(so);
    std::fprintf(stderr, "bankml serve: listening on http://%s:%d\n", so.host.c_str(), server.port());
    std::thread http([&] { server.run(g_stop); });
    std::unique_ptr<serve::Engine> engine;
    std::unique_ptr<model::Tokenizer> tok;
    try {
        std::vector<std::unique_ptr<model::Model>> models;
        for (int i = 0; i < parallel; ++i) models.push_back(model::Model::open(path, st.model));
        tok = std::make_unique<model::Tokenizer>(model::Tokenizer::from_gguf(models[0]->file()));
        json::Value gpu = attach_gpu_to_slots(models, st.model.threads);
        const int ctx = models[0]->n_ctx(), threads = models[0]->threads();
        engine = std::make_unique<serve::Engine>(std::move(models), *tok);
        server.set_ready(engine.get(), std::move(gpu));
        std::fprintf(stderr, "bankml serve: ready: %s, %d slot%s, context %d, %d thread%s\n", so.model_name.c_str(),
                     parallel, parallel == 1 ? "" : "s", ctx, threads, threads == 1 ? "" : "s");
    } catch (...) {
        g_stop.store(true);
        http.join();
        throw;
    }
    http.join();  // returns once stopped and every open answer is finished
    engine->stop();
    std::fprintf(stderr, "bankml serve: stopped\n");
    return 0;
}

}  // namespace

const cli::Command serve_command = {
    "serve", "an OpenAI-compatible HTTP server with a chat page",
    "usage: bankml serve -m FILE [--host 127.0.0.1] [--port 8080] [--parallel N] [--api-key KEY]\n"
    "                    [-c CTX] [-t N] [OPTIONS]\n\n"
    "Serves the model over HTTP/1.1:\n"
    "  POST /v1/chat/completions   chat (the Qwen3 template), \"stream\": true for server-sent events\n"
    "  POST /v1/completions        plain text completion\n"
    "  GET  /v1/models             the served model\n"
    "  GET  /health                503 while the model loads, then 200 (no key needed)\n"
    "  GET  /bankml/usage          the engine's counters, the card in use and what it is doing\n"
    "                              (\"gpu_limiter\": gpu::status, as `bankml run --json`'s \"gpu\")\n"
    "  GET  /metrics               the same counters for Prometheus\n"
    "  GET  /                      a chat page\n"
    "A request's tokens depend only on the request (its seed, its sampling): the same whether it\n"
    "runs alone or beside others. Requests without a seed draw one (unless --seed sets it).\n"
    "SIGINT or SIGTERM stops accepting, finishes the answers in flight and exits 0.\n\n"
    "  -m FILE             a qwen3 GGUF with its tokenizer\n"
    "  --host ADDR         the address to bind (default 127.0.0.1: this machine only)\n"
    "  --port N            the port (default 8080; 0: any free port, printed on stderr)\n"
    "  --parallel N        slots: requests generated at once, each with its own cache (default 1)\n"
    "  --api-key KEY       require \"Authorization: Bearer KEY\" everywhere but /health and /\n"
    "  --alias NAME        the model's name in the API (default: the file's name)\n"
    "  --max-body BYTES    the largest request body (default 1048576)\n"
    "  --max-conns N       open connections at most; more get 503 (default 64)\n"
    "  --timeout S         a generation's time limit in seconds (default 600)\n"
    "  --idle-timeout S    how long a kept-alive connection may wait between requests (default 30)\n"
    "the sampling flags below set the defaults of requests that do not say:\n"
    BANKML_TEXT_GEN_HELP,
    run_serve};

}  // namespace bankml::cmd
