#include "serve/server.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "core/error.h"
#include "gpu/limiter.h"
#include "serve/page.h"

namespace bankml::serve {

namespace {

constexpr const char* JSON = "application/json; charset=utf-8";

// Compares without an early exit, so the time taken does not tell how much of a guess was right.
bool same_secret(std::string_view a, std::string_view b) {
    size_t n = std::max(a.size(), b.size());
    unsigned diff = unsigned(a.size() != b.size());
    for (size_t i = 0; i < n; ++i) {
        unsigned char x = i < a.size() ? (unsigned char)a[i] : 0, y = i < b.size() ? (unsigned char)b[i] : 0;
        diff |= unsigned(x ^ y);
    }
    return diff == 0;
}

std::string prom_line(const char* name, const char* help, const char* type, double v) {
    char num[64];
    std::snprintf(num, sizeof num, "%.17g", v);
    return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + num + "\n";
}

}  // namespace

Server::Server(ServerOptions opt) : opt_(std::move(opt)) { listen_fd_ = net::listen_tcp(opt_.host, opt_.port, &port_); }

Server::~Server() {
    if (listen_fd_ >= 0) ::close(listen_fd_);
}

void Server::set_ready(Engine* engine, json::Value gpu) {
    gpu_ = std::move(gpu);
    engine_.store(engine);
}

bool Server::authorized(const net::Request& req) const {
    if (opt_.api_key.empty()) return true;
    const std::string* h = req.header("authorization");
    if (!h || h->compare(0, 7, "Bearer ") != 0) return false;
    return same_secret(std::string_view(*h).substr(7), opt_.api_key);
}

void Server::run(const std::atomic<bool>& stop) {
    while (!stop.load()) {
        pollfd p{listen_fd_, POLLIN, 0};
        int r = ::poll(&p, 1, 100);
        if (r <= 0) continue;
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(50));
            continue;
        }
        {
            std::lock_guard<std::mutex> l(conn_mu_);
            if (conns_ >= opt_.max_conns) {
                rejected_conns_++;
                net::Limits quick = opt_.limits;
                quick.write_ms = 200;
                net::Conn c(fd, quick);
                c.respond(503, JSON, error_json({503, "too many connections", "unavailable_error"}), false);
                continue;
            }
            conns_++;
        }
        std::thread([this, fd] {
            try {
                handle(fd);
            } catch (...) {
                // A connection's failure stays with it; the server goes on.
            }
            std::lock_guard<std::mutex> l(conn_mu_);
            conns_--;
            conn_cv_.notify_all();
        }).detach();
    }
    // Stop: accept nothing more; idle connections leave, busy ones finish their answer.
    stopping_.store(true);
    ::close(listen_fd_);
    listen_fd_ = -1;
    std::unique_lock<std::mutex> l(conn_mu_);
    conn_cv_.wait(l, [&] { return conns_ == 0; });
}

void Server::handle(int fd) {
    net::Conn c(fd, opt_.limits, &stopping_);
    for (;;) {
        net::Request req;
        std::string why;
        auto rd = c.read_request(req, why);
        using R = net::Conn::Read;
        if (rd == R::Closed || rd == R::Stopping) return;
        if (rd == R::Timeout) {
            // Only a request cut off midway gets an answer; a quiet kept-alive connection just closes.
            return;
        }
        if (rd != R::Ok) {
            int status = rd == R::HeadTooLarge ? 431 : rd == R::BodyTooLarge ? 413 : 400;
            std::string msg = rd == R::HeadTooLarge   ? "the request head is larger than " + std::to_string(opt_.limits.max_head) + " bytes"
                              : rd == R::BodyTooLarge ? "the body is larger than " + std::to_string(opt_.limits.max_body) + " bytes"
                                                      : "malformed request: " + why;
            http_requests_++;
            http_4xx_++;
            c.respond(status, JSON, error_json({status, msg}), false);
            return;
        }
        http_requests_++;
        bool keep = req.keep_alive && !stopping_.load();
        if (!route(c, req, keep) || !keep) return;
    }
}

