// `bankml bench gpu`: gpu/bench.h's measurements, then every op kernel's card time. The op kernels
// are timed through their oracle (model::verify_ops with time_reps): each dispatch runs once and
// is checked bit for bit against the CPU, then runs again in a sequence of its own (repeated, each
// after a barrier, the card warmed up first), timed by the queue's timestamps. Without --quick the oracle's full shapes, of which the table keeps the 8B
// model's (n_embd 4096, n_ff 12288, 32 query and 8 kv heads of 128).
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>

#include "cmd/bench.h"
#include "core/json.h"
#include "gpu/bench.h"
#include "gpu/compute.h"
#include "gpu/kernels.h"
#include "gpu/op_kernels.h"
#include "model/verify_gpu.h"

namespace bankml::cmd {

namespace {

// A check's shape without its data kind and its position or token ("40×128", "32×128 over 512").
std::string dims_of(const std::string& shape) {
    size_t end = shape.size();
    for (const char* cut : {" position ", " token ", " ("}) end = std::min(end, shape.find(cut));
    return shape.substr(0, end);
}
std::string kind_of(const std::string& shape) {
    const size_t open = shape.rfind(" (");
    return open == std::string::npos ? "" : shape.substr(open + 2, shape.size() - open - 3);
}
std::string base_name(const std::string& name) { return name.substr(0, name.find(' ')); }

// The probes: one batch of floats each, no model shape.
bool probe(const std::string& name) {
    const std::string b = base_name(name);
    return b == "expf" || b == "f16_round";
}

// The 8B model's shapes among the oracle's full ones: its rows (4096) and the feed-forward's
// (12288), its products (4096×4096, 12288×4096, 4096×12288, the stacked gate and up 24576×4096),
// its 40 heads of 128 (32 query, 8 kv), attention's 32 query heads of 128 at any cache length, and
// rows of 4096 of token_embd.
bool eight_b(const std::string& name, const std::string& shape) {
    static const std::set<std::string> dims = {"1×4096", "1×12288", "4096×4096", "12288×4096", "4096×12288",
                                               "24576×4096", "40×128", "300×4096"};
    const std::string d = dims_of(shape);
    return probe(name) || dims.count(d) || d.rfind("32×128 over ", 0) == 0;
}

// The checks the table shows (and the oracle times): random data (a probe's one batch), and
// without --quick the 8B model's shapes.
bool shown(const std::string& name, const std::string& shape, bool quick) {
    return (probe(name) || kind_of(shape).find("random") != std::string::npos) && (quick || eight_b(name, shape));
}

// Pads s to `width` characters (UTF-8: "×" is one), at least one space.
std::string pad(const std::string& s, size_t width) {
    size_t chars = 0;
    for (unsigned char ch : s) chars += (ch & 0xC0) != 0x80;
    return s + std::string(chars < width ? width - chars : 1, ' ');
}

void op_kernel_times(gpu::Gpu& g, const gpu::BenchOptions& o, json::Value& doc) {
    const bool native = gpu::kernels::probe_native_fma(g).native;
    const gpu::ops::Build build = gpu::ops::build_for(g, native);
    const bool guard = gpu::ops::has_guard(gpu::ops::guarded(build));
    std::fprintf(o.text, "op kernels: Fma %s; f32 %s; norms' workgroup sums %s; q2_0 block sums %s; expf %s\n",
                native ? "native (proven by the probe)" : "exact (fma_exact: the card's Fma is not proven)",
                guard ? "soft (exact build: every f32 operation through double) and guarded (plain f32 with a subnormal flag: rows \"(guarded f32)\")"
                      : "plain (the card preserves f32 subnormals)",
                build.subgroup ? "by subgroup" : "by a workgroup tree", build.int_dot ? "by the packed 8-bit dot product" : "by integer steps",
                build.expf_fused ? "fused (the host's)" : "unfused (the host's)");
    std::fflush(o.text);
    std::vector<gpu::kernels::Check> checks;
    model::VerifyOpsOptions vo;
    vo.full = !o.quick;
    vo.time_reps = o.reps;
    if (o.quick) vo.time_repeat = 2, vo.time_warm_ms = 0;  // (lavapipe: seconds a sequence otherwise)
    vo.time_if = [&o](const std::string& k, const std::string& shape) { return shown(k, shape, o.quick); };
    vo.checks = &checks;
    std::fprintf(o.text,
                 "card time of each op kernel, best and median of %d runs after one bit-exact run (%s, random data; a run: the "
                 "dispatch %zu times in a sequence, each after a barrier, per dispatch%s):\n",
                 o.reps, o.quick ? "the oracle's small shapes" : "the 8B model's shapes", vo.time_repeat,
                 vo.time_warm_ms > 0 ? (", after " + std::to_string(int(vo.time_warm_ms)) + " ms of it").c_str() : "");
    std::fflush(o.text);
    std::string failed;
    try {
        model::verify_ops(g, build, vo);
    } catch (const std::exception& e) {
        failed = e.what();
    }
    json::Value b = json::Value::object();
    b.set("fma", native ? "native" : "exact");
    b.set("f32", guard ? "soft and guarded" : "plain");
    b.set("subgroup_sums", build.subgroup);
    b.set("int_dot", build.int_dot);
    b.set("expf_fused", build.expf_fused);
    json::Value rows = json::Value::array();
    // One row per kernel, shape and kind of data (the first position or token of each).
    std::set<std::string> seen;
    std::fprintf(o.text, "%s%s%10s %10s\n", pad("kernel", 30).c_str(), pad("shape", 32).c_str(), "best us", "median us");
    for (const auto& c : checks) {
        if (!c.bit_exact || shown(c.name, c.shape, o.quick)) {
            const std::string kind = kind_of(c.shape), dims = dims_of(c.shape);
            if (!seen.insert(c.name + "|" + dims + "|" + kind).second) continue;
            const std::string shape = probe(c.name) ? dims + " floats" : dims + " (" + kind + ")";
            const std::string head = pad(c.name, 30) + pad(shape, 32);
            json::Value r = json::Value::object();
            r.set("name", c.name);
            r.set("shape", shape);
            r.set("bit_exact", c.bit_exact);
            r.set("flagged", c.flagged);
            if (c.reps) {
                r.set("best_us", c.card_us_best);
                r.set("median_us", c.card_us_median);
                r.set("reps", c.reps);
            }
            rows.push(std::move(r));
            if (!c.bit_exact) std::fprintf(o.text, "%s%10s %10s  (BITS DIFFER FROM THE CPU: %s)\n", head.c_str(), "-", "-", c.shape.c_str());
            else std::fprintf(o.text, "%s%10.1f %10.1f%s\n", head.c_str(), c.card_us_best, c.card_us_median,
                              c.flagged ? "  (flagged a subnormal: the exact build would run)" : "");
        }
    }
    if (!failed.empty()) std::fprintf(o.text, "op kernels NOT VERIFIED on this card: %s\n", failed.c_str());
    json::Value ok = json::Value::object();
    ok.set("build", std::move(b));
    ok.set("shapes", o.quick ? "small" : "8b");
    ok.set("verified", failed.empty());
    if (!failed.empty()) ok.set("reason", failed);
    ok.set("rows", std::move(rows));
    doc.set("op_kernels", std::move(ok));
    std::fprintf(o.text, "us: between timestamps around the dispatch on the card (negative: the queue has no timestamps).\n");
    std::fflush(o.text);
}

}  // namespace

int run_gpu_bench(const std::vector<std::string>& args) { return gpu::bench_gpu_main(args, op_kernel_times); }

}  // namespace bankml::cmd
