// ./bankml runs on any glibc from the floor on (docs/modules/build.md): its imports name no newer
// symbol version, and an old glibc's own loader runs it to the same output as the machine's.
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "test.h"

namespace {

std::string env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v && *v ? v : fallback;
}

// "2.17" -> 21700, "2.3.4" -> 20304: glibc versions compared as numbers, not strings.
int vnum(const std::string& v) {
    int part[3] = {0, 0, 0};
    std::istringstream in(v);
    std::string s;
    for (int i = 0; i < 3 && std::getline(in, s, '.'); i++) part[i] = std::atoi(s.c_str());
    return part[0] * 10000 + part[1] * 100 + part[2];
}

struct Import {
    std::string name, version;
};

// The versioned symbols a binary imports, from readelf's dynamic symbol table.
std::vector<Import> imports(const std::string& bin) {
    auto r = bt::run_cmd("readelf --dyn-syms -W '" + bin + "'");
    REQUIRE_EQ(r.code, 0);
    std::vector<Import> out;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
        std::istringstream f(line);
        std::vector<std::string> w;
        for (std::string s; f >> s;) w.push_back(s);
        if (w.size() < 8 || w[0].back() != ':' || w[6] != "UND") continue;
        auto at = w[7].find('@');
        if (at == std::string::npos) continue;
        std::string ver = w[7].substr(at + 1);
        if (!ver.empty() && ver[0] == '@') ver.erase(0, 1);
        out.push_back({w[7].substr(0, at), ver});
    }
    return out;
}

// The old glibc's loader, or "" with the test skipped (failed when CI asks for it).
std::string old_loader(std::string* libpath) {
    const std::string dir = env_or("BANKML_OLD_GLIBC", "");
    const std::string ld = dir + "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";
    if (dir.empty() || bt::run_cmd("test -x '" + ld + "'").code != 0) {
        const std::string why = "no old glibc at '" + dir + "': run scripts/old-glibc.sh DIR and set BANKML_OLD_GLIBC=DIR";
        if (env_or("BANKML_REQUIRE_OLD_GLIBC", "0") == "1") {
            bt::fail(__FILE__, __LINE__, why);
            throw bt::Stop{};
        }
        throw bt::Skipped{"old-glibc", why};
    }
    *libpath = dir + "/lib/x86_64-linux-gnu:" + dir + "/usr/lib/x86_64-linux-gnu";
    return ld;
}

// The AddressSanitizer build links against the machine's glibc as it is: nothing to prove there.
void skip_under_asan() {
    if (env_or("BANKML_ASAN", "0") == "1") throw bt::Skipped{"non-asan-build", "the ASan build is linked for this machine's glibc only"};
}

// The repository root, next to ./bankml.
std::string root() {
    const std::string bin = bt::bankml_bin();
    const auto slash = bin.rfind('/');
    return slash == std::string::npos ? "." : bin.substr(0, slash);
}

}  // namespace

TEST(glibc_floor_imports_no_newer_symbol_version) {
    skip_under_asan();
    const std::string floor = env_or("BANKML_GLIBC_FLOOR", "2.17");
    const auto syms = imports(bt::bankml_bin());
    int glibc = 0;
    std::string newest = "2.0", too_new;
    for (const auto& s : syms) {
        if (s.version.rfind("GLIBC_", 0) != 0) continue;
        glibc++;
        const std::string v = s.version.substr(6);
        if (v == "PRIVATE" || vnum(v) > vnum(floor)) too_new += " " + s.name + "@" + s.version;
        else if (vnum(v) > vnum(newest)) newest = v;
    }
    // Hundreds of imports (pthreads, sockets, stdio, dlopen) are all versioned; none may be above the floor.
    CHECK_GT(glibc, 100);
    CHECK_EQ(too_new, "");
    CHECK_LE(vnum(newest), vnum(floor));
    // The calls that moved or changed since the floor resolve to their old versions.
    for (const char* want : {"__libc_start_main@GLIBC_2.2.5", "pthread_create@GLIBC_2.2.5", "dlopen@GLIBC_2.2.5"}) {
        bool found = false;
        for (const auto& s : syms) found = found || s.name + "@" + s.version == want;
        if (!found) bt::fail(__FILE__, __LINE__, std::string("missing import ") + want);
    }
    // Only glibc's own libraries are needed, libstdc++ and libgcc are inside.
    auto d = bt::run_cmd("readelf -d -W '" + bt::bankml_bin() + "' | sed -n 's/.*(NEEDED).*\\[\\(.*\\)\\]/\\1/p'");
    REQUIRE_EQ(d.code, 0);
    std::istringstream in(d.out);
    int libs = 0;
    for (std::string lib; in >> lib; libs++) {
        const bool glibc_lib = lib == "libc.so.6" || lib == "libm.so.6" || lib == "libpthread.so.0" || lib == "libdl.so.2" ||
                               lib == "ld-linux-x86-64.so.2";
        if (!glibc_lib) bt::fail(__FILE__, __LINE__, "./bankml needs " + lib);
    }
    CHECK_GE(libs, 3);
}

