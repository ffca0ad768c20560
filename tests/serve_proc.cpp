#include "serve_proc.h"

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "test.h"

namespace bt {

using Clock = std::chrono::steady_clock;

ServeProc::ServeProc(const std::vector<std::string>& args, int ready_s) {
    err_path_ = temp_dir() + "/serve.err";
    std::vector<std::string> argv = {bankml_bin(), "serve", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargs;  // built before fork: the child only calls async-signal-safe functions
    for (auto& a : argv) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    pid_t p = ::fork();
    if (p == 0) {
        int fd = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) ::dup2(fd, 2);
        int nul = ::open("/dev/null", O_RDWR);
        if (nul >= 0) ::dup2(nul, 0), ::dup2(nul, 1);
        ::execv(cargs[0], cargs.data());
        ::_exit(127);
    }
    pid_ = p;
    auto deadline = Clock::now() + std::chrono::seconds(ready_s);
    while (Clock::now() < deadline && port_ == 0) {
        std::string e = err();
        size_t at = e.find("listening on http://127.0.0.1:");
        if (at != std::string::npos) {
            size_t s = at + std::string("listening on http://127.0.0.1:").size();
            size_t nl = e.find('\n', s);
            if (nl != std::string::npos) port_ = std::atoi(e.substr(s, nl - s).c_str());
        }
        int st;
        if (port_ == 0 && ::waitpid(pid_, &st, WNOHANG) == pid_) {
            pid_ = -1;
            return;
        }
        if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    while (port_ > 0 && Clock::now() < deadline) {
        auto r = get("/health", "", 2000);
        if (r && r->status == 200) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    port_ = 0;
}

ServeProc::~ServeProc() {
    if (pid_ > 0) stop(5000);
}

std::string ServeProc::err() const {
    std::ifstream f(err_path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

int ServeProc::stop(int timeout_ms) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    int st = 0;
    while (Clock::now() < deadline) {
        if (::waitpid(pid_, &st, WNOHANG) == pid_) {
            pid_ = -1;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return -1;
}

std::optional<bankml::net::Response> ServeProc::get(const std::string& path, const std::string& headers, int ms) const {
    return bankml::net::request("127.0.0.1", port_, "GET", path, "", headers, ms);
}

std::optional<bankml::net::Response> ServeProc::post(const std::string& path, const std::string& body,
                                                     const std::string& headers, int ms) const {
    return bankml::net::request("127.0.0.1", port_, "POST", path, body, "Content-Type: application/json\r\n" + headers, ms);
}

bankml::json::Value ServeProc::post_json(const std::string& path, const std::string& body, int* status) const {
    auto r = post(path, body);
    if (status) *status = r ? r->status : 0;
    if (!r) return nullptr;
    auto v = bankml::json::try_parse(r->body);
    return v ? *v : bankml::json::Value();
}

std::vector<std::string> sse_data(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < body.size()) {
        size_t e = body.find("\n\n", pos);
        if (e == std::string::npos) e = body.size();
        std::string ev = body.substr(pos, e - pos);
        if (ev.compare(0, 6, "data: ") == 0) out.push_back(ev.substr(6));
        pos = e + 2;
    }
    return out;
}

}  // namespace bt
