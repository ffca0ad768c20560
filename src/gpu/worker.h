// gpu::Worker: a verified card that takes a share of each Q1_0 matrix's rows in a one-column
// product (decoding) while the caller's CPU pool computes the rest. Each output row is one
// device's whole dot product, and the card's kernels were proven bit-exact with
// quant::vec_dot_q1_0_ref on this very card (kernels::verify_q1_0) before any use, so the split
// never changes a bit. The worker knows rows and activations only (no model).
//
// One product is in flight at a time: begin() packs and submits, finish() waits and copies.
// Weights are packed and uploaded once per matrix (keyed by the caller's pointer, e.g. the
// weights' address in the mapped file); the share of rows is fixed when the worker opens.
//
// Per-shape calibration: the first products of each matrix shape (rows × cols) alternate between
// the share on the card and the CPU alone, timed begin → finish in the caller's pipeline (the
// CPU's rows included). After one warm-up of each (the card's includes the upload) and TRIALS
// timings of each, the faster median decides the shape; a shape decided for the CPU frees its
// buffers and begin() returns 0 for it from then on. A product the card skipped (resting, no
// room) is no timing. BANKML_GPU_LIMIT bounds the buffers and rests the card (gpu/limiter.h).
#pragma once
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/compute.h"
#include "gpu/kernels.h"
#include "gpu/limiter.h"

namespace bankml::gpu {

struct WorkerOptions {
    // Verify with verify_q1_0's full shapes (up to 12288×4096); false: its small shapes (tests).
    bool full_verify = true;
    // The card's share of rows, 0..0.95; negative: BANKML_GPU_SHARE, else calibrate (see open).
    double share = -1;
    // CPU threads the calibration compares the card with (0: Pool::env_threads()).
    int cpu_threads = 0;
    // Tests: alters the card's verify output (a corrupted card must give no worker).
    std::function<void(std::vector<float>&)> corrupt;
    // false: every shape takes the share at once, without per-shape calibration (tests of the rows).
    bool calibrate_shapes = true;
    // The limit; unset: BANKML_GPU_LIMIT.
    std::optional<LimitSetting> limit;
    // Tests: microseconds added to the card's side of every product (a slow card), or to the
    // calibration's CPU-alone products (a slow CPU).
    int test_card_delay_us = 0, test_cpu_delay_us = 0;
};

// Timings of each side per shape after the warm-up.
constexpr int TRIALS = 6;

class Worker {
public:
    // The first selected card (BANKML_GPU over discover(), software renderers only with
    // BANKML_GPU_ALLOW_SOFTWARE=1), opened, verified, with its chosen kernel variant; nullptr when
    // there is none or BANKML_GPU=off (silently: the ordinary CPU-only case), or after one stderr
    // line `bankml: GPU not used: <reason>` when BANKML_GPU could not be followed, the card fails
    // to open or verify, or the share is below 2%. Share: options.share, else BANKML_GPU_SHARE, else
    // card rate / (card rate + CPU rate) timed on one 4096×4096 product each (clamped to 0..0.95).
    static std::unique_ptr<Worker> open(const WorkerOptions& opt = {});
    // The same on a given card (tests).
    static std::unique_ptr<Worker> open_on(Gpu gpu, const WorkerOptions& opt);
    ~Worker();

    // Starts rows [0, k) of weights (rows × cols Q1_0, row-major) times act_q8 (cols/32 Q8_0
    // blocks) on the card; returns k (0: nothing submitted: cols > 16384, the shape is decided
    // for the CPU or is being timed on it, the card rests, no room). Throws bankml::Error on a
    // card failure.
    size_t begin(const void* key, const uint8_t* weights, size_t rows, size_t cols, const uint8_t* act_q8);
    // Called after every begin() once the caller's CPU rows are done, also when begin() returned
    // 0 (it ends the product's timing): waits for the card and writes its k rows to out[0..k).
    void finish(float* out);
    // False once the shape was decided for the CPU (the caller may then take its faster CPU path).
    bool takes(size_t rows, size_t cols) const;

    double share() const { return share_; }
    const CardUse& use() const { return *use_; }
    // "NVIDIA H200 (q1_0_mat_vec8_fma), 40% of Q1_0 decode rows (calibrated)".
    std::string describe() const;

private:
    struct Mat {
        Buffer scales, bits, out;
        size_t rows = 0, k = 0, cols = 0;
    };
    enum class Side { none, card, cpu };
    struct Shape {
        size_t rows = 0, cols = 0;
        enum class State { tuning, card, cpu } state = State::tuning;
        bool card_next = true;    // whose turn it is while tuning
        int card_runs = 0, cpu_runs = 0;  // the warm-up included
        std::vector<double> card_ms, cpu_ms;
    };
    Worker(Gpu gpu, kernels::FmaPath path, double share, std::string how, const WorkerOptions& opt, LimitSetting limit);
    Mat* matrix(const void* key, const uint8_t* weights, size_t rows, size_t cols);
    Mat upload(const uint8_t* weights, size_t rows, size_t k, size_t cols);
    void submit(const Mat& m, const uint8_t* act_q8);
    void collect(const Mat& m, float* out);
    Shape& shape(size_t rows, size_t cols);
    void record(Shape& s, Side side, double ms);
    double calibrate(int cpu_threads);
    void forget_shape(size_t rows, size_t cols);

    Gpu gpu_;
    std::unique_ptr<CardUse> use_;
    kernels::FmaPath path_;
    Pipeline pipes_[3];  // q1_0_mat_vec8 with 1, 2 and 4 rows per invocation: pipes_[log2(per)]
    double share_;
    std::string how_;
    bool calibrate_shapes_;
    int card_delay_us_, cpu_delay_us_;
    std::vector<std::pair<const void*, Mat>> mats_;
    std::vector<Shape> shapes_;
    Buffer act_scales_, act_lanes_;
    const Mat* pending_ = nullptr;
    // The product between begin() and finish(): which side a tuning shape is timed on, from when.
    Side side_ = Side::none;
    size_t shape_ = 0;
    std::chrono::steady_clock::time_point t0_, submitted_;
};

// BANKML_GPU_SHARE parsed: a value in [0, 0.95], or negative when unset; a bad value is an error.
double share_from_env();

}  // namespace bankml::gpu
