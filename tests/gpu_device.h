// The card the GPU tests share: the first discrete or integrated one, else a software renderer
// (lavapipe), which the tests allow so that every machine runs the whole path. Opened once per
// process; validation layers are switched on for the whole run where they are installed
// (BANKML_GPU_VALIDATION=1 before the first Vulkan call of the process).
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "gpu/compute.h"
#include "gpu/op_kernels.h"

namespace bt {

struct TestGpu {
    std::unique_ptr<bankml::gpu::Gpu> gpu;  // null when there is none (why says so)
    size_t index = 0;                       // its vkEnumeratePhysicalDevices index
    std::string why;
};

TestGpu& test_gpu_device();

// A fresh handle on the test card (the model takes it), after its Q1_0 kernels proved themselves
// (and whether its Fma is native) as bankml checks before use, with the op kernels' build for it.
// Skips the test where there is no card or it lacks shaderFloat64.
struct VerifiedCard {
    bankml::gpu::Gpu gpu;
    bankml::gpu::ops::Build build;
    bool native = false;
};
VerifiedCard open_verified_card();

// Whether discovery finds any Vulkan device.
bool any_vulkan_device();

// Sets an environment variable for one scope (nullptr: unset), restoring the previous state.
struct EnvScope {
    std::string name;
    std::optional<std::string> old;
    EnvScope(const char* n, const char* v);
    ~EnvScope();
};

}  // namespace bt
