#include "gpu/bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/cli.h"
#include "core/error.h"
#include "core/model_shapes.h"
#include "gpu/compute.h"
#include "gpu/gpu.h"
#include "gpu/kernels.h"
#include "gpu/spirv.h"
#include "par/pool.h"
#include "quant/blocks.h"
#include "quant/matmul.h"

namespace bankml::gpu {

namespace {

using Clock = std::chrono::steady_clock;

double since_us(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// A kernel that does nothing: what one submit and wait cost.
std::vector<uint32_t> empty_kernel() {
    spirv::Module m;
    m.entry_point(kernels::LOCAL_SIZE);
    m.begin_main();
    m.end_main();
    return m.words();
}

// dst[i] = src[i] over `count` 16-byte elements, each invocation striding by the whole grid: the
// card's memory bandwidth as its shader cores see it (vkCmdCopyBuffer may use a copy engine).
std::vector<uint32_t> copy_kernel() {
    spirv::Module m;
    uint32_t u = m.t_u32(), u4 = m.t_vec(u, 4), bl = m.t_bool();
    uint32_t src = m.storage_buffer(u4, 0, true, "src", 16), dst = m.storage_buffer(u4, 1, false, "dst", 16);
    uint32_t push = m.push_constants(2);
    uint32_t gid = m.builtin_u32x3(spirv::BuiltInGlobalInvocationId);
    m.entry_point(kernels::LOCAL_SIZE);
    m.begin_main();
    uint32_t i = m.local_var(u);
    auto pc = [&](uint32_t k) { return m.load(u, m.op(spirv::OpAccessChain, m.t_ptr(spirv::StoragePushConstant, u), {push, m.c_u32(k)})); };
    uint32_t count = pc(0), stride = pc(1);
    m.store(i, m.builtin_x(gid));
    m.loop([&] { return m.op(spirv::OpULessThan, bl, {m.load(u, i), count}); },
           [&] { uint32_t at = m.load(u, i); m.store_elem(u4, dst, at, m.load_elem(u4, src, at)); },
           [&] { m.store(i, m.op(spirv::OpIAdd, u, {m.load(u, i), stride})); });
    m.end_main();
    return m.words();
}

FILE* g_text = stdout;  // stderr with --json

void line(const char* fmt, auto... args) {
    std::fprintf(g_text, fmt, args...);
    std::fflush(g_text);  // partial results survive a time limit
}

// The Q1_0 products as a decode token runs them: one recorded sequence of many products, each after
// a barrier, each reading its own copy of the weights (together several times the card's L2, so
// the weights come from memory, as a token's do). Card time per product, for the 8B model's layer
// shapes and output matrix, with each kernel variant.
void products_in_sequence(Gpu& g, std::mt19937_64& rng, json::Value& rows) {
    const ModelShape* m8 = model_shape("8b");
    const size_t E = size_t(m8->embd), FF = size_t(m8->ff), NQ = size_t(m8->heads) * size_t(m8->head_dim),
                 KV = size_t(m8->kv_heads) * size_t(m8->head_dim);
    struct Shape { const char* what; size_t rows, cols; };
    const Shape shapes[] = {{"q,k,v", NQ + 2 * KV, E}, {"o", E, NQ}, {"gate,up", 2 * FF, E}, {"down", E, FF}, {"output", size_t(m8->vocab), E}};
    const uint64_t TOTAL = uint64_t(512) << 20;  // weight bytes per sequence
    struct V { std::string name; Pipeline p; uint32_t per; };
    std::vector<V> vs;
    const kernels::FmaPath path = kernels::probe_native_fma(g).native ? kernels::FmaPath::native : kernels::FmaPath::exact;
    for (uint32_t per : kernels::MAT_VEC8_PERS) {
        // The variant the forward pass runs, and where it loads chunks ahead, the one that does not.
        vs.push_back({kernels::kernel_name(true, path, per), g.pipeline(kernels::q1_0_mat_vec8(path, per), kernels::Q1_0_BINDINGS, kernels::Q1_0_PUSH_BYTES), per});
        if (kernels::mat_vec8_ahead(per) > 1)
            vs.push_back({kernels::kernel_name(true, path, per) + " (one chunk at a time)",
                          g.pipeline(kernels::q1_0_mat_vec8(path, per, 1), kernels::Q1_0_BINDINGS, kernels::Q1_0_PUSH_BYTES), per});
    }
    line("products in a sequence (each after a barrier, weights from memory: %llu MiB a sequence), card time:\n",
         (unsigned long long)(TOTAL >> 20));
    line("%-8s %-12s %-32s %10s %10s\n", "matrix", "shape", "kernel", "us each", "GB/s");
    for (const Shape& sh : shapes) {
        const size_t wbytes = sh.rows * sh.cols / quant::QK1_0 * sizeof(quant::BlockQ1_0);
        std::vector<uint8_t> w(wbytes), x(sh.cols / quant::QK8_0 * sizeof(quant::BlockQ8_0));
        for (auto& b : w) b = uint8_t(rng());
        for (size_t i = 0; i < wbytes; i += sizeof(quant::BlockQ1_0)) w[i + 1] = uint8_t(0x18 + rng() % 24);
        for (auto& b : x) b = uint8_t(rng());
        for (size_t i = 0; i < x.size(); i += sizeof(quant::BlockQ8_0)) x[i + 1] = uint8_t(0x18 + rng() % 24);
        const auto pw = kernels::pack_q1_0(w, sh.rows, sh.cols);
        const auto pa = kernels::pack_act(x, sh.cols);
        const size_t copies = std::max<size_t>(2, size_t(TOTAL / wbytes));
        std::vector<Buffer> ws, bs;
        for (size_t c = 0; c < copies; ++c) ws.push_back(g.upload<uint32_t>(pw.scales)), bs.push_back(g.upload<uint32_t>(pw.bits));
        Buffer as = g.upload<float>(pa.scales), aq = g.upload<float>(pa.lane_products);
        Buffer out = g.buffer(sh.rows * 4);
        char shape[32];
        std::snprintf(shape, sizeof shape, "%zux%zu", sh.rows, sh.cols);
        for (const V& v : vs) {
            std::vector<Step> steps;
            for (size_t c = 0; c < copies; ++c)
                steps.push_back(Step{&v.p, {&ws[c], &bs[c], &as, &aq, &out},
                                     {uint32_t(sh.rows), uint32_t(sh.cols / quant::QK1_0)}, kernels::groups_mat_vec8(sh.rows, v.per), true});
            Sequence seq = g.record(steps);
            std::vector<double> t;
            for (int i = 0; i < 4; ++i) {
                g.submit(seq), g.wait();
                if (i) t.push_back(g.last_dispatch_us());
            }
            g.free(seq);
            const double each = median(t) / double(copies);
            json::Value r = json::Value::object();
            r.set("matrix", sh.what);
            r.set("shape", shape);
            r.set("kernel", v.name);
            r.set("card_us", each);
            rows.push(std::move(r));
            line("%-8s %-12s %-32s %10.2f %10.1f%s\n", sh.what, shape, v.name.c_str(), each, double(wbytes) / each / 1e3,
                 v.per == kernels::mat_vec8_per(sh.rows) ? "" : "  (not the forward pass's rows per invocation)");
        }
        for (Buffer& b : ws) g.free(b);
        for (Buffer& b : bs) g.free(b);
        for (Buffer* b : {&as, &aq, &out}) g.free(*b);
    }
}

}  // namespace

int bench_gpu_main(const std::vector<std::string>& args, const BenchMore& more) {
    cli::Args a(args, {{"--quick", false}, {"--copy-mib", true}, {"--reps", true}, {"--json", false}});
    BenchOptions opt;
    opt.quick = a.has("quick");
    opt.json = a.has("json");
    opt.text = g_text = opt.json ? stderr : stdout;
    json::Value doc = json::Value::object();
    auto emit = [&] {
        if (opt.json) std::fputs((json::write(doc, 2) + "\n").c_str(), stdout);
        std::fflush(stdout);
    };
    const bool quick = opt.quick;
    size_t copy_mib = size_t(a.get_int("copy-mib", quick ? 64 : 1024, 1, 1 << 16));
    opt.reps = int(a.get_int("reps", quick ? 3 : 10, 1, 100000));
    auto sel = selected(discover().devices);
    const Device* card = nullptr;
    for (auto& d : sel)
        if (d.backend == "vulkan" && !card) card = &d;
    if (!card) {
        line("bankml bench gpu: no usable GPU found (BANKML_GPU_ALLOW_SOFTWARE=1 allows lavapipe)\n");
        doc.set("device", json::Value());
        emit();
        return 0;
    }
    auto t_open = Clock::now();
    Gpu g = Gpu::open(card->backend_index);
    // The kernels' workgroups must fit the card before anything is dispatched on it.
    const Gpu::Limits& lim = g.limits();
    if (std::string why = kernels::limits_problem(lim.max_invocations, lim.max_size_x, lim.max_shared_bytes); !why.empty())
        throw Error(g.name() + ": " + why + "; bankml refuses the card rather than dispatch past its limits", 2);
    par::Pool pool = par::Pool::from_env();
    doc.set("device", g.name());
    doc.set("device_index", card->backend_index);
    doc.set("cpu_threads", pool.threads());
    doc.set("reps", opt.reps);
    line("card: %s (device %u), buffers in %s memory; CPU: %d threads; opened in %.0f ms\n", g.name().c_str(),
         card->backend_index, g.device_local_buffers() ? "device-local host-visible" : "host-visible (system)",
         pool.threads(), since_us(t_open) / 1000);

    // 1. The round trip of one empty dispatch.
    {
        Pipeline p = g.pipeline(empty_kernel(), 0, 0);
        int runs = quick ? 200 : 5000;
        std::vector<double> t, dev;
        for (int i = 0; i < runs + 20; ++i) {
            auto t0 = Clock::now();
            g.run(p, {}, {}, 1);
            if (i >= 20) t.push_back(since_us(t0)), dev.push_back(g.last_dispatch_us());
        }
        line("empty dispatch round trip (submit + wait): median %.1f us, best %.1f us over %d runs; on the card %.1f us\n",
             median(t), *std::min_element(t.begin(), t.end()), runs, median(dev));
        json::Value e = json::Value::object();
        e.set("median_us", median(t));
        e.set("best_us", *std::min_element(t.begin(), t.end()));
        e.set("card_us", median(dev));
        doc.set("empty_dispatch", std::move(e));
        json::Value seq = json::Value::object();
        // What one more dispatch costs inside a recorded sequence, with and without a barrier
        // before it: a sequence of n empty dispatches against one of 1, card time.
        for (bool after : {true, false}) {
            const size_t n = 512;
            std::vector<Step> one(1, Step{&p, {}, {}, 1, after}), many(n, Step{&p, {}, {}, 1, after});
            Sequence s1 = g.record(one), sn = g.record(many);
            std::vector<double> d1, dn;
            for (int i = 0; i < (quick ? 20 : 200); ++i) {
                g.submit(s1), g.wait(), d1.push_back(g.last_dispatch_us());
                g.submit(sn), g.wait(), dn.push_back(g.last_dispatch_us());
            }
            line("sequence of %zu empty dispatches %s: %.2f us per extra dispatch on the card (one alone: %.1f us)\n", n,
                 after ? "each after a barrier" : "without barriers", (median(dn) - median(d1)) / double(n - 1), median(d1));
            seq.set(after ? "after_barrier_us" : "without_barrier_us", (median(dn) - median(d1)) / double(n - 1));
            g.free(s1);
            g.free(sn);
        }
        doc.set("extra_dispatch_in_sequence", std::move(seq));
    }

    // 2. Device-to-device copy bandwidth (read + write counted).
    double copy_card_gbs = 0;  // the shader copy on the card: the bandwidth the kernels are held to
    try {
        size_t bytes = copy_mib << 20;
        Buffer s = g.device_buffer(bytes), d = g.device_buffer(bytes);
        std::vector<double> t;
        for (int i = 0; i < (quick ? 3 : 6); ++i) {
            auto t0 = Clock::now();
            g.copy(s, d, bytes);
            if (i) t.push_back(since_us(t0));
        }
        double best = *std::min_element(t.begin(), t.end());
        line("device copy %zu MiB (vkCmdCopyBuffer, submit + wait): best %.3f ms = %.1f GB/s read+write\n", copy_mib,
             best / 1000, 2.0 * double(bytes) / best / 1e3);
        Pipeline cp = g.pipeline(copy_kernel(), 2, 8);
        size_t count = bytes / 16;
        uint32_t groups = uint32_t(std::min<size_t>(65535, (count + kernels::LOCAL_SIZE - 1) / kernels::LOCAL_SIZE));
        uint32_t push[] = {uint32_t(count), groups * kernels::LOCAL_SIZE};
        const Buffer* bufs[] = {&s, &d};
        std::vector<double> dev;
        t.clear();
        for (int i = 0; i < (quick ? 3 : 6); ++i) {
            auto t0 = Clock::now();
            g.run(cp, bufs, push, groups);
            if (i) t.push_back(since_us(t0)), dev.push_back(g.last_dispatch_us());
        }
        best = *std::min_element(t.begin(), t.end());
        double dbest = *std::min_element(dev.begin(), dev.end());
        if (dbest > 0) copy_card_gbs = 2.0 * double(bytes) / dbest / 1e3;
        doc.set("shader_copy_card_gbs", copy_card_gbs);
        line("shader copy %zu MiB (16-byte loads and stores, submit + wait): best %.3f ms = %.1f GB/s read+write; "
             "on the card %.3f ms = %.1f GB/s\n", copy_mib, best / 1000, 2.0 * double(bytes) / best / 1e3, dbest / 1000,
             dbest > 0 ? 2.0 * double(bytes) / dbest / 1e3 : 0.0);
        g.free(s);
        g.free(d);
    } catch (const std::exception& e) {
        line("device copy: not measured (%s)\n", e.what());
    }

    // 3. The kernels against the CPU on the 8B model's shapes: d x d, ff x d and the output matrix.
    const ModelShape* m8 = model_shape("8b");
    const size_t d8 = size_t(m8->embd);
    std::vector<std::pair<size_t, size_t>> shapes =
        quick ? std::vector<std::pair<size_t, size_t>>{{512, 1024}, {2048, 2048}}
              : std::vector<std::pair<size_t, size_t>>{{d8, d8}, {size_t(m8->ff), d8}, {size_t(m8->vocab), d8}};
    const int reps = opt.reps;
    // Every kernel, the native-Fma variants too (their rows say whether the bits match on this
    // card; bankml uses them only where verify_q1_0 proved them).
    line("%s\n", kernels::probe_native_fma(g).line.c_str());
    struct K {
        bool eight;
        kernels::FmaPath path;
        uint32_t per;
        Pipeline p;
    };
    std::vector<K> ks;
    for (auto path : {kernels::FmaPath::exact, kernels::FmaPath::native}) {
        ks.push_back({false, path, 1, g.pipeline(kernels::q1_0_mat_vec(path), kernels::Q1_0_BINDINGS, kernels::Q1_0_PUSH_BYTES)});
        for (uint32_t per : kernels::MAT_VEC8_PERS)
            ks.push_back({true, path, per, g.pipeline(kernels::q1_0_mat_vec8(path, per), kernels::Q1_0_BINDINGS, kernels::Q1_0_PUSH_BYTES)});
    }
    // What the card's compiler made of each kernel (registers bound how many workgroups an SM holds).
    if (g.has_pipeline_statistics())
        for (const K& k : ks) {
            std::string st;
            for (const std::string& s : g.pipeline_statistics(k.p)) st += (st.empty() ? "" : ", ") + s;
            line("%s: %s\n", kernels::kernel_name(k.eight, k.path, k.per).c_str(), st.c_str());
        }
    line("%-16s %-20s %10s %10s %8s %12s %10s\n", "shape", "kernel", "median ms", "best ms", "GB/s", "card us", "card GB/s");
    std::vector<std::string> shares;  // q1_0_mat_vec8 on the largest shape against the copy
    json::Value q1_rows = json::Value::array();
    auto q1_row = [&](const char* shape, const std::string& kernel, double med_ms, double best_ms, double card_us, bool same) {
        json::Value r = json::Value::object();
        r.set("shape", shape);
        r.set("kernel", kernel);
        r.set("median_ms", med_ms);
        r.set("best_ms", best_ms);
        if (card_us >= 0) r.set("card_us", card_us);
        r.set("bit_exact", same);
        q1_rows.push(std::move(r));
    };
    std::mt19937_64 rng(42);
    for (auto [rows, cols] : shapes) {
        size_t wbytes = rows * cols / quant::QK1_0 * sizeof(quant::BlockQ1_0);
        std::vector<uint8_t> w(wbytes), x(cols / quant::QK8_0 * sizeof(quant::BlockQ8_0));
        for (size_t i = 0; i < wbytes; i += 8) {
            uint64_t r = rng();
            std::memcpy(&w[i], &r, std::min<size_t>(8, wbytes - i));
        }
        // Random f16 scales of many sizes (2^-9 to 2^3, full mantissas): a fused and an unfused
        // multiply-add round differently on such data, so a row reported the CPU's bits proves the
        // kernel's order (power-of-two scales would hide the difference).
        for (size_t i = 0; i < wbytes; i += sizeof(quant::BlockQ1_0)) w[i] = uint8_t(rng()), w[i + 1] = uint8_t(0x18 + rng() % 24);
        for (auto& b : x) b = uint8_t(rng());
        for (size_t i = 0; i < x.size(); i += sizeof(quant::BlockQ8_0)) x[i] = uint8_t(rng()), x[i + 1] = uint8_t(0x18 + rng() % 24);
        char shape[32];
        std::snprintf(shape, sizeof shape, "%zux%zu", rows, cols);
        std::vector<float> cpu(rows);
        auto bench_cpu = [&] {
            std::vector<double> t;
            for (int i = 0; i < reps + 1; ++i) {
                auto t0 = Clock::now();
                quant::mat_vec_par(pool, quant::Type::Q1_0, w.data(), rows, cols, x.data(), cpu.data());
                if (i) t.push_back(since_us(t0));
            }
            double best = *std::min_element(t.begin(), t.end());
            line("%-16s %-20s %10.3f %10.3f %8.1f\n", shape, "cpu mat_vec_par", median(t) / 1000, best / 1000,
                 double(wbytes) / best / 1e3);
            q1_row(shape, "cpu mat_vec_par", median(t) / 1000, best / 1000, -1, true);
        };
        bench_cpu();
        auto pw = kernels::pack_q1_0(w, rows, cols);
        auto pa = kernels::pack_act(x, cols);
        Buffer bs = g.upload<uint32_t>(pw.scales), bb = g.upload<uint32_t>(pw.bits);
        Buffer as = g.upload<float>(pa.scales), aq = g.upload<float>(pa.lane_products), out = g.buffer(rows * 4);
        const Buffer* bufs[] = {&bs, &bb, &as, &aq, &out};
        uint32_t push[] = {uint32_t(rows), uint32_t(cols / quant::QK1_0)};
        for (const K& k : ks) {
            uint32_t groups = k.eight ? kernels::groups_mat_vec8(rows, k.per) : kernels::groups_mat_vec(rows);
            std::vector<double> t, dev;
            for (int i = 0; i < reps + 1; ++i) {
                auto t0 = Clock::now();
                g.run(k.p, bufs, push, groups);
                if (i) t.push_back(since_us(t0)), dev.push_back(g.last_dispatch_us());
            }
            double dev_best = *std::min_element(dev.begin(), dev.end());
            auto got = g.read_f32(out, rows);
            bool same = std::memcmp(got.data(), cpu.data(), rows * 4) == 0;
            double best = *std::min_element(t.begin(), t.end());
            line("%-16s %-20s %10.3f %10.3f %8.1f %12.1f %10.1f%s%s\n", shape, kernels::kernel_name(k.eight, k.path, k.per).c_str(),
                 median(t) / 1000, best / 1000, double(wbytes) / best / 1e3, median(dev),
                 dev_best > 0 ? double(wbytes) / dev_best / 1e3 : 0.0, same ? "" : "  (BITS DIFFER FROM THE CPU)",
                 k.eight && k.per == kernels::mat_vec8_per(rows) ? "  <- q1_0_mat_vec8 uses this for the shape" : "");
            q1_row(shape, kernels::kernel_name(k.eight, k.path, k.per), median(t) / 1000, best / 1000, median(dev), same);
            if (rows == shapes.back().first && k.eight && k.per == kernels::mat_vec8_per(rows) && copy_card_gbs > 0 && median(dev) > 0) {
                double med = double(wbytes) / median(dev) / 1e3, top = double(wbytes) / dev_best / 1e3;
                char l[256];
                std::snprintf(l, sizeof l, "%s on %s: %.1f us median on the card = %.1f GB/s, %.1f %% of the shader copy's %.0f GB/s (best %.1f %%)%s",
                              kernels::kernel_name(k.eight, k.path, k.per).c_str(), shape, median(dev), med, 100 * med / copy_card_gbs,
                              copy_card_gbs, 100 * top / copy_card_gbs, same ? "" : " (BITS DIFFER FROM THE CPU)");
                shares.push_back(l);
            }
        }
        for (Buffer* b : {&bs, &bb, &as, &aq, &out}) g.free(*b);
    }
    line("GB/s: Q1_0 weight bytes (rows·cols/128·18) / best time. ms: submit + wait on the host;\n"
         "card us: median between timestamps around the dispatch (card GB/s from the best); negative: no timestamps.\n");
    for (const std::string& l : shares) line("%s\n", l.c_str());
    doc.set("q1_0", std::move(q1_rows));
    if (!quick) {
        json::Value rows = json::Value::array();
        products_in_sequence(g, rng, rows);
        doc.set("products_in_sequence", std::move(rows));
    }
    if (more) more(g, opt, doc);
    emit();
    return 0;
}

}  // namespace bankml::gpu
