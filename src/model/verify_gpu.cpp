#include "model/verify_gpu.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/f16.h"
#include "gpu/spirv.h"
#include "model/ops.h"
#include "quant/dot.h"
#include "quant/q8_0.h"
#include "quant/traits.h"

namespace bankml::model {

namespace go = gpu::ops;
using gpu::kernels::Check;

namespace {

uint32_t fbits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float bitsf(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
std::vector<uint32_t> words_of(const std::vector<float>& v) {
    std::vector<uint32_t> w(v.size());
    if (!v.empty()) std::memcpy(w.data(), v.data(), v.size() * 4);
    return w;
}
// f16 values two to a word, element 2i in the low half.
std::vector<uint32_t> pairs_of(const std::vector<uint16_t>& h) {
    std::vector<uint32_t> w((h.size() + 1) / 2, 0);
    for (size_t i = 0; i < h.size(); ++i) w[i / 2] |= uint32_t(h[i]) << (16 * (i % 2));
    return w;
}

// What the card's words are, for the message that names a difference.
enum class Word { f32, i32, f16x2, i8x4 };
std::string show(uint32_t w, Word k) {
    char b[96];
    if (k == Word::f32) std::snprintf(b, sizeof b, "0x%08x (%.9g)", w, double(bitsf(w)));
    else if (k == Word::i32) std::snprintf(b, sizeof b, "%d", int32_t(w));
    else if (k == Word::i8x4) std::snprintf(b, sizeof b, "0x%08x (%d, %d, %d, %d)", w, int8_t(w), int8_t(w >> 8), int8_t(w >> 16), int8_t(w >> 24));
    else std::snprintf(b, sizeof b, "0x%08x (f16 %.6g, %.6g)", w, double(f16_to_f32(uint16_t(w))), double(f16_to_f32(uint16_t(w >> 16))));
    return b;
}

// Written into every output before a dispatch: a word the card does not write cannot pass.
constexpr uint32_t POISON = 0x7fbadbadu;

struct Out {
    const char* what;  // the output's name in a difference ("y", "q", "k_cache")
    std::vector<uint32_t> got, want;
    Word kind;
};

std::string dims(std::initializer_list<size_t> d) {
    std::string s;
    for (size_t v : d) s += (s.empty() ? "" : "×") + std::to_string(v);
    return s;
}

class Runner {
public:
    Runner(gpu::Gpu& g, const go::Build& b, const VerifyOpsOptions& o) : gpu_(g), build_(b), opt_(o) {}
    ~Runner() {
        for (gpu::Buffer& b : live_) gpu_.free(b);
    }

    std::vector<std::string> lines;
    std::vector<std::string> failures;  // every check that differed, in order

    // The kernel's pipeline, built once, after checking the card can run it; spec: values beyond
    // the build's (a row length compiled in).
    const gpu::Pipeline& pipe(const std::string& name, const std::vector<gpu::SpecValue>& spec = {}) {
        const std::string key = name + go::spec_suffix(spec);
        auto it = pipes_.find(key);
        if (it != pipes_.end()) return it->second;
        const go::OpKernel& k = go::op_kernel(name);
        std::vector<uint32_t> words = k.build(build_);
        const gpu::Gpu::Limits& lim = gpu_.limits();
        auto refuse = [&](const std::string& why) {
            throw Error(name + ": " + why + "; bankml refuses the card rather than dispatch past its limits", 2);
        };
        if (lim.max_invocations < k.local_size || lim.max_size_x < k.local_size)
            refuse("needs workgroups of " + std::to_string(k.local_size) + " invocations, the card offers " +
                   std::to_string(std::min(lim.max_invocations, lim.max_size_x)));
        if (size_t need = workgroup_bytes(words); lim.max_shared_bytes < need)
            refuse("needs " + std::to_string(need) + " bytes of workgroup memory, the card offers " +
                   std::to_string(lim.max_shared_bytes));
        return pipes_.emplace(key, gpu_.pipeline(words, go::bindings(k, build_), k.push_words * 4, go::spec_values(build_, spec))).first->second;
    }

    // A buffer holding `w` (at least one word), freed with the runner.
    gpu::Buffer* upload(const std::vector<uint32_t>& w) {
        gpu::Buffer b = gpu_.buffer(std::max<size_t>(w.size(), 1) * 4);
        if (!w.empty()) gpu_.write(b, std::span<const uint32_t>(w));
        live_.push_back(b);
        return &live_.back();
    }
    // An output: host-cached memory where the card has it (reading device memory across the bus
    // uncached made the every-float expf check take minutes), filled with the poison word.
    gpu::Buffer* poisoned(size_t n) {
        gpu::Buffer b = gpu_.readback_buffer(std::max<size_t>(n, 1) * 4);
        std::vector<uint32_t> w(std::max<size_t>(n, 1), POISON);
        gpu_.write(b, std::span<const uint32_t>(w));
        live_.push_back(b);
        host_outs_.insert(&live_.back());
        return &live_.back();
    }
    void release() {
        for (gpu::Buffer& b : live_) gpu_.free(b);
        live_.clear();
        host_outs_.clear();
    }
    static std::vector<uint32_t> read(const gpu::Buffer& b, size_t n) {
        std::vector<uint32_t> w(n);
        std::memcpy(w.data(), b.mapped, n * 4);
        return w;
    }

    double run(const std::string& name, std::initializer_list<const gpu::Buffer*> bufs, std::vector<uint32_t> push, uint32_t groups,
               const std::vector<gpu::SpecValue>& spec = {}) {
        const gpu::Pipeline& p = pipe(name, spec);
        std::vector<const gpu::Buffer*> b(bufs);
        gpu::Buffer* flag = nullptr;
        if (go::has_guard(build_)) {
            flag = poisoned(gpu::shader::GUARD_FLAG_WORDS);
            std::memset(flag->mapped, 0, gpu::shader::GUARD_FLAG_WORDS * 4);
            b.push_back(flag);
        }
        last_ = {&p, b, push, groups};
        auto t0 = std::chrono::steady_clock::now();
        gpu_.run(p, b, push, groups);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        flagged_ = flag && read(*flag, 1)[0] != 0;
        flag_sites_.clear();
        if (flagged_) {
            const std::vector<uint32_t> w = read(*flag, gpu::shader::GUARD_FLAG_WORDS);
            const auto& sites = gpu::shader::guard_site_names();
            for (size_t i = 0; i < sites.size(); ++i)
                if (w[1 + i]) flag_sites_ += (flag_sites_.empty() ? "" : ", ") + sites[i];
        }
        return ms;
    }

    // Every word of every output against the CPU's; throws on the first difference.
    void check(const std::string& kernel, const std::string& shape, double ms, std::vector<Out> outs) {
        if (opt_.corrupt && !outs.empty()) opt_.corrupt(kernel, outs[0].got);
        size_t words = 0;
        for (const Out& o : outs) {
            words += o.want.size();
            std::string diff;
            if (o.got.size() != o.want.size())
                diff = std::string(o.what) + ": " + std::to_string(o.got.size()) + " words for " + std::to_string(o.want.size());
            for (size_t i = 0; diff.empty() && i < o.want.size(); ++i)
                if (o.got[i] != o.want[i])
                    diff = std::string(o.what) + "[" + std::to_string(i) + "] differs (card " + show(o.got[i], o.kind) +
                           ", CPU " + show(o.want[i], o.kind) + ")";
            if (!diff.empty() && flagged_) {
                // The guard saw a subnormal: the forward pass would not use these outputs (it runs
                // the exact build instead), so a difference here is allowed.
                if (opt_.checks) opt_.checks->push_back(timed({kernel + guard_suffix(), shape, words, true, ms}));
                lines.push_back(kernel + guard_suffix() + " " + shape + ": flagged a subnormal (the exact build runs instead), raised in " + flag_sites_);
                ++flagged_checks;
                return;
            }
            if (!diff.empty()) {
                if (opt_.checks) opt_.checks->push_back({kernel, shape, words, false, ms});
                // Every kernel is still tried, so one run names all that differ.
                failures.push_back(kernel + " " + shape + ": " + diff);
                return;
            }
        }
        if (opt_.checks) opt_.checks->push_back(timed({kernel + guard_suffix(), shape, words, true, ms}));
        char line[320];
        std::snprintf(line, sizeof line, "%s%s %s: %zu of %zu words bit-exact%s, %.2f ms", kernel.c_str(), guard_suffix().c_str(),
                      shape.c_str(), words, words, flagged_ ? " (flagged)" : "", ms);
        lines.push_back(line);
        if (flagged_) ++flagged_checks;
        else if (go::has_guard(build_) && shape.find("(random") != std::string::npos) ++random_unflagged;
    }
    // With time_reps: the last dispatch run again that many times (its outputs checked already, or
    // flagged), its card times in c.
    gpu::kernels::Check timed(gpu::kernels::Check c) {
        c.flagged = flagged_;
        if (opt_.time_reps <= 0 || !last_.pipe || (opt_.time_if && !opt_.time_if(c.name, c.shape))) return c;
        // The outputs the oracle reads back live in host memory; the timed runs write device
        // memory instead, as the forward pass's kernels do (a copy of each such buffer).
        std::deque<gpu::Buffer> copies;
        std::vector<const gpu::Buffer*> bufs = last_.bufs;
        for (const gpu::Buffer*& b : bufs)
            if (host_outs_.count(b)) {
                copies.push_back(gpu_.buffer(b->bytes));
                gpu_.write(copies.back(), std::span<const uint32_t>(static_cast<const uint32_t*>(b->mapped), b->bytes / 4));
                b = &copies.back();
            }
        // (VerifyOpsOptions::time_repeat, time_warm_ms.)
        const size_t TIMED_REPEAT = std::max<size_t>(opt_.time_repeat, 1);
        const double TIMED_WARM_MS = opt_.time_warm_ms;
        gpu::Sequence seq = gpu_.record(std::vector<gpu::Step>(TIMED_REPEAT, gpu::Step{last_.pipe, bufs, last_.push, last_.groups}));
        const auto w0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 1000 && std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count() < TIMED_WARM_MS; ++i)
            gpu_.submit(seq), gpu_.wait();
        std::vector<double> t;
        for (int i = 0; i < opt_.time_reps; ++i) {
            gpu_.submit(seq);
            gpu_.wait();
            t.push_back(gpu_.last_dispatch_us() / double(TIMED_REPEAT));
        }
        gpu_.free(seq);
        for (gpu::Buffer& b : copies) gpu_.free(b);
        std::sort(t.begin(), t.end());
        c.card_us_best = t.front();
        c.card_us_median = t[t.size() / 2];
        c.reps = t.size();
        return c;
    }
    // The guarded build's name suffix in lines and checks.
    std::string guard_suffix() const { return go::has_guard(build_) ? " (guarded f32)" : ""; }

    size_t flagged_checks = 0;    // guarded runs that raised the flag
    size_t random_unflagged = 0;  // guarded runs on random data that did not (the fast path is taken)

private:
    gpu::Gpu& gpu_;
    const go::Build& build_;
    const VerifyOpsOptions& opt_;
    std::map<std::string, gpu::Pipeline> pipes_;
    std::deque<gpu::Buffer> live_;
    std::set<const gpu::Buffer*> host_outs_;  // live_'s buffers in host memory (poisoned())
    struct Dispatch {
        const gpu::Pipeline* pipe = nullptr;
        std::vector<const gpu::Buffer*> bufs;
        std::vector<uint32_t> push;
        uint32_t groups = 0;
    } last_;  // the last run, for timed()
    bool flagged_ = false;  // the last run's guard flag
    std::string flag_sites_;  // and the guard sites that raised it
};

using Rng = std::mt19937_64;
float normal(Rng& r) { return std::normal_distribution<float>(0.0f, 1.0f)(r); }
float uniform(Rng& r, float a, float b) { return std::uniform_real_distribution<float>(a, b)(r); }
int uniform_int(Rng& r, int a, int b) { return std::uniform_int_distribution<int>(a, b)(r); }
float r_sign(Rng& r) { return r() % 2 ? -1.0f : 1.0f; }
// ±m·2^e, m in [1, 2), e uniform in [lo, hi].
float spread(Rng& r, int lo, int hi) {
    float v = std::ldexp(uniform(r, 1.0f, 2.0f), uniform_int(r, lo, hi));
    return r() % 2 ? -v : v;
}

// ---------------------------------------------------------------- rms_norm

constexpr float NORM_EPS = 1e-6f;

// A row whose mean the ordered chain rounds to one float and its exact sum to the other side of
// a midpoint, so that only the chain's own sum gives the CPU's bits: squares large enough to stay
// in the chain closing in on n·M from below, M midway between two floats near 1.5 whose norm
// scales 1/sqrt(mean + eps) differ (so the outputs show which one the mean is), then either
// squares below half the sum's last place, each dropped by the chain, that together carry the
// exact sum past n·M ("mean on a boundary"), or squares just above half a last place, each
// rounded up by the chain, that carry the chain's sum past n·M while the exact sum stays below
// ("... rounded up"; zeros after them). Random signs.
std::vector<float> boundary_row(Rng& r, size_t n, bool up, float eps) {
    float m = 1.5f;
    auto scale = [&](float v) { return 1.0f / sqrtf(v + eps); };
    while (scale(m) == scale(std::nextafter(m, 2.0f))) m = std::nextafter(m, 2.0f);
    const double target = (double(m) + double(std::nextafter(m, 2.0f))) / 2 * double(n);
    auto square = [](float v) { return double(v * v); };  // the CPU's float square, widened
    // The largest float whose square lies below v.
    auto root_below = [&](double v) {
        float x = float(std::sqrt(v));
        while (square(x) >= v) x = std::nextafter(x, 0.0f);
        for (float up = std::nextafter(x, 1e30f); square(up) < v; up = std::nextafter(up, 1e30f)) x = up;
        return x;
    };
    auto ulp = [](double s) {
        int e;
        std::frexp(s, &e);
        return std::ldexp(1.0, e - 53);
    };
    std::vector<float> x;
    double s = 0.0;
    while (x.size() < n) {
        if (s > 0 && target - s < double(n - x.size()) * 0.4 * ulp(s)) break;  // the rest can cross
        const float v = root_below(target - s);
        if (square(v) < ulp(s) / 2) break;  // the chain would drop it
        x.push_back(v);
        s += square(v);
    }
    // Rounded up, each fill adds a whole last place to the chain and 0.52 of one to the exact sum
    // (which the closing squares' own roundings leave within half a place of the chain's).
    const size_t end = up ? x.size() + size_t((target - s - ulp(s)) / (0.52 * ulp(s))) : n;
    const float fill = root_below((up ? 0.52 : 0.45) * ulp(s));
    while (x.size() < n) x.push_back(x.size() < end ? fill : 0.0f);
    long double exact = 0;
    double chain = 0;
    for (float v : x) exact += (long double)square(v), chain += square(v);
    if (float(chain / double(n)) == float(double(exact / (long double)n)))
        throw Error("norm_data: no row of " + std::to_string(n) + " values has its mean on a boundary");
    for (float& v : x) v *= r_sign(r);
    return x;
}

// Rows whose double sums round often, or never, or from a cancelled residual.
void norm_data(Rng& r, const std::string& kind, size_t n, std::vector<float>& x, std::vector<float>& add) {
    x.assign(n, 0.0f);
    add.assign(n, 0.0f);
    if (kind.rfind("mean on a boundary", 0) == 0) {
        x = boundary_row(r, n, kind == "mean on a boundary, rounded up", NORM_EPS);
        return;
    }
    for (size_t i = 0; i < n; ++i) {
        float& v = x[i];
        if (kind == "random") v = normal(r);
        else if (kind == "spread exponents") v = spread(r, -75, 60);
        else if (kind == "narrow spread") v = spread(r, -12, 8);
        // Mostly small integers (their squares add exactly), every tenth value tiny (its square
        // rounds): few additions round, so the parallel walk of the rounding ones is taken.
        else if (kind == "sparse rounding") v = i % 10 == 9 ? spread(r, -22, -18) : float(uniform_int(r, -16, 16));
        else if (kind == "huge first") v = i == 0 ? 0x1.8p40f : normal(r) * 0x1p-8f;
        // Squares about the last place of a sum near 1, and now and then a 1 that moves the sum
        // across binades.
        else if (kind == "last place") v = i == 0 || i % 211 == 0 ? 1.0f : uniform(r, 0.7f, 1.5f) * 0x1p-26f;
        // Squares below float's normal range (subnormal or zero), and subnormal values.
        else if (kind == "subnormal squares") v = i % 5 == 0 ? bitsf(uint32_t(r() % 0x7fffff + 1) | (r() % 2 ? 0x80000000u : 0)) : spread(r, -90, -62);
        // With the sum in [2, 4) (its last place 2^-51), (m·2^-26)² = m²·2^-52 for an odd m lies
        // exactly halfway between two multiples: a tie at every such square.
        else if (kind == "ties") v = i == 0 ? 1.5f : float(2 * uniform_int(r, 0, 40) + 1) * 0x1p-26f;
        else if (kind == "some ties") v = i == 0 ? 1.5f : i % 8 == 0 ? float(2 * uniform_int(r, 0, 40) + 1) * 0x1p-26f : normal(r) * 0x1p-14f;
        // A few large activations among many small ones (most squares below the sum's last place).
        else if (kind == "large few") v = i % 97 == 3 ? normal(r) * 300.0f : normal(r) * 0.02f;
        else if (kind == "zeros") v = i % 2 ? -0.0f : 0.0f;
        else if (kind == "equal") v = 0.1f;
        else if (kind == "residual random") v = normal(r), add[i] = normal(r);
        else if (kind == "residual cancel") {
            v = normal(r);
            add[i] = i % 3 == 0 ? -v : -v * (1.0f + uniform(r, -1.0f, 1.0f) * 0x1p-20f);  // exact zeros and tiny sums
        } else if (kind == "residual spread") v = spread(r, -40, 40), add[i] = spread(r, -40, 40);
        else throw Error("norm_data: " + kind);
    }
}

// The norms' data kinds (norm_data; "residual ..." adds `add` first) and a row of one: the inputs,
// and the CPU's x = add + x (stored back) and norm y of n values (weights from w_off).
const char* const NORM_KINDS[] = {"random", "spread exponents", "narrow spread", "sparse rounding", "huge first", "last place",
                                  "subnormal squares", "ties", "some ties", "large few", "zeros", "equal", "mean on a boundary", "mean on a boundary, rounded up",
                                  "residual random",
                                  "residual cancel", "residual spread"};
constexpr uint32_t NORM_W_OFF = 5;
struct NormRow {
    bool residual;
    std::vector<float> x, add, w, xc, y;
};
NormRow norm_row(Rng& rng, const char* kind, size_t n) {
    NormRow c;
    c.residual = std::strncmp(kind, "residual", 8) == 0;
    norm_data(rng, kind, n, c.x, c.add);
    c.w.resize(NORM_W_OFF + n);
    for (float& v : c.w) v = 1.0f + 0.1f * normal(rng);
    c.xc = c.x, c.y.resize(n);
    if (c.residual)
        for (size_t i = 0; i < n; ++i) c.xc[i] = c.add[i] + c.xc[i];
    ops::rms_norm_mul(c.xc.data(), c.w.data() + NORM_W_OFF, c.y.data(), n, NORM_EPS);
    return c;
}

void verify_rms_norm(Runner& R, Rng& rng, bool full) {
    std::vector<size_t> ns = full ? std::vector<size_t>{2048, 2560, 4096, 12288} : std::vector<size_t>{1000, 4224};
    const float eps = NORM_EPS;
    const uint32_t w_off = NORM_W_OFF;
    for (size_t n : ns)
        for (const char* kind : NORM_KINDS) {
            const auto [residual, x, add, w, xc, y] = norm_row(rng, kind, n);
            gpu::Buffer *bx = R.upload(words_of(x)), *ba = R.upload(words_of(add)), *bw = R.upload(words_of(w)), *by = R.poisoned(n);
            double ms = R.run("rms_norm", {bx, ba, bw, by}, {uint32_t(n), w_off, fbits(eps), residual ? 1u : 0u}, 1);
            std::vector<Out> outs{{"y", Runner::read(*by, n), words_of(y), Word::f32}};
            if (residual) outs.push_back({"x", Runner::read(*bx, n), words_of(xc), Word::f32});
            R.check("rms_norm", "1×" + std::to_string(n) + " (" + kind + ")", ms, std::move(outs));
            R.release();
        }
}

// Q8_0 quants four to a word, in order from the low byte, the words where go::q8_word puts them
// (prep_act's q8), of n values; the words of a last partial block of 64 no quant fills hold the
// poison, as the kernels leave them.
std::vector<uint32_t> quants_packed(const std::vector<quant::BlockQ8_0>& q8, size_t n) {
    std::vector<uint32_t> w(go::q8_words(n), POISON);
    for (size_t word = 0; word < n / 4; ++word) {
        uint32_t v = 0;
        for (size_t b = 0, i = 4 * word; b < 4; ++b, ++i) v |= uint32_t(uint8_t(q8[i / 32].qs[i % 32])) << (8 * b);
        w[go::q8_word(word, n)] = v;
    }
    return w;
}

// Per Q8_0 block of n values its scale widened (f32 bits) and the sum of its quants (prep_act's d8).
std::vector<uint32_t> scales_and_sums(const std::vector<quant::BlockQ8_0>& q8, size_t n) {
    std::vector<uint32_t> d(n / 16);
    for (size_t b = 0; b < n / 32; ++b) {
        int32_t sum = 0;
        for (int8_t q : q8[b].qs) sum += q;
        d[2 * b] = fbits(f16_to_f32(q8[b].d)), d[2 * b + 1] = uint32_t(sum);
    }
    return d;
}

// The words at even (odd = false) or odd places.
std::vector<uint32_t> every_other(const std::vector<uint32_t>& w, bool odd) {
    std::vector<uint32_t> r;
    for (size_t i = odd; i < w.size(); i += 2) r.push_back(w[i]);
    return r;
}

// The CPU's input of a Q1_0, Q2_0 or F16 product made from y: Q8_0 quants (four to a word), scales
// and quant sums, the Q1_0 lane-product table, and the f16 pairs. n is a multiple of 32 (the blocks past n up to a
// multiple of 128, which pack_act needs, are made of zeros and left out).
struct PreparedAct {
    std::vector<uint32_t> q8, d8, table, f16;
};
PreparedAct prepared(const std::vector<float>& y) {
    const size_t n = y.size(), padded = (n + 127) / 128 * 128;
    std::vector<float> yp(y);
    yp.resize(padded, 0.0f);
    std::vector<quant::BlockQ8_0> q8(padded / 32);
    quant::quantize_row_q8_0(yp.data(), q8.data(), padded);
    std::span<const uint8_t> q8b(reinterpret_cast<const uint8_t*>(q8.data()), q8.size() * sizeof(quant::BlockQ8_0));
    gpu::kernels::PackedAct pa = gpu::kernels::pack_act(q8b, padded);
    PreparedAct p;
    p.table = words_of(std::vector<float>(pa.lane_products.begin(), pa.lane_products.begin() + long(n / 32 * 128)));
    p.q8 = quants_packed(q8, n), p.d8 = scales_and_sums(q8, n);
    std::vector<uint16_t> h(n);
    ops::round_f16(y.data(), h.data(), n);
    p.f16 = pairs_of(h);
    return p;
}

// prep_act's four outputs of n values on the card (each poisoned), and the checks of them against
// the CPU's (q8 first: the output the oracle's corruption hook changes).
struct ActBuffers {
    gpu::Buffer *table, *q8, *d8, *f16;
};
ActBuffers poisoned_act(Runner& R, size_t n) {
    return {R.poisoned(go::table_floats(n)), R.poisoned(go::q8_words(n)), R.poisoned(n / 16), R.poisoned(n / 2)};
}
// With `outputs` (a pipeline of go::act_spec), the outputs left out must still hold the poison.
std::vector<Out> act_outs(const ActBuffers& a, const PreparedAct& want, size_t n, uint32_t outputs = go::ACT_ALL) {
    auto or_poison = [&](uint32_t output, const std::vector<uint32_t>& w) {
        return outputs & output ? w : std::vector<uint32_t>(w.size(), POISON);
    };
    const std::vector<uint32_t> d8 = Runner::read(*a.d8, n / 16);
    return {{"q8", Runner::read(*a.q8, go::q8_words(n)), or_poison(go::ACT_Q8, want.q8), Word::i8x4},
            {"d8 scales", every_other(d8, false), or_poison(go::ACT_Q8, every_other(want.d8, false)), Word::f32},
            {"d8 quant sums", every_other(d8, true), or_poison(go::ACT_Q8, every_other(want.d8, true)), Word::i32},
            {"lane_products", Runner::read(*a.table, want.table.size()), or_poison(go::ACT_TABLE, want.table), Word::f32},
            {"f16", Runner::read(*a.f16, n / 2), or_poison(go::ACT_F16, want.f16), Word::f16x2}};
}

// The pipelines of a kernel that prepares a product's input (go::act_spec) the oracle runs on a
// case: every output; where `each`, also each output alone (the forward pass's pipelines for a
// model whose products all read one), with the shape's label for each.
std::vector<uint32_t> act_pipelines(bool each) {
    if (!each) return {go::ACT_ALL};
    return {go::ACT_ALL, go::ACT_TABLE, go::ACT_Q8, go::ACT_F16};
}
std::string act_label(uint32_t outputs) {
    return outputs == go::ACT_TABLE ? ", the table alone" : outputs == go::ACT_Q8 ? ", the quants alone" : outputs == go::ACT_F16 ? ", the f16 pairs alone" : "";
}

// rms_norm_q8: the CPU's residual add and norm, then the quantization of the norm's output as
// prepared() makes it, across several workgroups (a last one with a shorter span: 1056 and 4320
// are not multiples of NORM_Q8_SPAN), and the residual stream the first workgroup writes; then
// each row length the forward pass compiles in, with its pipeline.
void verify_rms_norm_q8(Runner& R, Rng& rng, bool full) {
    std::vector<size_t> ns = full ? std::vector<size_t>{2048, 2560, 4096, 5120, 12288} : std::vector<size_t>{1056, 4320};
    const size_t any_rows = ns.size();
    for (uint32_t n : go::NORM_ROWS_COMPILED_IN) ns.push_back(n);
    const float eps = NORM_EPS;
    const uint32_t w_off = NORM_W_OFF;
    for (size_t i = 0; i < ns.size(); ++i)
        for (const char* kind : NORM_KINDS) {
            const size_t n = ns[i];
            const bool compiled_in = i >= any_rows;
            const auto [residual, x, add, w, xc, y] = norm_row(rng, kind, n);
            const PreparedAct want = prepared(y);
            // Each output alone: on each row compiled in and on the first of any length.
            for (uint32_t outputs : act_pipelines((compiled_in || i == 0) && kind == NORM_KINDS[0])) {
                gpu::Buffer *bx = R.upload(words_of(x)), *ba = R.upload(words_of(add)), *bw = R.upload(words_of(w)), *bxo = R.poisoned(n);
                const ActBuffers a = poisoned_act(R, n);
                double ms = R.run("rms_norm_q8", {bx, ba, bw, bxo, a.table, a.q8, a.d8, a.f16}, {uint32_t(n), w_off, fbits(eps), residual ? 1u : 0u},
                                  go::norm_q8_groups(uint32_t(n)), go::act_spec(outputs, compiled_in ? go::norm_spec(uint32_t(n)) : std::vector<gpu::SpecValue>{}));
                std::vector<Out> outs = act_outs(a, want, n, outputs);
                outs.push_back({"x_out", Runner::read(*bxo, n), words_of(xc), Word::f32});
                outs.push_back({"x", Runner::read(*bx, n), words_of(x), Word::f32});
                R.check("rms_norm_q8", "1×" + std::to_string(n) + (compiled_in ? ", the row compiled in" : "") + act_label(outputs) + " (" + kind + ")", ms, outs);
                R.release();
            }
        }
}

// The norm's ordered double sum alone, every bit of it, on the norm's data (a norm's float output
// moves only when its sum moves by a large part of a float's last place).
void verify_sum_squares(Runner& R, Rng& rng, bool full) {
    std::vector<size_t> ns = full ? std::vector<size_t>{128, 2048, 4096, 12288} : std::vector<size_t>{128, 1000, 4224};
    const char* kinds[] = {"random", "spread exponents", "narrow spread", "sparse rounding", "huge first", "last place", "subnormal squares",
                           "ties", "some ties", "large few", "zeros", "equal", "mean on a boundary", "mean on a boundary, rounded up"};
    for (size_t n : ns)
        for (const char* kind : kinds) {
            std::vector<float> x, add;
            norm_data(rng, kind, n, x, add);
            double sum = 0.0;
            for (float v : x) sum += (double)(v * v);
            uint64_t sb;
            std::memcpy(&sb, &sum, 8);
            gpu::Buffer *bx = R.upload(words_of(x)), *bo = R.poisoned(2);
            double ms = R.run("sum_squares", {bx, bo}, {uint32_t(n)}, 1);
            R.check("sum_squares", "1×" + std::to_string(n) + " (" + kind + ")", ms,
                    {{"sum", Runner::read(*bo, 2), {uint32_t(sb), uint32_t(sb >> 32)}, Word::i32}});
            R.release();
        }
}

// ---------------------------------------------------------------- prep_act

void prep_data(Rng& r, const std::string& kind, size_t n, std::vector<float>& x) {
    x.assign(n, 0.0f);
    for (size_t b = 0; b < n / 32; ++b) {
        float* v = &x[b * 32];
        const int k = uniform_int(r, -10, 10);
        for (size_t j = 0; j < 32; ++j) {
            if (kind == "random") v[j] = normal(r) * std::exp(2.0f * normal(r));
            // Every other block all zeros (amax 0: id 0, d 0).
            else if (kind == "zero blocks") v[j] = b % 2 ? (j % 3 ? 0.0f : -0.0f) : normal(r);
            // amax = 127·2^k, so id = 2^-k and x·id = q + 0.5 exactly: ties of the rounding.
            else if (kind == "rounding ties") v[j] = j == 0 ? std::ldexp(b % 4 ? 127.0f : -127.0f, k) : std::ldexp(float(uniform_int(r, -128, 126)) + 0.5f, k);
            // Subnormal blocks (127/amax overflows to infinity), blocks of subnormals beside tiny
            // normals (127/amax huge), and subnormal f16 roundings.
            else if (kind == "subnormal") {
                switch (b % 3) {
                    case 0: v[j] = bitsf(uint32_t(r() % 0x7fffff + 1) | (r() % 2 ? 0x80000000u : 0)); break;
                    case 1: v[j] = j == 0 ? 0x1p-124f : bitsf(uint32_t(r() % 0x7fffff) | (r() % 2 ? 0x80000000u : 0)); break;
                    default: v[j] = spread(r, -30, -14); break;
                }
            }
            // Near float's largest values, and about f16's largest (65504, 65520 rounds to infinity).
            else if (kind == "huge") {
                if (b % 2) v[j] = (r() % 2 ? -1.0f : 1.0f) * uniform(r, 0.5f, 1.0f) * 3.4e38f;
                else v[j] = (r() % 2 ? -1.0f : 1.0f) * (j % 4 == 0 ? 65520.0f : j % 4 == 1 ? 65519.996f : j % 4 == 2 ? 65504.0f : uniform(r, 6e4f, 7e4f));
            }
            // Exactly halfway between neighbouring f16 values, normal and subnormal.
            else if (kind == "f16 ties") {
                int e = uniform_int(r, -24, 15);
                float m = float(2 * uniform_int(r, 1024, 2047) + 1);  // 12 bits, odd: a tie at f16's 11
                float t = e < -14 ? std::ldexp(float(2 * uniform_int(r, 0, 1023) + 1), -25) : std::ldexp(m, e - 11);
                v[j] = r() % 2 ? -t : t;
            } else throw Error("prep_data: " + kind);
        }
    }
}

void verify_prep_act(Runner& R, Rng& rng, bool full) {
    std::vector<size_t> ns = full ? std::vector<size_t>{2048, 2560, 4096, 12288} : std::vector<size_t>{128, 1024};
    const char* kinds[] = {"random", "zero blocks", "rounding ties", "subnormal", "huge", "f16 ties"};
    const uint32_t x_off = 7;
    for (size_t n : ns)
        for (const char* kind : kinds) {
            std::vector<float> x;
            prep_data(rng, kind, n, x);
            const PreparedAct want = prepared(x);
            std::vector<float> xin(x_off, 1.0f);
            xin.insert(xin.end(), x.begin(), x.end());
            for (uint32_t outputs : act_pipelines(n == ns[0] && kind == kinds[0])) {
                gpu::Buffer* bx = R.upload(words_of(xin));
                const ActBuffers a = poisoned_act(R, n);
                double ms = R.run("prep_act", {bx, a.table, a.q8, a.d8, a.f16}, {uint32_t(n), x_off, 0u}, uint32_t(n / 32), go::act_spec(outputs));
                R.check("prep_act", "1×" + std::to_string(n) + act_label(outputs) + " (" + kind + ")", ms, act_outs(a, want, n, outputs));
                R.release();
            }
        }
    // With SwiGLU on the way in (the forward pass's input of the down product): the CPU's swiglu of
    // a gate|up pair, then its quantization.
    for (size_t n : ns)
        for (const char* kind : {"gated random", "gated large gates"}) {
            std::vector<float> gu(2 * n), y(n);
            for (size_t i = 0; i < n; ++i) {
                gu[i] = std::string(kind) == "gated random" ? 3.0f * normal(rng) : uniform(rng, -200.0f, 200.0f);
                gu[n + i] = normal(rng);
            }
            ops::swiglu(gu.data(), gu.data() + n, y.data(), n);
            const PreparedAct want = prepared(y);
            gpu::Buffer *bx = R.upload(words_of(gu)), *bt = R.poisoned(go::table_floats(n)), *bq = R.poisoned(go::q8_words(n)),
                        *bd = R.poisoned(n / 16), *bh = R.poisoned(n / 2);
            double ms = R.run("prep_act", {bx, bt, bq, bd, bh}, {uint32_t(n), 0u, 1u}, uint32_t(n / 32));
            R.check("prep_act", "1×" + std::to_string(n) + " (" + kind + ")", ms,
                    {{"q8", Runner::read(*bq, go::q8_words(n)), want.q8, Word::i8x4}, {"f16", Runner::read(*bh, n / 2), want.f16, Word::f16x2}});
            R.release();
        }
}

// ---------------------------------------------------------------- products

// A Q8_0 activation as the forward pass makes one: the CPU quantizer on values whose blocks have
// scales of many sizes (so -128 never occurs).
std::vector<quant::BlockQ8_0> activation_q8(Rng& r, size_t n) {
    std::vector<float> x(n);
    for (size_t b = 0; b < n / 32; ++b) {
        float s = std::exp(2.0f * normal(r));
        for (size_t j = 0; j < 32; ++j) x[b * 32 + j] = normal(r) * s;
    }
    std::vector<quant::BlockQ8_0> q8(n / 32);
    quant::quantize_row_q8_0(x.data(), q8.data(), n);
    return q8;
}

// Random Q2_0 blocks: every code, scales of varying size, subnormal now and then.
std::vector<uint8_t> random_q2_0(Rng& rng, size_t blocks) {
    std::vector<uint8_t> w(blocks * sizeof(quant::BlockQ2_0));
    for (size_t b = 0; b < blocks; ++b) {
        uint8_t* p = &w[b * sizeof(quant::BlockQ2_0)];
        uint16_t h = f32_to_f16((r_sign(rng)) * 0.01f * std::exp(1.5f * normal(rng)));
        if (rng() % 64 == 0) h = uint16_t((1 + rng() % 1023) | (rng() % 2 ? 0x8000u : 0u));  // subnormal scales
        p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
        for (size_t k = 2; k < sizeof(quant::BlockQ2_0); ++k) p[k] = uint8_t(rng());
    }
    return w;
}

// The largest integer sums: every block's codes all 0 (-1) or all 3 (2), every quant 127 or -128.
void make_extreme(Rng& rng, std::vector<uint8_t>& w, std::vector<quant::BlockQ8_0>& q8) {
    for (size_t b = 0; b < w.size() / sizeof(quant::BlockQ2_0); ++b) {
        auto* blk = reinterpret_cast<quant::BlockQ2_0*>(&w[b * sizeof(quant::BlockQ2_0)]);
        std::memset(blk->qs, rng() % 2 ? 0xff : 0x00, sizeof blk->qs);
    }
    for (quant::BlockQ8_0& blk : q8)
        for (int8_t& q : blk.qs) q = rng() % 2 ? 127 : -128;
}

// The smallest products: every weight scale an f16 subnormal and every activation block's Q8_0
// scale one too (values near 2^-17), so that block products come down to about 2^-48 and the
// row's sums cancel further: where a card that flushes subnormals would differ if any step's value
// could be subnormal (the products run as plain f32 on such a card).
void make_tiny(Rng& rng, std::vector<uint8_t>& w, std::vector<quant::BlockQ8_0>& q8, size_t n) {
    for (size_t b = 0; b < w.size() / sizeof(quant::BlockQ2_0); ++b) {
        auto* blk = reinterpret_cast<quant::BlockQ2_0*>(&w[b * sizeof(quant::BlockQ2_0)]);
        blk->d = uint16_t((1 + rng() % 1023) | (rng() % 2 ? 0x8000u : 0u));
    }
    std::vector<float> x(n);
    for (float& v : x) v = std::ldexp(normal(rng), -17);
    quant::quantize_row_q8_0(x.data(), q8.data(), n);
}

void verify_q2_0(Runner& R, Rng& rng, bool full) {
    std::vector<std::pair<size_t, size_t>> shapes =
        full ? std::vector<std::pair<size_t, size_t>>{{64, 128}, {2048, 2048}, {4096, 4096}, {12288, 4096}, {4096, 12288}, {9728, 2560}, {2560, 9728}}
             : std::vector<std::pair<size_t, size_t>>{{8, 64}, {37, 640}, {100, 2048}, {37, 4480}, {5, 4288}};
    for (auto [rows, n] : shapes)
        for (const char* kind : {"random", "extreme", "tiny"}) {
            const size_t nb = n / 64;
            std::vector<uint8_t> w = random_q2_0(rng, rows * nb);
            std::vector<quant::BlockQ8_0> q8 = activation_q8(rng, n);
            if (std::strcmp(kind, "extreme") == 0) make_extreme(rng, w, q8);
            if (std::strcmp(kind, "tiny") == 0) make_tiny(rng, w, q8, n);
            std::vector<float> want(rows);
            auto* qw = reinterpret_cast<const quant::BlockQ2_0*>(w.data());
            for (size_t r = 0; r < rows; ++r) want[r] = quant::vec_dot_q2_0_ref(n, qw + r * nb, q8.data());
            go::PackedQ2_0 pk = go::pack_q2_0(w.data(), rows, n);
            std::vector<uint32_t> qi = quants_packed(q8, n), d8 = scales_and_sums(q8, n);
            // Each pipeline the forward pass may take: the default lanes a row, and those of a wide matrix.
            for (uint32_t lanes : {go::Q2_0_LANES, go::Q2_0_WIDE_LANES}) {
                gpu::Buffer *bs = R.upload(pk.scales), *bc = R.upload(pk.codes), *bq = R.upload(qi), *bd = R.upload(d8), *bo = R.poisoned(rows);
                double ms = R.run("q2_0_mat_vec", {bs, bc, bq, bd, bo}, {uint32_t(rows), uint32_t(nb)}, go::q2_0_groups(rows, lanes),
                                  go::q2_0_spec(lanes));
                const std::string how = lanes == go::Q2_0_LANES ? "" : ", " + std::to_string(lanes) + " lanes a row";
                R.check("q2_0_mat_vec", dims({rows, n}) + how + " (" + kind + ")", ms, {{"out", Runner::read(*bo, rows), words_of(want), Word::f32}});
                R.release();
            }
        }
}

// A swiglu kernel on one shape (2·n_ff rows of `blocks` blocks) with each pipeline act_pipelines(each)
// gives: its four inputs uploaded by `inputs`, prep_act's outputs of SwiGLU's output checked.
void check_swiglu(Runner& R, const char* kernel, size_t n_ff, size_t n, size_t blocks, bool each, const PreparedAct& want,
                  const std::function<std::array<gpu::Buffer*, 4>()>& inputs) {
    for (uint32_t outputs : act_pipelines(each)) {
        const std::array<gpu::Buffer*, 4> in = inputs();
        const ActBuffers a = poisoned_act(R, n_ff);
        double ms = R.run(kernel, {in[0], in[1], in[2], in[3], a.table, a.q8, a.d8, a.f16}, {uint32_t(2 * n_ff), uint32_t(blocks)},
                          go::swiglu_q1_0_groups(n_ff), go::act_spec(outputs));
        R.check(kernel, dims({2 * n_ff, n}) + act_label(outputs) + " (random)", ms, act_outs(a, want, n_ff, outputs));
        R.release();
    }
}

// swiglu_q1_0_q8: random Q1_0 gate and up matrices (scales of varying size, subnormal now and then)
// and a Q8_0 activation (-128 quants now and then); the CPU's products, ops::swiglu, then the
// quantization as prepared() makes it.
void verify_swiglu_q1_0(Runner& R, Rng& rng, bool full) {
    std::vector<std::pair<size_t, size_t>> shapes =
        full ? std::vector<std::pair<size_t, size_t>>{{6144, 2048}, {9728, 2560}, {12288, 4096}}
             : std::vector<std::pair<size_t, size_t>>{{32, 128}, {96, 640}, {224, 1024}};
    for (auto [n_ff, n] : shapes) {
        const size_t nb = n / 128, row_bytes = nb * sizeof(quant::BlockQ1_0);
        std::vector<uint8_t> gate(n_ff * row_bytes), up(n_ff * row_bytes);
        for (std::vector<uint8_t>* m : {&gate, &up})
            for (size_t b = 0; b < n_ff * nb; ++b) {
                uint8_t* p = &(*m)[b * sizeof(quant::BlockQ1_0)];
                uint16_t h = f32_to_f16(r_sign(rng) * 0.02f * std::exp(1.5f * normal(rng)));
                if (rng() % 64 == 0) h = uint16_t((1 + rng() % 1023) | (rng() % 2 ? 0x8000u : 0u));
                p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
                for (size_t k = 2; k < sizeof(quant::BlockQ1_0); ++k) p[k] = uint8_t(rng());
            }
        std::vector<quant::BlockQ8_0> q8 = activation_q8(rng, n);
        std::vector<float> g(n_ff), u(n_ff), h(n_ff);
        auto* gw = reinterpret_cast<const quant::BlockQ1_0*>(gate.data());
        auto* uw = reinterpret_cast<const quant::BlockQ1_0*>(up.data());
        for (size_t r = 0; r < n_ff; ++r)
            g[r] = quant::vec_dot_q1_0_ref(n, gw + r * nb, q8.data()), u[r] = quant::vec_dot_q1_0_ref(n, uw + r * nb, q8.data());
        ops::swiglu(g.data(), u.data(), h.data(), n_ff);
        const PreparedAct want = prepared(h);
        const std::vector<uint8_t> stacked = go::stack_gate_up(gate.data(), up.data(), n_ff, row_bytes);
        gpu::kernels::PackedQ1_0 pk = gpu::kernels::pack_q1_0(stacked, 2 * n_ff, n);
        std::span<const uint8_t> q8b(reinterpret_cast<const uint8_t*>(q8.data()), q8.size() * sizeof(quant::BlockQ8_0));
        gpu::kernels::PackedAct pa = gpu::kernels::pack_act(q8b, n);
        check_swiglu(R, "swiglu_q1_0_q8", n_ff, n, nb, n_ff == shapes[0].first, want, [&] {
            gpu::Buffer* bt = R.upload(words_of(pa.lane_products));
            return std::array<gpu::Buffer*, 4>{R.upload(pk.scales), R.upload(pk.bits), bt, bt};
        });
    }
}

// swiglu_q2_0_q8: random Q2_0 gate and up matrices and a Q8_0 activation; the CPU's products,
// ops::swiglu, then the quantization as prepared() makes it.
void verify_swiglu_q2_0(Runner& R, Rng& rng, bool full) {
    std::vector<std::pair<size_t, size_t>> shapes =
        full ? std::vector<std::pair<size_t, size_t>>{{6144, 2048}, {9728, 2560}, {12288, 4096}}
             : std::vector<std::pair<size_t, size_t>>{{32, 128}, {96, 640}, {64, 4480}};
    for (auto [n_ff, n] : shapes) {
        const size_t nb = n / 64, row_bytes = nb * sizeof(quant::BlockQ2_0);
        std::vector<uint8_t> gate = random_q2_0(rng, n_ff * nb), up = random_q2_0(rng, n_ff * nb);
        std::vector<quant::BlockQ8_0> q8 = activation_q8(rng, n);
        std::vector<float> g(n_ff), u(n_ff), h(n_ff);
        auto* gw = reinterpret_cast<const quant::BlockQ2_0*>(gate.data());
        auto* uw = reinterpret_cast<const quant::BlockQ2_0*>(up.data());
        for (size_t r = 0; r < n_ff; ++r)
            g[r] = quant::vec_dot_q2_0_ref(n, gw + r * nb, q8.data()), u[r] = quant::vec_dot_q2_0_ref(n, uw + r * nb, q8.data());
        ops::swiglu(g.data(), u.data(), h.data(), n_ff);
        const PreparedAct want = prepared(h);
        const std::vector<uint8_t> stacked = go::stack_gate_up(gate.data(), up.data(), n_ff, row_bytes);
        go::PackedQ2_0 pk = go::pack_q2_0(stacked.data(), 2 * n_ff, n);
        check_swiglu(R, "swiglu_q2_0_q8", n_ff, n, nb, n_ff == shapes[0].first, want, [&] {
            return std::array<gpu::Buffer*, 4>{R.upload(pk.scales), R.upload(pk.codes), R.upload(quants_packed(q8, n)),
                                               R.upload(scales_and_sums(q8, n))};
        });
    }
}

void verify_f16(Runner& R, Rng& rng, bool full) {
    std::vector<std::pair<size_t, size_t>> shapes =
        full ? std::vector<std::pair<size_t, size_t>>{{64, 128}, {2048, 2048}, {4096, 4096}, {12288, 4096}, {4096, 12288}, {9728, 2560}}
             : std::vector<std::pair<size_t, size_t>>{{8, 32}, {37, 128}, {100, 1024}};
    for (auto [rows, n] : shapes)
        for (const char* kind : {"random", "wide"}) {
            const bool wide = std::strcmp(kind, "wide") == 0;
            // wide: any finite f16 (subnormals to 65504): no sum of these overflows f32.
            auto value = [&](float scale) {
                if (!wide) return f32_to_f16(normal(rng) * scale);
                uint16_t h;
                do h = uint16_t(rng()); while ((h & 0x7c00) == 0x7c00);
                return h;
            };
            std::vector<uint16_t> w(rows * n), x(n);
            for (auto& v : w) v = value(0.05f);
            for (auto& v : x) v = value(1.0f);
            std::vector<float> want(rows);
            for (size_t r = 0; r < rows; ++r) want[r] = quant::vec_dot_f16_ref(n, w.data() + r * n, x.data());
            gpu::Buffer *bw = R.upload(pairs_of(w)), *bx = R.upload(pairs_of(x)), *bo = R.poisoned(rows);
            double ms = R.run("f16_mat_vec", {bw, bx, bo}, {uint32_t(rows), uint32_t(n)}, uint32_t((rows + 7) / 8));
            R.check("f16_mat_vec", dims({rows, n}) + " (" + kind + ")", ms, {{"out", Runner::read(*bo, rows), words_of(want), Word::f32}});
            R.release();
        }
}

// ---------------------------------------------------------------- head_norm_rope

void verify_head_norm_rope(Runner& R, Rng& rng, bool full) {
    const size_t NH = full ? 32 : 4, NKV = full ? 8 : 2;
    const float eps = 1e-6f;
    // Head sizes other than 128 give an invocation (64 a workgroup) no element, one, or four.
    struct C { int64_t pos; const char* kind; size_t D = 128; };
    for (C c : {C{0, "random"}, C{1, "random"}, C{1000, "random"}, C{40000, "random"}, C{1000, "spread exponents"},
                C{7, "mean on a boundary"}, C{5, "random", 32}, C{1000, "random", 256}}) {
        const size_t D = c.D, half = D / 2;
        const uint32_t qn = 3, kn = uint32_t(3 + D), layer = uint32_t(3 * half);  // offsets that are not zero
        ops::Rope rope(int(D), 1e6f);
        const size_t n_ctx = size_t(c.pos) + 2, cache_words = layer + NKV * n_ctx * half;
        std::vector<float> qkv((NH + 2 * NKV) * D), w(kn + D);
        for (size_t h = 0; h < NH + 2 * NKV; ++h) {
            float s = std::exp(normal(rng));
            if (std::strcmp(c.kind, "mean on a boundary") == 0) {
                const std::vector<float> row = boundary_row(rng, D, h % 2 == 1, eps);
                std::copy(row.begin(), row.end(), qkv.begin() + long(h * D));
                continue;
            }
            for (size_t i = 0; i < D; ++i)
                qkv[h * D + i] = std::strcmp(c.kind, "random") ? spread(rng, -30, 12) : normal(rng) * s;
        }
        for (float& v : w) v = 1.0f + 0.1f * normal(rng);
        std::vector<float> cs(D);
        rope.cache(c.pos, cs.data());
        std::vector<uint32_t> state(go::STATE_ROPE + D, 0);
        state[go::STATE_POS] = uint32_t(c.pos);
        state[go::STATE_NKV] = uint32_t(c.pos + 1);
        std::memcpy(&state[go::STATE_ROPE], cs.data(), D * 4);
        // The CPU: each head normed, rotated; keys and values rounded to f16 into the cache.
        std::vector<float> q(NH * D), tmp(D);
        for (size_t h = 0; h < NH; ++h) {
            ops::rms_norm_mul(&qkv[h * D], &w[qn], &q[h * D], D, eps);
            rope.apply(&q[h * D], cs.data());
        }
        std::vector<uint32_t> kc(cache_words, POISON), vc(cache_words, POISON);
        std::vector<uint16_t> h16(D);
        for (size_t kh = 0; kh < NKV; ++kh) {
            ops::rms_norm_mul(&qkv[(NH + kh) * D], &w[kn], tmp.data(), D, eps);
            rope.apply(tmp.data(), cs.data());
            const size_t at = layer + (kh * n_ctx + size_t(c.pos)) * half;
            ops::round_f16(tmp.data(), h16.data(), D);
            std::vector<uint32_t> kw = pairs_of(h16);
            std::copy(kw.begin(), kw.end(), kc.begin() + long(at));
            ops::round_f16(&qkv[(NH + NKV + kh) * D], h16.data(), D);
            std::vector<uint32_t> vw = pairs_of(h16);
            std::copy(vw.begin(), vw.end(), vc.begin() + long(at));
        }
        gpu::Buffer *bqkv = R.upload(words_of(qkv)), *bw = R.upload(words_of(w)), *bst = R.upload(state), *bq = R.poisoned(NH * D),
                    *bk = R.poisoned(cache_words), *bv = R.poisoned(cache_words);
        // A head size the forward pass compiles in runs with that pipeline.
        const std::vector<gpu::SpecValue> spec = go::head_spec(uint32_t(D));
        double ms = R.run("head_norm_rope", {bqkv, bw, bst, bq, bk, bv},
                          {uint32_t(D), uint32_t(NH), uint32_t(NKV), qn, kn, layer, uint32_t(n_ctx), fbits(eps)}, uint32_t(NH + NKV), spec);
        // The whole cache: the token's words, and no word written elsewhere.
        R.check("head_norm_rope", dims({NH + NKV, D}) + (spec.empty() ? "" : ", D compiled in") + " position " + std::to_string(c.pos) + " (" + c.kind + ")", ms,
                {{"q", Runner::read(*bq, NH * D), words_of(q), Word::f32},
                 {"k_cache", Runner::read(*bk, cache_words), kc, Word::f16x2},
                 {"v_cache", Runner::read(*bv, cache_words), vc, Word::f16x2}});
        R.release();
    }
}

// ---------------------------------------------------------------- attention

// q8: attention_q8, whose output is checked as the output product's input (PreparedAct).
void verify_attention(Runner& R, Rng& rng, bool full, bool q8) {
    const size_t NH = full ? 32 : 4, NKV = full ? 8 : 2, group = NH / NKV;
    // Head sizes past 128 walk two outputs an invocation; the walk's chunks hold 8192 halves (64
    // positions of 128, 256 of 32).
    struct C { size_t n_kv; const char* kind; size_t D = 128; };
    std::vector<C> cases = {{1, "random"}, {2, "random"}, {7, "random"}, {64, "random"}, {300, "random"},
                            {300, "equal scores"}, {300, "rise and fall"}, {64, "large scores"}, {300, "large scores"},
                            {300, "cancelling"}, {7, "negative zero"}, {70, "random", 256}, {600, "rise and fall", 32},
                            {64, "small values"}, {300, "small values"}, {64, "overflowing values"}};
    if (full) cases.insert(cases.end(), {{512, "random"}, {4096, "random"}, {4096, "equal scores"}, {4096, "rise and fall"}, {4096, "large scores"}});
    for (const C& c : cases) {
        const size_t D = c.D, half = D / 2;
        const uint32_t layer = uint32_t(5 * half);
        const float scale = 1.0f / sqrtf(float(D));
        const size_t n_kv = c.n_kv, n_ctx = n_kv + 3, cache_halves = 2 * layer + NKV * n_ctx * D;
        const std::string kind = c.kind;
        // Random keys and queries; the values alone differ.
        const bool random_scores = kind == "random" || kind == "small values" || kind == "overflowing values";
        std::vector<uint16_t> k(cache_halves, 0), v(cache_halves, 0);
        std::vector<float> q(NH * D);
        for (size_t kvh = 0; kvh < NKV; ++kvh) {
            // u: the direction of every key in the structured cases; a score is c_i·|u|²·α·scale.
            std::vector<float> u(D);
            for (float& x : u) x = normal(rng);
            const float alpha = kind == "large scores" ? 4.0f : 1.0f;
            for (size_t i = 0; i < n_kv; ++i) {
                float ci = 0;
                if (kind == "rise and fall")  // maxima late, falls between them
                    ci = float(i) / float(n_kv) * (1.0f + std::sin(float(i) * 0.05f)) - 0.5f;
                else if (kind == "large scores") ci = uniform(rng, -1.0f, 1.0f);
                // The second position a far larger maximum with value -0, the rest far below it with
                // value -0: the output -0 after the first's -2^-24 is rescaled to -0 (the walk's
                // last run, past the chunk's end, must leave it so).
                else if (kind == "negative zero") ci = i == 0 ? -1.0f : i == 1 ? 2.0f : 0.0f;
                for (size_t d = 0; d < D; ++d) {
                    const size_t at = 2 * layer + (kvh * n_ctx + i) * D + d;
                    float kv = random_scores ? normal(rng) : kind == "equal scores" ? u[d] : ci * u[d] * alpha;
                    k[at] = f32_to_f16(kv);
                    // Each dot lane's second term cancels its first exactly (q is one value per
                    // head): the scores are exact zeros made from nonzero terms.
                    if (kind == "cancelling") k[at] = d % 64 < 32 ? f32_to_f16(normal(rng)) : uint16_t(k[at - 32] ^ 0x8000u);
                    v[at] = f32_to_f16(normal(rng));
                    if (kind == "negative zero") v[at] = i == 0 ? 0x8001 : 0x8000;
                    // Values about f16's smallest normal, 2^-14: the walk's sums cross into and
                    // out of the subnormals; values near its largest: the sums overflow to inf.
                    if (kind == "small values") v[at] = uint16_t((r_sign(rng) < 0 ? 0x8000u : 0u) | (rng() % 0xc00u));
                    if (kind == "overflowing values") v[at] = f32_to_f16(r_sign(rng) * uniform(rng, 30000.0f, 65504.0f));
                }
            }
            for (size_t h = kvh * group; h < (kvh + 1) * group; ++h)
                for (size_t d = 0; d < D; ++d) q[h * D + d] = random_scores ? normal(rng) : u[d] * alpha * (1.0f + 0.01f * normal(rng));
            if (kind == "cancelling")
                for (size_t h = kvh * group; h < (kvh + 1) * group; ++h) std::fill_n(&q[h * D], D, f16_to_f32(f32_to_f16(normal(rng))));
        }
        // The CPU: attend_f16 per query head over its kv head's rows.
        std::vector<float> out(NH * D);
        std::vector<uint8_t> scratch(ops::attend_scratch_bytes(D));
        for (size_t h = 0; h < NH; ++h) {
            const size_t base = 2 * layer + (h / group) * n_ctx * D;
            ops::attend_f16(&q[h * D], &k[base], &v[base], n_kv, D, scale, &out[h * D], scratch.data());
        }
        std::vector<uint32_t> state(go::STATE_ROPE + D, 0);
        state[go::STATE_POS] = uint32_t(n_kv - 1);
        state[go::STATE_NKV] = uint32_t(n_kv);
        const std::vector<uint32_t> push{uint32_t(D), uint32_t(NH), uint32_t(group), layer, uint32_t(n_ctx), fbits(scale)};
        // A head size the forward pass compiles in runs with that pipeline; attention_q8's first
        // case and the first of a head size not compiled in with each output alone as well.
        const std::vector<gpu::SpecValue> spec = go::head_spec(uint32_t(D));
        const std::string shape = dims({NH, D}) + (spec.empty() ? "" : ", D compiled in") + " over " + std::to_string(n_kv);
        for (uint32_t outputs : act_pipelines(q8 && kind == "random" && (n_kv == 1 || D != 128))) {
            gpu::Buffer *bq = R.upload(words_of(q)), *bk = R.upload(pairs_of(k)), *bv = R.upload(pairs_of(v)), *bst = R.upload(state),
                        *bsc = R.poisoned(3 * NH * n_ctx);
            if (!q8) {
                gpu::Buffer* bo = R.poisoned(NH * D);
                double ms = R.run("attention", {bq, bk, bv, bst, bsc, bo}, push, uint32_t(NH), spec);
                R.check("attention", shape + " (" + kind + ")", ms, {{"out", Runner::read(*bo, NH * D), words_of(out), Word::f32}});
            } else {
                const size_t n = NH * D;
                const PreparedAct want = prepared(out);
                const ActBuffers a = poisoned_act(R, n);
                double ms = R.run("attention_q8", {bq, bk, bv, bst, bsc, a.table, a.q8, a.d8, a.f16}, push, uint32_t(NH), go::act_spec(outputs, spec));
                R.check("attention_q8", shape + act_label(outputs) + " (" + kind + ")", ms, act_outs(a, want, n, outputs));
            }
            R.release();
        }
    }
}

// ---------------------------------------------------------------- swiglu

void verify_swiglu(Runner& R, Rng& rng, bool full) {
    std::vector<size_t> ns = full ? std::vector<size_t>{6144, 9728, 12288} : std::vector<size_t>{1024};
    for (size_t n : ns)
        for (const char* kind : {"random", "large gates", "subnormal gates"}) {
            std::vector<float> gu(2 * n);
            const std::string k = kind;
            // v_expf's branches: |x·log2(e)| past 126 (scaled) and past 192 (saturated), and their edges.
            const float edges[] = {87.0f, 87.5f, 88.0f, 88.7f, 89.0f, 133.0f, 133.1f, 134.0f, 200.0f, 103.97f, 104.0f};
            for (size_t i = 0; i < n; ++i) {
                float& g = gu[i];
                if (k == "random") g = 3.0f * normal(rng);
                else if (k == "large gates") g = i % 16 < 11 ? (r_sign(rng)) * edges[i % 16] : uniform(rng, -200.0f, 200.0f);
                else g = i % 7 == 0 ? (i % 2 ? -0.0f : 0.0f) : i % 7 == 1 ? r_sign(rng) * 0x1p-126f
                                                                           : bitsf(uint32_t(rng() % 0x7fffff + 1) | (rng() % 2 ? 0x80000000u : 0));
                gu[n + i] = normal(rng);
            }
            std::vector<float> y(n);
            ops::swiglu(gu.data(), gu.data() + n, y.data(), n);
            gpu::Buffer *bg = R.upload(words_of(gu)), *bo = R.poisoned(n);
            double ms = R.run("swiglu", {bg, bo}, {uint32_t(n)}, uint32_t((n + 255) / 256));
            R.check("swiglu", "1×" + std::to_string(n) + " (" + kind + ")", ms, {{"out", Runner::read(*bo, n), words_of(y), Word::f32}});
            R.release();
        }
}

// ---------------------------------------------------------------- expf

// y[i] = f(x[i]) on up to 16 threads (the exhaustive runs' 2^32 inputs).
template <class F>
void on_threads(const std::vector<uint32_t>& x, std::vector<uint32_t>& y, F f) {
    y.resize(x.size());
    const size_t T = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (size_t t = 0; t < T; ++t)
        th.emplace_back([&, t] {
            for (size_t i = x.size() * t / T; i < x.size() * (t + 1) / T; ++i) y[i] = f(x[i]);
        });
    for (auto& t : th) t.join();
}

// The host's expf.
void host_expf(const std::vector<uint32_t>& x, std::vector<uint32_t>& y) {
    on_threads(x, y, [](uint32_t w) {
        volatile float in = bitsf(w);
        return fbits(expf(in));
    });
}

// A probe kernel (one float in, one word out) on a batch of floats against the CPU's words.
using Reference = void (*)(const std::vector<uint32_t>& x, std::vector<uint32_t>& want);
void probe_batch(Runner& R, const char* kernel, Reference ref, const std::vector<uint32_t>& x, const std::string& shape) {
    std::vector<uint32_t> want;
    ref(x, want);
    gpu::Buffer *bx = R.upload(x), *bo = R.poisoned(x.size());
    double ms = R.run(kernel, {bx, bo}, {uint32_t(x.size())}, uint32_t((x.size() + 255) / 256));
    R.check(kernel, shape, ms, {{kernel, Runner::read(*bo, x.size()), want, Word::f32}});
    R.release();
}

// Every one of the 2^32 floats through a probe, in batches of 2^24, summed up in one line.
void every_float(Runner& R, const char* kernel, Reference ref) {
    const size_t batch = size_t(1) << 24;
    std::vector<uint32_t> x(batch);
    std::vector<std::string> keep = std::move(R.lines);
    R.lines.clear();
    for (uint64_t base = 0; base < (uint64_t(1) << 32); base += batch) {
        for (size_t i = 0; i < batch; ++i) x[i] = uint32_t(base + i);
        probe_batch(R, kernel, ref, x, "every float from " + show(uint32_t(base), Word::f32));
    }
    double ms = 0;
    for (const std::string& l : R.lines) {
        const char* comma = std::strrchr(l.c_str(), ',');
        ms += comma ? std::atof(comma + 1) : 0;
    }
    R.lines = std::move(keep);
    char line[160];
    std::snprintf(line, sizeof line, "%s every float (2^32): %zu of %zu words bit-exact, %.0f ms", kernel, size_t(1) << 32,
                  size_t(1) << 32, ms);
    R.lines.push_back(line);
}

void verify_expf(Runner& R, Rng& rng, bool full, bool exhaustive) {
    std::vector<uint32_t> x;
    // The special values and the boundaries of glibc's expf, with their neighbours.
    for (uint32_t b : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u,
                       0xff812345u, 0x4202422fu, fbits(0x1.62e42ep6f), fbits(-0x1.9fe368p6f), fbits(-0x1.5d589ep6f), fbits(-0x1.9d1d9ep6f)})
        for (int d = -4; d <= 4; ++d) x.push_back(b + uint32_t(d));
    // Every exponent alike: random bits.
    const size_t sample = full ? size_t(1) << 24 : size_t(1) << 21;
    while (x.size() < sample) x.push_back(uint32_t(rng()));
    probe_batch(R, "expf", host_expf, x, dims({x.size()}) + " (specials, boundaries, every exponent)");
    if (full && exhaustive) every_float(R, "expf", host_expf);
}

// ---------------------------------------------------------------- division and square root

void host_div_sqrt(const std::vector<uint32_t>& x, std::vector<uint32_t>& y) {
    y.resize(x.size());
    for (size_t i = 0; i + 1 < x.size(); i += 2) {
        y[i] = fbits(bitsf(x[i]) / bitsf(x[i + 1]));
        y[i + 1] = fbits(std::sqrt(bitsf(x[i + 1])));
    }
}

// Pairs (a, b) of positive floats: quotients next to the midpoint between two floats (a = b·m
// rounded, m a midpoint, and a's neighbours), exact quotients, divisors that are squares of
// midpoints (roots next to a midpoint) and of floats (exact roots), a zero numerator, an infinite
// divisor, an overflowing quotient, and random normal floats whose quotient is at least 2^-125.
void verify_div_sqrt(Runner& R, Rng& rng, bool full) {
    std::vector<uint32_t> x;
    auto normal = [&](int lo, int hi) {  // a random float with biased exponent in [lo, hi]
        return uint32_t(lo + int(rng() % uint32_t(hi - lo + 1))) << 23 | (uint32_t(rng()) & 0x7fffffu);
    };
    auto midpoint = [&](uint32_t f) { return (double(bitsf(f)) + double(bitsf(f + 1))) / 2; };
    for (int i = 0; i < 4096; ++i) {
        const uint32_t b = normal(100, 150), q = normal(100, 150);
        const uint32_t a = fbits(float(midpoint(q) * double(bitsf(b))));
        for (int d = -2; d <= 2; ++d) x.insert(x.end(), {a + uint32_t(d), b});
        x.insert(x.end(), {fbits(bitsf(q & 0xfffff000u) * bitsf(b & 0xfff00000u)), b & 0xfff00000u});  // exact
        const uint32_t r = normal(90, 160);
        const uint32_t s = fbits(float(midpoint(r) * midpoint(r)));
        for (int d = -1; d <= 1; ++d) x.insert(x.end(), {q, s + uint32_t(d)});
        x.insert(x.end(), {q, fbits(bitsf(r & 0xfffff000u) * bitsf(r & 0xfffff000u))});
    }
    x.insert(x.end(), {0u, fbits(3.0f), fbits(1.0f), 0x7f800000u, 0x7f7fffffu, fbits(0.5f), 0x01800000u, fbits(2.0f)});
    // Exponents 66 to 190 keep every quotient at least 2^-125, so that the guarded build (which
    // flags quotients below twice the smallest normal) runs random pairs unflagged.
    const size_t sample = full ? size_t(1) << 22 : size_t(1) << 18;
    while (x.size() < sample) x.insert(x.end(), {normal(66, 190), normal(66, 190)});
    probe_batch(R, "div_sqrt", host_div_sqrt, x, dims({x.size()}) + " (quotients and roots next to midpoints, exact ones, random)");
}

// ---------------------------------------------------------------- f16 rounding

void host_f16_round(const std::vector<uint32_t>& x, std::vector<uint32_t>& y) {
    on_threads(x, y, [](uint32_t w) { return fbits(f16_to_f32(f32_to_f16(bitsf(w)))); });
}

void verify_f16_round(Runner& R, Rng& rng, bool full, bool exhaustive) {
    std::vector<uint32_t> x;
    // Every f16 value's f32 and the midpoints between neighbours (the ties), each with its f32
    // neighbours; the ends of the subnormal, normal and overflow ranges; the specials.
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const uint32_t v = fbits(f16_to_f32(uint16_t(h)));
        x.push_back(v);
        if ((h & 0x7c00u) == 0x7c00u) continue;
        const uint32_t mid = fbits((f16_to_f32(uint16_t(h)) + f16_to_f32(uint16_t(h + 1))) / 2);
        if ((h & 0x7fffu) != 0x7bffu) x.insert(x.end(), {mid - 1, mid, mid + 1});
    }
    for (uint32_t b : {0x33000000u, 0x33800000u, 0x38800000u, 0x477fe000u, 0x477ff000u, 0x7f800000u, 0x7fc00000u,
                       0x7f800001u, 0x7fa01234u, 0x00000001u, 0x00800000u})
        for (int d = -3; d <= 3; ++d) x.insert(x.end(), {b + uint32_t(d), (b + uint32_t(d)) ^ 0x80000000u});
    const size_t sample = full ? size_t(1) << 24 : size_t(1) << 20;
    while (x.size() < sample) x.push_back(uint32_t(rng()));
    probe_batch(R, "f16_round", host_f16_round, x, dims({x.size()}) + " (every f16, ties, boundaries, every exponent)");
    if (full && exhaustive) every_float(R, "f16_round", host_f16_round);
}

