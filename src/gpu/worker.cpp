#include "gpu/worker.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

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

Worker::Worker(Gpu gpu, kernels::FmaPath path, double share, std::string how, const WorkerOptions& opt, LimitSetting limit)
    : gpu_(std::move(gpu)), path_(path), share_(share), how_(std::move(how)), calibrate_shapes_(opt.calibrate_shapes),
      card_delay_us_(opt.test_card_delay_us), cpu_delay_us_(opt.test_cpu_delay_us) {
    for (uint32_t i = 0; i < 3; ++i)
        pipes_[i] = gpu_.pipeline(kernels::q1_0_mat_vec8(path_, 1u << i), kernels::Q1_0_BINDINGS, kernels::Q1_0_PUSH_BYTES);
    use_ = std::make_unique<CardUse>(gpu_, CardUse::Mode::share, limit);
}

Worker::~Worker() { use_.reset(); }  // unregistered before the Gpu frees its buffers and pipelines

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
        const LimitSetting limit = opt.limit ? *opt.limit : limit_from_env();
        std::string how = share >= 0 ? "set" : "calibrated";
        std::unique_ptr<Worker> w(new Worker(std::move(gpu), path, share < 0 ? 0.5 : share, how, opt, limit));
        if (share < 0) w->share_ = w->calibrate(opt.cpu_threads);
        w->use_->share.store(w->share_);
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
    std::vector<float> y(rows);
    Mat m = upload(w.data(), rows, rows, cols);  // the whole matrix on the card
    double card = best_ms(3, [&] {
        submit(m, q8.data());
        collect(m, y.data());
    });
    for (Buffer* b : {&m.scales, &m.bits, &m.out}) gpu_.free(*b);
    par::Pool pool(cpu_threads > 0 ? cpu_threads : par::Pool::env_threads());
    double cpu = best_ms(3, [&] { quant::mat_vec_par(pool, quant::Type::Q1_0, w.data(), rows, cols, q8.data(), y.data()); });
    double s = (1 / card) / (1 / card + 1 / cpu);
    return std::clamp(s, 0.0, MAX_SHARE);
}

void Worker::forget_shape(size_t rows, size_t cols) {
    for (size_t i = mats_.size(); i-- > 0;) {
        Mat& m = mats_[i].second;
        if (m.rows != rows || m.cols != cols) continue;
        for (Buffer* b : {&m.scales, &m.bits, &m.out})
            if (b->id) gpu_.free(*b);
        mats_.erase(mats_.begin() + (long)i);
    }
}

Worker::Mat Worker::upload(const uint8_t* weights, size_t rows, size_t k, size_t cols) {
    Mat m;
    m.rows = rows, m.k = k, m.cols = cols;
    if (k == 0) return m;
    const size_t row_bytes = cols / kernels::Q1_0_BLOCK * kernels::Q1_0_BLOCK_BYTES;
    kernels::PackedQ1_0 p = kernels::pack_q1_0({weights, k * row_bytes}, k, cols);
    m.scales = gpu_.upload<uint32_t>(p.scales);
    m.bits = gpu_.upload<uint32_t>(p.bits);
    m.out = gpu_.readback_buffer(k * 4);
    return m;
}

// The matrix's share on the card, uploaded on first use; nullptr when it does not fit the limit.
Worker::Mat* Worker::matrix(const void* key, const uint8_t* weights, size_t rows, size_t cols) {
    for (auto& [k, m] : mats_)
        if (k == key && m.cols == cols && m.rows == rows) return &m;
    const size_t k = std::min(rows, (size_t)((double)rows * share_));
    const size_t blocks = k * (cols / kernels::Q1_0_BLOCK);
    // Packed: a f32 scale and four u32 words of bits per block, and the rows read back.
    if (k > 0 && !use_->fits(blocks * 4 + blocks * 16 + k * 4)) return nullptr;
    mats_.emplace_back(key, upload(weights, rows, k, cols));
    return &mats_.back().second;
}

void Worker::submit(const Mat& m, const uint8_t* act_q8) {
    const size_t cols = m.cols;
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
}

void Worker::collect(const Mat& m, float* out) {
    gpu_.wait();
    std::vector<float> got = gpu_.read_f32(m.out, m.k);
    std::memcpy(out, got.data(), m.k * 4);
}

