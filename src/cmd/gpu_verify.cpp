#include "cmd/gpu_verify.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"
#include "gpu/compute.h"
#include "gpu/gpu.h"
#include "gpu/kernels.h"

namespace bankml::cmd {

namespace {

// The cards to verify: the registry's selection (BANKML_GPU, usable cards, discrete first;
// software renderers only with BANKML_GPU_ALLOW_SOFTWARE=1), Vulkan ones only.
std::vector<gpu::Device> cards() {
    std::vector<gpu::Device> out;
    for (auto& d : gpu::selected(gpu::discover().devices))
        if (d.backend == "vulkan") out.push_back(d);
    return out;
}

}  // namespace

int gpu_verify(bool full) {
    auto list = cards();
    if (list.empty()) {
        std::printf("bankml gpu --verify: no usable GPU found; bankml runs on the CPU\n");
        return 0;
    }
    int rc = 0;
    for (const auto& d : list) {
        std::printf("%s (device %u):\n", d.name.c_str(), d.backend_index);
        std::fflush(stdout);
        try {
            gpu::Gpu g = gpu::Gpu::open(d.backend_index);
            gpu::kernels::VerifyOptions opt;
            opt.full = full && !std::getenv("BANKML_GPU_TEST_SMALL");  // tests: the small shapes
            // Test hook: BANKML_GPU_TEST_CORRUPT_ROW=N moves row N of every result one ulp, to show
            // that a card whose output differs is refused (tests/test_gpu_kernels.cpp).
            if (const char* v = std::getenv("BANKML_GPU_TEST_CORRUPT_ROW")) {
                size_t row = size_t(std::strtoull(v, nullptr, 10));
                opt.corrupt = [row](std::vector<float>& out) {
                    if (row < out.size()) out[row] = std::nextafter(out[row], INFINITY);
                };
            }
            // Test hook: BANKML_GPU_TEST_UNFUSED_FMA=1 replaces the native-Fma probe's results with a
            // multiply then an add (what a card that does not fuse computes), to show on any card
            // that such a card keeps the fma_exact kernels.
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
            for (const auto& line : gpu::kernels::verify_q1_0(g, opt)) std::printf("  %s\n", line.c_str());
            std::printf("  verified: bankml may use this card\n");
        } catch (const std::exception& e) {
            std::printf("  NOT VERIFIED — %s; bankml will not use this card\n", e.what());
            rc = 2;
        }
        std::fflush(stdout);
    }
    return rc;
}

int gpu_dump_spirv(const std::string& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error("create_directories(" + dir + ") failed: " + ec.message());
    for (const auto& [name, words] : gpu::kernels::all_modules()) {
        std::string path = dir + "/" + name;
        file::Output f(path);
        f.write(words.data(), words.size() * 4);
        f.commit();
        std::printf("%s (%zu words)\n", path.c_str(), words.size());
    }
    return 0;
}

}  // namespace bankml::cmd
