// HTTP/1.1 on the OS's sockets: a request reader with limits and deadlines, responses with
// Content-Length or chunked transfer (server-sent events), a listening socket, and a small client
// (for the tests and `bankml bench serve`). Blocking I/O with poll() deadlines: one thread per
// connection, so a slow peer only ever holds its own thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bankml::net {

struct Limits {
    size_t max_head = 16 * 1024;   // request line and headers
    size_t max_body = 1 << 20;     // Content-Length
    int head_ms = 10000;           // from a request's first byte to its last
    int idle_ms = 30000;           // a kept-alive connection waiting for its next request
    int write_ms = 10000;          // one write blocked by a peer that does not read
};

struct Request {
    std::string method, target, path, version;  // path: target without "?query"
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
    std::string body;
    bool keep_alive = true;
    // The value of a header (name lower-case), or nullptr.
    const std::string* header(std::string_view name) const;
};

// Parses a request head (request line and headers, up to but without the blank line). Returns
// "" on success, else what is wrong (the 400's message).
std::string parse_head(std::string_view head, Request& req);

const char* status_text(int status);

// One accepted connection. read_request() and the writers return false once the peer is gone or
// too slow; the connection is then closed by the destructor.
class Conn {
public:
    enum class Read { Ok, Closed, Timeout, Bad, HeadTooLarge, BodyTooLarge, Stopping };
    // `stop`: when it becomes true, a connection waiting for its next request gives up (Stopping).
    Conn(int fd, const Limits& lim, const std::atomic<bool>* stop = nullptr);
    ~Conn();
    Conn(const Conn&) = delete;
    Conn& operator=(const Conn&) = delete;

    // Reads the next request. On Bad, `why` says what was wrong.
    Read read_request(Request& req, std::string& why);

    // A whole response. `headers`: extra "Name: value\r\n" lines. omit_body: the answer to a HEAD
    // request (the body's length, not the body).
    bool respond(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                 std::string_view headers = {}, bool omit_body = false);
    // A streamed response: chunked on HTTP/1.1, else raw until close. The connection closes after it
    // unless keep_alive (and the transfer is chunked).
    bool begin_stream(int status, std::string_view content_type, bool http11, std::string_view headers = {});
    bool send_chunk(std::string_view data);
    bool end_stream();
    // Whether the peer has closed its end (or reset the connection), without reading data.
    bool peer_closed();
    int fd() const { return fd_; }

private:
    bool write_all(std::string_view s);
    int fd_;
    Limits lim_;
    const std::atomic<bool>* stop_;
    std::string buf_;  // bytes read past the last request
    bool chunked_ = false;
};

// A listening TCP socket on host:port (port 0: any free port). Returns the fd and sets *bound to
// the port; throws bankml::Error naming the address on failure.
int listen_tcp(const std::string& host, int port, int* bound);

// A connected TCP socket to host:port (numeric IPv4/IPv6 or a name), or -1 with *err set.
int connect_tcp(const std::string& host, int port, int timeout_ms, std::string* err = nullptr);

// A client request over a fresh connection. on_data, when given, receives the body as it arrives
// (chunked transfer decoded). Returns nullopt, with *err set, on a connection error or timeout.
struct Response {
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
    std::string body;
    const std::string* header(std::string_view name) const;
};
std::optional<Response> request(const std::string& host, int port, std::string_view method, std::string_view path,
                                std::string_view body, std::string_view headers, int timeout_ms,
                                const std::function<void(std::string_view)>& on_data = {}, std::string* err = nullptr);

}  // namespace bankml::net