// ---------------------------------------------------------------- embeddings

// token_embd of `type` (Q1_0, Q2_0 or F16), rows × n, its f16 values (the blocks' scales, or the
// F16 values) by kind: "random" (many sizes, both signs), "subnormal scales" (every scale a
// subnormal f16, zeros of both signs among them), "special scales" (±0, the largest f16, ±infinity,
// quiet and signalling NaN), "every f16" (F16: rows of the 65536 values in order); the bits
// and codes random, so every code occurs. The row of each token is checked against quant's
// to_float: the first, the last and a random one (pushed, and the last one read from the state
// buffer), and a token past the rows, which must write nothing.
void verify_embed(Runner& R, Rng& rng, bool full, quant::Type type) {
    const quant::TypeTraits& tt = quant::traits(type);
    const std::string kernel = std::string("embed_") + tt.name;
    const bool f16 = type == quant::Type::F16;
    std::vector<size_t> ns = full ? std::vector<size_t>{1024, 2048, 2560, 4096} : std::vector<size_t>{128, 640};
    std::vector<const char*> kinds{"random", "subnormal scales", "special scales"};
    if (f16) kinds = {"random", "every f16"};
    const uint16_t specials[] = {0x0000, 0x8000, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0x7d55};
    for (size_t row_n : ns)
        for (const char* kind : kinds) {
            const std::string k = kind;
            size_t n = row_n;
            if (k == "every f16" && n != ns[0]) continue;
            if (k == "every f16") n = 65536;  // one row holds them all
            const size_t rows = k == "every f16" ? 2 : full ? 300 : 7;
            const size_t row_bytes = quant::row_bytes(type, n);
            std::vector<uint8_t> w(rows * row_bytes);
            for (auto& v : w) v = uint8_t(rng());
            auto scale = [&](size_t at) {
                uint16_t h;
                if (k == "random" || f16) h = f32_to_f16(r_sign(rng) * (f16 ? 0.05f : 0.01f) * std::exp(1.5f * normal(rng)));
                else if (k == "subnormal scales") h = uint16_t((rng() % 1024) | (rng() % 2 ? 0x8000u : 0u));
                else h = specials[rng() % std::size(specials)];
                if (k == "every f16") h = uint16_t(at);
                return h;
            };
            if (f16)
                for (size_t i = 0; i < rows * n; ++i) {
                    const uint16_t h = scale(i);
                    std::memcpy(&w[i * 2], &h, 2);
                }
            else
                for (size_t b = 0; b < w.size() / tt.block_bytes; ++b) {
                    const uint16_t h = scale(b);
                    std::memcpy(&w[b * tt.block_bytes], &h, 2);
                }
            // The product kernel's layout, as the forward pass uploads the matrix.
            std::vector<uint32_t> a, b;
            if (type == quant::Type::Q1_0) {
                gpu::kernels::PackedQ1_0 pk = gpu::kernels::pack_q1_0(w, rows, n);
                a = std::move(pk.scales), b = std::move(pk.bits);
            } else if (type == quant::Type::Q2_0) {
                go::PackedQ2_0 pk = go::pack_q2_0(w.data(), rows, n);
                a = std::move(pk.scales), b = std::move(pk.codes);
            } else {
                a.resize(w.size() / 4);
                std::memcpy(a.data(), w.data(), w.size());
            }
            const uint32_t random_token = uint32_t(rng() % rows);
            struct Case { uint32_t token; bool from_state; };
            std::vector<Case> cases{{0, false}, {uint32_t(rows - 1), true}, {random_token, false}, {uint32_t(rows), false}};
            for (const Case& c : cases) {
                std::vector<uint32_t> want(n, POISON);
                if (c.token < rows) {
                    std::vector<float> y(n);
                    tt.to_float(w.data() + c.token * row_bytes, y.data(), n);
                    want = words_of(y);
                }
                std::vector<uint32_t> state(go::STATE_ROPE, 0);
                state[go::STATE_TOKEN] = c.from_state ? c.token : 0xdeadu;
                gpu::Buffer *ba = R.upload(a), *bb = b.empty() ? ba : R.upload(b), *bs = R.upload(state), *bo = R.poisoned(n);
                const uint32_t pushed = c.from_state ? 0xdeadu : c.token;
                double ms = R.run(kernel, {ba, bb, bs, bo}, {uint32_t(n), uint32_t(rows), pushed, c.from_state ? 1u : 0u},
                                  uint32_t((n + 255) / 256));
                const std::string which = c.token >= rows ? " past " + std::to_string(rows) + " rows"
                                          : c.from_state ? " from the state" : "";
                R.check(kernel, dims({rows, n}) + " token " + std::to_string(c.token) + which + " (" + kind + ")", ms,
                        {{"out", Runner::read(*bo, n), want, Word::f32}});
                R.release();
            }
        }
}

}  // namespace

