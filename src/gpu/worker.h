// gpu::Worker: a verified card that takes a share of each Q1_0 matrix's rows in a one-column
// product (decoding) while the caller's CPU pool computes the rest. Each output row is one
// device's whole dot product, and the card's kernels were proven bit-exact with
// quant::vec_dot_q1_0_ref on this very card (kernels::verify_q1_0) before any use, so the split
// never changes a bit. The worker knows rows and activations only (no model).
//
// One product is in flight at a time: begin() packs and submits, finish() waits and copies.
// Weights are packed and uploaded once per matrix (keyed by the caller's pointer, e.g. the
// weights' address in the mapped file); the share of rows is fixed when the worker opens.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/compute.h"
#include "gpu/kernels.h"

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
};

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
    // blocks) on the card; returns k (0: nothing submitted, e.g. cols > 16384). Throws bankml::Error on a card failure.
    size_t begin(const void* key, const uint8_t* weights, size_t rows, size_t cols, const uint8_t* act_q8);
    // Waits for the product begin() submitted and writes its k rows to out[0..k).
    void finish(float* out);

    double share() const { return share_; }
    // "NVIDIA H200 (q1_0_mat_vec8_fma), 40% of Q1_0 decode rows (calibrated)".
    std::string describe() const;

private:
    struct Mat {
        Buffer scales, bits, out;
        size_t k = 0, cols = 0;
    };
    Worker(Gpu gpu, kernels::FmaPath path, double share, std::string how);
    Mat& matrix(const void* key, const uint8_t* weights, size_t rows, size_t cols);
    double calibrate(int cpu_threads);
    void forget(const void* key);

    Gpu gpu_;
    kernels::FmaPath path_;
    Pipeline pipes_[3];  // q1_0_mat_vec8 with 1, 2 and 4 rows per invocation: pipes_[log2(per)]
    double share_;
    std::string how_;
    std::vector<std::pair<const void*, Mat>> mats_;
    Buffer act_scales_, act_lanes_;
    Mat* pending_ = nullptr;
};

// BANKML_GPU_SHARE parsed: a value in [0, 0.95], or negative when unset; a bad value is an error.
double share_from_env();

}  // namespace bankml::gpu
