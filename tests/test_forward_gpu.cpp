// The GPU forward pass on the test card (lavapipe where there is no other): the tiny Q1_0, Q2_0
// and F16 models' logits equal the CPU path's byte for byte at every step, llama.cpp's greedy
// tokens come out, and a card that fails mid-generation hands the rest to the CPU with the same
// bits. The card proves its Q1_0 kernels (and whether its Fma is native) first, as bankml does.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "gpu/kernels.h"
#include "gpu/op_kernels.h"
#include "gpu_device.h"
#include "model/forward.h"
#include "model/forward_gpu.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "quant/traits.h"
#include "test.h"

using namespace bankml;

namespace {

using Card = bt::VerifiedCard;
Card open_card() { return bt::open_verified_card(); }

std::unique_ptr<model::Model> open_path(const std::string& path, bool on_gpu) {
    model::ModelOptions opt;
    opt.threads = 2;
    opt.ctx = 96;
    auto m = model::Model::open(path, opt);
    if (on_gpu) {
        Card c = open_card();
        m->use_gpu(std::move(c.gpu), c.build, c.native);
    }
    return m;
}
std::unique_ptr<model::Model> open_model(const std::string& type, bool on_gpu) {
    return open_path(bt::data_path("tiny-" + type + ".gguf"), on_gpu);
}

// A copy of a tiny model with its embedding changed: "tied" drops output.weight (the output matrix
// is token_embd), "f32 embedding" stores token_embd as f32 (a type without a kernel on the card).
std::string embedding_variant(const std::string& type, const std::string& how) {
    auto f = gguf::File::open(bt::data_path("tiny-" + type + ".gguf"));
    gguf::Writer w;
    for (const auto& kv : f.metadata())
        if (kv.key != "general.alignment") w.add_value(kv.key, kv.value);
    std::vector<float> f32;
    for (const auto& t : f.tensors()) {
        const std::string name(t.name);
        if (how == "tied" && name == "output.weight") continue;
        const uint8_t* data = t.data;
        gguf::Type ty = t.type;
        uint64_t row = t.row_bytes();
        if (how == "f32 embedding" && name == "token_embd.weight") {
            const size_t n = size_t(t.ne[0]), rows = size_t(t.nrows());
            f32.resize(n * rows);
            for (size_t r = 0; r < rows; ++r) quant::traits(t.type).to_float(t.data + r * row, f32.data() + r * n, n);
            data = reinterpret_cast<const uint8_t*>(f32.data()), ty = gguf::Type::F32, row = n * 4;
        }
        w.add_tensor(name, ty, std::vector<int64_t>(t.ne, t.ne + t.n_dims),
                     [data, row](int64_t r0, int64_t nr, uint8_t* o) { std::memcpy(o, data + uint64_t(r0) * row, size_t(nr) * row); });
    }
    const std::string path = bt::temp_dir() + "/" + type + "-" + (how == "tied" ? "tied" : "f32-embd") + ".gguf";
    w.write(path);
    return path;
}

// The prompt, then n greedy tokens: every step's logits, concatenated.
std::vector<float> steps(model::Model& m, const std::vector<int32_t>& prompt, int n) {
    std::vector<float> all, l;
    m.eval_into(prompt, l);
    all.insert(all.end(), l.begin(), l.end());
    for (int i = 0; i < n; ++i) {
        int32_t t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
        m.eval_into(std::span<const int32_t>(&t, 1), l);
        all.insert(all.end(), l.begin(), l.end());
    }
    return all;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

std::vector<int32_t> prompt_of(size_t n) {
    std::vector<int32_t> p;
    for (size_t i = 0; i < n; ++i) p.push_back(int32_t((i * 389 + 17) % 1000));
    return p;
}

}  // namespace

TEST(forward_gpu_logits_equal_the_cpu_path_byte_for_byte) {
    for (const char* type : {"q1_0", "q2_0", "f16"})
        for (size_t len : {1, 8, 37}) {
            auto cpu = open_model(type, false);
            auto card = open_model(type, true);
            REQUIRE(card->on_gpu());
            const auto p = prompt_of(len);
            auto want = steps(*cpu, p, 20), got = steps(*card, p, 20);
            if (!CHECK(same_bytes(want, got))) std::fprintf(stderr, "  %s, prompt of %zu\n", type, len);
            CHECK(card->on_gpu());
        }
}

// The token's first step writes its embedding row from the token id (embed_q1_0, embed_q2_0,
// embed_f16). Tied, the card keeps one copy of token_embd, the output matrix's, which the
// embedding reads; a token_embd without a kernel on the card (f32) has the host write the row
// instead, one dispatch fewer. Either way the logits equal the CPU path's.
TEST(forward_gpu_tied_and_host_embeddings_equal_the_cpu_path) {
    for (const char* type : {"q1_0", "q2_0", "f16"}) {
        auto orig = open_model(type, true);
        REQUIRE(orig->gpu_forward() != nullptr);
        for (const std::string how : {"tied", "f32 embedding"}) {
            const std::string path = embedding_variant(type, how);
            auto cpu = open_path(path, false), card = open_path(path, true);
            REQUIRE(card->gpu_forward() != nullptr);
            CHECK_EQ(cpu->hparams().tied_output, how == "tied");
            const auto p = prompt_of(6);
            if (!CHECK(same_bytes(steps(*cpu, p, 8), steps(*card, p, 8)))) std::fprintf(stderr, "  %s, %s\n", type, how.c_str());
            CHECK_LT(card->gpu_forward()->weight_bytes(), orig->gpu_forward()->weight_bytes());
            CHECK_EQ(card->gpu_forward()->dispatches() + (how == "tied" ? 0 : 1), orig->gpu_forward()->dispatches());
        }
    }
}

// Each norm quantizes its own output for the next product in one dispatch of several workgroups
// (rms_norm_q8, the residual stream in two buffers in turn); BANKML_GPU_SPLIT_NORM=1 (measuring)
// records rms_norm then prep_act instead: a dispatch more a norm, the same bits, the exact replay
// after a flag as right.
TEST(forward_gpu_split_norm_gives_the_same_bits_with_a_dispatch_more_a_norm) {
    auto cpu = open_model("q1_0", false);
    const auto p = prompt_of(5);
    const auto want = steps(*cpu, p, 6);
    auto fused = open_model("q1_0", true);
    REQUIRE(fused->gpu_forward() != nullptr);
    CHECK_GT(gpu::ops::norm_q8_groups(uint32_t(cpu->hparams().n_embd)), 1u);
    CHECK(same_bytes(want, steps(*fused, p, 6)));
    const size_t norms = 2 * size_t(cpu->hparams().n_layer) + 1;
    bt::EnvScope split("BANKML_GPU_SPLIT_NORM", "1");
    auto card = open_model("q1_0", true);
    REQUIRE(card->gpu_forward() != nullptr);
    if (card->gpu_forward()->guarded()) card->gpu_forward()->inject_failure(3, "subnormal");
    CHECK(same_bytes(want, steps(*card, p, 6)));
    CHECK_EQ(card->gpu_forward()->dispatches(), fused->gpu_forward()->dispatches() + norms);
    CHECK_EQ(card->gpu_forward()->replays(), card->gpu_forward()->guarded() ? 1u : 0u);
}

namespace {
// The tiny model's (Q1_0 unless `type` says) logits through the card equal the CPU's by default
// and with `var`=`value` (a measuring switch), and the token then has `more(n_layer)` dispatches
// more (fewer: negative).
void same_bits_with_switch(const char* var, const char* value, const std::function<long(long)>& more, const char* type = "q1_0") {
    auto cpu = open_model(type, false);
    const auto p = prompt_of(4);
    const auto want = steps(*cpu, p, 5);
    auto plain = open_model(type, true);
    REQUIRE(plain->gpu_forward() != nullptr);
    CHECK(same_bytes(want, steps(*plain, p, 5)));
    bt::EnvScope sw(var, value);
    auto card = open_model(type, true);
    REQUIRE(card->gpu_forward() != nullptr);
    CHECK(same_bytes(want, steps(*card, p, 5)));
    CHECK_EQ(long(card->gpu_forward()->dispatches()), long(plain->gpu_forward()->dispatches()) + more(long(cpu->hparams().n_layer)));
}
}  // namespace

// A Q1_0 or Q2_0 layer's gate and up products run as one dispatch with SwiGLU's output quantized
// in it (swiglu_q1_0_q8, swiglu_q2_0_q8); BANKML_GPU_SPLIT_SWIGLU=1 (measuring) records the stacked
// product, then prep_act with SwiGLU on the way in: a dispatch more a layer, the same bits.
TEST(forward_gpu_split_swiglu_gives_the_same_bits_with_a_dispatch_more_a_layer) {
    for (const char* type : {"q1_0", "q2_0"}) same_bits_with_switch("BANKML_GPU_SPLIT_SWIGLU", "1", [](long layers) { return layers; }, type);
}

// A model with small layers reads each layer product's weights into the card's L2 beside the step
// before it (warm_l2, two dispatches a Q1_0 matrix: scales and bits, four matrices a layer; the
// output matrix is not warmed); BANKML_GPU_PREFETCH=0 (measuring) leaves them out: fewer
// dispatches, the same bits.
TEST(forward_gpu_weights_warmed_in_l2_keep_the_bits) {
    same_bits_with_switch("BANKML_GPU_PREFETCH", "0", [](long layers) { return -(8 * layers); });
}

TEST(forward_gpu_all_logits_of_a_prompt_equal_the_cpu_batch) {
    auto cpu = open_model("q1_0", false);
    auto card = open_model("q1_0", true);
    const auto p = prompt_of(12);
    CHECK(same_bytes(cpu->eval(p, true), card->eval(p, true)));
}

TEST(forward_gpu_gives_llama_cpp_greedy_tokens) {
    std::ifstream in(bt::data_path("tiny-greedy.txt"));
    REQUIRE(in.good());
    std::string line, model;
    std::vector<int32_t> prompt;
    int cases = 0;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string key;
        ls >> key;
        if (key == "model") ls >> model;
        if (key == "prompt") {
            prompt.clear();
            for (int32_t v; ls >> v;) prompt.push_back(v);
        }
        if (key != "greedy") continue;
        std::vector<int32_t> want;
        for (int32_t v; ls >> v && want.size() < 24;) want.push_back(v);
        std::string type = "q1_0";
        for (const char* t : {"q2_0", "f16"})
            if (model.find(t) != std::string::npos) type = t;
        auto m = open_model(type, true);
        std::vector<float> l;
        m->eval_into(prompt, l);
        std::vector<int32_t> got;
        for (size_t i = 0; i < want.size(); ++i) {
            int32_t t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
            got.push_back(t);
            m->eval_into(std::span<const int32_t>(&t, 1), l);
        }
        CHECK(got == want);
        cases++;
    }
    CHECK_EQ(cases, 6);
}

