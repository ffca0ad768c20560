#include "gpu_device.h"

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

}  // namespace bt
