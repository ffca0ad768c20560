#include "core/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

#include <optional>

namespace bankml::cli {

// llama.cpp's flags that have no bankml equivalent, and what to do instead. The ones that map
// (-m -p -f -n -c -t -s --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n
// --ignore-eos -ngl -sys -r -fa -ctk -ctv --no-bos --ids --chunks -o) are flags of the commands.
struct LlamaNote {
    const char* names;
    const char* note;
};
static const LlamaNote LLAMA_NOTES[] = {
    {"-b|--batch-size|-ub|--ubatch-size", "the prompt is evaluated in one batch, whatever its length"},
    {"-tb|--threads-batch", "one thread count serves the prompt and generation: use -t"},
    {"--mlock|--no-mmap|--mmap", "the model is always memory-mapped read-only and never copied"},
    {"-mg|--main-gpu|-dev|--device|-sm|--split-mode|-ts|--tensor-split",
     "choose cards with BANKML_GPU=0,2 (bankml gpu lists them)"},
    {"--lora|--lora-scaled|--control-vector", "adapters are not supported; merge them into the GGUF"},
    {"-cnv|--conversation|-i|--interactive|-if|--interactive-first|-st|--single-turn",
     "use `bankml chat` for a conversation, `bankml run --chat` for one turn"},
    {"-no-cnv|--no-conversation", "`bankml run` never converses; it completes the prompt"},
    {"--jinja|--chat-template|--chat-template-file", "the chat template is Qwen3's ChatML, built in"},
    {"--reasoning-budget|--reasoning-format", "use --no-think for answers without reasoning"},
    {"--grammar|--grammar-file|-j|--json-schema", "constrained sampling is not supported"},
    {"--mirostat|--mirostat-lr|--mirostat-ent|--typical|--top-nsigma|--xtc-probability|--xtc-threshold|"
     "--dry-multiplier|--dry-base|--dry-allowed-length|--dry-penalty-last-n|--dry-sequence-breaker|"
     "--presence-penalty|--frequency-penalty|--samplers|--sampling-seq|-l|--logit-bias|--dynatemp-range|"
     "--dynatemp-exp",
     "the samplers are repeat penalty, top-k, top-p, min-p and temperature (bankml help run)"},
    {"--rope-scaling|--rope-scale|--rope-freq-base|--rope-freq-scale|--yarn-orig-ctx|--yarn-ext-factor|"
     "--yarn-attn-factor|--yarn-beta-slow|--yarn-beta-fast",
     "the rotary embedding is the model file's; context extension is not supported"},
    {"-hf|--hf-repo|-hff|--hf-file|-mu|--model-url|-hft|--hf-token", "bankml downloads nothing: give a local GGUF with -m"},
    {"--host|--port|-np|--parallel|-cb|--cont-batching|--api-key", "these are `bankml serve`'s flags"},
    {"--keep|--prompt-cache|--prompt-cache-all|--prompt-cache-ro|--context-shift|--no-context-shift",
     "a full context stops generation (raise it with -c); nothing is cached between runs"},
    {"--numa|-C|--cpu-mask|-Cr|--cpu-range|--prio|--poll|--cpu-strict",
     "threads are not pinned or prioritised: set the count with -t"},
    {"--no-warmup|--warmup", "there is no warm-up run outside `bankml bench`"},
    {"-e|--escape|--no-escape", "--stop always reads \\n, \\t and \\\\ as escapes; -p is taken as given"},
    {"--color|--log-disable|--log-file|--log-colors|-v|--verbose|-lv|--verbosity|--log-verbosity",
     "messages are one line on stderr, timings with --timings or --json"},
    {"--in-prefix|--in-suffix|--in-prefix-bos|--spm-infill|--multiline-input|-mli",
     "`bankml chat` reads one message per line"},
    {"-md|--model-draft|--draft|--draft-max|--draft-min|-cd|--ctx-size-draft",
     "speculative decoding is not supported"},
    {"--show-tokens|--log-prompt", "`bankml tokenize` shows the tokens of a text"},
};

const char* llama_note(const std::string& name) {
    for (const auto& n : LLAMA_NOTES) {
        std::string names = n.names;
        size_t s = 0;
        while (s <= names.size()) {
            size_t e = names.find('|', s);
            if (e == std::string::npos) e = names.size();
            if (names.compare(s, e - s, name) == 0) return n.note;
            s = e + 1;
        }
    }
    return nullptr;
}

static std::vector<std::string> split_names(const std::string& names) {
    std::vector<std::string> out;
    size_t s = 0;
    while (s <= names.size()) {
        size_t e = names.find('|', s);
        if (e == std::string::npos) e = names.size();
        out.push_back(names.substr(s, e - s));
        s = e + 1;
    }
    return out;
}

static std::string key_of(const Flag& f) {
    auto names = split_names(f.names);
    for (const auto& n : names)
        if (n.rfind("--", 0) == 0) return n.substr(2);
    return names[0].substr(names[0].find_first_not_of('-'));
}

std::string Args::canonical(const std::string& name) const {
    for (const auto& f : flags_)
        for (const auto& n : split_names(f.names))
            if (n == name) return key_of(f);
    return "";
}

Args::Args(const std::vector<std::string>& args, const std::vector<Flag>& flags, size_t max_positional)
    : flags_(flags) {
    // The first error is kept and thrown after the whole line is read, so that -h anywhere (as a
    // flag, not as a flag's value) still shows the help.
    std::optional<UsageError> err;
    auto error = [&](const std::string& m) {
        if (!err) err.emplace(m);
    };
    bool flags_done = false;
    for (size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        if (flags_done) {
            pos_.push_back(a);
            continue;
        }
        if (a == "--") {
            flags_done = true;
            continue;
        }
        if (a == "--help" || a == "-h") {
            help_ = true;
            continue;
        }
        if (a.size() > 1 && a[0] == '-' && !(std::isdigit((unsigned char)a[1]) || a[1] == '.')) {
            std::string name = a, val;
            bool inline_val = false;
            size_t eq = a.find('=');
            if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
                name = a.substr(0, eq);
                val = a.substr(eq + 1);
                inline_val = true;
            }
            const Flag* f = nullptr;
            for (const auto& fl : flags_)
                for (const auto& n : split_names(fl.names))
                    if (n == name) f = &fl;
            if (!f) {
                if (const char* note = llama_note(name))
                    error("llama.cpp's " + name + " is not supported by bankml: " + note);
                else
                    error("unknown flag " + name);
                continue;
            }
            std::string key = key_of(*f);
            if (f->takes_value) {
                if (!inline_val) {
                    if (i + 1 >= args.size()) {
                        error("flag " + name + " needs a value");
                        continue;
                    }
                    val = args[++i];  // a value, whatever it looks like ("-p --help" is a prompt)
                }
                vals_[key] = val;
            } else {
                if (!f->optional_values.empty() && !inline_val && i + 1 < args.size())
                    for (const auto& w : split_names(f->optional_values))
                        if (args[i + 1] == w) {
                            val = args[++i];
                            inline_val = true;
                            break;
                        }
                if (inline_val && f->optional_values.empty()) error("flag " + name + " takes no value");
                vals_[key] = val;
            }
            continue;
        }
        pos_.push_back(a);
    }
    if (help_) throw HelpRequested{};
    if (err) throw *err;
    if (pos_.size() > max_positional)
        throw UsageError("unexpected argument '" + pos_[max_positional] + "'");
}

