#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

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

namespace {

// A copy of tests/data/NAME with `patch` applied to its bytes, in a fresh temporary directory.
std::string patched(const std::string& name, const std::function<void(std::string&)>& patch) {
    auto b = bt::read_file(bt::data_path(name));
    std::string s(b.begin(), b.end());
    patch(s);
    std::string p = bt::temp_dir() + "/" + name;
    std::ofstream(p, std::ios::binary) << s;
    return p;
}

// The offset just past the key string KEY in a GGUF's metadata (where its value type starts).
size_t after_key(const std::string& s, const std::string& key) {
    size_t k = s.find(key);
    REQUIRE(k != std::string::npos);
    return k + key.size();
}

}  // namespace

TEST(cli_bad_context_length_names_the_key) {
    std::string zero = patched("tiny-q1_0.gguf", [](std::string& s) {
        size_t v = after_key(s, "qwen3.context_length") + 4;
        std::memset(&s[v], 0, 4);
    });
    std::string neg = patched("tiny-q1_0.gguf", [](std::string& s) {
        size_t t = after_key(s, "qwen3.context_length");
        const uint32_t i32 = 5;
        const int32_t m5 = -5;
        std::memcpy(&s[t], &i32, 4);
        std::memcpy(&s[t + 4], &m5, 4);
    });
    for (const auto& [path, val] : {std::pair{zero, std::string("= 0 ")}, std::pair{neg, std::string("= -5 ")}}) {
        for (const std::string& cmd : {"run -m " + path + " -p hi -n 2", "run -m " + path + " --tokens 1,2 -n 2",
                                       "perplexity -m " + path + " -f " + bt::data_path("ppl-text.txt")}) {
            auto r = bm(cmd);
            CHECK_EQ(r.code, 1);
            CHECK_EQ(lines(r.err), 1u);
            if (!CHECK(has(r.err, "qwen3.context_length " + val))) std::printf("    %s", r.err.c_str());
        }
    }
}

TEST(cli_bytes_in_keys_and_tokenizer_errors_are_escaped_and_the_file_named) {
    std::string key = patched("tiny-q1_0.gguf", [](std::string& s) {
        size_t k = after_key(s, "general.name") - 12;
        s[k] = char(0xff), s[k + 1] = char(0xfe), s[k + 2] = 0;
    });
    auto r = bm("info " + key);
    CHECK_EQ(r.code, 0);
    CHECK(has(r.out, "  \\xff\\xfe\\x00eral.name "));
    auto j = bm("info --json " + key);
    CHECK(j.code == 0 || (j.code == 1 && lines(j.err) == 1));
    std::string merge = patched("tiny-q1_0.gguf", [](std::string& s) {
        // the value: type (arr), element type (str), count, then the first string's length and bytes
        size_t m = after_key(s, "tokenizer.ggml.merges") + 4 + 4 + 8 + 8;
        REQUIRE_EQ(s.substr(m, 3), std::string("e e"));
        s[m + 1] = 0;
    });
    for (const std::string& cmd : {"tokenize -m " + merge + " hi", "run -m " + merge + " -p hi",
                                   "detokenize -m " + merge + " 1"}) {
        auto t = bm(cmd);
        CHECK_EQ(t.code, 1);
        CHECK_EQ(lines(t.err), 1u);
        if (!CHECK(has(t.err, merge + ": tokenizer: merge 0 'e\\x00e' is not 'left right'"))) std::printf("    %s", t.err.c_str());
    }
}

TEST(cli_prompt_files_and_one_line_one_prefix_errors) {
    const std::string tiny = bt::data_path("tiny-q1_0.gguf"), vocab = bt::data_path("qwen3-vocab.gguf");
    auto dir = bm("run -m " + tiny + " -f /tmp");
    CHECK_EQ(dir.code, 1);
    CHECK_EQ(dir.err, "bankml run: /tmp: Is a directory\n");
    auto none = bm("run -m " + tiny + " -f /nonexistent");
    CHECK_EQ(none.code, 1);
    CHECK_EQ(none.err, "bankml run: /nonexistent: No such file or directory\n");
    auto tk = bm("tokenize -m " + vocab + " -f /tmp");
    CHECK_EQ(tk.err, "bankml tokenize: /tmp: Is a directory\n");
    // A FIFO with no writer reads as empty, at once.
    std::string d = bt::temp_dir();
    const int made = bt::run_cmd("mkfifo " + d + "/p").code;
    REQUIRE_EQ(made, 0);
    auto fifo = bm("run -m " + tiny + " -f " + d + "/p");
    CHECK_EQ(fifo.code, 2);
    CHECK(has(fifo.err, "the prompt is empty"));
    // A pipe with a writer is read to its end.
    auto pipe = bt::run_cmd("echo hello | timeout 20 " + bt::bankml_bin() + " tokenize -m " + vocab + " -f /dev/stdin");
    CHECK_EQ(pipe.code, 0);
    CHECK_EQ(pipe.out, bm("tokenize -m " + vocab + " 'hello\n'").out);
    auto ppl = bm("perplexity -m " + tiny + " -f /dev/null");
    CHECK_EQ(ppl.code, 1);
    CHECK_EQ(ppl.err, "bankml perplexity: the text has 0 tokens; a context of 128 needs at least 256\n");
    auto syn = bm("synth --heads 3 -o " + d + "/x.gguf");
    CHECK_EQ(syn.code, 2);
    CHECK_EQ(lines(syn.err), 1u);
    CHECK(syn.err.rfind("bankml synth: n_head = 3", 0) == 0);
}

