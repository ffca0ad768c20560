#include <cstdio>

#include "cmd/commands.h"
#include "core/cpu.h"
#include "core/kernels.h"
#include "core/error.h"
#include "quant/traits.h"

namespace bankml::cmd {

static int run_version(const std::vector<std::string>& args) {
    cli::Args a(args, {});
    std::printf("bankml %s\n", VERSION);
#if defined(__clang__)
    std::printf("compiler: clang %s\n", __clang_version__);
#elif defined(__GNUC__)
    std::printf("compiler: g++ %s, C++%ld\n", __VERSION__, __cplusplus / 100 % 100);
#endif
    std::printf("cpu features: %s\n", cpu_features_string().c_str());
    // What the kernels compute, from quant's traits table.
    std::string products, acts;
    for (const quant::TypeTraits& t : quant::all_traits()) {
        if (t.rows_ref) products += std::string(products.empty() ? "" : ", ") + t.name;
        if (t.from_float) acts += std::string(acts.empty() ? "" : ", ") + t.name;
    }
    std::printf("kernels: %s (%s products; %s activations)\n", kernels_description().c_str(), products.c_str(), acts.c_str());
    return 0;
}

const cli::Command version_command = {
    "version", "the version, the compiler, the CPU features and the kernels picked",
    "usage: bankml version\n\nPrints bankml's version, the compiler that built it, the CPU features detected at run\n"
    "time (AVX2, FMA, F16C, AVX-512...) and which kernels it picked.\n",
    run_version};

}  // namespace bankml::cmd
