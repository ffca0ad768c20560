// BANKML_GPU_LIMIT and the card's status: how much of a card bankml may take, and what it is doing.
//
// The limit L (0.05..1, default 0.8) has two parts:
//   memory: bankml's buffers on a card stay within L of the heap they come from (Gpu::heap_bytes,
//           against what every Gpu opened on that card holds); on a card that shares the system's
//           RAM (integrated, or a software renderer) also within L of the RAM they could use (what
//           they hold plus MemAvailable).
//   time:   after a dispatch (a product, or a whole token's sequence) of d the card rests
//           d·(1−L)/L; work arriving while it rests runs on the CPU, never a wait, the same bits.
// The memory part always applies. The time part applies on an integrated card, which shares the
// memory bandwidth and the power budget with the desktop, and wherever BANKML_GPU_LIMIT is set
// explicitly; a discrete card with the default limit computes without rests (a card dedicated to
// inference should not lose a fifth of its speed unasked).
//
// Every user of a card (a gpu::Worker, a whole-token forward pass) holds a CardUse while it lives;
// status() sums them for `bankml run --json`, `bankml bench --json` and GET /bankml/usage.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "gpu/compute.h"

namespace bankml::gpu {

constexpr double DEFAULT_LIMIT = 0.8;
constexpr double MIN_LIMIT = 0.05;

struct LimitSetting {
    double value = DEFAULT_LIMIT;  // L
    bool given = false;            // BANKML_GPU_LIMIT was set
};
// BANKML_GPU_LIMIT: a number, clamped to 0.05..1; unset or empty: the default. Anything else is a
// bankml::Error naming the value.
LimitSetting limit_from_env();
double limit();

// Whether the time part applies by default to a card of this kind (Integrated only).
bool rests_by_default(Kind kind);
// Whether a card of this kind computes in the system's RAM (Integrated, Cpu).
bool shares_ram(Kind kind);
// MemAvailable from /proc/meminfo in bytes (0 when unreadable).
uint64_t mem_available();

// One matrix shape as per-shape calibration left it: "card", "cpu" or "tuning", with the median
// begin → finish times of both sides (0 until timed).
struct ShapeDecision {
    size_t rows = 0, cols = 0;
    std::string on = "tuning";
    double card_ms = 0, cpu_ms = 0;
};

class CardUse {
public:
    enum class Mode { share, forward };
    // Registers gpu (not owned: it must outlive this object and stay where it is) for status().
    // BANKML_GPU_TEST_HEAP=BYTES (tests) stands for the card's heap size.
    CardUse(const Gpu& gpu, Mode mode, LimitSetting l);
    ~CardUse();
    CardUse(const CardUse&) = delete;
    CardUse& operator=(const CardUse&) = delete;

    double limit() const { return limit_.value; }
    bool time_part() const { return time_part_; }
    uint64_t heap_bytes() const { return heap_; }
    // What bankml's buffers on this card may hold at most, and what they hold now (every Gpu
    // opened on this card).
    uint64_t budget_bytes() const;
    uint64_t held_bytes() const;
    // Whether `more` bytes fit within the budget beside what is held.
    bool fits(uint64_t more) const;

    // Whether the card rests now (this user's last dispatch or another's on the same card).
    bool resting() const;
    // A dispatch of `seconds` has just ended: the card's busy time, and the rest after it.
    void ran(double seconds);

    // Counters for status().
    std::atomic<uint64_t> products_on_card{0}, products_on_cpu_resting{0}, products_on_cpu_memory{0},
        products_on_cpu_shape{0};
    std::atomic<uint64_t> tokens_on_card{0}, tokens_on_cpu_resting{0};
    std::atomic<int> shapes_on_card{0}, shapes_on_cpu{0}, shapes_tuning{0};
    std::atomic<double> share{-1};  // the worker's share of rows; negative: none (forward mode)
    void decided(const ShapeDecision& d);

    // This user's part of the status.
    struct Status snapshot() const;

private:
    using Clock = std::chrono::steady_clock;
    const Gpu& gpu_;
    Mode mode_;
    LimitSetting limit_;
    bool time_part_;
    uint64_t heap_;
    bool ram_;
    std::atomic<int64_t> rest_until_ns_{0};
    // The card's busy time per second over the last BUSY_WINDOW seconds.
    static constexpr int BUSY_WINDOW = 10;
    mutable std::mutex busy_mu_;
    int64_t busy_sec_[BUSY_WINDOW] = {};
    double busy_s_[BUSY_WINDOW] = {};
    int64_t first_sec_ = -1;
    mutable std::atomic<int64_t> ram_checked_ns_{-1};
    mutable std::atomic<uint64_t> ram_budget_{0};
    mutable std::mutex shapes_mu_;
    std::vector<ShapeDecision> shapes_;
};

// What the card is doing, summed over its users (docs/modules/worker.md names every field).
struct Status {
    std::string card, mode;  // mode: "forward" (whole tokens), "share" (rows of products), or both
    double limit = DEFAULT_LIMIT;
    bool limit_given = false, time_limit = false, integrated = false, resting = false;
    double share = -1;  // negative: no worker
    uint64_t allocated_bytes = 0, heap_bytes = 0, budget_bytes = 0;
    double busy = 0;  // the card's busy share of the last seconds, 0..1
    uint64_t products_on_card = 0, products_on_cpu_resting = 0, products_on_cpu_memory = 0, products_on_cpu_shape = 0;
    int shapes_on_card = 0, shapes_on_cpu = 0, shapes_tuning = 0;
    uint64_t tokens_on_card = 0, tokens_on_cpu_resting = 0;
    std::vector<ShapeDecision> shapes;  // the worker's decided shapes, in order of decision
};

// None when no card works in this process now.
std::optional<Status> status();
json::Value status_value(const Status& s);
// status() as JSON: an object, or null.
json::Value status_value();
std::string status_json();

}  // namespace bankml::gpu