TEST(cli_number_errors_say_g_and_too_large) {
    const std::string tiny = bt::data_path("tiny-q1_0.gguf");
    auto t = bm("run -m " + tiny + " -p hi --temp 1e10");
    CHECK_EQ(t.code, 2);
    CHECK(has(t.err, "--temp must be between -1e+09 and 1e+09, got 1e10"));
    auto s = bm("run -m " + tiny + " -p hi --seed 18446744073709551615");
    CHECK_EQ(s.code, 2);
    CHECK(has(s.err, "--seed 18446744073709551615 is too large"));
    auto n = bm("run -m " + tiny + " -p hi -n 99999999999999999999");
    CHECK(has(n.err, "--n-predict 99999999999999999999 is too large"));
    auto r = bm("run -m " + tiny + " -p hi --seed -1 -n 2");
    CHECK_EQ(r.code, 0);
    CHECK(has(r.err, "seed "));
}

TEST(cli_chat_long_message_help_reset_and_ctrl_c) {
    const std::string tiny = bt::data_path("tiny-q1_0.gguf"), bin = bt::bankml_bin();
    auto longmsg = bt::run_cmd("python3 -c \"print('word ' * 5000)\" | timeout 30 " + bin + " chat -m " + tiny + " -c 256");
    CHECK_EQ(longmsg.code, 0);
    CHECK(has(longmsg.err, "the message is "));
    CHECK(has(longmsg.err, " tokens, longer than the context of 256"));
    CHECK(!has(longmsg.err, "the context is full"));
    auto cmds = bt::run_cmd("printf '/help\\n/reset\\n' | timeout 30 " + bin + " chat -m " + tiny);
    CHECK_EQ(cmds.code, 0);
    CHECK(cmds.out.empty());  // /help never went to the model
    CHECK(has(cmds.err, "/reset"));
    CHECK(has(cmds.err, "(conversation cleared)"));
    // Ctrl-C stops a long reply; the chat goes on to the next line and ends normally.
    auto c = bt::run_cmd("(echo hi; sleep 3; echo /exit) | timeout 60 " + bin + " chat -m " + tiny +
                         " --ignore-eos -c 32768 -n 30000 --temp 0 & pid=$!; sleep 1; kill -INT $pid; wait $pid");
    CHECK_EQ(c.code, 0);
    CHECK(has(c.err, "(stopped)"));
}

