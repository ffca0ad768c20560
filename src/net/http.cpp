#include "net/http.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"

namespace bankml::net {

namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string_view s) {
    std::string o(s);
    for (char& c : o)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return o;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool is_token_char(char c) {
    if (c >= 'a' && c <= 'z') return true;
    if (c >= 'A' && c <= 'Z') return true;
    if (c >= '0' && c <= '9') return true;
    return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

int ms_left(Clock::time_point deadline) {
    auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return d < 0 ? 0 : int(d);
}

// Waits until fd is readable (or writable) or the deadline passes; false on timeout.
bool wait_fd(int fd, short events, int ms) {
    pollfd p{fd, events, 0};
    for (;;) {
        int r = ::poll(&p, 1, ms);
        if (r > 0) return true;
        if (r == 0) return false;
        if (errno != EINTR) return false;
    }
}

const std::string* find_header(const std::vector<std::pair<std::string, std::string>>& hs, std::string_view name) {
    for (const auto& h : hs)
        if (h.first == name) return &h.second;
    return nullptr;
}

bool parse_size(std::string_view s, size_t& out, int base = 10) {
    if (s.empty() || s.size() > 16) return false;
    size_t v = 0;
    for (char c : s) {
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return false;
        v = v * size_t(base) + size_t(d);
    }
    out = v;
    return true;
}

}  // namespace

const std::string* Request::header(std::string_view name) const { return find_header(headers, name); }
const std::string* Response::header(std::string_view name) const { return find_header(headers, name); }

const char* status_text(int s) {
    switch (s) {
        case 100: return "Continue";
        case 200: return "OK";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 411: return "Length Required";
        case 413: return "Content Too Large";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 505: return "HTTP Version Not Supported";
    }
    return "Unknown";
}

std::string parse_head(std::string_view head, Request& req) {
    req = Request{};
    size_t eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    size_t a = line.find(' ');
    size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
    if (b == std::string_view::npos || line.find(' ', b + 1) != std::string_view::npos)
        return "malformed request line";
    req.method = std::string(line.substr(0, a));
    req.target = std::string(line.substr(a + 1, b - a - 1));
    req.version = std::string(line.substr(b + 1));
    if (req.method.empty()) return "empty method";
    for (char c : req.method)
        if (!is_token_char(c)) return "malformed method";
    if (req.target.empty() || (req.target[0] != '/' && req.target != "*")) return "the target must start with '/'";
    for (unsigned char c : req.target)
        if (c <= 0x20 || c == 0x7f) return "control character in the target";
    if (req.version != "HTTP/1.1" && req.version != "HTTP/1.0") return "unsupported version '" + req.version + "'";
    req.path = req.target.substr(0, req.target.find('?'));
    req.keep_alive = req.version == "HTTP/1.1";
    size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
    while (pos < head.size()) {
        size_t e = head.find("\r\n", pos);
        if (e == std::string_view::npos) e = head.size();
        std::string_view h = head.substr(pos, e - pos);
        pos = e + 2;
        if (h.empty()) continue;
        if (h[0] == ' ' || h[0] == '\t') return "obsolete header folding";
        size_t colon = h.find(':');
        if (colon == std::string_view::npos || colon == 0) return "malformed header line";
        std::string_view name = h.substr(0, colon);
        for (char c : name)
            if (!is_token_char(c)) return "malformed header name";
        std::string_view value = trim(h.substr(colon + 1));
        for (unsigned char c : value)
            if ((c < 0x20 && c != '\t') || c == 0x7f) return "control character in a header value";
        req.headers.emplace_back(lower(name), std::string(value));
    }
    if (const std::string* c = req.header("connection")) {
        std::string v = lower(*c);
        if (v.find("close") != std::string::npos) req.keep_alive = false;
        else if (v.find("keep-alive") != std::string::npos) req.keep_alive = true;
    }
    return "";
}

Conn::Conn(int fd, const Limits& lim, const std::atomic<bool>* stop) : fd_(fd), lim_(lim), stop_(stop) {
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Conn::~Conn() {
    if (fd_ >= 0) ::close(fd_);
}

Conn::Read Conn::read_request(Request& req, std::string& why) {
    // Wait for the first byte of the next request: the idle limit, in short steps so that a
    // server that is stopping lets idle connections go.
    auto idle_end = Clock::now() + std::chrono::milliseconds(lim_.idle_ms);
    while (buf_.empty()) {
        if (stop_ && stop_->load()) return Read::Stopping;
        int left = ms_left(idle_end);
        if (left == 0) return Read::Timeout;
        if (!wait_fd(fd_, POLLIN, std::min(left, 100))) continue;
        char tmp[4096];
        ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
        if (n == 0) return Read::Closed;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return Read::Closed;
        }
        buf_.append(tmp, size_t(n));
    }
    auto deadline = Clock::now() + std::chrono::milliseconds(lim_.head_ms);
    auto fill = [&]() -> int {  // 1 read, 0 closed, -1 timeout
        for (;;) {
            int left = ms_left(deadline);
            if (left == 0 || !wait_fd(fd_, POLLIN, left)) return -1;
            char tmp[16384];
            ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
            if (n > 0) {
                buf_.append(tmp, size_t(n));
                return 1;
            }
            if (n == 0) return 0;
            if (errno != EINTR && errno != EAGAIN) return 0;
        }
    };
    // Leading blank lines before a request line are allowed (RFC 9112 2.2).
    size_t end;
    for (;;) {
        while (buf_.size() >= 2 && buf_[0] == '\r' && buf_[1] == '\n') buf_.erase(0, 2);
        end = buf_.find("\r\n\r\n");
        if (end != std::string::npos) break;
        if (buf_.size() > lim_.max_head) return Read::HeadTooLarge;
        int f = fill();
        if (f < 0) return Read::Timeout;
        if (f == 0) return Read::Closed;
    }
    if (end > lim_.max_head) return Read::HeadTooLarge;
    why = parse_head(std::string_view(buf_).substr(0, end), req);
    buf_.erase(0, end + 4);
    if (!why.empty()) return Read::Bad;
    if (req.header("transfer-encoding")) {
        why = "chunked request bodies are not supported; send Content-Length";
        return Read::Bad;
    }
    size_t len = 0;
    if (const std::string* cl = req.header("content-length")) {
        if (!parse_size(*cl, len)) {
            why = "malformed Content-Length '" + *cl + "'";
            return Read::Bad;
        }
    }
    if (len > lim_.max_body) return Read::BodyTooLarge;
    if (len > buf_.size()) {
        if (const std::string* ex = req.header("expect"); ex && lower(*ex) == "100-continue")
            if (!write_all("HTTP/1.1 100 Continue\r\n\r\n")) return Read::Closed;
    }
    while (buf_.size() < len) {
        int f = fill();
        if (f < 0) return Read::Timeout;
        if (f == 0) return Read::Closed;
    }
    req.body = buf_.substr(0, len);
    buf_.erase(0, len);
    return Read::Ok;
}

bool Conn::write_all(std::string_view s) {
    auto deadline = Clock::now() + std::chrono::milliseconds(lim_.write_ms);
    while (!s.empty()) {
        ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            s.remove_prefix(size_t(n));
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            int left = ms_left(deadline);
            if (left == 0 || !wait_fd(fd_, POLLOUT, left)) return false;
            continue;
        }
        return false;
    }
    return true;
}

