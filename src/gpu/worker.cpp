#include "gpu/worker.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "core/error.h"
#include "gpu/gpu.h"
#include "par/pool.h"
#include "quant/matmul.h"

namespace bankml::gpu {

namespace {

constexpr double MAX_SHARE = 0.95;
// Below this the card's rows do not repay a submit and a wait per product.
constexpr double MIN_SHARE = 0.02;
// Wider activations are left to the CPU: the verified shapes stop at 12288.
constexpr size_t MAX_COLS = 16384;

// Random Q1_0 weights and a Q8_0 column of the calibration's shape: any values time the same.
void calibration_data(size_t rows, size_t cols, std::vector<uint8_t>& w, std::vector<uint8_t>& q8) {
    std::mt19937 rng(7);
    w.resize(rows * cols / kernels::Q1_0_BLOCK * kernels::Q1_0_BLOCK_BYTES);
    for (size_t i = 0; i < w.size(); i += kernels::Q1_0_BLOCK_BYTES) {
        w[i] = 0x00, w[i + 1] = 0x3c;  // f16 1.0
        for (size_t j = 2; j < kernels::Q1_0_BLOCK_BYTES; ++j) w[i + j] = uint8_t(rng());
    }
    q8.resize(cols / kernels::Q8_0_BLOCK * kernels::Q8_0_BLOCK_BYTES);
    for (size_t i = 0; i < q8.size(); i += kernels::Q8_0_BLOCK_BYTES) {
        q8[i] = 0x00, q8[i + 1] = 0x20;  // f16 2^-7
        for (size_t j = 2; j < kernels::Q8_0_BLOCK_BYTES; ++j) q8[i + j] = uint8_t(rng());
    }
}

double best_ms(int reps, const std::function<void()>& f) {
    double best = 1e300;
    for (int i = 0; i < reps; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

}  // namespace

double share_from_env() {
    const char* s = std::getenv("BANKML_GPU_SHARE");
    if (!s || !*s || std::string(s) == "auto") return -1;  // -1: calibrate
    char* end = nullptr;
    double v = std::strtod(s, &end);
    if (end == s || *end || !(v >= 0 && v <= MAX_SHARE))
        throw Error(std::string("BANKML_GPU_SHARE='") + s + "' is not a number from 0 to 0.95 nor auto");
    return v;
}

Worker::Worker(Gpu gpu, kernels::FmaPath path, double share, std::string how)
    : gpu_(std::move(gpu)), path_(path), share_(share), how_(std::move(how)) {
    for (uint32_t i = 0; i < 3; ++i)
        pipes_[i] = gpu_.pipeline(kernels::q1_0_mat_vec8(path_, 1u << i), kernels::Q1_0_BINDINGS, kernels::Q1_0_PUSH_BYTES);
}

Worker::~Worker() = default;  // the Gpu frees its buffers and pipelines

std::unique_ptr<Worker> Worker::open(const WorkerOptions& opt) {
    auto refuse = [](const std::string& why) {
        std::fprintf(stderr, "bankml: GPU not used: %s\n", why.c_str());
        return std::unique_ptr<Worker>();
    };
    try {
        Discovery d = discover();
        Selection sel = select_from_env(d.devices);
        if (sel.off) return nullptr;  // asked for: nothing to report
        if (sel.indices.empty()) {
            // No card is the ordinary CPU-only machine: silent, unless BANKML_GPU said something
            // bankml could not follow.
            if (sel.notes.empty()) return nullptr;
            std::string why = "no usable card";
            for (const std::string& n : sel.notes) why += "; " + n;
            return refuse(why);
        }
        const Device& dev = d.devices[sel.indices[0]];
        if (dev.backend != "vulkan") return refuse(dev.name + ": backend " + dev.backend + " has no compute");
        return open_on(Gpu::open(dev.backend_index), opt);
    } catch (const std::exception& e) {
        return refuse(e.what());
    }
}

std::unique_ptr<Worker> Worker::open_on(Gpu gpu, const WorkerOptions& opt) {
    const std::string name = gpu.name();
    try {
        double share = opt.share >= 0 ? std::min(opt.share, MAX_SHARE) : share_from_env();
        kernels::FmaPath path = kernels::FmaPath::exact;
        kernels::VerifyOptions vo;
        vo.full = opt.full_verify;
        vo.corrupt = opt.corrupt;
        vo.chosen = &path;
        kernels::verify_q1_0(gpu, vo);
        std::string how = share >= 0 ? "set" : "calibrated";
        std::unique_ptr<Worker> w(new Worker(std::move(gpu), path, share < 0 ? 0.5 : share, how));
        if (share < 0) w->share_ = w->calibrate(opt.cpu_threads);
        if (w->share_ < MIN_SHARE) {
            std::fprintf(stderr, "bankml: GPU not used: %s: its share of rows (%.1f%%, %s) is below %.0f%%\n", name.c_str(),
                         w->share_ * 100, how.c_str(), MIN_SHARE * 100);
            return nullptr;
        }
        return w;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bankml: GPU not used: %s: %s\n", name.c_str(), e.what());
        return nullptr;
    }
}

// One 4096×4096 product on the card (weights already there, activation packed and written as in
// decoding) and on the CPU pool, each the best of a few runs: share = card rate / both rates.
double Worker::calibrate(int cpu_threads) {
    const size_t rows = 4096, cols = 4096;
    std::vector<uint8_t> w, q8;
    calibration_data(rows, cols, w, q8);
    const double saved = share_;
    share_ = 1.0;  // the whole matrix on the card
    std::vector<float> y(rows);
    const uint8_t* key = w.data();
    double card = best_ms(3, [&] {
        begin(key, w.data(), rows, cols, q8.data());
        finish(y.data());
    });
    share_ = saved;
    forget(key);
    par::Pool pool(cpu_threads > 0 ? cpu_threads : par::Pool::env_threads());
    double cpu = best_ms(3, [&] { quant::mat_vec_par(pool, quant::Type::Q1_0, w.data(), rows, cols, q8.data(), y.data()); });
    double s = (1 / card) / (1 / card + 1 / cpu);
    return std::clamp(s, 0.0, MAX_SHARE);
}

void Worker::forget(const void* key) {
    for (size_t i = 0; i < mats_.size(); ++i)
        if (mats_[i].first == key) {
            Mat& m = mats_[i].second;
            for (Buffer* b : {&m.scales, &m.bits, &m.out}) gpu_.free(*b);
            mats_.erase(mats_.begin() + (long)i);
            return;
        }
}

Worker::Mat& Worker::matrix(const void* key, const uint8_t* weights, size_t rows, size_t cols) {
    for (auto& [k, m] : mats_)
        if (k == key && m.cols == cols) return m;
    Mat m;
    m.cols = cols;
    m.k = std::min(rows, (size_t)((double)rows * share_));
    if (m.k > 0) {
        const size_t row_bytes = cols / kernels::Q1_0_BLOCK * kernels::Q1_0_BLOCK_BYTES;
        kernels::PackedQ1_0 p = kernels::pack_q1_0({weights, m.k * row_bytes}, m.k, cols);
        m.scales = gpu_.upload<uint32_t>(p.scales);
        m.bits = gpu_.upload<uint32_t>(p.bits);
        m.out = gpu_.readback_buffer(m.k * 4);
    }
    mats_.emplace_back(key, m);
    return mats_.back().second;
}

size_t Worker::begin(const void* key, const uint8_t* weights, size_t rows, size_t cols, const uint8_t* act_q8) {
    if (pending_) throw Error("gpu::Worker::begin: a product is already in flight");
    if (cols == 0 || cols % kernels::Q1_0_BLOCK) throw Error("gpu::Worker::begin: cols " + std::to_string(cols) + " is not a multiple of 128");
    if (cols > MAX_COLS) return 0;
    Mat& m = matrix(key, weights, rows, cols);
    if (m.k == 0) return 0;
    kernels::PackedAct a = kernels::pack_act({act_q8, cols / kernels::Q8_0_BLOCK * kernels::Q8_0_BLOCK_BYTES}, cols);
    const size_t sb = a.scales.size() * 4, lb = a.lane_products.size() * 4;
    if (act_scales_.bytes < sb) {
        if (act_scales_.id) gpu_.free(act_scales_);
        act_scales_ = gpu_.buffer(sb);
    }
    if (act_lanes_.bytes < lb) {
        if (act_lanes_.id) gpu_.free(act_lanes_);
        act_lanes_ = gpu_.buffer(lb);
    }
    gpu_.write<float>(act_scales_, a.scales);
    gpu_.write<float>(act_lanes_, a.lane_products);
    const Buffer* bufs[] = {&m.scales, &m.bits, &act_scales_, &act_lanes_, &m.out};
    const uint32_t push[] = {uint32_t(m.k), uint32_t(cols / kernels::Q1_0_BLOCK)};
    const uint32_t per = kernels::mat_vec8_per(m.k);
    gpu_.submit(pipes_[std::countr_zero(per)], bufs, push, kernels::groups_mat_vec8(m.k, per));
    pending_ = &m;
    return m.k;
}

void Worker::finish(float* out) {
    if (!pending_) return;
    Mat& m = *pending_;
    pending_ = nullptr;
    gpu_.wait();
    std::vector<float> got = gpu_.read_f32(m.out, m.k);
    std::memcpy(out, got.data(), m.k * 4);
}

std::string Worker::describe() const {
    char pct[64];
    std::snprintf(pct, sizeof pct, "%.0f%%", share_ * 100);
    return gpu_.name() + " (" + kernels::kernel_name(true, path_) + ") takes " + pct + " of the rows of each Q1_0 decode product (" +
           how_ + (how_ == "set" ? "" : " against the CPU pool") + ")";
}

}  // namespace bankml::gpu
