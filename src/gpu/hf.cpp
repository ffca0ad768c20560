#include "gpu/hf.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cli.h"
#include "core/error.h"
#include "core/json.h"

namespace bankml::gpu::hf {

// ---------------------------------------------------------------------------------------------
// Options

FetchOptions options_from_env(std::string* note) {
    FetchOptions o;
    if (const char* v = std::getenv("BANKML_HF_TIMEOUT")) {
        auto d = cli::parse_double(v);
        if (d && *d >= 0.05 && *d <= 600) {
            o.timeout_s = *d;
            o.connect_timeout_s = std::min(o.connect_timeout_s, *d);
        } else if (note) {
            *note = std::string("BANKML_HF_TIMEOUT='") + v + "' is not a number of seconds from 0.05 to 600; using " +
                    std::to_string(int(o.timeout_s)) + " s";
        }
    }
    return o;
}

static std::string seconds(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", s);
    return b;
}

std::vector<std::string> curl_argv(const FetchOptions& o) {
    return {o.program,
            "-fsSL",  // fail on HTTP errors, quiet but with errors, follow redirects
            "--proto", "=https", "--proto-redir", "=https",
            "--connect-timeout", seconds(std::min(o.connect_timeout_s, o.timeout_s)),
            "--max-time", seconds(o.timeout_s),
            "--max-filesize", std::to_string(o.max_bytes),
            "-H", "Accept: application/json",
            o.url};
}

// ---------------------------------------------------------------------------------------------
// The subprocess

// What curl's common exit codes mean, in words (curl(1), "EXIT CODES").
static const char* curl_exit_meaning(int code) {
    switch (code) {
        case 1: return "unsupported protocol";
        case 3: return "malformed URL";
        case 5: return "could not resolve the proxy";
        case 6: return "could not resolve the host: no DNS or no network";
        case 7: return "could not connect: no network or the host refused";
        case 16: return "HTTP/2 error";
        case 18: return "partial transfer";
        case 22: return "the server answered with an HTTP error status";
        case 23: return "write error";
        case 26: return "read error";
        case 27: return "out of memory";
        case 28: return "timed out";
        case 35: return "TLS handshake failed";
        case 47: return "too many redirects";
        case 52: return "the server sent nothing";
        case 55: return "failed sending data";
        case 56: return "failed receiving data";
        case 60: return "the server's TLS certificate could not be verified";
        case 63: return "the answer is larger than the limit";
        case 77: return "cannot read the CA certificates";
        default: return nullptr;
    }
}

// The last non-empty line of curl's stderr, trimmed to a sane length: its one-line error.
static std::string last_line(const std::string& err) {
    size_t end = err.size();
    while (end > 0) {
        while (end > 0 && (err[end - 1] == '\n' || err[end - 1] == '\r' || err[end - 1] == ' ')) --end;
        size_t start = err.rfind('\n', end ? end - 1 : 0);
        start = start == std::string::npos ? 0 : start + 1;
        if (end > start) {
            std::string line = err.substr(start, end - start);
            for (auto& c : line)
                if ((unsigned char)c < 0x20) c = ' ';
            if (line.size() > 300) line = line.substr(0, 300) + "...";
            return line;
        }
        end = start;
        if (start == 0) break;
    }
    return "";
}

namespace {
struct Fd {
    int fd = -1;
    ~Fd() { reset(); }
    void reset() {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
};

void make_pipe(Fd& r, Fd& w) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw Error(std::string("pipe2 failed: ") + std::strerror(errno));
    r.fd = p[0];
    w.fd = p[1];
}
}  // namespace

std::string fetch(const FetchOptions& o) {
    std::vector<std::string> args = curl_argv(o);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    Fd out_r, out_w, err_r, err_w, exec_r, exec_w;
    make_pipe(out_r, out_w);
    make_pipe(err_r, err_w);
    make_pipe(exec_r, exec_w);  // close-on-exec: it reads EOF once curl runs, or errno if exec failed

    pid_t pid = ::fork();
    if (pid < 0) throw Error(std::string("fork failed: ") + std::strerror(errno));
    if (pid == 0) {
        // The child: only async-signal-safe calls until exec.
        ::setpgid(0, 0);
        int devnull = ::open("/dev/null", O_RDONLY);
        if (devnull >= 0) ::dup2(devnull, 0);
        ::dup2(out_w.fd, 1);
        ::dup2(err_w.fd, 2);
        ::execvp(argv[0], argv.data());
        int e = errno;
        ssize_t ignored = ::write(exec_w.fd, &e, sizeof e);
        (void)ignored;
        ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from here, so the group exists before any kill below
    out_w.reset();
    err_w.reset();
    exec_w.reset();

    auto kill_and_reap = [&] {
        ::kill(-pid, SIGKILL);
        ::kill(pid, SIGKILL);
        int st;
        while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    };

    int exec_errno = 0;
    ssize_t n;
    while ((n = ::read(exec_r.fd, &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {}
    if (n == sizeof exec_errno) {
        int st;
        while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        if (exec_errno == ENOENT) throw Error(o.program + " not found on PATH (bankml reads the list through curl)");
        throw Error("cannot run " + o.program + ": " + std::strerror(exec_errno));
    }

    using Clock = std::chrono::steady_clock;
    auto deadline = Clock::now() + std::chrono::duration<double>(o.timeout_s + 1.0);
    std::string body, err;
    bool out_open = true, err_open = true;
    char buf[16384];
    while (out_open || err_open) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            kill_and_reap();
            throw Error(o.program + " did not finish within " + seconds(o.timeout_s) + " s (killed)");
        }
        pollfd fds[2];
        int nf = 0;
        if (out_open) fds[nf++] = {out_r.fd, POLLIN, 0};
        if (err_open) fds[nf++] = {err_r.fd, POLLIN, 0};
        int r = ::poll(fds, nfds_t(nf), int(std::min<long long>(left, 1000)));
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            kill_and_reap();
            throw Error(std::string("poll failed: ") + std::strerror(e));
        }
        for (int i = 0; i < nf; ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            bool is_out = fds[i].fd == out_r.fd;
            ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                (is_out ? out_open : err_open) = false;
                continue;
            }
            if (is_out) {
                body.append(buf, size_t(got));
                if (body.size() > o.max_bytes) {
                    kill_and_reap();
                    throw Error("the answer is larger than " + std::to_string(o.max_bytes) + " bytes (" + o.program +
                                " killed)");
                }
            } else if (err.size() < 65536) {
                err.append(buf, size_t(got));
            }
        }
    }
    // Both pipes are closed: curl (or whatever held them) is done; reap it within the deadline.
    int st = 0;
    for (;;) {
        pid_t w = ::waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) throw Error(std::string("waitpid failed: ") + std::strerror(errno));
        if (Clock::now() > deadline) {
            kill_and_reap();
            throw Error(o.program + " did not finish within " + seconds(o.timeout_s) + " s (killed)");
        }
        ::usleep(2000);
    }
    if (WIFSIGNALED(st)) throw Error(o.program + " was killed by signal " + std::to_string(WTERMSIG(st)));
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code != 0) {
        std::string msg = o.program + " failed with exit code " + std::to_string(code);
        if (const char* m = curl_exit_meaning(code)) msg += std::string(" (") + m + ")";
        std::string line = last_line(err);
        if (!line.empty()) msg += ": " + line;
        throw Error(msg);
    }
    return body;
}

