#include "cmd/gpu_verify.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "gpu/compute.h"
#include "gpu/gpu.h"
#include "gpu/op_kernels.h"
#include "model/verify_gpu.h"

namespace bankml::cmd {

namespace {

// The cards to verify: the registry's selection (BANKML_GPU, usable cards, discrete first;
// software renderers only with BANKML_GPU_ALLOW_SOFTWARE=1), Vulkan ones only, with the index
// the report and BANKML_GPU give them.
std::vector<std::pair<size_t, gpu::Device>> cards() {
    std::vector<std::pair<size_t, gpu::Device>> out;
    gpu::Discovery d = gpu::discover();
    for (size_t i : gpu::select_from_env(d.devices).indices)
        if (d.devices[i].backend == "vulkan") out.push_back({i, d.devices[i]});
    return out;
}

}  // namespace

CardVerdict verify_card(gpu::Gpu& g, bool full, bool exhaustive) {
    CardVerdict v;
    gpu::kernels::VerifyOptions opt;
    opt.full = full;
    opt.chosen = &v.path;
    opt.checks = &v.checks;
    model::VerifyOpsOptions oo;
    oo.full = full;
    oo.exhaustive = exhaustive;
    oo.checks = &v.checks;
    // Test hook: BANKML_GPU_TEST_CORRUPT_ROW=N moves output N of every result one ulp (flips the
    // low bit of word N of an op kernel's first output), to show that a card whose output differs
    // is refused (tests/test_gpu_kernels.cpp, tests/test_gpu_ops.cpp). With
    // BANKML_GPU_TEST_CORRUPT_KERNEL=NAME only that kernel's results ("q1_0" for the Q1_0 ones).
    if (const char* s = std::getenv("BANKML_GPU_TEST_CORRUPT_ROW")) {
        size_t row = size_t(std::strtoull(s, nullptr, 10));
        const char* k = std::getenv("BANKML_GPU_TEST_CORRUPT_KERNEL");
        std::string only = k ? k : "";
        if (only.empty() || only == "q1_0")
            opt.corrupt = [row](std::vector<float>& out) {
                if (row < out.size()) out[row] = std::nextafter(out[row], INFINITY);
            };
        oo.corrupt = [row, only](const std::string& kernel, std::vector<uint32_t>& out) {
            if ((only.empty() || only == kernel) && row < out.size()) out[row] ^= 1u;
        };
    }
    // Test hook: BANKML_GPU_TEST_UNFUSED_FMA=1 replaces the native-Fma probe's results with a
    // multiply then an add (what a card that does not fuse computes), to show on any card that
    // such a card keeps the fma_exact kernels.
    if (std::getenv("BANKML_GPU_TEST_UNFUSED_FMA")) {
        opt.corrupt_probe = [](std::vector<float>& out) {
            auto t = gpu::kernels::fma_probe_triples();
            for (size_t i = 0; i < t.size() && i < out.size(); ++i) {
                volatile float p = t[i].a * t[i].b;
                volatile float r = p + t[i].c;
                out[i] = r;
            }
        };
    }
    try {
        v.lines = gpu::kernels::verify_q1_0(g, opt);
        const gpu::ops::Build build = gpu::ops::build_for(g, v.path == gpu::kernels::FmaPath::native);
        v.lines.push_back("op kernels' float controls: " + g.float_controls_detail() + " (each one offered is asked for" +
                          (build.float_modes & gpu::shader::SOFT_F32
                               ? "; exact build: f32 arithmetic through double, subnormals kept; guarded build: plain f32 with a subnormal flag)"
                               : ")"));
        v.lines.push_back(std::string("expf as the host's C library: ") + (build.expf_fused ? "fused" : "unfused") +
                          " multiply-adds");
        v.lines.push_back("subgroups: size " + std::to_string(g.subgroup_size()) + ", arithmetic in compute shaders " +
                          (g.subgroup_arithmetic() ? "yes" : "no") +
                          (build.subgroup ? " (the norms' workgroup sums reduce each subgroup first)" : " (the norms' workgroup sums: a tree)"));
        for (std::string& l : model::verify_ops(g, build, oo)) v.lines.push_back(std::move(l));
        v.verified = true;
    } catch (const std::exception& e) {
        v.reason = e.what();
    }
    return v;
}

int gpu_verify(bool full, bool exhaustive, bool as_json) {
    full = full && !std::getenv("BANKML_GPU_TEST_SMALL");  // tests: the small shapes
    auto list = cards();
    json::Value devices = json::Value::array();
    if (list.empty() && !as_json) {
        std::printf("bankml gpu --verify: no usable GPU found; bankml runs on the CPU\n");
        return 0;
    }
    int rc = 0;
    for (const auto& [index, d] : list) {
        if (!as_json) {
            std::printf("%s (device %u):\n", d.name.c_str(), d.backend_index);
            std::fflush(stdout);
        }
        CardVerdict v;
        try {
            gpu::Gpu g = gpu::Gpu::open(d.backend_index);
            v = verify_card(g, full, exhaustive);
        } catch (const std::exception& e) {  // the card would not open
            v.reason = e.what();
        }
        if (!v.verified) rc = 2;
        if (as_json) {
            json::Value ks = json::Value::array();
            for (const auto& c : v.checks) {
                json::Value k = json::Value::object();
                k.set("name", c.name);
                k.set("shape", c.shape);
                k.set("rows", c.rows);
                k.set("bit_exact", c.bit_exact);
                k.set("ms", c.ms);
                ks.push(std::move(k));
            }
            json::Value o = json::Value::object();
            o.set("index", index);
            o.set("name", d.name);
            o.set("verified", v.verified);
            o.set("reason", v.verified ? json::Value() : json::Value(v.reason));
            o.set("kernels", std::move(ks));
            devices.push(std::move(o));
            continue;
        }
        for (const auto& line : v.lines) std::printf("  %s\n", line.c_str());
        if (v.verified) std::printf("  verified: bankml may use this card\n");
        else std::printf("  NOT VERIFIED — %s; bankml will not use this card\n", v.reason.c_str());
        std::fflush(stdout);
    }
    if (as_json) {
        json::Value o = json::Value::object();
        o.set("devices", std::move(devices));
        std::fputs((json::write(o, 2) + "\n").c_str(), stdout);
    }
    return rc;
}

int gpu_dump_spirv(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error("create_directories(" + dir + ") failed: " + ec.message());
    auto mods = gpu::kernels::all_modules();
    for (auto& m : model::op_modules()) mods.push_back(std::move(m));
    for (const auto& [name, words] : mods) {
        std::string path = dir + "/" + name;
        file::Output f(path);
        f.write(words.data(), words.size() * 4);
        f.commit();
        std::printf("%s (%zu words)\n", path.c_str(), words.size());
    }
    return 0;
}

}  // namespace bankml::cmd
