#include "core/cli.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace bankml::cli {

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
    for (size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        if (a == "--help" || a == "-h") {
            help_ = true;
            continue;
        }
        if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit((unsigned char)a[1]) || a[1] == '.'))) {
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
            if (!f) throw UsageError("unknown flag " + name);
            std::string key = key_of(*f);
            if (f->takes_value) {
                if (!inline_val) {
                    if (i + 1 >= args.size()) throw UsageError("flag " + name + " needs a value");
                    val = args[++i];
                }
                vals_[key] = val;
            } else {
                if (inline_val) throw UsageError("flag " + name + " takes no value");
                vals_[key] = "";
            }
            continue;
        }
        pos_.push_back(a);
    }
    if (pos_.size() > max_positional)
        throw UsageError("unexpected argument '" + pos_[max_positional] + "'");
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
        throw UsageError("--" + key + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                         ", got " + *v);
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
