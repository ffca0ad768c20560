// The card the GPU tests share: the first discrete or integrated one, else a software renderer
// (lavapipe), which the tests allow so that every machine runs the whole path. Opened once per
// process; validation layers are switched on for the whole run where they are installed
// (BANKML_GPU_VALIDATION=1 before the first Vulkan call of the process).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "gpu/compute.h"

namespace bt {

struct TestGpu {
    std::unique_ptr<bankml::gpu::Gpu> gpu;  // null when there is none (why says so)
    size_t index = 0;                       // its vkEnumeratePhysicalDevices index
    std::string why;
};

TestGpu& test_gpu_device();

}  // namespace bt