// ---------------------------------------------------------------------------------------------
// Parsing

bool parse_size(std::string_view s, uint64_t& bytes) {
    auto trim = [](std::string_view& v) {
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    };
    trim(s);
    size_t i = 0;
    while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
    if (i == 0) return false;
    double num;
    auto r = std::from_chars(s.data(), s.data() + i, num);
    if (r.ec != std::errc() || r.ptr != s.data() + i || !(num >= 0)) return false;
    std::string_view unit = s.substr(i);
    trim(unit);
    std::string u;
    for (char c : unit) u += char(std::tolower((unsigned char)c));
    double mult;
    if (u == "b" || u.empty()) mult = u.empty() ? -1 : 1;
    else if (u == "kb") mult = 1e3;
    else if (u == "mb") mult = 1e6;
    else if (u == "gb") mult = 1e9;
    else if (u == "tb") mult = 1e12;
    else if (u == "kib") mult = 1024.0;
    else if (u == "mib") mult = 1048576.0;
    else if (u == "gib") mult = 1073741824.0;
    else if (u == "tib") mult = 1099511627776.0;
    else return false;
    if (mult < 0) return false;  // a bare number: no unit, no way to know
    double b = std::round(num * mult);
    if (!(b < 1.8e19)) return false;
    bytes = uint64_t(b);
    return true;
}