TEST(forward_gpu_failure_falls_back_to_the_cpu_with_the_same_bits) {
    auto cpu = open_model("q1_0", false);
    const auto p = prompt_of(8);
    const auto want = steps(*cpu, p, 12);
    // A device lost, an out-of-memory and a failed submission, at the first step, in the prompt
    // and while decoding.
    const std::pair<const char*, int> cases[] = {{"device lost", 11}, {"out of memory", 0}, {"submit", 4}};
    for (const auto& [what, at] : cases) {
        auto card = open_model("q1_0", true);
        REQUIRE(card->gpu_forward() != nullptr);
        card->gpu_forward()->inject_failure(at, what);
        auto got = steps(*card, p, 12);
        if (!CHECK(same_bytes(want, got))) std::fprintf(stderr, "  failure '%s' at step %d\n", what, at);
        CHECK(!card->on_gpu());
        CHECK_EQ(card->n_past(), cpu->n_past());
    }
}

// On a card that needs soft f32 the token runs the guarded kernels; a token whose guard flag is up
// runs again with the exact kernels, from the same embedding row, and gives the same bits.
TEST(forward_gpu_guard_flag_replays_the_token_exactly) {
    auto cpu = open_model("q1_0", false);
    const auto p = prompt_of(8);
    const auto want = steps(*cpu, p, 12);
    for (int at : {0, 5, 11}) {
        auto card = open_model("q1_0", true);
        REQUIRE(card->gpu_forward() != nullptr);
        if (!card->gpu_forward()->guarded()) SKIP("gpu", "the test card keeps f32 subnormals: its kernels need no guard");
        card->gpu_forward()->inject_failure(at, "subnormal");
        auto got = steps(*card, p, 12);
        if (!CHECK(same_bytes(want, got))) std::fprintf(stderr, "  flag raised at step %d\n", at);
        CHECK(card->on_gpu());
        CHECK_EQ(card->gpu_forward()->replays(), (size_t)1);
        CHECK_EQ(card->gpu_forward()->tokens(), (size_t)20);
    }
}

