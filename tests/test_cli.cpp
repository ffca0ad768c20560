#include <algorithm>

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
