#include "model/forward_gpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>

#include "core/error.h"
#include "gpu/kernels.h"
#include "model/products.h"

namespace bankml::model {

namespace kn = gpu::kernels;
namespace go = gpu::ops;

namespace {

uint32_t fbits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// A weight matrix on the card, in its kernel's layout (several GGUF matrices with the same input
// stacked row-wise: Q, K and V; gate and up).
struct CardMatrix {
    gguf::Type type = gguf::Type::F32;
    size_t rows = 0, cols = 0;
    gpu::Buffer a, b;  // Q1_0: scales, bits; Q2_0: scales, codes; F16: the rows (b unused)
    bool gate_up = false;  // gate and up rows in swiglu_q1_0_q8's / swiglu_q2_0_q8's order (gpu::ops::stack_gate_up)
    // The card buffers holding it (b is a's copy where one buffer holds the matrix).
    std::vector<const gpu::Buffer*> buffers() const { return b.id == a.id ? std::vector{&a} : std::vector{&a, &b}; }
};

// How a matrix type runs on the card, one entry a type: its packing into one or two word buffers
// (a: scales or values; b: bits or codes, empty where a alone holds the matrix), the bytes that
// takes, its product kernel (product_step, below, reads `kernel`) and the kernel that dequantizes
// a row of it (token_embd) in that layout, and which of prep_act's outputs the product reads.
struct CardType {
    quant::Type type;
    const char* kernel;  // "" for Q1_0: q1_0_mat_vec8's variant by rows (kernels.h)
    const char* embed;
    uint32_t reads;  // go::ACT_TABLE, ACT_Q8 or ACT_F16
    void (*pack)(const std::vector<uint8_t>& raw, size_t rows, size_t cols, std::vector<uint32_t>& a, std::vector<uint32_t>& b);
    uint64_t (*bytes)(uint64_t rows, uint64_t cols);
};

const CardType CARD_TYPES[] = {
    {quant::Type::Q1_0, "", "embed_q1_0", go::ACT_TABLE,
     [](const std::vector<uint8_t>& raw, size_t rows, size_t cols, std::vector<uint32_t>& a, std::vector<uint32_t>& b) {
         kn::PackedQ1_0 pk = kn::pack_q1_0(raw, rows, cols);
         a = std::move(pk.scales), b = std::move(pk.bits);
     },
     [](uint64_t rows, uint64_t cols) { return rows * cols / 128 * 18; }},  // 18 bytes per 128, as in the GGUF
    {quant::Type::Q2_0, "q2_0_mat_vec", "embed_q2_0", go::ACT_Q8,
     [](const std::vector<uint8_t>& raw, size_t rows, size_t cols, std::vector<uint32_t>& a, std::vector<uint32_t>& b) {
         go::PackedQ2_0 pk = go::pack_q2_0(raw.data(), rows, cols);
         a = std::move(pk.scales), b = std::move(pk.codes);
     },
     [](uint64_t rows, uint64_t cols) { return rows * cols / 64 * 20; }},  // a scale per word, 16 bytes of codes
    {quant::Type::F16, "f16_mat_vec", "embed_f16", go::ACT_F16,
     [](const std::vector<uint8_t>& raw, size_t, size_t, std::vector<uint32_t>& a, std::vector<uint32_t>&) {
         a.resize(raw.size() / 4);
         std::memcpy(a.data(), raw.data(), a.size() * 4);
     },
     [](uint64_t rows, uint64_t cols) { return rows * cols * 2; }},
};

const CardType* find_card_type(quant::Type t) {
    for (const CardType& c : CARD_TYPES)
        if (c.type == t) return &c;
    return nullptr;
}
const CardType& card_type(quant::Type t) {
    if (const CardType* c = find_card_type(t)) return *c;
    throw Error(std::string("no card kernel for ") + gguf::type_name(t) + " matrices");
}

}  // namespace

// How long the host polls for a token before it sleeps on the fence.
constexpr int TOKEN_SPIN_US = 50000;
// The guard's flag buffer: word 0 and a word per guard site (gpu::shader::GUARD_FLAG_WORDS).
constexpr size_t FLAG_BYTES = gpu::shader::GUARD_FLAG_WORDS * 4;
constexpr size_t CLOCK_STAMPS = 32;  // the norm's (rms_norm_q8 or rms_norm) at 0-8, attention_q8's at 16-22

struct GpuForward::Impl {
    gpu::Gpu gpu;
    const Hparams& hp;
    int n_ctx;
    std::string name;
    uint64_t weights = 0, cache = 0;

    // Pipelines by kernel name ("q1_0_mat_vec8x4_fma", "rms_norm", ...).
    std::map<std::string, gpu::Pipeline> pipes;
    bool q1_0_native = false;