static std::string status_line(int status) {
    return "HTTP/1.1 " + std::to_string(status) + " " + status_text(status) + "\r\n";
}

bool Conn::respond(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                   std::string_view headers, bool omit_body) {
    std::string out = status_line(status);
    if (!content_type.empty()) out += "Content-Type: " + std::string(content_type) + "\r\n";
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    out += headers;
    out += "\r\n";
    if (!omit_body) out += body;
    return write_all(out);
}

bool Conn::begin_stream(int status, std::string_view content_type, bool http11, std::string_view headers) {
    chunked_ = http11;
    std::string out = status_line(status);
    out += "Content-Type: " + std::string(content_type) + "\r\nCache-Control: no-cache\r\n";
    out += chunked_ ? "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n" : "Connection: close\r\n";
    out += headers;
    out += "\r\n";
    return write_all(out);
}

bool Conn::send_chunk(std::string_view data) {
    if (data.empty()) return true;
    if (!chunked_) return write_all(data);
    char hex[32];
    int n = std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
    std::string out(hex, size_t(n));
    out += data;
    out += "\r\n";
    return write_all(out);
}

bool Conn::end_stream() { return chunked_ ? write_all("0\r\n\r\n") : true; }

bool Conn::peer_closed() {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return true;
    if (p.revents & POLLIN) {
        char c;
        ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0;
    }
    return false;
}

int listen_tcp(const std::string& host, int port, int* bound) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    std::string ps = std::to_string(port), where = host + ":" + ps;
    int rc = ::getaddrinfo(host.c_str(), ps.c_str(), &hints, &res);
    if (rc != 0) throw Error("getaddrinfo(" + host + "): " + gai_strerror(rc));
    int fd = -1;
    std::string why = "no address";
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            why = std::strerror(errno);
            continue;
        }
        int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) break;
        why = std::strerror(errno);
        ::close(fd);
        fd = -1;
    }
    ::freeaddrinfo(res);
    if (fd < 0) throw Error("listen on " + where + ": " + why);
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl);
    if (bound)
        *bound = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                          : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
}

