#include "gpu/limiter.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace bankml::gpu {

namespace {

// Recursive: status() holds it while a snapshot asks resting() and held_bytes().
std::recursive_mutex g_mu;
std::vector<const CardUse*> g_uses;  // every CardUse alive, in order of creation

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// How often an integrated card's RAM budget is read again from /proc/meminfo.
constexpr int64_t RAM_RECHECK_NS = 1'000'000'000;

}  // namespace

LimitSetting limit_from_env() {
    LimitSetting l;
    const char* s = std::getenv("BANKML_GPU_LIMIT");
    if (!s || !*s) return l;
    char* end = nullptr;
    double v = std::strtod(s, &end);
    if (end == s || *end || !(v == v))
        throw Error(std::string("BANKML_GPU_LIMIT='") + s + "' is not a number (the share of the card's memory and time, 0.05 to 1)");
    l.value = std::clamp(v, MIN_LIMIT, 1.0);
    l.given = true;
    return l;
}

double limit() { return limit_from_env().value; }

bool rests_by_default(Kind kind) { return kind == Kind::Integrated; }
bool shares_ram(Kind kind) { return kind == Kind::Integrated || kind == Kind::Cpu; }

uint64_t mem_available() {
    FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %lu kB", &kb) == 1) break;
    std::fclose(f);
    return kb * 1024;
}

CardUse::CardUse(const Gpu& gpu, Mode mode, LimitSetting l)
    : gpu_(gpu), mode_(mode), limit_(l), time_part_(l.given || rests_by_default(gpu.kind())), heap_(gpu.heap_bytes()),
      ram_(shares_ram(gpu.kind())) {
    // Test hook: a card of this many bytes, so that a tiny model can be larger than the limit.
    if (const char* h = std::getenv("BANKML_GPU_TEST_HEAP")) {
        char* end = nullptr;
        unsigned long long v = std::strtoull(h, &end, 10);
        if (end == h || *end) throw Error(std::string("BANKML_GPU_TEST_HEAP='") + h + "' is not a byte count");
        heap_ = v;
        ram_ = false;
    }
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    g_uses.push_back(this);
}

CardUse::~CardUse() {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    g_uses.erase(std::remove(g_uses.begin(), g_uses.end(), this), g_uses.end());
}

uint64_t CardUse::held_bytes() const {
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    uint64_t held = 0;
    for (const CardUse* u : g_uses)
        if (u->gpu_.index() == gpu_.index()) held += u->gpu_.allocated();
    return held;
}

uint64_t CardUse::budget_bytes() const {
    uint64_t b = uint64_t(limit_.value * double(heap_));
    if (!ram_) return b;
    const int64_t now = now_ns(), at = ram_checked_ns_.load();
    if (at < 0 || now - at > RAM_RECHECK_NS) {
        ram_budget_.store(uint64_t(limit_.value * double(held_bytes() + mem_available())));
        ram_checked_ns_.store(now);
    }
    return std::min(b, ram_budget_.load());
}

bool CardUse::fits(uint64_t more) const { return held_bytes() + more <= budget_bytes(); }

bool CardUse::resting() const {
    if (!time_part_) return false;
    const int64_t now = now_ns();
    std::lock_guard<std::recursive_mutex> lock(g_mu);
    for (const CardUse* u : g_uses)
        if (u->gpu_.index() == gpu_.index() && u->rest_until_ns_.load(std::memory_order_relaxed) > now) return true;
    return false;
}

void CardUse::ran(double seconds) {
    if (!(seconds > 0)) return;
    const int64_t now = now_ns();
    if (time_part_ && limit_.value < 1)
        rest_until_ns_.store(now + int64_t(seconds * (1 - limit_.value) / limit_.value * 1e9), std::memory_order_relaxed);
    const int64_t sec = now / 1'000'000'000;
    std::lock_guard<std::mutex> lock(busy_mu_);
    if (first_sec_ < 0) first_sec_ = sec;
    const int i = int(sec % BUSY_WINDOW);
    if (busy_sec_[i] != sec) busy_sec_[i] = sec, busy_s_[i] = 0;
    busy_s_[i] += seconds;
}

void CardUse::decided(const ShapeDecision& d) {
    std::lock_guard<std::mutex> lock(shapes_mu_);
    shapes_.push_back(d);
}