    // Activations, all [n] f32 unless noted; the cache [layer][kv head][position][head_dim] f16.
    // [n_embd] the residual stream, in two buffers: each norm reads one and writes the other (a
    // dispatch of many workgroups never reads what it writes); the token's first step writes its
    // embedding row into x, which the first norm reads.
    gpu::Buffer x, x2;
    gpu::Buffer state;    // words: position, cached positions, token, -, the rope table [head_dim]
    gpu::Buffer norms;    // every norm weight: attn, ffn, q, k per layer, then the output norm
    gpu::Buffer xn;       // [n_embd] a normed input (split_norm)
    gpu::Buffer table;    // the Q1_0 lane products of the prepared input
    gpu::Buffer table2;   // [table_floats(n_ff)] those of SwiGLU's output (swiglu_q1_0_q8)
    gpu::Buffer q8, d8;   // its Q8_0 quants (go::q8_word's layout) and each block's widened scale and quant sum
    gpu::Buffer q8h, d8h; // [q8_words(n_ff)], [n_ff / 16] those of SwiGLU's output (swiglu_q2_0_q8)
    gpu::Buffer act16;    // its f16 rounding, two to a word
    uint32_t act_outputs = go::ACT_ALL;  // which of those the model's products read (go::act_spec)
    gpu::Buffer qkv;      // [(n_head + 2·n_head_kv)·head_dim]
    gpu::Buffer q;        // [n_head·head_dim] normed, rotated queries
    gpu::Buffer o;        // [n_embd] an output product, added to x by the next norm
    gpu::Buffer gu;       // [2·n_ff] gate then up
    gpu::Buffer scratch;  // [3·n_head·n_ctx] attention's scores, ms, vs
    gpu::Buffer kc, vc;
    gpu::Buffer logits;   // [n_vocab] host-cached
    gpu::Buffer flag;     // the guarded kernels' subnormal flag (FLAG_BYTES)
    // BANKML_GPU_CLOCK=1 (measuring): the clock stamps of the token's last stamped kernel (the
    // output norm: rms_norm's phases), and the sum over tokens of each stamp's distance from
    // stamp 0, in clocks.
    gpu::Buffer clock;
    std::vector<double> clock_sum;
    size_t clock_tokens = 0;
    std::vector<CardMatrix> qkv_w, wo_w, gu_w, down_w;
    CardMatrix out_w;
    // token_embd on the card, in its product kernel's layout (out_w itself where the output matrix
    // is token_embd); a type without an embedding kernel stays on the host, which dequantizes the
    // token's row into x (host_embd).
    CardMatrix embd_w;
    const CardMatrix* embd = nullptr;
    const Matrix* host_embd = nullptr;
    // The token: `seq` with the fast build; where that is the guarded one, `exact_seq` with the
    // exact build runs the token again whenever the guard's flag is up, and `att_seq` is the
    // guarded token with the exact attention (attention_exact: flags came often; see step()).
    gpu::Sequence seq, exact_seq, att_seq;
    bool attention_exact = false;
    size_t att_tokens = 0;  // tokens that ran att_seq
    bool replayable = false;
    size_t tokens = 0, replays = 0;
    // A flagged token runs twice. Where flags come often (FLAGS_FOR_EXACT of the last RECENT
    // guarded tokens) the next EXACT_AFTER_FLAG guarded tokens take the exact attention (the
    // kernel whose guard rises on softmax weights of many sizes and on values past f16's range);
    // where they still come often, the next EXACT_AFTER_FLAG tokens run the exact build directly.
    // Either way the guarded token comes back after them: the exact attention's cost grows with
    // the cache, and a stretch of odd values passes.
    static constexpr size_t RECENT = 16, FLAGS_FOR_EXACT = 4, EXACT_AFTER_FLAG = 64;
    uint32_t recent_flags = 0;  // bit i: the guarded token i tokens ago raised the flag
    size_t exact_next = 0;
    size_t att_exact_left = 0;  // tokens left with the exact attention

    // BANKML_GPU_PROFILE=1: each step's card time, summed by kernel and printed at the end.
    bool profile = false;
    std::vector<std::string> step_names;
    std::map<std::string, double> profile_us;
    size_t profiled_tokens = 0;
    // BANKML_GPU_PROFILE=2: where a token's wall time goes (host before the submit, submit to the
    // end of the wait, the card's own time, host after), summed over tokens.
    bool host_profile = false;
    double host_in_us = 0, waited_us = 0, card_us = 0, host_out_us = 0, between_us = 0;
    size_t host_tokens = 0;
    std::chrono::steady_clock::time_point last_return{};

    int inject_at = -1;
    std::string inject_what;
    size_t inject_burst = 0;  // flags injected so far by "subnormal burst"

    // Last member: unregistered before the card's buffers go.
    std::unique_ptr<gpu::CardUse> use;

    Impl(gpu::Gpu g, const Hparams& h, int ctx) : gpu(std::move(g)), hp(h), n_ctx(ctx), name(gpu.name()) {}

    go::Build build;  // the one being recorded: fast, or exact
    go::Build fast, exact;
    // A kernel's pipeline, made on first use: the sequences build only the kernels they dispatch.
    const gpu::Pipeline& pipe(const std::string& n, const std::vector<gpu::SpecValue>& spec = {}) { return pipe(n, build, spec); }
    // spec: specialisation values beyond the build's (a row length compiled in: go::norm_spec).
    const gpu::Pipeline& pipe(const std::string& n, const go::Build& with, const std::vector<gpu::SpecValue>& spec = {}) {
        // The Q1_0 products (made in the constructor) have one build; the op kernels a guarded one.
        const std::string key = n + (go::has_guard(with) ? "/guarded" : "") + go::spec_suffix(spec);
        auto it = pipes.find(key);
        if (it != pipes.end()) return it->second;
        if (it = pipes.find(n); it != pipes.end() && n.rfind("q1_0_", 0) == 0) return it->second;
        const go::OpKernel& k = go::op_kernel(n);
        return pipes.emplace(key, gpu.pipeline(k.build(with), go::bindings(k, with), k.push_words * 4, go::spec_values(with, spec)))
            .first->second;
    }
    // Kernels the guarded token runs with the exact build all the same: those whose guard rises
    // often on ordinary data (",attention,"), so that a token seldom needs its exact replay. A
    // name covers its variant that quantizes its output ("attention" covers "attention_q8").
    std::string exact_in_fast;
    // An op kernel's step; a guarded kernel also binds the flag (profiling: a flag of its own, so
    // the profile can say which kernels raised it).
    std::deque<std::pair<gpu::Buffer, std::string>> step_flags;
    std::map<std::string, size_t> flags_by_kernel;
    gpu::Step op(const std::string& n, std::vector<const gpu::Buffer*> bufs, std::vector<uint32_t> push, uint32_t groups,
                 const std::vector<gpu::SpecValue>& spec = {}) {
        if (go::op_kernel(n).stamps && build.clock) bufs.push_back(&clock);
        const std::string base = n.size() > 3 && n.compare(n.size() - 3, 3, "_q8") == 0 ? n.substr(0, n.size() - 3) : n;
        if (go::has_guard(build) && exact_in_fast.find("," + base + ",") != std::string::npos)
            return {&pipe(n, exact, spec), std::move(bufs), std::move(push), groups};
        if (go::has_guard(build) && profile) {
            step_flags.emplace_back(gpu.readback_buffer(FLAG_BYTES), n);
            std::memset(step_flags.back().first.mapped, 0, FLAG_BYTES);
            bufs.push_back(&step_flags.back().first);
        } else if (go::has_guard(build)) {
            bufs.push_back(&flag);
        }
        return {&pipe(n, spec), std::move(bufs), std::move(push), groups};
    }
    std::string pipe_name(const gpu::Pipeline* p) const {
        for (const auto& [n, q] : pipes)
            if (q.id == p->id) return n.substr(0, n.find('/'));
        return "?";
    }