Worker::Shape& Worker::shape(size_t rows, size_t cols) {
    for (Shape& s : shapes_)
        if (s.rows == rows && s.cols == cols) return s;
    Shape s;
    s.rows = rows, s.cols = cols;
    if (!calibrate_shapes_) {
        s.state = Shape::State::card;
        use_->shapes_on_card++;
    } else {
        use_->shapes_tuning++;
    }
    shapes_.push_back(s);
    return shapes_.back();
}

bool Worker::takes(size_t rows, size_t cols) const {
    for (const Shape& s : shapes_)
        if (s.rows == rows && s.cols == cols) return s.state != Shape::State::cpu;
    return cols <= MAX_COLS;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void Worker::record(Shape& s, Side side, double ms) {
    if (s.state != Shape::State::tuning) return;
    if (side == Side::card) {
        if (s.card_runs++ > 0) s.card_ms.push_back(ms);  // the first is the warm-up (and the upload)
    } else {
        if (s.cpu_runs++ > 0) s.cpu_ms.push_back(ms);
    }
    s.card_next = side == Side::cpu;
    if ((int)s.card_ms.size() < TRIALS || (int)s.cpu_ms.size() < TRIALS) return;
    use_->shapes_tuning--;
    const double card = median(s.card_ms), cpu = median(s.cpu_ms);
    if (card < cpu) {
        s.state = Shape::State::card;
        use_->shapes_on_card++;
    } else {
        s.state = Shape::State::cpu;
        use_->shapes_on_cpu++;
        forget_shape(s.rows, s.cols);
    }
    use_->decided({s.rows, s.cols, card < cpu ? "card" : "cpu", card, cpu});
}

size_t Worker::begin(const void* key, const uint8_t* weights, size_t rows, size_t cols, const uint8_t* act_q8) {
    if (pending_) throw Error("gpu::Worker::begin: a product is already in flight");
    if (cols == 0 || cols % kernels::Q1_0_BLOCK) throw Error("gpu::Worker::begin: cols " + std::to_string(cols) + " is not a multiple of 128");
    side_ = Side::none;
    if (cols > MAX_COLS) return 0;
    t0_ = std::chrono::steady_clock::now();
    Shape& s = shape(rows, cols);
    shape_ = size_t(&s - shapes_.data());
    if (s.state == Shape::State::cpu) {
        use_->products_on_cpu_shape++;
        return 0;
    }
    const bool tuning = s.state == Shape::State::tuning;
    if (tuning && !s.card_next) {
        side_ = Side::cpu;  // the CPU alone, timed
        return 0;
    }
    if (use_->resting()) {
        use_->products_on_cpu_resting++;
        return 0;
    }
    Mat* m = matrix(key, weights, rows, cols);
    if (!m) {
        use_->products_on_cpu_memory++;
        return 0;
    }
    if (m->k == 0) {  // the share rounds to no row of this shape
        if (tuning) {
            s.state = Shape::State::cpu;
            use_->shapes_tuning--, use_->shapes_on_cpu++;
        }
        return 0;
    }
    submit(*m, act_q8);
    submitted_ = std::chrono::steady_clock::now();
    pending_ = m;
    if (tuning) side_ = Side::card;
    return m->k;
}

void Worker::finish(float* out) {
    const Side side = side_;
    side_ = Side::none;
    if (pending_) {
        const Mat& m = *pending_;
        pending_ = nullptr;
        collect(m, out);
        if (card_delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(card_delay_us_));
        // The card's own time where it has timestamps, else submit → collected (which includes
        // the CPU's rows: the rest comes out longer, never shorter).
        double card_s = gpu_.last_dispatch_us() * 1e-6;
        if (!(card_s > 0))
            card_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted_).count();
        else
            card_s += card_delay_us_ * 1e-6;
        use_->ran(card_s);
        use_->products_on_card++;
    } else if (side == Side::cpu && cpu_delay_us_ > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(cpu_delay_us_));
    }
    if (side != Side::none && shape_ < shapes_.size())
        record(shapes_[shape_], side, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
}

std::string Worker::describe() const {
    char pct[64];
    std::snprintf(pct, sizeof pct, "%.0f%%", share_ * 100);
    char lim[96];
    std::snprintf(lim, sizeof lim, "; limit %.0f%% of its memory%s", use_->limit() * 100, use_->time_part() ? " and time" : "");
    return gpu_.name() + " (" + kernels::kernel_name(true, path_) + ") takes " + pct + " of the rows of each Q1_0 decode product (" +
           how_ + (how_ == "set" ? "" : " against the CPU pool") + (calibrate_shapes_ ? "; per shape where it pays" : "") + lim + ")";
}

}  // namespace bankml::gpu