static std::string gb_text(uint64_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%g GB", double(bytes) / 1e9);
    return b;
}

static uint32_t vendor_of(std::string m) {
    for (auto& c : m) c = char(std::tolower((unsigned char)c));
    if (m == "nvidia") return 0x10de;
    if (m == "amd") return 0x1002;
    if (m == "intel") return 0x8086;
    return 0;
}

// A JSON value as text for a note: short, one line.
static std::string shown(const json::Value& v) {
    std::string s = json::write(v);
    return s.size() <= 60 ? s : s.substr(0, 57) + "...";
}

// One GPU flavor as a device; `i` is its position in the array (for flavors without a name).
static Device flavor_device(const json::Value& f, const json::Value& acc, size_t i) {
    Device d;
    d.kind = Kind::Remote;
    d.backend = "huggingface";
    d.backend_index = uint32_t(i);
    const json::Value& id = f["name"];
    const json::Value& pretty = f["prettyName"];
    d.id = id.string_or("");
    d.name = pretty.string_or(d.id);
    if (d.id.empty()) d.notes.push_back("no flavor name ('name'): this flavor cannot be asked for by name");
    if (d.name.empty()) d.name = "flavor #" + std::to_string(i);
    if (!pretty.is_string() && !d.id.empty()) d.notes.push_back("no 'prettyName': named by its flavor");
    if (!acc["type"].is_string()) d.notes.push_back("the accelerator has no 'type': taken as a GPU");

    std::string model = acc["model"].string_or(""), maker = acc["manufacturer"].string_or("");
    d.vendor_id = vendor_of(maker);
    if (model.empty()) d.notes.push_back("the accelerator has no 'model'");

    // Card count: the API writes it as a string ("8"); a number is accepted too.
    const json::Value& q = acc["quantity"];
    std::optional<int64_t> count;
    if (q.is_string()) count = cli::parse_int(q.as_string());
    else if (q.is_integer()) count = q.as_int();
    else if (q.is_double() && std::trunc(q.as_double()) == q.as_double()) count = int64_t(q.as_double());
    if (count && *count >= 1 && *count <= 4096) d.count = uint32_t(*count);
    else {
        d.count = 1;
        d.notes.push_back(q.is_null() ? "no card count ('quantity'): taken as 1"
                                      : "card count 'quantity' " + shown(q) + " is not a positive integer: taken as 1");
    }

    // Memory: the API's vram is the whole flavor's ("1128 GB" for 8 x H200), reported per card.
    const json::Value& vram = acc["vram"];
    uint64_t total = 0;
    if (vram.is_string() && parse_size(vram.as_string(), total)) {
        d.device_local_bytes = total / d.count;
        d.notes.push_back("memory: " + gb_text(total) + " for the flavor (the API's 'vram'), " +
                          gb_text(d.device_local_bytes) + " per card");
    } else {
        d.notes.push_back(vram.is_null() ? "no memory size ('vram')"
                                         : "memory 'vram' " + shown(vram) + " is not a size like \"80 GB\"");
    }

    // Price: only a per-minute price is turned into dollars per hour.
    const json::Value& label = f["unitLabel"];
    const json::Value& micro = f["unitCostMicroUSD"];
    const json::Value& usd = f["unitCostUSD"];
    std::optional<double> per_unit;
    if (micro.is_number() && micro.as_double() >= 0) per_unit = micro.as_double() / 1e6;
    else if (usd.is_number() && usd.as_double() >= 0) per_unit = usd.as_double();
    if (!per_unit) {
        d.notes.push_back("no price ('unitCostMicroUSD' / 'unitCostUSD')");
    } else if (label.is_string() && label.as_string() == "minute") {
        d.usd_per_hour = *per_unit * 60;
    } else {
        d.notes.push_back("no price per hour: the API's price is per " +
                          (label.is_string() ? "'" + label.as_string() + "'" : std::string("unknown unit ('unitLabel' missing)")) +
                          ", and only a per-minute price is converted");
    }
    return d;
}