bool Server::route(net::Conn& c, const net::Request& req, bool keep) {
    auto reply = [&](int status, std::string_view type, std::string_view body, std::string_view headers = {}) {
        if (status >= 500) http_5xx_++;
        else if (status >= 400) http_4xx_++;
        return c.respond(status, type, body, keep, headers, req.method == "HEAD");
    };
    auto error = [&](int status, const std::string& msg, const char* type = "invalid_request_error") {
        return reply(status, JSON, error_json({status, msg, type}));
    };
    const std::string& p = req.path;
    const bool get = req.method == "GET" || req.method == "HEAD", post = req.method == "POST";
    Engine* eng = engine_.load();

    if (p == "/health") {
        if (!get) return error(405, "use GET");
        if (!eng) return error(503, "loading the model", "unavailable_error");
        return reply(200, JSON, "{\"status\":\"ok\"}");
    }
    if (p == "/" || p == "/index.html") {
        // The page holds no data: it asks for the key itself when the server wants one.
        if (!get) return error(405, "use GET");
        return reply(200, "text/html; charset=utf-8", chat_page());
    }
    if (!authorized(req))
        return reply(401, JSON, error_json({401, "invalid or missing API key (Authorization: Bearer KEY)", "authentication_error"}),
                     "WWW-Authenticate: Bearer\r\n");
    if (p == "/bankml/usage") {
        if (!get) return error(405, "use GET");
        return reply(200, JSON, usage_json());
    }
    if (p == "/metrics") {
        if (!get) return error(405, "use GET");
        return reply(200, "text/plain; version=0.0.4; charset=utf-8", metrics_text());
    }
    const bool chat = p == "/v1/chat/completions" || p == "/chat/completions";
    const bool text = p == "/v1/completions" || p == "/completions";
    if (p == "/v1/models" || p == "/models") {
        if (!get) return error(405, "use GET");
        if (!eng) return error(503, "loading the model", "unavailable_error");
        json::Value meta;
        meta.set("n_ctx", eng->n_ctx()).set("n_vocab", eng->tokenizer().n_vocab()).set("slots", eng->slots());
        json::Value m;
        m.set("id", opt_.model_name).set("object", "model").set("created", int64_t(std::time(nullptr)));
        m.set("owned_by", "bankml").set("meta", std::move(meta));
        json::Value o;
        o.set("object", "list").set("data", json::Value::array().push(std::move(m)));
        return reply(200, JSON, json::write(o));
    }
    if (chat || text) {
        if (!post) return error(405, "use POST");
        if (!eng) return error(503, "loading the model", "unavailable_error");
        return generate(c, req, keep, chat);
    }
    return error(404, "no such endpoint: " + req.method + " " + p);
}

bool Server::generate(net::Conn& c, const net::Request& req, bool keep, bool chat) {
    Engine& eng = *engine_.load();
    auto fail = [&](const ApiError& e) {
        if (e.status >= 500) http_5xx_++;
        else http_4xx_++;
        return c.respond(e.status, JSON, error_json(e), keep);
    };
    Completion comp;
    auto job = std::make_shared<Job>();
    try {
        comp = chat ? parse_chat(req.body, opt_.defaults) : parse_completion(req.body, opt_.defaults);
        if (!comp.prompt_ids.empty()) {
            for (int32_t t : comp.prompt_ids)
                if (t >= eng.tokenizer().n_vocab())
                    throw ApiError(400, "prompt token " + std::to_string(t) + " is outside the vocabulary (" +
                                            std::to_string(eng.tokenizer().n_vocab()) + " tokens)",
                                   "invalid_request_error", "prompt");
            job->prompt = comp.prompt_ids;
        } else {
            job->prompt = eng.tokenizer().encode(comp.prompt, true);
        }
    } catch (const ApiError& e) {
        return fail(e);
    } catch (const std::exception& e) {
        return fail({400, e.what()});
    }
    if (job->prompt.empty()) return fail({400, "the prompt is empty"});
    if (int64_t(job->prompt.size()) > eng.n_ctx())
        return fail({400,
                     "the prompt has " + std::to_string(job->prompt.size()) + " tokens and the context holds " +
                         std::to_string(eng.n_ctx()) + " (raise it with -c)",
                     "invalid_request_error", chat ? "messages" : "prompt"});
    job->sampling = comp.sampling;
    job->gen = comp.gen;
    job->deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt_.request_s);
    Meta meta{std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++), int64_t(std::time(nullptr)),
              opt_.model_name};
    try {
        eng.submit(job);
    } catch (const std::exception& e) {
        return fail({503, e.what(), "unavailable_error"});
    }

    std::string piece;
    if (!comp.stream) {
        for (;;) {
            bool done = job->take(piece, 100);
            piece.clear();
            if (done) break;
            if (c.peer_closed()) {
                job->cancel = true;
                return false;
            }
        }
        if (!job->error.empty()) return fail({500, job->error, "server_error"});
        return c.respond(200, JSON, completion_json(comp, meta, job->result), keep);
    }

    if (!c.begin_stream(200, "text/event-stream", req.version == "HTTP/1.1")) {
        job->cancel = true;
        return false;
    }
    // The role comes first, with empty content, as OpenAI's streams begin.
    bool ok = comp.chat ? c.send_chunk(chunk_event(comp, meta, "", true)) : true;
    bool done = false;
    while (ok && !done) {
        done = job->take(piece, 100);
        if (!piece.empty()) ok = c.send_chunk(chunk_event(comp, meta, piece, false));
        else if (!done && c.peer_closed()) ok = false;
        piece.clear();
    }
    if (!ok) {
        job->cancel = true;  // the slot stops before its next token
        return false;
    }
    std::string tail;
    if (!job->error.empty()) {
        http_5xx_++;
        tail = "data: " + error_json({500, job->error, "server_error"}) + "\n\n";
    } else {
        tail = final_event(comp, meta, job->result);
        if (comp.include_usage) tail += usage_event(comp, meta, job->result);
    }
    tail += "data: [DONE]\n\n";
    return c.send_chunk(tail) && c.end_stream() && req.version == "HTTP/1.1";
}