size_t workgroup_bytes(const std::vector<uint32_t>& m) {
    std::map<uint32_t, uint64_t> size;  // type id -> bytes
    std::map<uint32_t, uint32_t> constant, pointee;
    size_t total = 0;
    for (size_t i = 5; i < m.size();) {
        const uint32_t op = m[i] & 0xffff, len = m[i] >> 16;
        if (len == 0 || i + len > m.size()) break;
        const uint32_t* a = &m[i + 1];
        switch (op) {
            case gpu::spirv::OpTypeInt:
            case gpu::spirv::OpTypeFloat: size[a[0]] = a[1] / 8; break;
            case gpu::spirv::OpTypeVector: size[a[0]] = size[a[1]] * a[2]; break;
            case gpu::spirv::OpTypeArray: size[a[0]] = size[a[1]] * constant[a[2]]; break;
            case gpu::spirv::OpConstant: constant[a[1]] = a[2]; break;
            case gpu::spirv::OpTypePointer: pointee[a[0]] = a[2]; break;
            case gpu::spirv::OpVariable:
                if (a[2] == gpu::spirv::StorageWorkgroup) total += size[pointee[a[0]]];
                break;
            default: break;
        }
        i += len;
    }
    return total;
}

std::vector<std::pair<std::string, std::vector<uint32_t>>> op_modules() {
    std::vector<std::pair<std::string, std::vector<uint32_t>>> out;
    namespace sh = gpu::shader;
    const uint32_t keep = sh::DENORM64 | sh::SIGNED_ZERO32 | sh::SIGNED_ZERO64;
    const std::pair<const char*, uint32_t> modes[] = {{"", keep | sh::DENORM32}, {"_soft", keep | sh::SOFT_F32}, {"_guarded", keep | sh::GUARD_F32}};
    for (const go::OpKernel& k : go::op_kernels())
        for (const auto& [suffix, m] : modes)
            for (sh::Fma f : {sh::Fma::exact, sh::Fma::native}) {
                go::Build b;
                b.fma = f;
                b.float_modes = m;
                out.push_back({std::string(k.name) + suffix + (f == sh::Fma::native ? "_fma" : "") + ".spv", k.build(b)});
            }
    // The Q2_0 kernels with the card's packed 8-bit dot product (one build each, without the guard).
    go::Build dot;
    dot.int_dot = true;
    dot.float_modes = keep | sh::DENORM32;
    for (const char* k : go::INT_DOT_KERNELS) out.push_back({std::string(k) + "_int_dot.spv", go::op_kernel(k).build(dot)});
    // The norms with the card's subgroup arithmetic (their workgroup sums).
    go::Build sub;
    sub.subgroup = true;
    sub.float_modes = keep | sh::DENORM32;
    for (const char* k : go::SUBGROUP_KERNELS) out.push_back({std::string(k) + "_subgroup.spv", go::op_kernel(k).build(sub)});
    return out;
}

