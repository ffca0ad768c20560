#include <algorithm>
#include <filesystem>

#include "core/cli.h"
#include "core/error.h"
#include "test.h"

using namespace bankml;

TEST(cli_help_exits_0_and_unknown_command_exits_2_with_one_line) {
    auto h = bt::run_cmd(bt::bankml_bin() + " --help");
    CHECK_EQ(h.code, 0);
    CHECK(h.out.find("usage: bankml") != std::string::npos);
    auto u = bt::run_cmd(bt::bankml_bin() + " frobnicate");
    CHECK_EQ(u.code, 2);
    CHECK(u.out.empty());
    CHECK_EQ(std::count(u.err.begin(), u.err.end(), '\n'), 1);
    auto v = bt::run_cmd(bt::bankml_bin() + " version");
    CHECK_EQ(v.code, 0);
    CHECK(v.out.find("cpu features:") != std::string::npos);
    auto f = bt::run_cmd(bt::bankml_bin() + " version --frob");
    CHECK_EQ(f.code, 2);
    CHECK_EQ(std::count(f.err.begin(), f.err.end(), '\n'), 1);
    auto hc = bt::run_cmd(bt::bankml_bin() + " help version");
    CHECK_EQ(hc.code, 0);
    CHECK(hc.out.find("usage: bankml version") != std::string::npos);
}

TEST(cli_args_parse_flags_values_and_reject_bad_ones) {
    std::vector<cli::Flag> flags = {{"-m|--model", true}, {"-n", true}, {"--json", false}};
    cli::Args a({"-m", "x.gguf", "--json", "-n", "12"}, flags);
    CHECK_EQ(a.get("model", ""), "x.gguf");
    CHECK(a.has("json"));
    CHECK_EQ(a.get_int("n", 0, 0, 100), 12);
    cli::Args b({"--model=y"}, flags);
    CHECK_EQ(b.get("model", ""), "y");
    CHECK_THROWS(cli::Args({"--frob"}, flags), "unknown flag --frob");
    CHECK_THROWS(cli::Args({"-m"}, flags), "needs a value");
    CHECK_THROWS(cli::Args({"pos"}, flags), "unexpected argument");
    CHECK_THROWS(cli::Args({"-n", "1x"}, flags).get_int("n", 0, 0, 10), "wants an integer");
    CHECK_THROWS(cli::Args({"-n", "11"}, flags).get_int("n", 0, 0, 10), "between 0 and 10");
    cli::Args neg({"-n", "-3"}, flags);
    CHECK_EQ(neg.get_int("n", 0, -5, 5), -3);
    CHECK(!cli::parse_int("").has_value());
    CHECK(!cli::parse_int("99999999999999999999").has_value());
    CHECK(!cli::parse_double("nan").has_value());
    auto l = cli::parse_int_list("1,2, 3");
    REQUIRE(l.has_value());
    CHECK_EQ(l->size(), 3u);
    CHECK(!cli::parse_int_list("1,,2").has_value());
}

namespace {

size_t lines(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }
bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }
// Every CLI check below runs under timeout(1): a command that blocks fails the test (code 124).
bt::Proc bm(const std::string& args) { return bt::run_cmd("timeout 20 " + bt::bankml_bin() + " " + args); }

}  // namespace

TEST(cli_output_refuses_devices_fifos_and_directories_and_writes_through_symlinks) {
    std::string d = bt::temp_dir();
    const int made = bt::run_cmd("mkfifo " + d + "/fifo && mknod " + d + "/null c 1 3 2>/dev/null || ln -s /dev/null " + d +
                           "/null; mkdir " + d + "/dir && ln -s " + d + "/real.gguf " + d + "/link.gguf && echo old >" + d +
                           "/real.gguf && ln -s /dev/null " + d + "/devlink").code;
    REQUIRE_EQ(made, 0);
    for (const char* name : {"fifo", "null", "dir", "devlink"}) {
        auto r = bm("synth -o " + d + "/" + name);
        CHECK_EQ(r.code, 1);
        CHECK_EQ(lines(r.err), 1u);
        CHECK(has(r.err, std::string("/") + name + ": "));
        CHECK(!std::filesystem::exists(d + "/" + name + ".part"));
    }
    // The special files are still what they were.
    CHECK(std::filesystem::is_fifo(d + "/fifo"));
    CHECK(!std::filesystem::is_regular_file(d + "/null"));
    CHECK(std::filesystem::is_directory(d + "/dir"));
    CHECK(std::filesystem::is_symlink(d + "/devlink"));
    CHECK(std::filesystem::is_character_file("/dev/null"));
    if (std::filesystem::exists("/dev/full")) {
        auto r = bm("synth -o /dev/full");
        CHECK_EQ(r.code, 1);
        CHECK(has(r.err, "/dev/full: not a regular file (a character device)"));
    }
    // A symlink to a regular file: the target is replaced, the link stays a link.
    auto r = bm("synth -o " + d + "/link.gguf");
    CHECK_EQ(r.code, 0);
    CHECK(std::filesystem::is_symlink(d + "/link.gguf"));
    CHECK_GT(std::filesystem::file_size(d + "/real.gguf"), 1000u);
    CHECK_EQ(bm("info " + d + "/link.gguf").code, 0);
    // The nonexistent directory: the errno text, nothing left behind.
    auto n = bm("synth -o " + d + "/nodir/x.gguf");
    CHECK_EQ(n.code, 1);
    CHECK(has(n.err, "No such file or directory"));
}

