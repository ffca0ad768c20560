#include "gpu_device.h"

#include "gpu/kernels.h"
#include "gpu/gpu.h"
#include "test.h"

#include <cstdlib>
#include <exception>

namespace bt {

using bankml::gpu::Gpu;
using bankml::gpu::PhysicalDevice;

TestGpu& test_gpu_device() {
    static TestGpu t;
    static bool tried = false;
    if (tried) return t;
    tried = true;
    // Set only for compute's first instance: child processes of later tests must not inherit it.
    bool set = !std::getenv("BANKML_GPU_VALIDATION");
    if (set) setenv("BANKML_GPU_VALIDATION", "1", 1);
    try {
        auto devs = Gpu::devices();
        if (set) unsetenv("BANKML_GPU_VALIDATION");
        const PhysicalDevice* pick = nullptr;
        for (bankml::gpu::Kind kind : {bankml::gpu::Kind::Discrete, bankml::gpu::Kind::Integrated, bankml::gpu::Kind::Cpu})
            for (auto& d : devs)
                if (!pick && d.kind == kind) pick = &d;
        if (pick) {
            t.gpu = std::make_unique<Gpu>(Gpu::open(pick->index));
            t.index = pick->index;
        } else {
            t.why = "no Vulkan device here (not even lavapipe: apt-get install mesa-vulkan-drivers)";
        }
    } catch (const std::exception& e) {
        t.why = e.what();
    }
    if (set) unsetenv("BANKML_GPU_VALIDATION");
    return t;
}

VerifiedCard open_verified_card() {
    TestGpu& t = test_gpu_device();
    if (!t.gpu) SKIP("gpu", t.why);
    VerifiedCard c{Gpu::open(t.index), {}, false};
    if (!c.gpu.has_f64()) SKIP("gpu", "the test card has no shaderFloat64");
    bankml::gpu::kernels::FmaPath path = bankml::gpu::kernels::FmaPath::exact;
    bankml::gpu::kernels::VerifyOptions vo;
    vo.full = false;
    vo.chosen = &path;
    bankml::gpu::kernels::verify_q1_0(c.gpu, vo);
    c.native = path == bankml::gpu::kernels::FmaPath::native;
    c.build = bankml::gpu::ops::build_for(c.gpu, c.native);
    return c;
}

bool any_vulkan_device() {
    for (const auto& d : bankml::gpu::discover().devices)
        if (d.backend == "vulkan") return true;
    return false;
}

EnvScope::EnvScope(const char* n, const char* v) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    if (v) setenv(n, v, 1);
    else unsetenv(n);
}
EnvScope::~EnvScope() {
    if (old) setenv(name.c_str(), old->c_str(), 1);
    else unsetenv(name.c_str());
}

}  // namespace bt