namespace {
// Every kernel of one build; failures collected in R.
void verify_build(Runner& R, const VerifyOpsOptions& opt, bool exhaustive) {
    Rng rng(20261201);
    auto want = [&](const char* k) { return opt.only.empty() || opt.only == k; };
    if (want("rms_norm")) verify_rms_norm(R, rng, opt.full);
    if (want("rms_norm_q8")) verify_rms_norm_q8(R, rng, opt.full);
    if (want("sum_squares")) verify_sum_squares(R, rng, opt.full);
    if (want("prep_act")) verify_prep_act(R, rng, opt.full);
    if (want("swiglu_q1_0_q8")) verify_swiglu_q1_0(R, rng, opt.full);
    if (want("q2_0_mat_vec")) verify_q2_0(R, rng, opt.full);
    if (want("swiglu_q2_0_q8")) verify_swiglu_q2_0(R, rng, opt.full);
    if (want("f16_mat_vec")) verify_f16(R, rng, opt.full);
    if (want("head_norm_rope")) verify_head_norm_rope(R, rng, opt.full);
    if (want("attention")) verify_attention(R, rng, opt.full, false);
    if (want("attention_q8")) verify_attention(R, rng, opt.full, true);
    if (want("swiglu")) verify_swiglu(R, rng, opt.full);
    if (want("expf")) verify_expf(R, rng, opt.full, exhaustive);
    if (want("f16_round")) verify_f16_round(R, rng, opt.full, exhaustive);
    if (want("div_sqrt")) verify_div_sqrt(R, rng, opt.full);
    if (want("embed_q1_0")) verify_embed(R, rng, opt.full, quant::Type::Q1_0);
    if (want("embed_q2_0")) verify_embed(R, rng, opt.full, quant::Type::Q2_0);
    if (want("embed_f16")) verify_embed(R, rng, opt.full, quant::Type::F16);
}
}  // namespace

