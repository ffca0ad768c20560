// The commands of the bankml binary: one file each in src/cmd/, the glue between the command line
// and the modules (which know nothing of argv). bankml.cpp lists them.
#pragma once
#include "core/cli.h"

namespace bankml::cmd {

inline constexpr const char* VERSION = "0.1.0";

extern const cli::Command version_command;
extern const cli::Command bench_command;
extern const cli::Command gpu_command;
extern const cli::Command info_command;
extern const cli::Command synth_command;
extern const cli::Command run_command;
extern const cli::Command tokenize_command;
extern const cli::Command detokenize_command;
extern const cli::Command chat_command;
extern const cli::Command perplexity_command;
extern const cli::Command serve_command;

}  // namespace bankml::cmd
