// bankml's error convention: a failure is a bankml::Error carrying one line that names the failing
// call and its arguments, and the exit code the CLI returns for it (1 failure, 2 usage error or a
// card that fails verification). Modules throw; bankml.cpp catches, prints one line and exits.
#pragma once
#include <stdexcept>
#include <string>

namespace bankml {

enum ExitCode : int { EXIT_OK = 0, EXIT_FAILURE_ = 1, EXIT_USAGE = 2 };

struct Error : std::runtime_error {
    int code;
    explicit Error(const std::string& msg, int exit_code = 1) : std::runtime_error(msg), code(exit_code) {}
};

// A bad command line, flag or flag value: exit code 2.
struct UsageError : Error {
    explicit UsageError(const std::string& msg) : Error(msg, 2) {}
};

}  // namespace bankml
