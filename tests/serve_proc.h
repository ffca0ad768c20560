// A `bankml serve` child process on 127.0.0.1 and an ephemeral port, for the tests: started with
// its stderr in a file, found ready through /health, stopped with SIGTERM (then SIGKILL after a
// bounded wait). Every wait here is bounded.
#pragma once
#include <string>
#include <vector>

#include "core/json.h"
#include "net/http.h"

namespace bt {

class ServeProc {
public:
    // Starts `bankml serve ARGS --port 0` and waits (at most ready_s seconds) until /health
    // answers 200.
    explicit ServeProc(const std::vector<std::string>& args, int ready_s = 60);
    ~ServeProc();
    bool ok() const { return port_ > 0; }
    int port() const { return port_; }
    int pid() const { return pid_; }
    std::string err() const;  // the server's stderr so far
    // SIGTERM, then the exit status (-1 if it had to be killed after timeout_ms).
    int stop(int timeout_ms = 15000);

    std::optional<bankml::net::Response> get(const std::string& path, const std::string& headers = "", int ms = 20000) const;
    std::optional<bankml::net::Response> post(const std::string& path, const std::string& body,
                                              const std::string& headers = "", int ms = 60000) const;
    // POST then parse the body as JSON (null when the request or the parse failed).
    bankml::json::Value post_json(const std::string& path, const std::string& body, int* status = nullptr) const;

private:
    int pid_ = -1, port_ = 0;
    std::string err_path_;
};

// The "data: " payloads of a server-sent event stream, in order.
std::vector<std::string> sse_data(const std::string& body);

}  // namespace bt
