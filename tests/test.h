// bankml's hand-rolled test runner: TEST registers, CHECK* records and keeps going,
// REQUIRE* stops the test, SKIP marks it skipped, naming what the machine lacks and why.
//
// A skip is never silent: the runner prints it, lists every skipped test by name before the closing
// line, and turns it into a failure where the run requires what it names:
//   BANKML_TEST_REQUIRE_GPU=1        every "gpu" skip fails (a Vulkan device, lavapipe included, and
//                                    the GPU tooling .ci/run installs: validation layers, spirv-val)
//   BANKML_TEST_REQUIRE=avx2,avxvnni  skips naming one of these fail (CPU paths this machine has)
#pragma once
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace bt {

struct Case {
    const char* name;
    const char* file;
    void (*fn)();
};
std::vector<Case>& registry();
struct Registrar {
    Registrar(const char* name, const char* file, void (*fn)()) { registry().push_back({name, file, fn}); }
};

// Thrown by REQUIRE to leave the test, and by SKIP.
struct Stop {};
struct Skipped {
    std::string needs;  // what the machine lacks: "gpu", a CPU feature ("avx2", "avxvnni"), ...
    std::string why;
};

void fail(const char* file, int line, const std::string& what);

template <class T>
std::string show(const T& v) {
    std::ostringstream o;
    if constexpr (std::is_same_v<T, bool>) o << (v ? "true" : "false");
    else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char>) o << int(v);
    else if constexpr (std::is_floating_point_v<T>) { o.precision(9); o << v; }
    else if constexpr (requires { o << v; }) o << v;
    else o << "<value>";
    return o.str();
}

template <class A, class B>
bool check_op(bool ok, const char* file, int line, const char* expr, const A& a, const B& b) {
    if (!ok) fail(file, line, std::string(expr) + "  [" + show(a) + " vs " + show(b) + "]");
    return ok;
}

// Reads a file under tests/data (the directory is found from the working directory or BANKML_TEST_DATA).
std::string data_path(const std::string& name);
std::vector<uint8_t> read_file(const std::string& path);
// Runs a command through /bin/sh, capturing stdout and stderr separately; returns the exit status.
struct Proc { int code = -1; std::string out, err; };
Proc run_cmd(const std::string& cmd);
// Ends a test that compared a fast path with its reference: on a CPU without AVX2/FMA/F16C the fast
// path is the reference itself, so the test is reported skipped for want of avx2 (its other checks
// still ran and still fail it).
void fast_path_checked();
// Path of the built ./bankml (BANKML_BIN, else ./bankml).
std::string bankml_bin();
// A fresh temporary directory, removed at exit of the test binary.
std::string temp_dir();

}  // namespace bt

#define BT_CAT2(a, b) a##b
#define BT_CAT(a, b) BT_CAT2(a, b)
#define TEST(name)                                                        \
    static void BT_CAT(bt_test_, name)();                                 \
    static ::bt::Registrar BT_CAT(bt_reg_, name)(#name, __FILE__, &BT_CAT(bt_test_, name)); \
    static void BT_CAT(bt_test_, name)()

#define CHECK(c) ((c) ? true : (::bt::fail(__FILE__, __LINE__, "CHECK(" #c ")"), false))
#define BT_CMP(a, b, op) ::bt::check_op(((a)op(b)), __FILE__, __LINE__, #a " " #op " " #b, (a), (b))
#define CHECK_EQ(a, b) BT_CMP(a, b, ==)
#define CHECK_NE(a, b) BT_CMP(a, b, !=)
#define CHECK_LT(a, b) BT_CMP(a, b, <)
#define CHECK_LE(a, b) BT_CMP(a, b, <=)
#define CHECK_GT(a, b) BT_CMP(a, b, >)
#define CHECK_GE(a, b) BT_CMP(a, b, >=)
#define CHECK_NEAR(a, b, tol)                                                                    \
    ::bt::check_op(std::abs(double(a) - double(b)) <= double(tol), __FILE__, __LINE__,          \
                   "CHECK_NEAR(" #a ", " #b ", " #tol ")", (a), (b))
// CHECK_THROWS(expr, substring): expr must throw a std::exception whose what() contains substring.
#define CHECK_THROWS(expr, sub)                                                                  \
    do {                                                                                         \
        bool bt_threw = false;                                                                   \
        try { (void)(expr); } catch (const std::exception& bt_e) {                               \
            bt_threw = true;                                                                     \
            if (std::string(bt_e.what()).find(sub) == std::string::npos)                         \
                ::bt::fail(__FILE__, __LINE__, std::string("CHECK_THROWS(" #expr "): message '") \
                                                   + bt_e.what() + "' lacks '" + (sub) + "'");   \
        }                                                                                        \
        if (!bt_threw) ::bt::fail(__FILE__, __LINE__, "CHECK_THROWS(" #expr "): nothing thrown"); \
    } while (0)
#define REQUIRE(c) do { if (!CHECK(c)) throw ::bt::Stop{}; } while (0)
#define REQUIRE_EQ(a, b) do { if (!CHECK_EQ(a, b)) throw ::bt::Stop{}; } while (0)
// SKIP(needs, why): the test cannot run here because the machine lacks `needs`.
#define SKIP(needs, why) throw ::bt::Skipped{needs, why}
