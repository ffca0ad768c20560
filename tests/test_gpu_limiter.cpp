// BANKML_GPU_LIMIT, per-shape calibration and the card's status, on the test card (lavapipe where
// there is no other): calibration decides every shape and says so in gpu::status(); a card made
// slow leaves every shape on the CPU, a CPU made slow sends every shape to the card; a limit
// smaller than a matrix or the model keeps it off the card; rests move products and whole tokens
// to the CPU; and in every case the logits are the CPU's, byte for byte.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "cmd/gpu_offload.h"
#include "core/json.h"
#include "gpu/gpu.h"
#include "gpu/kernels.h"
#include "gpu/limiter.h"
#include "gpu/op_kernels.h"
#include "gpu/worker.h"
#include "gpu_device.h"
#include "model/forward.h"
#include "model/forward_gpu.h"
#include "test.h"

using namespace bankml;

namespace {

using Env = bt::EnvScope;

using bt::any_vulkan_device;

std::unique_ptr<gpu::Worker> worker(gpu::WorkerOptions opt) {
    bt::test_gpu_device();
    Env soft("BANKML_GPU_ALLOW_SOFTWARE", "1"), sel("BANKML_GPU", nullptr);
    if (!any_vulkan_device()) SKIP("gpu", "no Vulkan device here (not even lavapipe: apt-get install mesa-vulkan-drivers)");
    opt.full_verify = false;
    if (opt.share < 0) opt.share = 0.5;
    auto w = gpu::Worker::open(opt);
    REQUIRE(w != nullptr);
    return w;
}

gpu::LimitSetting limit_of(double v, bool given = true) { return {v, given}; }

std::unique_ptr<model::Model> tiny(const char* type = "q1_0") {
    model::ModelOptions o;
    o.threads = 2;
    o.ctx = 96;
    return model::Model::open(bt::data_path(std::string("tiny-") + type + ".gguf"), o);
}

// Token by token (one-column products: the worker's case): every token's logits, concatenated.
std::vector<float> decode(model::Model& m, size_t n) {
    std::vector<float> all, l;
    for (size_t i = 0; i < n; ++i) {
        const int32_t t = int32_t((i * 389 + 17) % 1000);
        m.eval_into(std::span<const int32_t>(&t, 1), l);
        all.insert(all.end(), l.begin(), l.end());
    }
    return all;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

const std::vector<float>& cpu_logits(size_t n) {
    static std::vector<float> want;
    if (want.empty()) {
        auto m = tiny();
        want = decode(*m, n);
    }
    REQUIRE(want.size() >= n * 1024);
    return want;
}

// The Q1_0 shapes of the tiny model (rows × cols of its one-column products).
size_t q1_0_shapes(model::Model& m) {
    std::vector<std::pair<int64_t, int64_t>> s;
    for (const auto& t : m.file().tensors())
        if (t.type == gguf::Type::Q1_0) s.emplace_back(t.ne[1], t.ne[0]);
    std::sort(s.begin(), s.end());
    return size_t(std::unique(s.begin(), s.end()) - s.begin());
}

// Each decided shape's medians, for a failing calibration test.
void print_decisions(const gpu::Status& s) {
    for (const auto& d : s.shapes)
        std::fprintf(stderr, "    shape %zux%zu: %s (card %.3f ms, cpu %.3f ms)\n", d.rows, d.cols, d.on.c_str(), d.card_ms, d.cpu_ms);
}

constexpr size_t TOKENS = 40;  // enough for every shape's 2 × (1 + TRIALS) products

using Card = bt::VerifiedCard;
Card open_card() { return bt::open_verified_card(); }

}  // namespace

TEST(limiter_reads_bankml_gpu_limit) {
    {
        Env e("BANKML_GPU_LIMIT", nullptr);
        CHECK_EQ(gpu::limit(), 0.8);
        CHECK(!gpu::limit_from_env().given);
    }
    {
        Env e("BANKML_GPU_LIMIT", "0.5");
        CHECK_EQ(gpu::limit(), 0.5);
        CHECK(gpu::limit_from_env().given);
    }
    {
        Env e("BANKML_GPU_LIMIT", "0.01");
        CHECK_EQ(gpu::limit(), 0.05);
    }
    {
        Env e("BANKML_GPU_LIMIT", "3");
        CHECK_EQ(gpu::limit(), 1.0);
    }
    Env e("BANKML_GPU_LIMIT", "most");
    CHECK_THROWS(gpu::limit_from_env(), "BANKML_GPU_LIMIT='most'");
    // The rests apply by default only where the card shares the desktop's memory and power.
    CHECK(gpu::rests_by_default(gpu::Kind::Integrated));
    CHECK(!gpu::rests_by_default(gpu::Kind::Discrete));
    CHECK(!gpu::rests_by_default(gpu::Kind::Cpu));
    CHECK(gpu::shares_ram(gpu::Kind::Integrated) && gpu::shares_ram(gpu::Kind::Cpu) && !gpu::shares_ram(gpu::Kind::Discrete));
}

TEST(limiter_rests_in_proportion_and_bounds_memory) {
    bt::TestGpu& t = bt::test_gpu_device();
    if (!t.gpu) SKIP("gpu", t.why);
    CHECK(!gpu::status());  // nothing uses a card yet
    {
        gpu::CardUse u(*t.gpu, gpu::CardUse::Mode::forward, limit_of(0.5));
        REQUIRE(gpu::status().has_value());
        CHECK(u.time_part());
        CHECK(!u.resting());
        u.ran(1.0);  // rests 1.0 · (1 − 0.5) / 0.5: long enough to still rest on a loaded machine
        CHECK(u.resting());
        std::this_thread::sleep_for(std::chrono::milliseconds(1100));
        CHECK(!u.resting());
        CHECK_GT(gpu::status()->busy, 0.0);
        CHECK_EQ(u.budget_bytes() <= uint64_t(0.5 * double(u.heap_bytes())), true);
        CHECK(u.fits(0));
        CHECK(!u.fits(u.heap_bytes()));
    }
    {
        // The default limit on a card that does not share the desktop: no rests.
        gpu::CardUse u(*t.gpu, gpu::CardUse::Mode::forward, limit_of(0.8, false));
        u.ran(0.2);
        CHECK_EQ(u.resting(), gpu::rests_by_default(t.gpu->kind()));
    }
    Env heap("BANKML_GPU_TEST_HEAP", "1000000");
    gpu::CardUse u(*t.gpu, gpu::CardUse::Mode::share, limit_of(0.8, false));
    CHECK_EQ(u.heap_bytes(), (uint64_t)1000000);
    CHECK_EQ(u.budget_bytes(), (uint64_t)800000);
    CHECK(!u.fits(800001));
}

TEST(worker_per_shape_calibration_decides_every_shape_and_keeps_the_bits) {
    const auto& want = cpu_logits(TOKENS);
    gpu::WorkerOptions opt;
    opt.limit = limit_of(1.0);
    auto m = tiny();
    const size_t shapes = q1_0_shapes(*m);
    REQUIRE(shapes > 0);
    m->set_offload(cmd::as_offload(worker(opt)));
    auto s0 = gpu::status();
    REQUIRE(s0.has_value());
    CHECK_EQ(s0->mode, "share");
    CHECK_EQ(s0->share, 0.5);
    auto got = decode(*m, TOKENS);
    CHECK(same_bytes(want, got));
    auto s = gpu::status();
    REQUIRE(s.has_value());
    CHECK_EQ(s->shapes_tuning, 0);
    CHECK_EQ(size_t(s->shapes_on_card + s->shapes_on_cpu), shapes);
    CHECK_GT(s->products_on_card, (uint64_t)0);  // the card's trials at least
    CHECK_EQ(s->products_on_cpu_resting, (uint64_t)0);  // a limit of 1 never rests
    json::Value j = json::parse(gpu::status_json());
    for (const char* k : {"card", "limit", "share", "allocated_bytes", "heap_bytes", "integrated", "busy", "products_on_card",
                          "products_on_cpu_resting", "products_on_cpu_memory", "shapes_on_card", "shapes_on_cpu",
                          "shapes_tuning", "tokens_on_card", "tokens_on_cpu_resting"})
        if (!CHECK(j.contains(k))) std::fprintf(stderr, "  status lacks %s\n", k);
    CHECK_EQ(j["shapes_tuning"].as_int(), 0);
    m.reset();
    CHECK(!gpu::status());  // the worker went with the model
}

TEST(worker_a_slow_card_leaves_every_shape_on_the_cpu) {
    const auto& want = cpu_logits(TOKENS);
    gpu::WorkerOptions opt;
    opt.limit = limit_of(1.0);
    // Far above a tiny product's time on any card or CPU, even under the sanitizers on a busy machine.
    opt.test_card_delay_us = 200000;
    auto m = tiny();
    auto w = worker(opt);
    const uint64_t idle = w->use().held_bytes();  // pipelines' buffers, the activation
    m->set_offload(cmd::as_offload(std::move(w)));
    CHECK(same_bytes(want, decode(*m, TOKENS)));
    auto s = gpu::status();
    REQUIRE(s.has_value());
    CHECK_EQ(s->shapes_tuning, 0);
    CHECK_EQ(s->shapes_on_card, 0);
    CHECK_EQ(size_t(s->shapes_on_cpu), q1_0_shapes(*m));
    if (s->shapes_on_card != 0) print_decisions(*s);
    // The card computed its trials and nothing after: the shapes' products take the CPU's path.
    CHECK_LE(s->products_on_card, uint64_t(s->shapes_on_cpu) * (1 + gpu::TRIALS));
    // A shape decided for the CPU frees its buffers: the weights are off the card again.
    CHECK(s->allocated_bytes <= idle + 64 * 1024);
}

TEST(worker_a_slow_cpu_sends_every_shape_to_the_card) {
    const auto& want = cpu_logits(TOKENS);
    gpu::WorkerOptions opt;
    opt.limit = limit_of(1.0);
    opt.test_cpu_delay_us = 200000;  // as above: the card's side must never come near it
    auto m = tiny();
    m->set_offload(cmd::as_offload(worker(opt)));
    CHECK(same_bytes(want, decode(*m, TOKENS)));
    auto s = gpu::status();
    REQUIRE(s.has_value());
    CHECK_EQ(s->shapes_tuning, 0);
    CHECK_EQ(s->shapes_on_cpu, 0);
    CHECK_EQ(size_t(s->shapes_on_card), q1_0_shapes(*m));
    if (s->shapes_on_cpu != 0) print_decisions(*s);
}

TEST(worker_rests_move_products_to_the_cpu) {
    const auto& want = cpu_logits(TOKENS);
    gpu::WorkerOptions opt;
    opt.limit = limit_of(0.05);  // rests 19 times each product's card time
    opt.calibrate_shapes = false;
    auto m = tiny();
    m->set_offload(cmd::as_offload(worker(opt)));
    CHECK(same_bytes(want, decode(*m, TOKENS)));
    auto s = gpu::status();
    REQUIRE(s.has_value());
    CHECK(s->time_limit);
    CHECK_GT(s->products_on_card, (uint64_t)0);
    CHECK_GT(s->products_on_cpu_resting, (uint64_t)0);
}

TEST(worker_a_limit_smaller_than_a_matrix_keeps_it_on_the_cpu) {
    const auto& want = cpu_logits(TOKENS);
    gpu::WorkerOptions opt;
    opt.calibrate_shapes = false;
    auto m = tiny();
    std::unique_ptr<gpu::Worker> w;
    {
        Env heap("BANKML_GPU_TEST_HEAP", "1");  // a card of one byte: nothing more fits
        opt.limit = limit_of(1.0);
        w = worker(opt);
    }
    m->set_offload(cmd::as_offload(std::move(w)));
    CHECK(same_bytes(want, decode(*m, TOKENS)));
    auto s = gpu::status();
    REQUIRE(s.has_value());
    CHECK_EQ(s->products_on_card, (uint64_t)0);
    CHECK_GT(s->products_on_cpu_memory, (uint64_t)0);
}

TEST(forward_gpu_a_limit_smaller_than_the_model_keeps_it_off_the_card) {
    auto m = tiny();
    Card c = open_card();
    Env heap("BANKML_GPU_TEST_HEAP", std::to_string(m->gpu_bytes()).c_str());
    Env lim("BANKML_GPU_LIMIT", "0.5");
    CHECK_THROWS(m->use_gpu(std::move(c.gpu), c.build, c.native), "BANKML_GPU_LIMIT=0.50 allows");
    CHECK(!m->on_gpu());
    CHECK(!gpu::status());
    // Within the limit it runs (the estimate holds the upload's own total).
    Env heap2("BANKML_GPU_TEST_HEAP", std::to_string(m->gpu_bytes() * 2 + (1 << 20)).c_str());
    Card c2 = open_card();
    m->use_gpu(std::move(c2.gpu), c2.build, c2.native);
    CHECK(m->on_gpu());
}

TEST(forward_gpu_rests_run_tokens_on_the_cpu_with_the_same_bits) {
    for (const char* type : {"q1_0", "q2_0"}) {
        auto cpu = tiny(type);
        const auto want = decode(*cpu, 24);
        auto m = tiny(type);
        {
            Card c = open_card();
            Env lim("BANKML_GPU_LIMIT", "0.05");
            m->use_gpu(std::move(c.gpu), c.build, c.native);
        }
        // Tokens one by one, through rests.
        auto got = decode(*m, 24);
        if (!CHECK(same_bytes(want, got))) std::fprintf(stderr, "  %s\n", type);
        auto s = gpu::status();
        REQUIRE(s.has_value());
        CHECK_EQ(s->mode, "forward");
        CHECK_GT(s->tokens_on_card, (uint64_t)0);
        CHECK_GT(s->tokens_on_cpu_resting, (uint64_t)0);
        CHECK_EQ(s->tokens_on_card + s->tokens_on_cpu_resting, (uint64_t)24);
        CHECK(m->on_gpu());
        // After a reset the same tokens give the same logits again.
        m->reset();
        CHECK(same_bytes(want, decode(*m, 24)));
        // The default limit on a card that is not integrated: every token on the card.
        auto m2 = tiny(type);
        Card c2 = open_card();
        Env lim("BANKML_GPU_LIMIT", nullptr);
        m2->use_gpu(std::move(c2.gpu), c2.build, c2.native);
        m.reset();
        CHECK(same_bytes(want, decode(*m2, 24)));
        auto s2 = gpu::status();
        REQUIRE(s2.has_value());
        if (!s2->integrated) CHECK_EQ(s2->tokens_on_cpu_resting, (uint64_t)0);
    }
}

TEST(gpu_status_and_run_json_say_what_the_card_does) {
    const std::string m = bt::data_path("tiny-q1_0.gguf"), bin = bt::bankml_bin();
    auto st = bt::run_cmd("BANKML_GPU_ALLOW_SOFTWARE=1 " + bin + " gpu --status -m " + m);
    REQUIRE_EQ(st.code, 0);
    json::Value j = json::parse(st.out);
    CHECK_EQ(j["limit"].as_double(), 0.8);
    if (j["card"].is_null()) SKIP("gpu", "no card here: " + st.out);
    CHECK_GT(j["budget_bytes"].as_uint(), (uint64_t)0);
    CHECK_GT(j["model"]["card_bytes"].as_uint(), (uint64_t)0);
    CHECK(j["model"]["fits"].as_bool());
    const std::string heap = " BANKML_GPU_TEST_HEAP=" + std::to_string(j["model"]["card_bytes"].as_uint()) + " ";
    auto small = bt::run_cmd("BANKML_GPU_ALLOW_SOFTWARE=1" + heap + bin + " gpu --status -m " + m);
    REQUIRE_EQ(small.code, 0);
    CHECK_EQ(json::parse(small.out)["model"]["runs"].as_string(), "share");
    CHECK_EQ(bt::run_cmd(bin + " gpu -m " + m).code, 2);  // -m goes with --status

    // run --json: "gpu" says where the tokens ran; a model larger than the limit stays off the
    // card, saying so, and the share takes over; the tokens are the same in every case.
    const std::string run = " run -m " + m + " --tokens 5,6,7 -n 8 --json";
    auto card = bt::run_cmd("BANKML_GPU_ALLOW_SOFTWARE=1 " + bin + run);
    auto off = bt::run_cmd("BANKML_GPU=off " + bin + run);
    // (A set share: lavapipe's calibrated one, about 2 %, may fall below the worker's minimum.)
    auto over = bt::run_cmd("BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU_SHARE=0.3" + heap + bin + run);
    REQUIRE_EQ(card.code, 0);
    REQUIRE_EQ(off.code, 0);
    REQUIRE_EQ(over.code, 0);
    json::Value jc = json::parse(card.out), jo = json::parse(off.out), jv = json::parse(over.out);
    CHECK(jo["gpu"].is_null());
    CHECK_EQ(jc["gpu"]["mode"].as_string(), "forward");
    CHECK_EQ(jc["gpu"]["tokens_on_card"].as_int(), 3 + 7);
    CHECK(over.err.find("BANKML_GPU_LIMIT") != std::string::npos);
    CHECK_EQ(jv["backend"].as_string(), "cpu");
    CHECK_EQ(jv["gpu"]["mode"].as_string(), "share");
    CHECK(json::write(jc["tokens"]) == json::write(jo["tokens"]));
    CHECK(json::write(jv["tokens"]) == json::write(jo["tokens"]));

    // bench --json: each row's "gpu" (null for the CPU row).
    auto bench = bt::run_cmd("BANKML_GPU_ALLOW_SOFTWARE=1 " + bin + " bench -m " + m + " -p 0 -n 4 -r 1 -t 1 --gpu on,off --json");
    REQUIRE_EQ(bench.code, 0);
    json::Value rows = json::parse(bench.out);
    REQUIRE_EQ(rows.size(), (size_t)2);
    CHECK_EQ(rows[0]["backends"].as_string(), "Vulkan");
    CHECK_GE(rows[0]["gpu"]["tokens_on_card"].as_int(), 4);
    CHECK(rows[1]["gpu"].is_null());
}
