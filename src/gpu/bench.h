// `bankml bench gpu`: what the first selected card costs and delivers, beside the CPU kernel —
// the round trip of one empty dispatch, each Q1_0 kernel's time and effective bandwidth, the
// card's own device-to-device copy bandwidth, and quant::mat_vec_par on all threads.
#pragma once
#include <string>
#include <vector>

namespace bankml::gpu {

// Flags: --quick (small shapes and few repetitions, for lavapipe and tests), --copy-mib N.
int bench_gpu_main(const std::vector<std::string>& args);

}  // namespace bankml::gpu