    gpu::Buffer upload_words(const std::vector<uint32_t>& w) {
        gpu::Buffer b = gpu.buffer(w.size() * 4 + 4);
        gpu.write(b, std::span<const uint32_t>(w));
        weights += b.bytes;
        return b;
    }

    // gate_up (a gate and an up matrix): Q1_0 and Q2_0 ones go in their swiglu kernel's row order.
    CardMatrix upload(std::initializer_list<const Matrix*> parts, bool gate_up = false) {
        const Matrix& first = **parts.begin();
        CardMatrix c;
        c.type = first.type;
        c.cols = (size_t)first.cols;
        for (const Matrix* p : parts) {
            if (p->type != c.type || (size_t)p->cols != c.cols)
                throw Error("a layer mixes matrix types or widths (" + std::string(gguf::type_name(p->type)) + ")");
            c.rows += (size_t)p->rows;
        }
        std::vector<uint8_t> raw;
        c.gate_up = gate_up && (c.type == quant::Type::Q1_0 || c.type == quant::Type::Q2_0) && parts.size() == 2 && first.rows % 32 == 0 &&
                    (*(parts.begin() + 1))->rows == first.rows;
        if (c.gate_up) {
            raw = go::stack_gate_up(first.data, (*(parts.begin() + 1))->data, (size_t)first.rows, first.row_bytes);
        } else {
            raw.reserve(c.rows * first.row_bytes);
            for (const Matrix* p : parts) raw.insert(raw.end(), p->data, p->data + (size_t)p->rows * p->row_bytes);
        }
        std::vector<uint32_t> a, b;
        card_type(c.type).pack(raw, c.rows, c.cols, a, b);
        c.a = upload_words(a);
        c.b = b.empty() ? c.a : upload_words(b);
        return c;
    }