TEST(glibc_floor_check_script_names_a_newer_symbol) {
    skip_under_asan();
    // The post-link check fails on a binary built the default way against the machine's glibc 2.34+,
    // naming the newer symbol, so it is a check that can fail.
    const std::string dir = bt::temp_dir();
    auto c = bt::run_cmd("printf '#include <pthread.h>\\nstatic void* f(void* p) { return p; }\\n"
                         "int main() { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }\\n' > " +
                         dir + "/t.c && cc -pthread -o " + dir + "/t " + dir + "/t.c");
    REQUIRE_EQ(c.code, 0);
    if (bt::run_cmd("readelf --dyn-syms -W " + dir + "/t | grep -q 'pthread_create@GLIBC_2.34'").code != 0)
        throw bt::Skipped{"this machine's glibc is older than 2.34: pthread_create has no newer version to catch"};
    auto bad = bt::run_cmd(root() + "/scripts/glibc-check.sh " + dir + "/t 2.17");
    CHECK_EQ(bad.code, 1);
    CHECK(bad.err.find("pthread_create@GLIBC_2.34") != std::string::npos);
    auto ok = bt::run_cmd(root() + "/scripts/glibc-check.sh '" + bt::bankml_bin() + "' " + env_or("BANKML_GLIBC_FLOOR", "2.17"));
    CHECK_EQ(ok.code, 0);
    CHECK_EQ(ok.err, "");
}

TEST(glibc_floor_old_loader_runs_version_run_and_gpu) {
    skip_under_asan();
    std::string libpath;
    const std::string ld = old_loader(&libpath);
    const std::string bin = bt::bankml_bin();
    const std::string old = ld + " --library-path " + libpath + " " + bin;
    // The old C library is really the one in use: its libc.so.6 reports 2.31 or older.
    auto libc = bt::run_cmd(ld + " --library-path " + libpath + " " + libpath.substr(0, libpath.find(':')) + "/libc.so.6");
    CHECK(libc.out.find("version 2.") != std::string::npos);

    auto hv = bt::run_cmd(bin + " version"), ov = bt::run_cmd(old + " version");
    CHECK_EQ(ov.code, 0);
    CHECK_EQ(ov.err, "");
    CHECK_EQ(ov.out, hv.out);

    // The same tokens from a tiny model: greedy on 2 threads (pthreads), and sampled from a text prompt
    // (tokenizer, sampler, libm) as JSON, whose timings differ from run to run but whose ids may not.
    const std::string q1 = bt::data_path("tiny-q1_0.gguf");
    const std::string greedy = " run -m " + q1 + " --tokens 1,2,3,4,5,6,7,8 -n 64 -t 2";
    auto hg1 = bt::run_cmd(bin + greedy), og1 = bt::run_cmd(old + greedy);
    CHECK_EQ(hg1.code, 0);
    CHECK_EQ(og1.code, 0);
    CHECK(og1.out.size() > 64);
    CHECK_EQ(og1.out, hg1.out);
    const std::string sampled = " run -m " + q1 + " -p 'hello world' -n 24 -t 1 --temp 0.8 --seed 7 --json";
    auto ids = [](const std::string& out) {
        const auto a = out.find("\"ids\":["), b = out.find(']', a);
        return a == std::string::npos || b == std::string::npos ? std::string() : out.substr(a, b - a);
    };
    auto hs = bt::run_cmd(bin + sampled), os = bt::run_cmd(old + sampled);
    CHECK_EQ(hs.code, 0);
    CHECK_EQ(os.code, 0);
    CHECK(ids(os.out).size() > 24);
    CHECK_EQ(ids(os.out), ids(hs.out));
    // A clear error still comes out as one line with its exit code (exceptions unwind).
    auto he = bt::run_cmd(bin + " run -m /nonexistent.gguf"), oe = bt::run_cmd(old + " run -m /nonexistent.gguf");
    CHECK_EQ(oe.code, he.code);
    CHECK_EQ(oe.err, he.err);

    // `bankml gpu` dlopens the old system's libvulkan.so.1. With no driver to load both give the same
    // report; with the machine's drivers (built for its newer glibc) the old one reports what failed.
    const std::string none = "VK_ICD_FILENAMES=/nonexistent.json VK_DRIVER_FILES=/nonexistent.json ";
    auto hg = bt::run_cmd(none + bin + " gpu"), og = bt::run_cmd(none + old + " gpu");
    CHECK_EQ(og.code, 0);
    CHECK_EQ(og.code, hg.code);
    CHECK(og.out.find("\"devices\"") != std::string::npos);
    CHECK(og.out.find("vkCreateInstance") != std::string::npos);  // the old libvulkan.so.1 was loaded and called
    auto any = bt::run_cmd(old + " gpu");
    CHECK_EQ(any.code, 0);
    CHECK(any.out.find("\"devices\"") != std::string::npos);
}
