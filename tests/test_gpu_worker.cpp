// gpu::Worker: a verified card computing a share of each Q1_0 decode product. On lavapipe (allowed
// in-process, as test_gpu_kernels does) the tiny Q1_0 model decoded token by token with half of
// every product's rows on the card gives llama.cpp's logits and greedy tokens bit for bit; a card
// that fails verification gives no worker; without BANKML_GPU_ALLOW_SOFTWARE lavapipe is never used.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "cmd/gpu_offload.h"
#include "core/error.h"
#include "gpu/gpu.h"
#include "gpu/worker.h"
#include "gpu/compute.h"
#include "gpu_device.h"
#include "model/forward.h"
#include "quant/dot.h"
#include "test.h"

using namespace bankml;

namespace {

using bt::EnvScope;

using bt::any_vulkan_device;

// A worker on the first selected card, software renderers allowed, half of the rows.
std::unique_ptr<gpu::Worker> test_worker(const gpu::WorkerOptions& extra = {}) {
    bt::test_gpu_device();  // the process's first Vulkan use: the validation layers are on for the workers too
    EnvScope soft("BANKML_GPU_ALLOW_SOFTWARE", "1"), sel("BANKML_GPU", nullptr);
    if (!any_vulkan_device()) SKIP("gpu", "no Vulkan device here (not even lavapipe: apt-get install mesa-vulkan-drivers)");
    gpu::WorkerOptions opt = extra;
    opt.full_verify = false;  // the small shapes: the suite stays fast (a real run verifies fully)
    opt.calibrate_shapes = false;  // every product takes the share (per-shape calibration: test_gpu_limiter)
    if (opt.share < 0) opt.share = 0.5;
    return gpu::Worker::open(opt);
}

// Counts what the card took, to prove the products went through it.
struct Counting : model::Offload {
    std::shared_ptr<model::Offload> inner;
    size_t calls = 0, rows = 0;
    size_t begin(const void* key, const uint8_t* w, size_t r, size_t c, const uint8_t* a) override {
        size_t k = inner->begin(key, w, r, c, a);
        calls++, rows += k;
        return k;
    }
    void finish(float* out) override { inner->finish(out); }
};

// Fails on its `fail_at`-th begin (counting from 1), as a lost card would.
struct Failing : model::Offload {
    std::shared_ptr<model::Offload> inner;
    size_t calls = 0, fail_at = 0;
    bool fail_finish = false;
    size_t begin(const void* key, const uint8_t* w, size_t r, size_t c, const uint8_t* a) override {
        if (++calls == fail_at && !fail_finish) throw Error("vkQueueSubmit failed: VK_ERROR_DEVICE_LOST (simulated)");
        return inner->begin(key, w, r, c, a);
    }
    void finish(float* out) override {
        inner->finish(out);
        if (calls == fail_at && fail_finish) throw Error("vkWaitForFences failed: VK_ERROR_DEVICE_LOST (simulated)");
    }
};

std::vector<float> read_f32(const std::string& name) {
    auto b = bt::read_file(bt::data_path(name));
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), v.size() * 4);
    return v;
}

std::vector<int32_t> tiny_q1_0_greedy(std::vector<int32_t>& prompt) {
    std::ifstream in(bt::data_path("tiny-greedy.txt"));
    std::string line, model;
    std::vector<int32_t> greedy;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string key;
        ls >> key;
        if (key == "model") ls >> model;
        else if (model == "tiny-q1_0.gguf" && key == "prompt" && prompt.empty()) for (int32_t v; ls >> v;) prompt.push_back(v);
        else if (model == "tiny-q1_0.gguf" && key == "greedy" && greedy.empty()) for (int32_t v; ls >> v;) greedy.push_back(v);
    }
    return greedy;
}

std::unique_ptr<model::Model> open_tiny(int threads) {
    model::ModelOptions o;
    o.threads = threads;
    o.ctx = 256;
    return model::Model::open(bt::data_path("tiny-q1_0.gguf"), o);
}

// Every token one at a time (one-column products, the worker's case); the last token's logits.
std::vector<float> decode_each(model::Model& m, const std::vector<int32_t>& toks) {
    std::vector<float> l;
    for (int32_t t : toks) m.eval_into(std::span<const int32_t>(&t, 1), l);
    return l;
}

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
    size_t d = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

}  // namespace

TEST(worker_rows_are_the_cpu_reference_bits) {
    auto w = test_worker();
    REQUIRE(w != nullptr);
    const size_t rows = 300, cols = 512, nb = cols / 128;
    std::mt19937 rng(11);
    std::vector<quant::BlockQ1_0> wt(rows * nb);
    for (auto& b : wt) {
        b.d = uint16_t(0x2000 + rng() % 0x2000);
        for (auto& q : b.qs) q = uint8_t(rng());
    }
    for (int round = 0; round < 2; ++round) {  // the second product reuses the uploaded share
        std::vector<quant::BlockQ8_0> x(cols / 32);
        for (auto& b : x) {
            b.d = uint16_t(0x1800 + rng() % 0x2000);
            for (auto& q : b.qs) q = int8_t(round ? -128 : int(rng() % 256) - 128);
        }
        std::vector<float> out(rows, std::nanf(""));
        size_t k = w->begin(wt.data(), (const uint8_t*)wt.data(), rows, cols, (const uint8_t*)x.data());
        CHECK_EQ(k, rows / 2);
        w->finish(out.data());
        size_t bad = 0;
        for (size_t r = 0; r < k; ++r) {
            float want = quant::vec_dot_q1_0_ref(cols, wt.data() + r * nb, x.data());
            bad += std::memcmp(&want, &out[r], 4) != 0;
        }
        CHECK_EQ(bad, (size_t)0);
        for (size_t r = k; r < rows; ++r) CHECK(std::isnan(out[r]));  // the card wrote only its share
    }
    CHECK(w->describe().find("50% of the rows") != std::string::npos);
}