bool is_digits(const std::string& s) {
    size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    if (i >= s.size()) return false;
    for (; i < s.size(); ++i)
        if (!std::isdigit((unsigned char)s[i])) return false;
    return true;
}

static std::string fmt_g(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}

bool Args::has(const std::string& key) const { return vals_.count(key) != 0; }

std::optional<std::string> Args::value(const std::string& key) const {
    auto it = vals_.find(key);
    if (it == vals_.end()) return std::nullopt;
    return it->second;
}

std::string Args::get(const std::string& key, const std::string& dflt) const {
    auto v = value(key);
    return v ? *v : dflt;
}

int64_t Args::get_int(const std::string& key, int64_t dflt, int64_t lo, int64_t hi) const {
    auto v = value(key);
    if (!v) return dflt;
    auto n = parse_int(*v);
    if (!n && is_digits(*v))
        throw UsageError("--" + key + " " + *v + (v->front() == '-' ? " is too small (at least " + std::to_string(lo)
                                                                    : " is too large (at most " + std::to_string(hi)) + ")");
    if (!n) throw UsageError("--" + key + " wants an integer, got '" + *v + "'");
    if (*n < lo || *n > hi)
        throw UsageError("--" + key + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                         ", got " + *v);
    return *n;
}

double Args::get_double(const std::string& key, double dflt, double lo, double hi) const {
    auto v = value(key);
    if (!v) return dflt;
    auto d = parse_double(*v);
    if (!d) throw UsageError("--" + key + " wants a number, got '" + *v + "'");
    if (!(*d >= lo && *d <= hi))
        throw UsageError("--" + key + " must be between " + fmt_g(lo) + " and " + fmt_g(hi) + ", got " + *v);
    return *d;
}

std::optional<int64_t> parse_int(const std::string& s) {
    if (s.empty() || s.size() > 20) return std::nullopt;
    size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
    if (i == s.size()) return std::nullopt;
    for (size_t j = i; j < s.size(); ++j)
        if (!std::isdigit((unsigned char)s[j])) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno == ERANGE || *end) return std::nullopt;
    return v;
}

std::optional<double> parse_double(const std::string& s) {
    if (s.empty() || std::isspace((unsigned char)s[0])) return std::nullopt;
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (*end || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
    return v;
}

std::optional<std::vector<int64_t>> parse_int_list(const std::string& s) {
    std::vector<int64_t> out;
    size_t st = 0;
    while (true) {
        size_t e = s.find(',', st);
        std::string item = s.substr(st, e == std::string::npos ? std::string::npos : e - st);
        while (!item.empty() && item.front() == ' ') item.erase(item.begin());
        while (!item.empty() && item.back() == ' ') item.pop_back();
        auto v = parse_int(item);
        if (!v) return std::nullopt;
        out.push_back(*v);
        if (e == std::string::npos) break;
        st = e + 1;
    }
    return out;
}

}  // namespace bankml::cli