// Flags that come often move the guarded token to the exact attention, and then, where they still
// come, the next tokens to the exact build: the bits stay the CPU's throughout.
TEST(forward_gpu_frequent_flags_take_the_exact_attention_then_the_exact_build) {
    auto cpu = open_model("q1_0", false);
    const auto p = prompt_of(8);
    const auto want = steps(*cpu, p, 12);
    auto card = open_model("q1_0", true);
    REQUIRE(card->gpu_forward() != nullptr);
    if (!card->gpu_forward()->guarded()) SKIP("gpu", "the test card keeps f32 subnormals: its kernels need no guard");
    card->gpu_forward()->inject_failure(2, "subnormals");
    auto got = steps(*card, p, 12);
    CHECK(same_bytes(want, got));
    CHECK(card->on_gpu());
    CHECK(card->gpu_forward()->attention_exact());
    // Steps 2-5 flag with the guarded attention, 6-9 with the exact one; 10-19 run the exact build.
    CHECK_EQ(card->gpu_forward()->replays(), (size_t)8);
    CHECK_EQ(card->gpu_forward()->tokens(), (size_t)20);
}

TEST(forward_gpu_exact_attention_ends_after_a_burst_of_flags) {
    auto cpu = open_model("q1_0", false);
    const auto p = prompt_of(8);
    const auto want = steps(*cpu, p, 72);
    auto card = open_model("q1_0", true);
    REQUIRE(card->gpu_forward() != nullptr);
    if (!card->gpu_forward()->guarded()) SKIP("gpu", "the test card keeps f32 subnormals: its kernels need no guard");
    card->gpu_forward()->inject_failure(2, "subnormal burst");
    // Steps 2-5 flag; 6-69 take the exact attention; 70-79 the guarded token again.
    std::vector<float> got, l;
    card->eval_into(p, l);
    got.insert(got.end(), l.begin(), l.end());
    for (int i = 0; i < 72; ++i) {
        int32_t t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
        card->eval_into(std::span<const int32_t>(&t, 1), l);
        got.insert(got.end(), l.begin(), l.end());
        if (i == 30) CHECK(card->gpu_forward()->attention_exact());
    }
    CHECK(same_bytes(want, got));
    CHECK(card->on_gpu());
    CHECK(!card->gpu_forward()->attention_exact());
    CHECK_EQ(card->gpu_forward()->replays(), (size_t)4);
    CHECK_EQ(card->gpu_forward()->tokens(), (size_t)80);
}

