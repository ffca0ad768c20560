// `bankml gpu --verify` and `bankml gpu --dump-spirv DIR`: the on-card oracle on each selected
// card, and the SPIR-V modules bankml would load written out for driver bug reports.
#pragma once
#include <string>

namespace bankml::cmd {

// Runs kernels::verify_q1_0 on every selected card, printing one line per kernel and shape, or
// "NOT VERIFIED — <reason>; bankml will not use this card". Returns 2 if any card fails, else 0
// (also with no usable card, after saying so). full=false uses the small shapes (tests).
int gpu_verify(bool full = true);
// Writes every module bankml would load into dir (created if missing); returns 0.
int gpu_dump_spirv(const std::string& dir);

}  // namespace bankml::cmd