TEST(worker_decoding_gives_llama_cpp_logits_and_greedy_tokens) {
    auto w = test_worker();
    REQUIRE(w != nullptr);
    auto count = std::make_shared<Counting>();
    count->inner = bankml::cmd::as_offload(std::move(w));
    auto m = open_tiny(2);
    m->set_offload(count);
    // Prompt A token by token: the same logits as llama.cpp's batch (a token's bits never depend on the batch).
    auto got = decode_each(*m, {1, 2, 3, 4, 5, 6, 7, 8});
    CHECK_EQ(differing(got, read_f32("tiny-q1_0-logits-A.f32")), (size_t)0);
    CHECK_GT(count->calls, (size_t)0);
    CHECK_GT(count->rows, (size_t)0);
    const size_t per_token = count->calls / 8;
    // Greedy: the prompt in one batch (CPU), every generated token through the worker.
    std::vector<int32_t> prompt;
    auto want = tiny_q1_0_greedy(prompt);
    REQUIRE(!want.empty());
    m->reset();
    const size_t before = count->calls;
    auto l = m->eval(prompt);
    // A prompt's several-column products stay on the CPU: only the last layer's, which keep the
    // last token's row alone, are one-column products.
    CHECK_LT(count->calls - before, per_token);
    std::vector<int32_t> toks;
    for (size_t i = 0; i < want.size(); ++i) {
        int32_t t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
        toks.push_back(t);
        if (i + 1 < want.size()) m->eval_into(std::span<const int32_t>(&t, 1), l);
    }
    CHECK(toks == want);
    CHECK(m->has_offload());
}

TEST(worker_failure_drops_the_card_and_keeps_the_bits) {
    for (bool at_finish : {false, true}) {
        auto w = test_worker();
        REQUIRE(w != nullptr);
        auto f = std::make_shared<Failing>();
        f->inner = bankml::cmd::as_offload(std::move(w));
        f->fail_at = 5;
        f->fail_finish = at_finish;
        auto m = open_tiny(1);
        m->set_offload(f);
        auto got = decode_each(*m, {1, 2, 3, 4, 5, 6, 7, 8});
        CHECK(!m->has_offload());
        CHECK_EQ(differing(got, read_f32("tiny-q1_0-logits-A.f32")), (size_t)0);
    }
}

TEST(worker_refuses_a_corrupted_card) {
    gpu::WorkerOptions opt;
    opt.corrupt = [](std::vector<float>& out) {
        if (out.size() > 3) out[3] = std::nextafter(out[3], INFINITY);
    };
    CHECK(test_worker(opt) == nullptr);
}

TEST(worker_share_zero_or_bad_gives_no_worker) {
    {
        EnvScope share("BANKML_GPU_SHARE", "0");
        gpu::WorkerOptions opt;
        opt.share = -1;  // from the environment
        EnvScope soft("BANKML_GPU_ALLOW_SOFTWARE", "1");
        if (!any_vulkan_device()) SKIP("gpu", "no Vulkan device here");
        opt.full_verify = false;
        CHECK(gpu::Worker::open(opt) == nullptr);
        EnvScope small("BANKML_GPU_SHARE", "0.01");
        CHECK(gpu::Worker::open(opt) == nullptr);
    }
    EnvScope share("BANKML_GPU_SHARE", "lots");
    CHECK_THROWS(gpu::share_from_env(), "BANKML_GPU_SHARE='lots'");
    EnvScope share2("BANKML_GPU_SHARE", "0.25");
    CHECK_EQ(gpu::share_from_env(), 0.25);
}

TEST(worker_never_opens_a_software_renderer_by_default) {
    EnvScope soft("BANKML_GPU_ALLOW_SOFTWARE", nullptr), sel("BANKML_GPU", nullptr);
    for (const auto& d : gpu::discover().devices)
        if (d.usable()) SKIP("no-usable-card", "this machine has a usable card (" + d.name + "): the default would use it");
    gpu::WorkerOptions opt;
    opt.full_verify = false;
    opt.share = 0.5;
    CHECK(gpu::Worker::open(opt) == nullptr);
    EnvScope off("BANKML_GPU", "off"), soft2("BANKML_GPU_ALLOW_SOFTWARE", "1");
    CHECK(gpu::Worker::open(opt) == nullptr);
}

// Runs last in this file: every Vulkan call the workers made (opening, verifying, uploading,
// dispatching, reading back, closing) went through the validation layers, which said nothing.
TEST(worker_vulkan_validation_reports_nothing) {
    bt::TestGpu& t = bt::test_gpu_device();
    if (!t.gpu) SKIP("gpu", t.why);
    if (!gpu::Gpu::validation_enabled())
        SKIP("gpu", "VK_LAYER_KHRONOS_validation is not installed (apt-get install vulkan-validationlayers), or Vulkan was in use before the GPU tests");
    auto msgs = gpu::Gpu::validation_messages();
    for (auto& m : msgs) std::printf("    validation: %s\n", m.c_str());
    CHECK_EQ(msgs.size(), 0u);
}
