#include <cstdio>

#include "cmd/commands.h"
#include "core/error.h"
#include "gpu/gpu.h"

namespace bankml::cmd {

static int run_gpu(const std::vector<std::string>& args) {
    cli::Args a(args, {{"--remote", false}});
    std::fputs(gpu::report_json(a.has("remote")).c_str(), stdout);
    return 0;
}

const cli::Command gpu_command = {
    "gpu", "every video card found, which bankml would use, as JSON",
    "usage: bankml gpu [--remote]\n"
    "\n"
    "Prints, as JSON, every video card the backends find (Vulkan, through the loader opened at run\n"
    "time, merged with /sys/class/drm), whether each is usable and why not, which bankml would use\n"
    "and in what order, notes on why a backend found nothing, and where the Q1_0, Q2_0 and F16\n"
    "products would run. Exit code 0 with or without a card. docs/modules/gpu.md names every field.\n"
    "\n"
    "  --remote   also list rented GPUs (listed only: never selected, started or paid for)\n"
    "\n"
    "Only integrated and discrete cards with a compute queue are used, discrete first, then by\n"
    "device-local memory, largest first. Software renderers (llvmpipe, SwiftShader) are listed, never\n"
    "used.\n"
    "\n"
    "environment:\n"
    "  BANKML_GPU=off        (also none, cpu) no GPU: everything runs on the CPU\n"
    "  BANKML_GPU=0,2        only the devices with these indices (as this report numbers them)\n"
    "                        a value that is neither is reported in notes and selects no GPU\n"
    "  BANKML_GPU_ALLOW_SOFTWARE=1   lets a software renderer be selected (testing on CI only)\n"
    "  BANKML_VULKAN_LOADER=PATH     the Vulkan loader library to open instead of libvulkan.so.1\n"
    "  BANKML_SYSFS_ROOT=DIR         the directory read in place of /sys (tests)\n",
    run_gpu};

}  // namespace bankml::cmd
