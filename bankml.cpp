// bankml: main() parses the command name and dispatches to the modules' commands.
// Every command throws bankml::Error on failure; this file prints one line and exits with its code.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "cmd/commands.h"

using bankml::cli::Command;

static int cmd_help(const std::vector<std::string>& args);

static const Command HELP_CMD = {"help", "show help for bankml or one command", "usage: bankml help [COMMAND]\n", cmd_help};

// The commands, in the order `bankml --help` lists them. A module adds its command here.
static const Command* const COMMANDS[] = {
    &HELP_CMD,
    &bankml::cmd::version_command,
    &bankml::cmd::run_command,
    &bankml::cmd::bench_command,
    &bankml::cmd::gpu_command,
    &bankml::cmd::info_command,
    &bankml::cmd::synth_command,
    &bankml::cmd::tokenize_command,
    &bankml::cmd::detokenize_command,
    &bankml::cmd::chat_command,
    &bankml::cmd::perplexity_command,
    &bankml::cmd::serve_command,
};

static const char* EXIT_CODES =
    "exit codes: 0 ok, 1 failure, 2 usage error or a card that fails verification\n";

static void print_usage(FILE* f) {
    std::fprintf(f, "bankml %s: 1-bit and ternary LLMs, bit-exact with ggml on the CPU, verified on the GPU\n\n",
                 bankml::cmd::VERSION);
    std::fprintf(f, "usage: bankml COMMAND [ARGS]   (bankml help COMMAND for details)\n\ncommands:\n");
    for (const Command* c : COMMANDS) std::fprintf(f, "  %-12s %s\n", c->name, c->summary);
    std::fprintf(f, "\n%s", EXIT_CODES);
}

static const Command* find(const std::string& name) {
    for (const Command* c : COMMANDS)
        if (name == c->name) return c;
    return nullptr;
}

static int cmd_help(const std::vector<std::string>& args) {
    if (args.empty()) {
        print_usage(stdout);
        return 0;
    }
    if (args.size() > 1) throw bankml::UsageError("help takes one command name");
    const Command* c = find(args[0]);
    if (!c) throw bankml::UsageError("unknown command '" + args[0] + "'");
    std::fputs(c->help, stdout);
    return 0;
}

// The message without a leading "NAME: " that would repeat the command's prefix
// ("bankml synth: synth: ..." is printed "bankml synth: ...").
static const char* without_prefix(const char* what, const char* name) {
    size_t n = std::strlen(name);
    if (std::strncmp(what, name, n) == 0 && what[n] == ':' && what[n + 1] == ' ') return what + n + 2;
    return what;
}

int main(int argc, char** argv) {
    bankml::file::guard_std_descriptors();
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
        print_usage(stderr);
        return bankml::EXIT_USAGE;
    }
    std::string name = args[0];
    if (name == "--help" || name == "-h") {
        print_usage(stdout);
        return 0;
    }
    if (name == "--version" || name == "-V") name = "version";
    const Command* c = find(name);
    if (!c) {
        std::fprintf(stderr, "bankml: unknown command '%s' (try bankml --help)\n", name.c_str());
        return bankml::EXIT_USAGE;
    }
    std::vector<std::string> rest(args.begin() + 1, args.end());
    try {
        int rc = c->run(rest);
        // Output that never arrived (a full disk, a closed stdout) is a failure, not exit 0.
        bankml::file::check_written(stdout);
        return rc;
    } catch (const bankml::cli::HelpRequested&) {
        std::fputs(c->help, stdout);
        try {
            bankml::file::check_written(stdout);
        } catch (const bankml::Error& e) {
            std::fprintf(stderr, "bankml %s: %s\n", c->name, e.what());
            return 1;
        }
        return 0;
    } catch (const bankml::UsageError& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "bankml %s: %s (see bankml help %s)\n", c->name, without_prefix(e.what(), c->name), c->name);
        return e.code;
    } catch (const bankml::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "bankml %s: %s\n", c->name, without_prefix(e.what(), c->name));
        return e.code;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "bankml %s: %s\n", c->name, without_prefix(e.what(), c->name));
        return 1;
    }
}
