// `bankml gpu --verify` and `bankml gpu --dump-spirv DIR`: the on-card oracle on each selected
// card, and the SPIR-V modules bankml would load written out for driver bug reports.
#pragma once
#include <string>
#include <vector>

#include "gpu/compute.h"
#include "gpu/kernels.h"

namespace bankml::cmd {

// What the oracle said of one card: the Q1_0 kernels (kernels::verify_q1_0), then every op kernel
// of the forward pass (model::verify_ops) built with the Fma path the Q1_0 oracle chose.
struct CardVerdict {
    bool verified = false;
    std::string reason;                        // why not, when not verified
    std::vector<std::string> lines;            // one per kernel and shape, as verify prints them
    std::vector<gpu::kernels::Check> checks;   // the same, structured (the failing one last)
    gpu::kernels::FmaPath path = gpu::kernels::FmaPath::exact;
};
// Runs both oracles on an open card; never throws for a card that differs (verified = false).
// full: the model's shapes; exhaustive (with full): expf on every float. The test hooks
// BANKML_GPU_TEST_CORRUPT_ROW, BANKML_GPU_TEST_CORRUPT_KERNEL and BANKML_GPU_TEST_UNFUSED_FMA apply.
CardVerdict verify_card(gpu::Gpu& g, bool full, bool exhaustive);

// Runs verify_card on every selected card, printing one line per kernel and shape, or
// "NOT VERIFIED — <reason>; bankml will not use this card" (json: one document,
// {"devices":[{"index","name","verified","reason","kernels":[{"name","shape","rows","bit_exact","ms"}]}]}).
// Returns 2 if any card fails, else 0 (also with no usable card, after saying so). full=false
// uses the small shapes (tests; also BANKML_GPU_TEST_SMALL=1).
int gpu_verify(bool full = true, bool exhaustive = false, bool json = false);
// Writes every module bankml would load into dir (created if missing); returns 0.
int gpu_dump_spirv(const std::string& dir);

}  // namespace bankml::cmd