TEST(forward_gpu_refuses_an_f32_cache_and_a_started_model) {
    model::ModelOptions opt;
    opt.threads = 1;
    opt.kv_f32 = true;
    auto m = model::Model::open(bt::data_path("tiny-q1_0.gguf"), opt);
    Card c = open_card();
    CHECK_THROWS(m->use_gpu(std::move(c.gpu), c.build, c.native), "f32 cache");
    CHECK(!m->on_gpu());
    auto m2 = open_model("q1_0", false);
    m2->eval(prompt_of(2));
    Card c2 = open_card();
    CHECK_THROWS(m2->use_gpu(std::move(c2.gpu), c2.build, c2.native), "before its first token");
}

TEST(run_json_names_the_backend_and_gpu_off_keeps_the_cpu) {
    const std::string m = bt::data_path("tiny-q1_0.gguf"), bin = bt::bankml_bin();
    auto card = bt::run_cmd("BANKML_GPU_ALLOW_SOFTWARE=1 " + bin + " run -m " + m + " --tokens 1,2,3 -n 4 --json");
    REQUIRE_EQ(card.code, 0);
    if (card.out.find("\"backend\":\"vulkan\"") == std::string::npos) {
        if (card.err.find("stays on the CPU") != std::string::npos || card.err.empty()) SKIP("gpu", "no card runs the model here: " + card.err);
    }
    CHECK(card.out.find("\"backend\":\"vulkan\"") != std::string::npos);
    CHECK(card.err.find("runs the model") != std::string::npos);
    auto off = bt::run_cmd("BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU=off " + bin + " run -m " + m + " --tokens 1,2,3 -n 4 --json");
    REQUIRE_EQ(off.code, 0);
    CHECK(off.out.find("\"backend\":\"cpu\",\"device\":null") != std::string::npos);
    // The same tokens and the same logits either way.
    const std::string dir = bt::temp_dir();
    auto a = bt::run_cmd("BANKML_GPU_ALLOW_SOFTWARE=1 " + bin + " run -m " + m + " --tokens 5,6,7 -n 6 --logits " + dir + "/g.f32");
    auto b = bt::run_cmd("BANKML_GPU=off " + bin + " run -m " + m + " --tokens 5,6,7 -n 6 --logits " + dir + "/c.f32");
    CHECK_EQ(a.out, b.out);
    auto ga = bt::read_file(dir + "/g.f32"), cb = bt::read_file(dir + "/c.f32");
    CHECK_EQ(ga.size(), (size_t)6 * 1024 * 4);
    CHECK(ga == cb);
    // A logits file that cannot be written fails the run with one line naming it.
    auto full = bt::run_cmd("BANKML_GPU=off " + bin + " run -m " + m + " --tokens 5,6,7 -n 2 --logits /dev/full");
    CHECK_EQ(full.code, 1);
    CHECK(full.err.find("/dev/full: write error") != std::string::npos);
}