TEST(cli_model_files_that_are_fifos_or_directories_fail_at_once) {
    std::string d = bt::temp_dir();
    const int made = bt::run_cmd("mkfifo " + d + "/f.gguf").code;
    REQUIRE_EQ(made, 0);
    for (const std::string& cmd : {"info " + d + "/f.gguf", "run -m " + d + "/f.gguf -p hi",
                                   "tokenize -m " + d + "/f.gguf hi", "info " + d}) {
        auto r = bm(cmd);
        CHECK_EQ(r.code, 1);
        CHECK_EQ(lines(r.err), 1u);
        CHECK(has(r.err, "not a regular file (a FIFO)") || has(r.err, ": Is a directory"));
    }
}

TEST(cli_failed_writes_to_stdout_exit_1_with_the_errno_text) {
    const std::string vocab = bt::data_path("qwen3-vocab.gguf"), tiny = bt::data_path("tiny-q1_0.gguf");
    const std::string cmds[] = {"tokenize -m " + vocab + " hello", "tokenize -m " + vocab + " --json hello",
                                "info " + tiny, "info --json " + tiny, "run -m " + tiny + " -p hi -n 3 --temp 0",
                                "run -m " + tiny + " --tokens 1,2 -n 3 --json", "help run"};
    for (const auto& c : cmds) {
        auto closed = bm(c + " >&-");
        CHECK_EQ(closed.code, 1);
        if (!CHECK(has(closed.err, "write error: Bad file descriptor"))) std::printf("    %s: %s", c.c_str(), closed.err.c_str());
        if (std::filesystem::exists("/dev/full")) {
            auto full = bt::run_cmd("timeout 20 " + bt::bankml_bin() + " " + c + " 2>&1 >/dev/full");
            CHECK_EQ(full.code, 1);
            if (!CHECK(has(full.out, "write error: No space left on device"))) std::printf("    %s: %s", c.c_str(), full.out.c_str());
        }
        CHECK_EQ(bm(c).code, 0);
    }
}

TEST(cli_flag_values_and_double_dash_are_not_flags) {
    std::vector<cli::Flag> flags = {{"-p|--prompt", true}, {"--stop", true}, {"--json", false}};
    cli::Args a({"-p", "--help", "--stop", "-h"}, flags);
    CHECK_EQ(a.get("prompt", ""), "--help");
    CHECK_EQ(a.get("stop", ""), "-h");
    cli::Args b({"--json", "--", "-hello", "--help"}, flags, 2);
    CHECK_EQ(b.positional().size(), 2u);
    CHECK_EQ(b.positional()[0], "-hello");
    CHECK_EQ(b.positional()[1], "--help");
    bool help = false;
    try {
        cli::Args({"--frob", "-h"}, flags);
    } catch (const cli::HelpRequested&) {
        help = true;
    }
    CHECK(help);
    const std::string tiny = bt::data_path("tiny-q1_0.gguf"), vocab = bt::data_path("qwen3-vocab.gguf");
    auto r = bm("run -m " + tiny + " -p --help -n 2 --temp 0");
    CHECK_EQ(r.code, 0);
    CHECK(!has(r.out, "usage:"));
    CHECK(has(r.err, "generated 2 tokens"));
    auto s = bm("run -m " + tiny + " -p hi -n 2 --stop -h --system --help --chat");
    CHECK_EQ(s.code, 0);
    CHECK(!has(s.out, "usage:"));
    auto h = bm("run -m " + tiny + " --frob --help");
    CHECK_EQ(h.code, 0);
    CHECK(has(h.out, "usage: bankml run"));
    auto t = bm("tokenize -m " + vocab + " -- -hello");
    auto t2 = bm("tokenize -m " + vocab + " ' -hello'");
    CHECK_EQ(t.code, 0);
    CHECK(!t.out.empty());
    CHECK_NE(t.out, t2.out);
    auto dt = bm("detokenize -m " + vocab + " -- 12");
    CHECK_EQ(dt.code, 0);
}

TEST(cli_dump_spirv_into_an_unwritable_directory_gives_the_errno_text) {
    auto r = bm("gpu --dump-spirv /proc/self");
    CHECK_EQ(r.code, 1);
    CHECK_EQ(lines(r.err), 1u);
    CHECK(has(r.err, "No such file or directory") || has(r.err, "Permission denied"));
    std::string d = bt::temp_dir();
    auto ok = bm("gpu --dump-spirv " + d);
    CHECK_EQ(ok.code, 0);
    CHECK(std::filesystem::exists(d + "/fma_probe.spv"));
}