Parsed parse(std::string_view text) {
    Parsed p;
    json::ParseFailure why;
    auto doc = json::try_parse(text, &why);
    if (!doc) {
        p.notes.push_back("the answer is not JSON (" + std::to_string(text.size()) + " bytes; " + why.message + ")");
        return p;
    }
    if (!doc->is_array()) {
        p.notes.push_back(std::string("the answer is a JSON ") + json::type_name(doc->type()) +
                          ", not an array of flavors");
        return p;
    }
    const json::Array& flavors = doc->as_array();
    p.flavors = flavors.size();
    if (flavors.empty()) {
        p.notes.push_back("the answer is an empty list of flavors");
        return p;
    }
    size_t not_objects = 0, no_accel_field = 0, other_accel = 0;
    for (size_t i = 0; i < flavors.size(); ++i) {
        const json::Value& f = flavors[i];
        if (!f.is_object()) {
            ++not_objects;
            continue;
        }
        const json::Value* acc = f.find("accelerator");
        if (!acc) {
            ++no_accel_field;
            continue;
        }
        if (acc->is_null()) continue;  // a CPU flavor
        if (!acc->is_object()) {
            ++other_accel;
            continue;
        }
        const json::Value& type = (*acc)["type"];
        if (type.is_string() && type.as_string() != "gpu") {
            ++other_accel;  // another accelerator (a TPU, say): not a GPU
            continue;
        }
        p.devices.push_back(flavor_device(f, *acc, i));
    }
    if (not_objects)
        p.notes.push_back(std::to_string(not_objects) + " entr" + (not_objects == 1 ? "y" : "ies") +
                          " of the list are not objects: skipped");
    if (no_accel_field)
        p.notes.push_back(std::to_string(no_accel_field) + " flavor" + (no_accel_field == 1 ? "" : "s") +
                          " without an 'accelerator' field: not listed (GPU or not is unknown)");
    if (other_accel)
        p.notes.push_back(std::to_string(other_accel) + " flavor" + (other_accel == 1 ? "" : "s") +
                          " with an accelerator that is not a GPU: not listed");
    if (p.devices.empty())
        p.notes.push_back("no GPU flavors among the " + std::to_string(flavors.size()) + " flavors");
    return p;
}

std::vector<Device> devices_with(const FetchOptions& o) {
    Parsed p = parse(fetch(o));
    if (p.devices.empty()) {
        std::string msg;
        for (const auto& n : p.notes) msg += (msg.empty() ? "" : "; ") + n;
        throw Error(msg + " (" + o.url + ")");
    }
    for (const auto& n : p.notes) p.devices.front().notes.push_back("the list: " + n);
    return p.devices;
}

std::vector<Device> devices() {
    std::string note;
    FetchOptions o = options_from_env(&note);
    try {
        auto devs = devices_with(o);
        if (!note.empty()) devs.front().notes.push_back(note);
        return devs;
    } catch (const Error& e) {
        if (note.empty()) throw;
        throw Error(std::string(e.what()) + "; " + note);
    }
}

}  // namespace bankml::gpu::hf