// A model that runs on the card inside a batched step (model::decode_batch, as `bankml serve`
// calls it) evaluates alone on the card, and keeps doing so; the CPU models of the same step are
// batched. Every sequence's logits equal its own CPU evaluation's.
TEST(forward_gpu_model_in_a_batched_step_stays_on_the_card_with_the_cpus_bits) {
    auto card = open_model("q1_0", true);
    auto cpu_a = open_model("q1_0", false), cpu_b = open_model("q1_0", false), ref = open_model("q1_0", false);
    const std::vector<std::vector<int32_t>> prompts = {prompt_of(7), prompt_of(3), prompt_of(12)};
    model::Model* ms[] = {card.get(), cpu_a.get(), cpu_b.get()};
    // References: each prompt, then tokens 100 + k, on the CPU alone.
    const int STEPS = 4;
    std::vector<std::vector<std::vector<float>>> want(3);
    for (size_t i = 0; i < 3; ++i) {
        ref->reset();
        std::vector<float> l;
        ref->eval_into(prompts[i], l);
        want[i].push_back(l);
        for (int k = 0; k < STEPS; ++k) {
            const int32_t t = 100 + k;
            ref->eval_into(std::span<const int32_t>(&t, 1), l);
            want[i].push_back(l);
        }
    }
    std::vector<std::vector<float>> got(3);
    std::vector<model::DecodeSeq> seqs;
    for (size_t i = 0; i < 3; ++i) seqs.push_back({ms[i], prompts[i], &got[i]});
    model::decode_batch(seqs);
    for (size_t i = 0; i < 3; ++i) CHECK(same_bytes(got[i], want[i][0]));
    for (int k = 0; k < STEPS; ++k) {
        const int32_t t = 100 + k;
        seqs.clear();
        for (size_t i = 0; i < 3; ++i) seqs.push_back({ms[i], std::span<const int32_t>(&t, 1), &got[i]});
        model::decode_batch(seqs);
        for (size_t i = 0; i < 3; ++i) CHECK(same_bytes(got[i], want[i][size_t(k) + 1]));
    }
    CHECK(card->on_gpu());
    for (size_t i = 0; i < 3; ++i) CHECK_EQ(ms[i]->n_past(), int(prompts[i].size()) + STEPS);
}

// BANKML_GPU_CLOCK=1 (measuring): where the card has the shader clock, the output norm's phases are
// stamped and their average distances from the first stamp printed, in order.
TEST(gpu_clock_stamps_the_norms_phases_in_order) {
    const std::string m = bt::data_path("tiny-q1_0.gguf"), bin = bt::bankml_bin();
    auto r = bt::run_cmd("BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU_CLOCK=1 " + bin + " run -m " + m + " --tokens 1,2,3 -n 3");
    REQUIRE_EQ(r.code, 0);
    if (r.err.find("runs the model") == std::string::npos) SKIP("gpu", "no card runs the model here: " + r.err);
    const size_t at = r.err.find("GPU clock stamps of the output norm");
    if (at == std::string::npos) SKIP("gpu", "this card offers no shader clock");
    const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
    double prev = 0;
    for (int i = 1; i <= 8; ++i) {
        const size_t p = line.find(" " + std::to_string(i) + ":");
        REQUIRE(p != std::string::npos);
        const double v = std::atof(line.c_str() + p + 3);
        CHECK_GE(v, prev);
        prev = v;
    }
    CHECK_GT(prev, 0.0);
}
