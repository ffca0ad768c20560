#include <cstdio>

#include "cmd/commands.h"
#include "core/error.h"
#include "cmd/gpu_verify.h"
#include "gpu/gpu.h"

namespace bankml::cmd {

static int run_gpu(const std::vector<std::string>& args) {
    cli::Args a(args, {{"--remote", false}, {"--verify", false}, {"--full", false}, {"--json", false}, {"--dump-spirv", true}});
    if (a.has("dump-spirv")) return gpu_dump_spirv(a.get("dump-spirv", ""));
    if (a.has("verify")) return gpu_verify(true, a.has("full"), a.has("json"));
    if (a.has("full")) throw UsageError("gpu: --full goes with --verify");
    std::fputs(gpu::report_json(a.has("remote")).c_str(), stdout);
    return 0;
}

const cli::Command gpu_command = {
    "gpu", "every video card found, which bankml would use, as JSON",
    "usage: bankml gpu [--remote] [--verify [--full] [--json]] [--dump-spirv DIR]\n"
    "\n"
    "Prints, as JSON, every video card the backends find (Vulkan, through the loader opened at run\n"
    "time, merged with /sys/class/drm), whether each is usable and why not, which bankml would use\n"
    "and in what order, notes on why a backend found nothing, and where the Q1_0, Q2_0 and F16\n"
    "products would run. Exit code 0 with or without a card. docs/modules/gpu.md names every field.\n"
    "\n"
    "  --remote   also list rented GPUs (listed only: never selected, started or paid for): Hugging\n"
    "             Face's Jobs hardware, read with the system curl; why there are none goes in notes\n"
    "  --verify   runs the bit-exact on-card oracle on each selected card: the native-Fma probe, the\n"
    "             Q1_0 products, then every op kernel of the forward pass (rms_norm, prep_act,\n"
    "             q2_0_mat_vec, f16_mat_vec, head_norm_rope, attention, swiglu, expf) on random and\n"
    "             adversarial data; one line per kernel and shape, which kernels the card uses (native\n"
    "             Fma only where proven), or NOT VERIFIED (exit code 2: a card failing any kernel is\n"
    "             refused whole); no usable card: exit code 0\n"
    "  --full     with --verify: also expf on every one of the 2^32 floats\n"
    "  --json     with --verify: one JSON document, {\"devices\":[{\"index\",\"name\",\"verified\",\n"
    "             \"reason\",\"kernels\":[{\"name\",\"shape\",\"rows\",\"bit_exact\",\"ms\"}]}]}\n"
    "  --dump-spirv DIR   writes every SPIR-V module bankml would load into DIR (driver bug reports;\n"
    "             the op kernels for both Fma paths: rms_norm.spv, rms_norm_fma.spv, ...)\n"
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
    "  BANKML_SYSFS_ROOT=DIR         the directory read in place of /sys (tests)\n"
    "  BANKML_HF_TIMEOUT=SECONDS     curl's time limit for --remote (default 20)\n",
    run_gpu};

}  // namespace bankml::cmd
