// BANKML_THREADS: a positive integer sets Pool::from_env()'s size; anything else is reported once
// on stderr and the machine's parallelism is used.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "par/pool.h"
#include "test.h"

using namespace bankml;

namespace {
// Sets (or with nullptr unsets) BANKML_THREADS and puts back what was there at scope exit.
struct EnvThreads {
    std::string old;
    bool had;
    explicit EnvThreads(const char* v) {
        const char* o = std::getenv("BANKML_THREADS");
        had = o != nullptr;
        if (o) old = o;
        if (v) setenv("BANKML_THREADS", v, 1);
        else unsetenv("BANKML_THREADS");
    }
    ~EnvThreads() {
        if (had) setenv("BANKML_THREADS", old.c_str(), 1);
        else unsetenv("BANKML_THREADS");
    }
};

// Runs f with stderr going to a file; returns what was written.
template <class F>
std::string capture_stderr(F f) {
    std::string path = bt::temp_dir() + "/stderr";
    std::fflush(stderr);
    int saved = dup(2);
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    f();
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

TEST(bankml_threads_sets_the_pool_size_and_bad_values_are_reported_once) {
    int hw = std::max(1, int(std::thread::hardware_concurrency()));
    {
        EnvThreads e(nullptr);
        CHECK_EQ(par::Pool::env_threads(), hw);
    }
    {
        EnvThreads e("3");
        CHECK_EQ(par::Pool::env_threads(), 3);
        CHECK_EQ(par::Pool::from_env().threads(), 3);
    }
    {
        EnvThreads e("1");
        CHECK_EQ(par::Pool::from_env().threads(), 1);
    }
    std::string err = capture_stderr([&] {
        for (const char* bad : {"abc", "0", "-2", "", "2x", " 2", "99999", "1.5"}) {
            EnvThreads e(bad);
            CHECK_EQ(par::Pool::env_threads(), hw);
        }
    });
    // One line, the first bad value named, the fallback said.
    CHECK_EQ(std::count(err.begin(), err.end(), '\n'), 1);
    CHECK(err.find("BANKML_THREADS='abc'") != std::string::npos);
    CHECK(err.find("using " + std::to_string(hw) + " threads") != std::string::npos);
}