std::string Server::usage_json() {
    json::Value o;
    Engine* eng = engine_.load();
    json::Value e;
    if (eng) {
        Stats s = eng->stats();
        json::Value recent = json::Value::array();
        for (double t : s.recent_tps) recent.push(t);
        e.set("requests", s.requests)
            .set("tokens_in", s.tokens_in)
            .set("tokens_out", s.tokens_out)
            .set("cancelled", s.cancelled)
            .set("failed", s.failed)
            .set("queue", s.queue)
            .set("slots", s.slots)
            .set("slots_busy", s.slots_busy)
            .set("recent_tokens_per_s", std::move(recent))
            .set("steps", s.steps)
            .set("step_tokens", s.step_tokens)
            .set("last_batch", s.last_batch)
            .set("max_batch", s.max_batch)
            .set("uptime_s", s.uptime_s);
    }
    json::Value h;
    {
        std::lock_guard<std::mutex> l(conn_mu_);
        h.set("connections", conns_);
    }
    h.set("requests", http_requests_.load())
        .set("errors_4xx", http_4xx_.load())
        .set("errors_5xx", http_5xx_.load())
        .set("rejected_connections", rejected_conns_.load());
    o.set("model", opt_.model_name)
        .set("ready", eng != nullptr)
        .set("engine", eng ? std::move(e) : json::Value())
        .set("http", std::move(h))
        .set("gpu", gpu_)
        .set("gpu_limiter", gpu::status_value());  // live: the limit, what is on the card, rests
    return json::write(o);
}

std::string Server::metrics_text() {
    std::string out;
    Engine* eng = engine_.load();
    out += prom_line("bankml_ready", "1 once the model is loaded", "gauge", eng ? 1 : 0);
    if (eng) {
        Stats s = eng->stats();
        double last = s.recent_tps.empty() ? 0 : s.recent_tps.back(), avg = 0;
        for (double t : s.recent_tps) avg += t / double(s.recent_tps.size());
        out += prom_line("bankml_requests_total", "generation requests finished", "counter", double(s.requests));
        out += prom_line("bankml_requests_cancelled_total", "generations stopped by a client that left", "counter",
                         double(s.cancelled));
        out += prom_line("bankml_requests_failed_total", "generations that failed", "counter", double(s.failed));
        out += prom_line("bankml_prompt_tokens_total", "prompt tokens evaluated", "counter", double(s.tokens_in));
        out += prom_line("bankml_completion_tokens_total", "tokens generated", "counter", double(s.tokens_out));
        out += prom_line("bankml_queue_length", "requests waiting for a slot", "gauge", s.queue);
        out += prom_line("bankml_slots", "generation slots", "gauge", s.slots);
        out += prom_line("bankml_slots_busy", "slots generating", "gauge", s.slots_busy);
        out += prom_line("bankml_steps_total", "batched forward passes (one product per matrix for every slot in one)",
                         "counter", double(s.steps));
        out += prom_line("bankml_step_tokens_total", "tokens those passes evaluated (prompts and decoded tokens)",
                         "counter", double(s.step_tokens));
        out += prom_line("bankml_last_tokens_per_second", "decode rate of the last finished request", "gauge", last);
        out += prom_line("bankml_recent_tokens_per_second", "mean decode rate of the last 16 requests", "gauge", avg);
    }
    out += prom_line("bankml_http_requests_total", "HTTP requests read", "counter", double(http_requests_.load()));
    out += prom_line("bankml_http_client_errors_total", "4xx answers", "counter", double(http_4xx_.load()));
    out += prom_line("bankml_http_server_errors_total", "5xx answers", "counter", double(http_5xx_.load()));
    {
        std::lock_guard<std::mutex> l(conn_mu_);
        out += prom_line("bankml_http_connections", "open connections", "gauge", conns_);
    }
    return out;
}

}  // namespace bankml::serve
