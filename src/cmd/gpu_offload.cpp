#include "cmd/gpu_offload.h"

#include <cstdio>
#include <cstdlib>

namespace bankml::cmd {

namespace {

class WorkerOffload : public model::Offload {
public:
    explicit WorkerOffload(std::unique_ptr<gpu::Worker> w) : w_(std::move(w)) {}
    size_t begin(const void* key, const uint8_t* w, size_t rows, size_t cols, const uint8_t* act_q8) override {
        return w_->begin(key, w, rows, cols, act_q8);
    }
    void finish(float* out) override { w_->finish(out); }

private:
    std::unique_ptr<gpu::Worker> w_;
};

}  // namespace

std::shared_ptr<model::Offload> as_offload(std::unique_ptr<gpu::Worker> w) {
    if (!w) return nullptr;
    return std::make_shared<WorkerOffload>(std::move(w));
}

void attach_gpu(model::Model& m, int threads) {
    if (!m.has_q1_0()) return;
    // Opt-in: on the H200 a share of every decode product made decoding 2.5-3x slower (each product
    // pays a submit, an activation upload and a fence wait; docs/modules/worker.md), so the card
    // takes rows only when BANKML_GPU_SHARE asks for it (a share, or "auto" to calibrate).
    const char* share = std::getenv("BANKML_GPU_SHARE");
    if (!share || !*share) return;
    gpu::WorkerOptions opt;
    opt.cpu_threads = threads > 0 ? threads : m.threads();
    auto w = gpu::Worker::open(opt);
    if (!w) return;
    std::fprintf(stderr, "bankml: GPU: %s\n", w->describe().c_str());
    m.set_offload(as_offload(std::move(w)));
}

}  // namespace bankml::cmd
