#include "cmd/gpu_verify.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "gpu/compute.h"
#include "gpu/kernels.h"

namespace bankml::cmd {

namespace {

bool env_is(const char* name, std::initializer_list<const char*> values) {
    const char* v = std::getenv(name);
    if (!v) return false;
    for (const char* x : values)
        if (std::strcmp(v, x) == 0) return true;
    return false;
}

// The cards to verify: usable Vulkan devices (integrated and discrete; software renderers only
// with BANKML_GPU_ALLOW_SOFTWARE=1), discrete first; none with BANKML_GPU=off.
std::vector<gpu::PhysicalDevice> cards() {
    std::vector<gpu::PhysicalDevice> out;
    if (env_is("BANKML_GPU", {"off", "none", "cpu"})) return out;
    bool software = env_is("BANKML_GPU_ALLOW_SOFTWARE", {"1"});
    auto devs = gpu::Gpu::devices();
    for (const char* type : {"discrete", "integrated", "cpu"})
        for (auto& d : devs)
            if (d.type == type && (d.type != "cpu" || software)) out.push_back(d);
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
        std::printf("%s (device %zu):\n", d.name.c_str(), d.index);
        std::fflush(stdout);
        try {
            gpu::Gpu g = gpu::Gpu::open(d.index);
            gpu::kernels::VerifyOptions opt;
            opt.full = full;
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
        std::ofstream f(path, std::ios::binary);
        f.write(reinterpret_cast<const char*>(words.data()), std::streamsize(words.size() * 4));
        if (!f) throw Error("write(" + path + ") failed");
        std::printf("%s (%zu words)\n", path.c_str(), words.size());
    }
    return 0;
}

}  // namespace bankml::cmd
