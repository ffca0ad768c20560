// Command-line functions shared by every command: flag parsing with strict values, and the
// command table entry each module exports.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bankml::cli {

// One command of the `bankml` binary. Modules define one each; bankml.cpp lists them.
struct Command {
    const char* name;
    const char* summary;  // one line for `bankml --help`
    const char* help;     // the full text for `bankml help NAME` / `bankml NAME --help`
    int (*run)(const std::vector<std::string>& args);  // args after the command name
};

// Thrown by Args when -h/--help appears as a flag (not as a flag's value, not after "--"): the
// command's help wins over any error on the same line. main() prints the help, exit 0.
struct HelpRequested {};

// Why bankml does not take one of llama.cpp's flags ("-b": "..."), or nullptr when NAME is not
// one of them. Args uses it so that such a flag gets an answer, never a bare "unknown flag".
const char* llama_note(const std::string& name);

// A flag: names separated by '|' ("-m|--model"), the first long name is the key used by get().
struct Flag {
    std::string names;
    bool takes_value;
    // For a flag without a value: words that, right after it, are its value ("-fa on"), as
    // llama.cpp's optional values; "" means none. Separated by '|'.
    std::string optional_values = "";
};

// Parses args against the flags. Unknown flags, a flag missing its value, or (unless allowed)
// positional arguments throw UsageError naming the offender (a llama.cpp flag bankml does not
// take: "llama.cpp's -X is not supported by bankml: why"). "--name=value" is accepted. A flag
// given twice keeps its last value. A flag's value is a value whatever it looks like ("-p -h");
// "--" ends the flags (what follows is positional); "--help"/"-h" throws HelpRequested.
class Args {
public:
    Args(const std::vector<std::string>& args, const std::vector<Flag>& flags, size_t max_positional = 0);
    bool help() const { return help_; }
    bool has(const std::string& key) const;
    std::optional<std::string> value(const std::string& key) const;
    std::string get(const std::string& key, const std::string& dflt) const;
    // Integer and real values, strictly parsed and range-checked; a bad value is a UsageError.
    int64_t get_int(const std::string& key, int64_t dflt, int64_t lo, int64_t hi) const;
    double get_double(const std::string& key, double dflt, double lo, double hi) const;
    const std::vector<std::string>& positional() const { return pos_; }

private:
    std::string canonical(const std::string& name) const;
    std::vector<Flag> flags_;
    std::map<std::string, std::string> vals_;
    std::vector<std::string> pos_;
    bool help_ = false;
};

// Strict parsers used for flags and environment variables: the whole string must be the number.
std::optional<int64_t> parse_int(const std::string& s);
std::optional<double> parse_double(const std::string& s);
// True when s is an optional sign and digits only (an integer, maybe too large for parse_int).
bool is_digits(const std::string& s);
// A comma list of integers ("1,2,3"); nullopt if any item is not an integer.
std::optional<std::vector<int64_t>> parse_int_list(const std::string& s);

}  // namespace bankml::cli