TEST(cli_llama_cpp_flags_map_or_get_a_note) {
    const std::string tiny = bt::data_path("tiny-q1_0.gguf"), vocab = bt::data_path("qwen3-vocab.gguf");
    auto base = bm("run -m " + tiny + " -p hi -n 4 --temp 0 --stop zz --kv f16");
    auto same = bm("run -m " + tiny + " -p hi -n 4 --temp 0 -r zz -ngl 0 -fa on -ctk f16 -ctv f16");
    CHECK_EQ(base.code, 0);
    CHECK_EQ(same.code, 0);
    CHECK_EQ(same.out, base.out);
    // -ngl 0 keeps the model on the CPU even where a card (here lavapipe, allowed) would run it.
    const std::string soft = "BANKML_GPU_ALLOW_SOFTWARE=1 " + bt::bankml_bin() + " run -m " + tiny + " --tokens 1,2 -n 2 --json";
    auto ngl0 = bt::run_cmd(soft + " -ngl 0"), ngl99 = bt::run_cmd(soft + " -ngl 99");
    CHECK_EQ(ngl0.code, 0);
    CHECK_EQ(ngl99.code, 0);
    CHECK(has(ngl0.out, "\"backend\":\"cpu\""));
    CHECK(!has(ngl0.err, "runs the model"));
    if (has(ngl99.err, "runs the model")) CHECK(has(ngl99.out, "\"backend\":\"vulkan\""));
    CHECK_EQ(bm("run -m " + tiny + " -p hi -ctk q8_0").code, 2);
    CHECK_EQ(bm("run -m " + tiny + " -p hi -ctk f32 -ctv f16").code, 2);
    auto sys = bm("run -m " + tiny + " -p hi -n 3 --temp 0 --chat -sys 'be brief'");
    auto sys2 = bm("run -m " + tiny + " -p hi -n 3 --temp 0 --chat --system 'be brief'");
    auto nosys = bm("run -m " + tiny + " -p hi -n 3 --temp 0 --chat --json");
    CHECK_EQ(sys.code, 0);
    CHECK_EQ(sys.out, sys2.out);
    CHECK(has(nosys.out, "\"n_prompt\":"));
    CHECK(!has(nosys.out, "\"n_prompt\":30"));  // the system message made the prompt longer
    for (const char* f : {"-b 512", "--mlock", "-cnv", "--grammar x", "-hf x/y", "--port 8080", "-mg 0", "--lora x"}) {
        auto r = bm("run -m " + tiny + " -p hi " + f);
        CHECK_EQ(r.code, 2);
        CHECK_EQ(lines(r.err), 1u);
        if (!CHECK(has(r.err, "llama.cpp's -") && has(r.err, "is not supported by bankml: "))) std::printf("    %s", r.err.c_str());
    }
    // run --tokens: spaces as detokenize takes them, -n -1 until the context is full.
    auto sp = bm("run -m " + tiny + " --tokens '1 2  3' -n 3");
    CHECK_EQ(sp.out, bm("run -m " + tiny + " --tokens 1,2,3 -n 3").out);
    auto all = bm("run -m " + tiny + " --tokens 1,2 -n -1 -c 8");
    CHECK_EQ(all.code, 0);
    CHECK_EQ(std::count(all.out.begin(), all.out.end(), ' '), 6);  // 7 ids: 2 + 7 - 1 fill the 8
    // tokenize: -p, --ids, --no-bos and the file's add_bos_token.
    CHECK_EQ(bm("tokenize -m " + vocab + " -p 'hello world' --ids").out, "[14990, 1879]\n");
    std::string bos = patched("qwen3-vocab.gguf", [](std::string& s) { s[after_key(s, "tokenizer.ggml.add_bos_token") + 4] = 1; });
    CHECK_EQ(bm("tokenize -m " + bos + " hello").out, "151643,14990\n");
    CHECK_EQ(bm("tokenize -m " + bos + " --no-bos hello").out, "14990\n");
    // perplexity --chunks, bench -o csv.
    auto ppl = bm("perplexity -m " + tiny + " -f " + bt::data_path("ppl-text.txt") + " -c 64 --chunks 2 --json");
    CHECK_EQ(ppl.code, 0);
    CHECK(has(ppl.out, "\"n_chunks\":2"));
    auto csv = bm("bench --shape tiny -p 8 -n 4 -r 1 -o csv");
    CHECK_EQ(csv.code, 0);
    CHECK(csv.out.rfind("model_type,model_size,", 0) == 0);
    CHECK_EQ(lines(csv.out), 3u);
    CHECK_EQ(bm("bench --shape tiny -o xml").code, 2);
    // bench batch: one row per stream count; without -m or with a count outside 1..64, a usage error.
    auto batch = bm("bench batch -m " + tiny + " -t 2 --streams 1,3 -r 1");
    CHECK_EQ(batch.code, 0);
    CHECK_EQ(lines(batch.out), 4u);
    CHECK(has(batch.out, "aggregate / 1") && has(batch.out, "\n       3 "));
    CHECK_EQ(bm("bench batch --streams 2").code, 2);
    CHECK_EQ(bm("bench batch -m " + tiny + " --streams 0,2").code, 2);
    // bench sample: a title, a header and one row per way of taking the top k; a vocabulary of
    // one token is a usage error.
    auto sample = bm("bench sample --vocab 5000 --draws 5 -r 1");
    CHECK_EQ(sample.code, 0);
    CHECK_EQ(lines(sample.out), 4u);
    CHECK(has(sample.out, "\none-pass top-k ") && has(sample.out, "\nfull sort "));
    CHECK_EQ(bm("bench sample --vocab 1").code, 2);
}
