// `bankml serve`'s HTTP side: the accept loop, one thread per connection (at most max_conns), the
// routes of the OpenAI API and bankml's own (/health, /bankml/usage, /metrics, the chat page), the
// API key, and a stop that lets the answers in flight finish.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/json.h"
#include "net/http.h"
#include "serve/api.h"
#include "serve/engine.h"

namespace bankml::serve {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;      // empty: no key required
    net::Limits limits;
    int max_conns = 64;
    int request_s = 600;      // a generation's time limit
    std::string model_name;   // what /v1/models lists and responses name
    Defaults defaults;        // sampling when a request does not say
};

class Server {
public:
    // Binds and listens (throws bankml::Error naming the address when it cannot).
    explicit Server(ServerOptions opt);
    ~Server();
    int port() const { return port_; }
    // The model is loaded: generation endpoints and /health answer from now on. `gpu` is
    // /bankml/usage's "gpu" object.
    void set_ready(Engine* engine, json::Value gpu);
    // Accepts until `stop` becomes true, then waits for the open connections' answers.
    void run(const std::atomic<bool>& stop);

private:
    void handle(int fd);
    bool route(net::Conn& c, const net::Request& req, bool keep_alive);
    bool generate(net::Conn& c, const net::Request& req, bool keep_alive, bool chat);
    std::string usage_json();
    std::string metrics_text();
    bool authorized(const net::Request& req) const;

    ServerOptions opt_;
    int listen_fd_ = -1, port_ = 0;
    std::atomic<Engine*> engine_{nullptr};
    json::Value gpu_;
    std::atomic<bool> stopping_{false};

    std::mutex conn_mu_;
    std::condition_variable conn_cv_;
    int conns_ = 0;

    std::atomic<uint64_t> http_requests_{0}, http_4xx_{0}, http_5xx_{0}, rejected_conns_{0}, next_id_{1};
};

}  // namespace bankml::serve