Status CardUse::snapshot() const {
    Status s;
    s.card = gpu_.name();
    s.mode = mode_ == Mode::forward ? "forward" : "share";
    s.limit = limit_.value;
    s.limit_given = limit_.given;
    s.time_limit = time_part_;
    s.integrated = gpu_.kind() == Kind::Integrated;
    s.resting = resting();
    s.share = share.load();
    s.allocated_bytes = gpu_.allocated();
    s.heap_bytes = heap_;
    s.budget_bytes = budget_bytes();
    {
        // Busy: the card's time over the whole seconds of the window that have passed (at least
        // one), since its first dispatch.
        std::lock_guard<std::mutex> lock(busy_mu_);
        const int64_t sec = now_ns() / 1'000'000'000;
        double busy = 0;
        for (int i = 0; i < BUSY_WINDOW; ++i)
            if (busy_sec_[i] > sec - BUSY_WINDOW) busy += busy_s_[i];
        const int64_t span = first_sec_ < 0 ? 1 : std::clamp<int64_t>(sec - first_sec_ + 1, 1, BUSY_WINDOW);
        s.busy = first_sec_ < 0 ? 0 : std::min(1.0, busy / double(span));
    }
    s.products_on_card = products_on_card.load();
    s.products_on_cpu_resting = products_on_cpu_resting.load();
    s.products_on_cpu_memory = products_on_cpu_memory.load();
    s.products_on_cpu_shape = products_on_cpu_shape.load();
    s.shapes_on_card = shapes_on_card.load();
    s.shapes_on_cpu = shapes_on_cpu.load();
    s.shapes_tuning = shapes_tuning.load();
    s.tokens_on_card = tokens_on_card.load();
    s.tokens_on_cpu_resting = tokens_on_cpu_resting.load();
    std::lock_guard<std::mutex> lock(shapes_mu_);
    s.shapes = shapes_;
    return s;
}

std::optional<Status> status() {
    std::lock_guard<std::recursive_mutex> lock(g_mu);  // no user goes away meanwhile
    const std::vector<const CardUse*>& uses = g_uses;
    if (uses.empty()) return std::nullopt;
    // The first user's card; counters summed over every user (serve's slots each hold one).
    Status s = uses[0]->snapshot();
    uint64_t allocated = s.allocated_bytes;
    for (size_t i = 1; i < uses.size(); ++i) {
        Status t = uses[i]->snapshot();
        if (t.mode != s.mode) s.mode = "forward+share";
        if (t.share >= 0) s.share = t.share;
        allocated += t.allocated_bytes;
        s.resting = s.resting || t.resting;
        s.busy = std::min(1.0, s.busy + t.busy);
        s.products_on_card += t.products_on_card;
        s.products_on_cpu_resting += t.products_on_cpu_resting;
        s.products_on_cpu_memory += t.products_on_cpu_memory;
        s.products_on_cpu_shape += t.products_on_cpu_shape;
        s.shapes_on_card += t.shapes_on_card;
        s.shapes_on_cpu += t.shapes_on_cpu;
        s.shapes_tuning += t.shapes_tuning;
        s.tokens_on_card += t.tokens_on_card;
        s.tokens_on_cpu_resting += t.tokens_on_cpu_resting;
        s.shapes.insert(s.shapes.end(), t.shapes.begin(), t.shapes.end());
    }
    s.allocated_bytes = allocated;
    return s;
}

json::Value status_value(const Status& s) {
    json::Value o;
    o.set("card", s.card)
        .set("mode", s.mode)
        .set("limit", s.limit)
        .set("limit_given", s.limit_given)
        .set("time_limit", s.time_limit)
        .set("share", s.share >= 0 ? json::Value(s.share) : json::Value())
        .set("allocated_bytes", (unsigned long long)s.allocated_bytes)
        .set("heap_bytes", (unsigned long long)s.heap_bytes)
        .set("budget_bytes", (unsigned long long)s.budget_bytes)
        .set("integrated", s.integrated)
        .set("busy", s.busy)
        .set("resting", s.resting)
        .set("products_on_card", (unsigned long long)s.products_on_card)
        .set("products_on_cpu_resting", (unsigned long long)s.products_on_cpu_resting)
        .set("products_on_cpu_memory", (unsigned long long)s.products_on_cpu_memory)
        .set("products_on_cpu_shape", (unsigned long long)s.products_on_cpu_shape)
        .set("shapes_on_card", s.shapes_on_card)
        .set("shapes_on_cpu", s.shapes_on_cpu)
        .set("shapes_tuning", s.shapes_tuning)
        .set("tokens_on_card", (unsigned long long)s.tokens_on_card)
        .set("tokens_on_cpu_resting", (unsigned long long)s.tokens_on_cpu_resting);
    json::Value shapes = json::Value::array();
    for (const ShapeDecision& d : s.shapes) {
        json::Value x;
        x.set("rows", (unsigned long long)d.rows).set("cols", (unsigned long long)d.cols).set("on", d.on);
        x.set("card_ms", d.card_ms).set("cpu_ms", d.cpu_ms);
        shapes.push(std::move(x));
    }
    o.set("shapes", std::move(shapes));
    return o;
}

json::Value status_value() {
    std::optional<Status> s = status();
    return s ? status_value(*s) : json::Value();
}

std::string status_json() { return json::write(status_value()); }

}  // namespace bankml::gpu
