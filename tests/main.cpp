// The test runner: `bankml_tests [pattern...]` runs the tests whose names contain any pattern,
// one line per test, lists the skipped tests by name, and ends with exactly
// "N passed, N failed, N skipped". A skip whose need the run requires is a failure (test.h).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "core/cpu.h"
#include "test.h"

namespace bt {

std::vector<Case>& registry() {
    static std::vector<Case> r;
    return r;
}

static int g_failures = 0;
static std::vector<std::string> g_temp_dirs;

void fail(const char* file, int line, const std::string& what) {
    ++g_failures;
    if (g_failures <= 20)
        std::printf("    %s:%d: %s\n", std::filesystem::path(file).filename().c_str(), line, what.c_str());
    else if (g_failures == 21)
        std::printf("    (further failures in this test not shown)\n");
}

std::string data_path(const std::string& name) {
    if (const char* d = std::getenv("BANKML_TEST_DATA")) return std::string(d) + "/" + name;
    for (const char* base : {"tests/data/", "../tests/data/", "data/"}) {
        std::string p = std::string(base) + name;
        if (std::filesystem::exists(p)) return p;
    }
    return std::string("tests/data/") + name;
}

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

static std::string slurp_and_remove(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(f)), {});
    std::remove(p.c_str());
    return s;
}

Proc run_cmd(const std::string& cmd) {
    std::string dir = temp_dir();
    std::string o = dir + "/out", e = dir + "/err";
    std::string full = "(" + cmd + ") >'" + o + "' 2>'" + e + "' </dev/null";
    int st = std::system(full.c_str());
    Proc p;
    p.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    p.out = slurp_and_remove(o);
    p.err = slurp_and_remove(e);
    return p;
}

void fast_path_checked() {
    if (!bankml::cpu_has_avx2_fma_f16c())
        throw Skipped{"avx2", "no AVX2/FMA/F16C: the fast path is the reference here, so only the reference was checked"};
}

std::string bankml_bin() {
    if (const char* b = std::getenv("BANKML_BIN")) return b;
    return std::filesystem::absolute("bankml").string();
}

std::string temp_dir() {
    char tmpl[] = "/tmp/bankml-test-XXXXXX";
    char* d = mkdtemp(tmpl);
    if (!d) throw std::runtime_error("mkdtemp failed");
    g_temp_dirs.push_back(d);
    return d;
}

}  // namespace bt

namespace {

// What this run requires: BANKML_TEST_REQUIRE_GPU=1 adds "gpu"; BANKML_TEST_REQUIRE a comma list.
std::vector<std::string> required() {
    std::vector<std::string> r;
    if (const char* g = std::getenv("BANKML_TEST_REQUIRE_GPU"); g && std::string(g) == "1") r.push_back("gpu");
    if (const char* l = std::getenv("BANKML_TEST_REQUIRE")) {
        std::string s = l;
        for (size_t at = 0; at <= s.size();) {
            size_t comma = s.find(',', at);
            if (comma == std::string::npos) comma = s.size();
            if (comma > at) r.push_back(s.substr(at, comma - at));
            at = comma + 1;
        }
    }
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> pats(argv + 1, argv + argc);
    int passed = 0, failed = 0, skipped = 0;
    const std::vector<std::string> req = required();
    std::vector<std::string> skipped_names;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    for (const auto& c : bt::registry()) {
        if (!pats.empty()) {
            bool hit = false;
            for (const auto& p : pats) hit |= std::string(c.name).find(p) != std::string::npos;
            if (!hit) continue;
        }
        int before = bt::g_failures;
        std::string skip_why, skip_needs, thrown;
        auto t0 = std::chrono::steady_clock::now();
        try {
            c.fn();
        } catch (const bt::Stop&) {
        } catch (const bt::Skipped& s) {
            skip_why = s.why.empty() ? "(no reason given)" : s.why;
            skip_needs = s.needs;
            for (const auto& r : req)
                if (r == s.needs) {
                    ++bt::g_failures;
                    std::printf("    skipped for want of %s, which this run requires: %s\n", s.needs.c_str(), skip_why.c_str());
                }
        } catch (const std::exception& e) {
            thrown = e.what();
        } catch (...) {
            thrown = "unknown exception";
        }
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!thrown.empty()) {
            ++bt::g_failures;
            std::printf("    threw: %s\n", thrown.c_str());
        }
        if (bt::g_failures != before) {
            ++failed;
            std::printf("FAIL %s (%.0f ms)\n", c.name, ms);
        } else if (!skip_why.empty()) {
            ++skipped;
            skipped_names.push_back(std::string(c.name) + " (needs " + skip_needs + ")");
            std::printf("SKIP %s: needs %s: %s\n", c.name, skip_needs.c_str(), skip_why.c_str());
        } else {
            ++passed;
            std::printf("ok   %s (%.0f ms)\n", c.name, ms);
        }
        bt::g_failures = 0;
    }
    for (const auto& d : bt::g_temp_dirs) {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
    }
    if (!skipped_names.empty()) {
        std::printf("skipped:");
        for (size_t i = 0; i < skipped_names.size(); ++i) std::printf("%s %s", i ? "," : "", skipped_names[i].c_str());
        std::printf("\n");
    }
    std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