    // The product of a card matrix with the prepared input, into out: with `swiglu`, the input a
    // swiglu kernel prepared (a Q1_0 product's lane-product table in table2, a Q2_0 one's quants
    // and scales in q8h, d8h).
    gpu::Step product(const CardMatrix& w, const gpu::Buffer& out, bool swiglu = false) {
        const uint32_t rows = (uint32_t)w.rows, cols = (uint32_t)w.cols;
        const std::string k = card_type(w.type).kernel;
        if (k.empty()) {  // Q1_0: the Q8_0 scales and the lane-product table
            const uint32_t per = kn::mat_vec8_per(w.rows);
            const std::string n = kn::kernel_name(true, q1_0_native ? kn::FmaPath::native : kn::FmaPath::exact, per);
            return {&pipe(n), {&w.a, &w.b, &d8, swiglu ? &table2 : &table, &out}, {rows, cols / 128}, kn::groups_mat_vec8(w.rows, per)};
        }
        if (k == "q2_0_mat_vec") {
            const uint32_t lanes = go::q2_0_lanes(rows);
            return op(k, {&w.a, &w.b, swiglu ? &q8h : &q8, swiglu ? &d8h : &d8, &out}, {rows, cols / 64}, go::q2_0_groups(rows, lanes),
                      go::q2_0_spec(lanes));
        }
        return op(k, {&w.a, &act16, &out}, {rows, cols}, (rows + 7) / 8);  // f16_mat_vec: the f16 activation
    }
    // The gate and up products and SwiGLU's output prepared for the down product: one dispatch for
    // Q1_0 (its table into table2: the product still reads table) and Q2_0 (its quants and scales
    // into q8h, d8h: the product still reads q8, d8), else the product into gu, then prep_act.
    // Returns whether the down product reads a swiglu kernel's output (product's `swiglu`).
    bool gate_up(std::vector<gpu::Step>& s, const CardMatrix& w) {
        const uint32_t rows = (uint32_t)w.rows, n_ff = rows / 2;
        if (!w.gate_up) {
            s.push_back(product(w, gu));
            s.push_back(prep(gu, n_ff, true));  // SwiGLU on the way in
            return false;
        }
        if (w.type == quant::Type::Q2_0)
            s.push_back(op("swiglu_q2_0_q8", {&w.a, &w.b, &q8, &d8, &table2, &q8h, &d8h, &act16}, {rows, (uint32_t)(w.cols / 64)},
                           go::swiglu_q1_0_groups(n_ff), go::act_spec(act_outputs)));
        else
            s.push_back(op("swiglu_q1_0_q8", {&w.a, &w.b, &table, &table, &table2, &q8, &d8, &act16}, {rows, (uint32_t)(w.cols / 128)},
                           go::swiglu_q1_0_groups(n_ff), go::act_spec(act_outputs)));
        return true;
    }
    gpu::Step prep(const gpu::Buffer& src, size_t n, bool gated = false) {
        return op("prep_act", {&src, &table, &q8, &d8, &act16}, {(uint32_t)n, 0, gated ? 1u : 0u}, (uint32_t)(n / 32), go::act_spec(act_outputs));
    }
    gpu::Step norm(uint32_t w_off, bool residual) {
        return op("rms_norm", {&x, &o, &norms, &xn}, {(uint32_t)hp.n_embd, w_off, fbits(hp.rms_eps), residual ? 1u : 0u}, 1);
    }
    // BANKML_GPU_SPLIT_NORM=1 (measuring only): each norm as rms_norm (one workgroup, x in place)
    // then prep_act, the two dispatches rms_norm_q8 makes one.
    bool split_norm = false;
    size_t norms_recorded = 0;  // in the token being recorded: which residual buffer is whose
    // Each layer product's weights read into the card's L2 beside the step before it (warm_l2, no
    // barrier between), where a layer's matrices are at most WARM_LAYER_BYTES: the H200's 1.7B
    // layers gained, its 8B layers lost (docs/PERFORMANCE.md). The output matrix is not warmed:
    // its reads slowed the output norm beside them more than its product gained.
    // BANKML_GPU_PREFETCH=0|1 (measuring only) turns it off or on for any model.
    static constexpr uint64_t WARM_LAYER_BYTES = 8ull << 20;
    bool warm = false;
    gpu::Buffer warm_sink;  // [4] warm_l2's sink, never read
    void warm_l2(std::vector<gpu::Step>& s, const CardMatrix& w) {
        if (!warm) return;
        auto it = pipes.find("warm_l2");
        if (it == pipes.end()) it = pipes.emplace("warm_l2", gpu.pipeline(kn::warm_l2(), 2, 8)).first;
        for (const gpu::Buffer* b : w.buffers()) {
            const uint32_t n = uint32_t(b->bytes / 8), groups = kn::warm_l2_groups(n);
            gpu::Step st{&it->second, {b, &warm_sink}, {n, groups * kn::KERNEL_INVOCATIONS}, groups};
            st.after = false;
            s.push_back(std::move(st));
        }
    }
    void norm_prep(std::vector<gpu::Step>& s, uint32_t w_off, bool residual) {
        if (split_norm) {
            s.push_back(norm(w_off, residual));
            s.push_back(prep(xn, (size_t)hp.n_embd));
            return;
        }
        // Norm k reads the residual stream from x (k even) or x2 (k odd) and writes it, after the
        // residual add, into the other.
        const bool odd = norms_recorded++ % 2;
        const gpu::Buffer &in = odd ? x2 : x, &out = odd ? x : x2;
        s.push_back(op("rms_norm_q8", {&in, &o, &norms, &out, &table, &q8, &d8, &act16},
                       {(uint32_t)hp.n_embd, w_off, fbits(hp.rms_eps), residual ? 1u : 0u}, go::norm_q8_groups((uint32_t)hp.n_embd),
                       go::act_spec(act_outputs, go::norm_spec((uint32_t)hp.n_embd))));
    }
};

GpuForward::GpuForward(gpu::Gpu g, const GpuModel& m, const go::Build& build, bool q1_0_native)
    : d_(std::make_unique<Impl>(std::move(g), *m.hp, m.n_ctx)) {
    Impl& d = *d_;
    const Hparams& hp = *m.hp;
    const size_t E = hp.n_embd, D = hp.head_dim, NH = hp.n_head, NKV = hp.n_head_kv, FF = hp.n_ff,
                 L = hp.n_layer, V = hp.n_vocab, NQ = NH * D, C = (size_t)m.n_ctx;
    if (!d.gpu.has_f64()) throw Error("shaderFloat64 missing");
    if (D % 32 || D > 256) throw Error("head size " + std::to_string(D) + " (the card's attention takes multiples of 32 up to 256)");
    if (E % 128 || NQ % 128 || FF % 128) throw Error("a row length is not a multiple of 128");
    d.q1_0_native = q1_0_native;

    // BANKML_GPU_LIMIT's memory part: nothing is uploaded for a model that cannot fit.
    d.use = std::make_unique<gpu::CardUse>(d.gpu, gpu::CardUse::Mode::forward, gpu::limit_from_env());
    auto too_big = [&](uint64_t need) {
        char msg[256];
        std::snprintf(msg, sizeof msg, "the model needs %.2f GiB of the card; BANKML_GPU_LIMIT=%.2f allows %.2f GiB of its %.2f GiB",
                      double(need) / (1 << 30), d.use->limit(), double(d.use->budget_bytes()) / (1 << 30),
                      double(d.use->heap_bytes()) / (1 << 30));
        return Error(msg);
    };
    if (const uint64_t need = bytes_for(m); !d.use->fits(need)) throw too_big(need);

    // Pipelines: the Q1_0 product's variants now, the op kernels as the sequence first uses them.
    // A card that needs soft f32 runs the guarded build, and the exact one when its flag is up;
    // BANKML_GPU_EXACT_F32=1 runs the exact build on every token (for measuring the guard's gain).
    d.exact = build;
    d.exact.clock = d.gpu.has_shader_clock();  // BANKML_GPU_CLOCK=1 (measuring)
    d.fast = go::guarded(d.exact);
    if (const char* e = std::getenv("BANKML_GPU_EXACT_F32"); e && std::string(e) == "1") d.fast = d.exact;
    d.replayable = go::has_guard(d.fast);
    // BANKML_GPU_EXACT_KERNELS=attention,... (measuring): kernels the guarded token runs with the
    // exact build from the start.
    const char* ex = std::getenv("BANKML_GPU_EXACT_KERNELS");
    d.exact_in_fast = "," + std::string(ex ? ex : "") + ",";
    const kn::FmaPath path = q1_0_native ? kn::FmaPath::native : kn::FmaPath::exact;
    for (uint32_t per : kn::MAT_VEC8_PERS)
        d.pipes[kn::kernel_name(true, path, per)] = d.gpu.pipeline(kn::q1_0_mat_vec8(path, per), kn::Q1_0_BINDINGS, kn::Q1_0_PUSH_BYTES);

    // Weights.
    std::vector<float> nw;
    auto put = [&](const float* p, size_t n) {
        uint32_t at = (uint32_t)nw.size();
        nw.insert(nw.end(), p, p + n);
        return at;
    };
    struct Offs { uint32_t attn, ffn, qn, kn; };
    std::vector<Offs> offs(L);
    // BANKML_GPU_SPLIT_SWIGLU=1 (measuring only): a Q1_0 or Q2_0 layer's gate and up products, then
    // prep_act, the two dispatches swiglu_q1_0_q8 (swiglu_q2_0_q8) makes one.
    const char* split_sw = std::getenv("BANKML_GPU_SPLIT_SWIGLU");
    const bool split_swiglu = split_sw && std::string(split_sw) == "1";
    for (size_t l = 0; l < L; ++l) {
        const Layer& y = m.layers[l];
        offs[l] = {put(y.attn_norm, E), put(y.ffn_norm, E), put(y.q_norm, D), put(y.k_norm, D)};
        d.qkv_w.push_back(d.upload({&y.wq, &y.wk, &y.wv}));
        d.wo_w.push_back(d.upload({&y.wo}));
        d.gu_w.push_back(d.upload({&y.gate, &y.up}, /*gate_up=*/!split_swiglu));
        d.down_w.push_back(d.upload({&y.down}));
    }
    const uint32_t out_norm = put(m.output_norm, E);
    d.norms = d.gpu.upload(std::span<const float>(nw));
    d.out_w = d.upload({m.output});
    if (!m.tok_embd) throw Error("GpuForward: no token_embd");
    const CardType* et = find_card_type(m.tok_embd->type);
    if (!et) d.host_embd = m.tok_embd;
    else if (m.tok_embd->data == m.output->data && m.tok_embd->type == m.output->type) d.embd = &d.out_w;
    else d.embd_w = d.upload({m.tok_embd}), d.embd = &d.embd_w;

    // Activations and the cache.
    auto zeroed = [&](size_t floats) {
        gpu::Buffer b = d.gpu.buffer(floats * 4 + 16);
        std::memset(b.mapped, 0, b.bytes);
        return b;
    };
    const size_t widest = std::max({E, NQ, FF});
    d.x = zeroed(E);
    d.x2 = zeroed(E);
    d.state = zeroed(go::STATE_ROPE + D);
    d.xn = zeroed(E);
    d.table = zeroed(go::table_floats(widest));
    d.table2 = zeroed(go::table_floats(FF));
    d.q8 = zeroed(go::q8_words(widest));
    d.d8 = zeroed(widest / 16);
    d.q8h = zeroed(go::q8_words(FF));
    d.d8h = zeroed(FF / 16);
    d.act16 = zeroed(widest / 2);
    d.qkv = zeroed(NQ + 2 * NKV * D);
    d.q = zeroed(NQ);
    d.o = zeroed(E);
    d.gu = zeroed(2 * FF);
    d.scratch = zeroed(3 * NH * C);
    const size_t layer_words = NKV * C * D / 2;
    d.kc = d.gpu.buffer(L * layer_words * 4);
    d.vc = d.gpu.buffer(L * layer_words * 4);
    d.cache = d.kc.bytes + d.vc.bytes;
    d.logits = d.gpu.readback_buffer(V * 4);
    d.clock = d.gpu.readback_buffer(CLOCK_STAMPS * 4);
    d.flag = d.gpu.readback_buffer(FLAG_BYTES);
    std::memset(d.flag.mapped, 0, FLAG_BYTES);

    const char* prof = std::getenv("BANKML_GPU_PROFILE");
    d.profile = prof && std::string(prof) == "1";
    d.host_profile = prof && std::string(prof) == "2";
    const char* split = std::getenv("BANKML_GPU_SPLIT_NORM");
    d.split_norm = split && std::string(split) == "1";
    uint64_t layer_bytes = 0;
    for (size_t l = 0; l < L; ++l) {
        uint64_t b = 0;
        for (const CardMatrix* w : {&d.qkv_w[l], &d.wo_w[l], &d.gu_w[l], &d.down_w[l]})
            for (const gpu::Buffer* buf : w->buffers()) b += buf->bytes;
        layer_bytes = std::max(layer_bytes, b);
    }
    d.warm = layer_bytes <= Impl::WARM_LAYER_BYTES;
    if (const char* e = std::getenv("BANKML_GPU_PREFETCH"); e && (std::string(e) == "0" || std::string(e) == "1")) d.warm = *e == '1';
    if (d.warm) d.warm_sink = zeroed(4);
    d.act_outputs = card_type(d.out_w.type).reads;
    for (size_t l = 0; l < L; ++l)
        for (const CardMatrix* w : {&d.qkv_w[l], &d.wo_w[l], &d.gu_w[l], &d.down_w[l]}) d.act_outputs |= card_type(w->type).reads;

    // The token, recorded once per build.
    const float scale = 1.0f / sqrtf((float)D);
    auto token = [&]() {
    std::vector<gpu::Step> s;
    d.norms_recorded = 0;
    // x = the token's embedding row, from the token id in the state buffer.
    if (d.embd)
        s.push_back(d.op(card_type(d.embd->type).embed, {&d.embd->a, &d.embd->b, &d.state, &d.x},
                         {(uint32_t)E, (uint32_t)d.embd->rows, 0, 1}, (uint32_t)((E + 255) / 256)));
    for (size_t l = 0; l < L; ++l) {
        d.norm_prep(s, offs[l].attn, l > 0);
        d.warm_l2(s, d.qkv_w[l]);
        s.push_back(d.product(d.qkv_w[l], d.qkv));
        s.push_back(d.op("head_norm_rope", {&d.qkv, &d.norms, &d.state, &d.q, &d.kc, &d.vc},
                         {(uint32_t)D, (uint32_t)NH, (uint32_t)NKV, offs[l].qn, offs[l].kn, (uint32_t)(l * layer_words),
                          (uint32_t)C, fbits(hp.rms_eps)},
                         (uint32_t)(NH + NKV), go::head_spec((uint32_t)D)));
        // Attention's output goes straight into the output product's input.
        s.push_back(d.op("attention_q8", {&d.q, &d.kc, &d.vc, &d.state, &d.scratch, &d.table, &d.q8, &d.d8, &d.act16},
                         {(uint32_t)D, (uint32_t)NH, (uint32_t)(NH / NKV), (uint32_t)(l * layer_words), (uint32_t)C, fbits(scale)},
                         (uint32_t)NH, go::act_spec(d.act_outputs, go::head_spec((uint32_t)D))));
        d.warm_l2(s, d.wo_w[l]);
        s.push_back(d.product(d.wo_w[l], d.o));
        d.norm_prep(s, offs[l].ffn, true);
        d.warm_l2(s, d.gu_w[l]);
        const bool swiglu = d.gate_up(s, d.gu_w[l]);
        d.warm_l2(s, d.down_w[l]);
        s.push_back(d.product(d.down_w[l], d.o, swiglu));
    }
    d.norm_prep(s, out_norm, true);
    s.push_back(d.product(d.out_w, d.logits));
    return s;
    };
    d.build = d.fast;
    std::vector<gpu::Step> s = token();
    // BANKML_GPU_PROFILE_SKIP=rms_norm,attention (measuring only): the token without those
    // kernels, whose time is then the difference. Its logits are wrong; it never replays.
    if (const char* skip = std::getenv("BANKML_GPU_PROFILE_SKIP"); skip && *skip) {
        const std::string list = "," + std::string(skip) + ",";
        std::vector<gpu::Step> kept;
        for (const gpu::Step& st : s)
            if (list.find("," + d.pipe_name(st.pipeline) + ",") == std::string::npos) kept.push_back(st);
        s = std::move(kept);
        d.replayable = false;
        std::fprintf(stderr, "bankml: GPU: BANKML_GPU_PROFILE_SKIP leaves %s out of the token (its logits are wrong)\n", skip);
    }
    for (const gpu::Step& st : s) d.step_names.push_back(d.pipe_name(st.pipeline));
    // BANKML_GPU_PROFILE=2 (measuring only): each step of the token alone, repeated in a sequence
    // of its own (each after a barrier), card time per step summed by kernel: what each costs
    // without the timestamps between steps that =1 adds. The repeated steps' results are wrong.
    const bool steps_alone = prof && std::string(prof) == "2";
    if (steps_alone) {
        constexpr size_t REPEAT = 32;
        std::map<std::string, std::pair<double, size_t>> by_kernel;
        double total = 0;
        for (size_t i = 0; i < s.size(); ++i) {
            gpu::Sequence rep = d.gpu.record(std::vector<gpu::Step>(REPEAT, s[i]));
            std::vector<double> t;
            for (int k = 0; k < 3; ++k) d.gpu.submit(rep), d.gpu.wait(), t.push_back(d.gpu.last_dispatch_us());
            d.gpu.free(rep);
            std::sort(t.begin(), t.end());
            const double each = t[1] / double(REPEAT);
            by_kernel[d.step_names[i]].first += each, ++by_kernel[d.step_names[i]].second;
            total += each;
        }
        std::fprintf(stderr, "bankml: GPU steps alone (each repeated %zu times in a sequence, card time per token):\n", REPEAT);
        for (const auto& [n, v] : by_kernel)
            std::fprintf(stderr, "  %-24s %9.1f us  %4zu steps, %7.2f us each\n", n.c_str(), v.first, v.second, v.first / double(v.second));
        std::fprintf(stderr, "  %-24s %9.1f us\n", "total", total);
    }
    d.seq = d.gpu.record(s, d.profile);
    if (steps_alone) {
        std::vector<double> t;
        for (int k = 0; k < 5; ++k) d.gpu.submit(d.seq), d.gpu.wait(), t.push_back(d.gpu.last_dispatch_us());
        std::sort(t.begin(), t.end());
        std::fprintf(stderr, "  %-24s %9.1f us (the recorded token, %zu steps)\n", "whole token", t[2], s.size());
    }
    if (d.replayable && d.exact_in_fast.find(",attention,") == std::string::npos) {
        const std::string kept = d.exact_in_fast;
        d.exact_in_fast += "attention,";
        d.att_seq = d.gpu.record(token(), d.profile);
        d.exact_in_fast = kept;
    }
    if (d.replayable) {
        d.build = d.exact;
        d.exact_seq = d.gpu.record(token(), false);
    }
    if (d.use->held_bytes() > d.use->budget_bytes()) throw too_big(d.gpu.allocated());
    // The host waits for each token by polling the fence: a sleeping wait woke milliseconds late on
    // the H200 (docs/modules/forward_gpu.md).
    d.gpu.set_spin_us(TOKEN_SPIN_US);
}

uint64_t GpuForward::bytes_for(const GpuModel& m) {
    const Hparams& hp = *m.hp;
    const uint64_t E = hp.n_embd, D = hp.head_dim, NH = hp.n_head, NKV = hp.n_head_kv, FF = hp.n_ff, L = hp.n_layer,
                   V = hp.n_vocab, NQ = NH * D, C = (uint64_t)m.n_ctx;
    // Packed weights, as each type packs them on the card.
    auto packed = [](const Matrix& w) -> uint64_t {
        for (const CardType& c : CARD_TYPES)
            if (c.type == w.type) return c.bytes(uint64_t(w.rows), uint64_t(w.cols));
        return uint64_t(w.rows) * w.row_bytes;  // no card kernel: the model stays on the CPU anyway
    };
    uint64_t b = packed(*m.output) + (2 * E + (2 * E + 2 * D) * L) * 4;
    if (m.tok_embd && m.tok_embd->data != m.output->data && find_card_type(m.tok_embd->type))
        b += packed(*m.tok_embd);  // the embedding (unless tied, or left on the host)
    for (const Layer& y : m.layers)
        for (const Matrix* w : {&y.wq, &y.wk, &y.wv, &y.wo, &y.gate, &y.up, &y.down}) b += packed(*w);
    b += 2 * L * NKV * C * D * 2;                                                     // the f16 cache
    const uint64_t widest = std::max({E, NQ, FF});
    b += (E * 4 + widest * 4 + FF * 4 + NQ * 3 + 2 * NKV * D + 2 * FF + 3 * NH * C + V) * 4;  // activations, logits (an upper bound)
    return b;
}

gpu::CardUse& GpuForward::use() { return *d_->use; }
double GpuForward::last_token_us() const { return d_->gpu.last_dispatch_us(); }

bool GpuForward::copy_cache(bool to_card, int p0, int p1, uint16_t* k, uint16_t* v) {
    Impl& d = *d_;
    if (!d.kc.mapped || !d.vc.mapped) return false;
    if (p0 < 0 || p1 > d.n_ctx || p0 >= p1) return true;
    const size_t D = d.hp.head_dim, heads = size_t(d.hp.n_layer) * d.hp.n_head_kv, n = size_t(p1 - p0) * D * 2;
    for (size_t h = 0; h < heads; ++h) {
        const size_t at = (h * size_t(d.n_ctx) + size_t(p0)) * D;
        uint16_t* ck = static_cast<uint16_t*>(d.kc.mapped) + at;
        uint16_t* cv = static_cast<uint16_t*>(d.vc.mapped) + at;
        if (to_card) {
            std::memcpy(ck, k + at, n);
            std::memcpy(cv, v + at, n);
        } else {
            std::memcpy(k + at, ck, n);
            std::memcpy(v + at, cv, n);
        }
    }
    return true;
}

GpuForward::~GpuForward() {
    Impl& d = *d_;
    if (d.clock_tokens) {
        std::fprintf(stderr, "bankml: GPU clock stamps of the output norm (average clocks after stamp 0 over %zu tokens):", d.clock_tokens);
        for (size_t i = 1; i <= 8 && i < d.clock_sum.size(); ++i) std::fprintf(stderr, " %zu:%.0f", i, d.clock_sum[i] / double(d.clock_tokens));
        std::fprintf(stderr, "\nbankml: GPU clock stamps of the last layer's attention (after stamp 16):");
        for (size_t i = 17; i <= 22 && i < d.clock_sum.size(); ++i) std::fprintf(stderr, " %zu:%.0f", i, d.clock_sum[i] / double(d.clock_tokens));
        std::fprintf(stderr, "\n");
    }
    if (d.host_profile && d.host_tokens) {
        const double n = double(d.host_tokens);
        std::fprintf(stderr, "bankml: GPU token wall time over %zu tokens: %.1f us in step() before the submit, %.1f us from the submit to the wait's end (card %.1f us), %.1f us after; %.1f us outside step() between tokens; %zu tokens ran the exact build directly, %zu the exact attention, %zu again after a flag\n",
                     d.host_tokens, d.host_in_us / n, d.waited_us / n, d.card_us / n, d.host_out_us / n, d.between_us / std::max(1.0, n - 1), d.tokens - d.host_tokens, d.att_tokens, d.replays);
    }
    if (!d.profile || !d.profiled_tokens) return;
    double total = 0;
    for (const auto& [n, us] : d.profile_us) total += us;
    std::fprintf(stderr, "bankml: GPU profile over %zu tokens (card time per token):\n", d.profiled_tokens);
    for (const auto& [n, us] : d.profile_us)
        std::fprintf(stderr, "  %-24s %9.1f us  %5.1f %%\n", n.c_str(), us / double(d.profiled_tokens), 100.0 * us / total);
    std::fprintf(stderr, "  %-24s %9.1f us\n", "total", total / double(d.profiled_tokens));
    if (d.replayable)
        std::fprintf(stderr, "  guarded f32: %zu of %zu tokens ran again with the exact kernels (a subnormal)\n", d.replays, d.tokens);
    for (const auto& [n, c] : d.flags_by_kernel) std::fprintf(stderr, "    %s raised the flag in %zu tokens\n", n.c_str(), c);
}

void GpuForward::step(int32_t token, const float* cs, int pos, float* logits) {
    Impl& d = *d_;
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t_in = Clock::now();
    Clock::time_point t_sub{}, t_waited{};
    struct HostProfile {  // BANKML_GPU_PROFILE=2's sums, taken however step() returns
        Impl& d;
        Clock::time_point in, &sub, &waited;
        ~HostProfile() {
            if (!d.host_profile || sub == Clock::time_point{}) return;
            const Clock::time_point out = Clock::now();
            auto us = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
            if (d.last_return != Clock::time_point{}) d.between_us += us(d.last_return, in);
            d.host_in_us += us(in, sub), d.waited_us += us(sub, waited), d.host_out_us += us(waited, out);
            d.card_us += std::max(0.0, d.gpu.last_dispatch_us());
            ++d.host_tokens;
            d.last_return = out;
        }
    } host_profile{d, t_in, t_sub, t_waited};
    const bool inject_flag = d.inject_what == "subnormal" || d.inject_what == "subnormals" || d.inject_what == "subnormal burst";
    if (d.inject_at >= 0 && !inject_flag && d.inject_at-- == 0) {
        const std::string w = d.inject_what;
        if (w == "device lost") throw Error("vkQueueSubmit failed: VK_ERROR_DEVICE_LOST (injected)");
        if (w == "out of memory") throw Error("vkAllocateMemory failed: VK_ERROR_OUT_OF_DEVICE_MEMORY (injected)");
        throw Error("vkQueueSubmit failed: VK_ERROR_UNKNOWN (injected)");
    }
    if (pos < 0 || pos >= d.n_ctx) throw Error("GpuForward::step: position " + std::to_string(pos) + " outside the cache");
    if (token < 0 || token >= d.hp.n_vocab)
        throw Error("GpuForward::step: token " + std::to_string(token) + " outside the vocabulary of " + std::to_string(d.hp.n_vocab));
    const size_t D = d.hp.head_dim;
    if (d.host_embd) dequantize_row(*d.host_embd, token, static_cast<float*>(d.x.mapped));
    uint32_t* st = static_cast<uint32_t*>(d.state.mapped);
    st[go::STATE_POS] = (uint32_t)pos;
    st[go::STATE_TOKEN] = (uint32_t)token;
    st[go::STATE_NKV] = (uint32_t)pos + 1;
    std::memcpy(st + go::STATE_ROPE, cs, D * 4);
    ++d.tokens;
    if (d.replayable && d.exact_next > 0) {
        // Recent tokens met subnormals often: the exact build runs the next ones directly rather
        // than twice.
        --d.exact_next;
        d.gpu.submit(d.exact_seq);
        d.gpu.wait();
        if (logits) std::memcpy(logits, d.logits.mapped, (size_t)d.hp.n_vocab * 4);
        return;
    }
    t_sub = Clock::now();
    d.att_tokens += d.attention_exact;
    d.gpu.submit(d.attention_exact ? d.att_seq : d.seq);
    d.gpu.wait();
    t_waited = Clock::now();
    if (d.attention_exact && --d.att_exact_left == 0) d.attention_exact = false;
    if (d.profile) {
        const std::vector<double> us = d.gpu.step_us();
        for (size_t i = 0; i < us.size() && i < d.step_names.size(); ++i) d.profile_us[d.step_names[i]] += us[i];
        d.profiled_tokens += !us.empty();
    }
    if (d.exact.clock) {
        const uint32_t* c = static_cast<const uint32_t*>(d.clock.mapped);
        d.clock_sum.resize(CLOCK_STAMPS);
        for (size_t i = 0; i < CLOCK_STAMPS; ++i) d.clock_sum[i] += double(uint32_t(c[i] - c[i < 16 ? 0 : 16]));
        ++d.clock_tokens;
    }
    uint32_t* flag = static_cast<uint32_t*>(d.flag.mapped);
    if (d.inject_at >= 0 && d.inject_what == "subnormal" && d.inject_at-- == 0) *flag = 1;
    if (d.inject_at >= 0 && d.inject_what == "subnormal burst") {  // FLAGS_FOR_EXACT guarded tokens
        if (d.inject_at == 0 && d.inject_burst++ < Impl::FLAGS_FOR_EXACT) *flag = 1;
        else if (d.inject_at > 0) --d.inject_at;
    }
    if (d.inject_at >= 0 && d.inject_what == "subnormals") {  // every guarded token from then on
        if (d.inject_at == 0) *flag = 1;
        else --d.inject_at;
    }
    std::map<std::string, bool> raised;
    for (auto& [b, n] : d.step_flags) {
        uint32_t* f = static_cast<uint32_t*>(b.mapped);
        if (*f) {
            raised[n] = true, *flag = 1;
            // Which parts of the kernel raised it (gpu::shader::GuardSite).
            const auto& sites = gpu::shader::guard_site_names();
            for (size_t i = 0; i < sites.size(); ++i)
                if (f[1 + i]) raised[n + " at " + sites[i]] = true;
        }
        std::memset(f, 0, FLAG_BYTES);
    }
    for (const auto& [n, r] : raised) d.flags_by_kernel[n] += r;
    d.recent_flags = ((d.recent_flags << 1) | (*flag ? 1u : 0u)) & ((1u << Impl::RECENT) - 1);
    if (d.replayable && *flag) {
        // The guarded kernels met a subnormal: the token again, exactly, from the embedding row
        // again (the norms wrote over it: the sequence's first step writes it, or the host);
        // everything else the token writes (this position's cache rows included) is written again.
        *flag = 0;
        ++d.replays;
        if (size_t(__builtin_popcount(d.recent_flags)) >= Impl::FLAGS_FOR_EXACT) {
            if (!d.attention_exact && d.att_seq.steps) d.attention_exact = true, d.att_exact_left = Impl::EXACT_AFTER_FLAG;
            else d.exact_next = Impl::EXACT_AFTER_FLAG;
            d.recent_flags = 0;
        }
        if (d.host_embd) dequantize_row(*d.host_embd, token, static_cast<float*>(d.x.mapped));
        d.gpu.submit(d.exact_seq);
        d.gpu.wait();
    }
    if (logits) std::memcpy(logits, d.logits.mapped, (size_t)d.hp.n_vocab * 4);
}

const std::string& GpuForward::device() const { return d_->name; }
uint64_t GpuForward::weight_bytes() const { return d_->weights; }
uint64_t GpuForward::cache_bytes() const { return d_->cache; }
size_t GpuForward::dispatches() const { return d_->seq.steps; }
size_t GpuForward::tokens() const { return d_->tokens; }
size_t GpuForward::replays() const { return d_->replays; }
bool GpuForward::attention_exact() const { return d_->attention_exact; }
bool GpuForward::guarded() const { return d_->replayable; }
void GpuForward::inject_failure(int at, const std::string& what) {
    d_->inject_at = at;
    d_->inject_what = what;
}

}  // namespace bankml::model