std::vector<std::string> verify_ops(gpu::Gpu& gpu, const go::Build& build, const VerifyOpsOptions& opt) {
    if (!gpu.has_f64()) throw Error("the op kernels need shaderFloat64, which the card lacks", 2);
    if (!opt.only.empty()) go::op_kernel(opt.only);  // a name that is no kernel is an error
    Runner R(gpu, build, opt);
    verify_build(R, opt, opt.exhaustive);
    std::vector<std::string> lines = std::move(R.lines), failures = std::move(R.failures);
    // A card that needs soft f32 runs the guarded build first: each of its runs must give the CPU's
    // bits or raise its flag (every float once is for the exact build; the guarded one sees the
    // special values and the boundaries).
    const go::Build fast = go::guarded(build);
    if (go::has_guard(fast) && failures.empty()) {
        Runner G(gpu, fast, opt);
        verify_build(G, opt, false);
        lines.insert(lines.end(), G.lines.begin(), G.lines.end());
        failures.insert(failures.end(), G.failures.begin(), G.failures.end());
        lines.push_back("guarded f32: " + std::to_string(G.flagged_checks) + " runs flagged a subnormal (the exact build runs instead), " +
                        std::to_string(G.random_unflagged) + " runs on random data gave the CPU's bits unflagged");
    }
    if (!failures.empty()) {
        std::string why = failures[0];
        for (size_t i = 1; i < failures.size() && i < 6; ++i) why += "; " + failures[i];
        if (failures.size() > 6) why += "; and " + std::to_string(failures.size() - 6) + " more";
        throw Error(why, 2);
    }
    return lines;
}

std::vector<std::string> norm_test_kinds() { return {std::begin(NORM_KINDS), std::end(NORM_KINDS)}; }

void norm_test_row(uint64_t seed, const std::string& kind, size_t n, std::vector<float>& x, std::vector<float>& add) {
    Rng r(seed);
    norm_data(r, kind, n, x, add);
}

}  // namespace bankml::model
