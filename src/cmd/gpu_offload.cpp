#include "cmd/gpu_offload.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "cmd/gpu_verify.h"
#include "gpu/gpu.h"
#include "gpu/kernels.h"
#include "gpu/op_kernels.h"
#include "core/error.h"

namespace bankml::cmd {

namespace {

class WorkerOffload : public model::Offload {
public:
    explicit WorkerOffload(std::unique_ptr<gpu::Worker> w) : w_(std::move(w)) {}
    size_t begin(const void* key, const uint8_t* w, size_t rows, size_t cols, const uint8_t* act_q8) override {
        return w_->begin(key, w, rows, cols, act_q8);
    }
    void finish(float* out) override { w_->finish(out); }
    bool takes(size_t rows, size_t cols) const override { return w_->takes(rows, cols); }

private:
    std::unique_ptr<gpu::Worker> w_;
};

}  // namespace

std::shared_ptr<model::Offload> as_offload(std::unique_ptr<gpu::Worker> w) {
    if (!w) return nullptr;
    return std::make_shared<WorkerOffload>(std::move(w));
}

bool run_on_card(model::Model& m) {
    std::string name;
    try {
        gpu::Discovery d = gpu::discover();
        gpu::Selection sel = gpu::select_from_env(d.devices);
        if (sel.off || sel.indices.empty()) return false;
        const gpu::Device& dev = d.devices[sel.indices[0]];
        name = dev.name;
        if (dev.backend != "vulkan") throw Error("backend " + dev.backend + " has no compute");
        gpu::Gpu card = gpu::Gpu::open(dev.backend_index);
        if (!card.has_f64()) throw Error("shaderFloat64 missing");
        // The card proves every kernel (and whether its Fma is correctly rounded) before any use:
        // once per card and process (small shapes; bankml gpu --verify runs the model's).
        gpu::kernels::FmaPath path = gpu::kernels::FmaPath::exact;
        {
            static std::mutex mu;
            static std::map<uint32_t, CardVerdict> verdicts;
            std::lock_guard<std::mutex> lock(mu);
            auto it = verdicts.find(dev.backend_index);
            if (it == verdicts.end()) it = verdicts.emplace(dev.backend_index, verify_card(card, false, false)).first;
            if (!it->second.verified) throw Error("not verified: " + it->second.reason);
            path = it->second.path;
        }
        const bool native = path == gpu::kernels::FmaPath::native;
        const gpu::ops::Build build = gpu::ops::build_for(card, native);
        std::fprintf(stderr, "bankml: GPU: %s\n", m.use_gpu(std::move(card), build, native).c_str());
        return true;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bankml: GPU: %s stays on the CPU: %s\n", name.empty() ? "the model" : name.c_str(), e.what());
        return false;
    }
}

void attach_gpu(model::Model& m, int threads) {
    if (run_on_card(m)) return;
    attach_share(m, threads);
}

void attach_share(model::Model& m, int threads) {
    if (!m.has_q1_0()) return;
    // The fallback for a card or a model the whole-token path cannot take: a share of each Q1_0
    // product's rows, per matrix shape only where it was measured to pay (gpu::Worker).
    gpu::WorkerOptions opt;
    opt.cpu_threads = threads > 0 ? threads : m.threads();
    auto w = gpu::Worker::open(opt);
    if (!w) return;
    std::fprintf(stderr, "bankml: GPU: %s\n", w->describe().c_str());
    m.set_offload(as_offload(std::move(w)));
}

}  // namespace bankml::cmd