int connect_tcp(const std::string& host, int port, int timeout_ms, std::string* err) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    std::string ps = std::to_string(port);
    int rc = ::getaddrinfo(host.c_str(), ps.c_str(), &hints, &res);
    if (rc != 0) {
        if (err) *err = "getaddrinfo(" + host + "): " + gai_strerror(rc);
        return -1;
    }
    int fd = -1;
    std::string why = "no address";
    for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            int e = errno;
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (e != EINPROGRESS || !wait_fd(fd, POLLOUT, timeout_ms) ||
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
                why = std::strerror(e == EINPROGRESS ? (soerr ? soerr : ETIMEDOUT) : e);
                ::close(fd);
                fd = -1;
                continue;
            }
        }
    }
    ::freeaddrinfo(res);
    if (fd < 0) {
        if (err) *err = "connect " + host + ":" + ps + ": " + why;
        return -1;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

std::optional<Response> request(const std::string& host, int port, std::string_view method, std::string_view path,
                                std::string_view body, std::string_view headers, int timeout_ms,
                                const std::function<void(std::string_view)>& on_data, std::string* err) {
    auto fail = [&](int fd, const std::string& why) -> std::optional<Response> {
        if (fd >= 0) ::close(fd);
        if (err) *err = why;
        return std::nullopt;
    };
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    int fd = connect_tcp(host, port, timeout_ms, err);
    if (fd < 0) return std::nullopt;
    std::string out = std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: " + host + "\r\n";
    out += "Connection: close\r\n";
    if (!body.empty() || method == "POST") out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    out += headers;
    out += "\r\n";
    out += body;
    std::string_view w = out;
    while (!w.empty()) {
        ssize_t n = ::send(fd, w.data(), w.size(), MSG_NOSIGNAL);
        if (n > 0) w.remove_prefix(size_t(n));
        else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!wait_fd(fd, POLLOUT, ms_left(deadline))) return fail(fd, "send: timed out");
        } else return fail(fd, std::string("send: ") + std::strerror(errno));
    }
    std::string in;
    bool eof = false;
    auto more = [&]() -> bool {
        if (eof) return false;
        if (!wait_fd(fd, POLLIN, ms_left(deadline))) return false;
        char tmp[16384];
        ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
        if (n > 0) {
            in.append(tmp, size_t(n));
            return true;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
        eof = true;
        return false;
    };
    Response r;
    size_t he;
    for (;;) {
        he = in.find("\r\n\r\n");
        if (he != std::string::npos) {
            // Skip interim 1xx responses.
            if (in.compare(0, 10, "HTTP/1.1 1") == 0) {
                in.erase(0, he + 4);
                continue;
            }
            break;
        }
        if (!more()) return fail(fd, eof ? "the server closed the connection before a response" : "timed out");
    }
    std::string_view head(in.data(), he);
    if (head.size() < 12 || head.substr(0, 5) != "HTTP/") return fail(fd, "malformed status line");
    r.status = std::atoi(std::string(head.substr(9, 3)).c_str());
    size_t pos = head.find("\r\n");
    while (pos != std::string_view::npos && pos < head.size()) {
        size_t e = head.find("\r\n", pos + 2);
        std::string_view h = head.substr(pos + 2, (e == std::string_view::npos ? head.size() : e) - pos - 2);
        size_t c = h.find(':');
        if (c != std::string_view::npos) r.headers.emplace_back(lower(h.substr(0, c)), std::string(trim(h.substr(c + 1))));
        pos = e;
    }
    in.erase(0, he + 4);
    auto deliver = [&](std::string_view d) {
        r.body += d;
        if (on_data && !d.empty()) on_data(d);
    };
    const std::string* te = r.header("transfer-encoding");
    const std::string* cl = r.header("content-length");
    if (method == "HEAD" || r.status == 204 || r.status == 304) {
        // No body, whatever the headers say.
    } else if (te && lower(*te).find("chunked") != std::string::npos) {
        for (;;) {
            size_t le;
            while ((le = in.find("\r\n")) == std::string::npos)
                if (!more()) return fail(fd, "truncated chunk size");
            size_t n = 0;
            std::string_view szs(in.data(), le);
            szs = szs.substr(0, szs.find(';'));
            if (!parse_size(trim(szs), n, 16)) return fail(fd, "malformed chunk size");
            while (in.size() < le + 2 + n + 2)
                if (!more()) return fail(fd, "truncated chunk");
            deliver(std::string_view(in).substr(le + 2, n));
            in.erase(0, le + 2 + n + 2);
            if (n == 0) break;
        }
    } else if (cl) {
        size_t n = 0;
        if (!parse_size(*cl, n)) return fail(fd, "malformed Content-Length");
        while (in.size() < n)
            if (!more()) return fail(fd, "truncated body");
        deliver(std::string_view(in).substr(0, n));
    } else {
        deliver(in);
        in.clear();
        while (more()) {
            deliver(in);
            in.clear();
        }
        if (!eof) return fail(fd, "timed out");
    }
    ::close(fd);
    return r;
}

}  // namespace bankml::net
