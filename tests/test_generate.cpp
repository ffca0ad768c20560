// The generation loop and ChatML, with a scripted logit source standing in for the model (the
// real forward pass is tested with the tiny models where it is wired in): stop reasons, -n,
// stop strings across tokens, the context limit, UTF-8-safe streaming, hidden reasoning, and
// that the prompt enters the repetition window.
#include "core/utf8.h"
#include "model/chat.h"
#include "model/generate.h"
#include "model/gguf.h"
#include "model/unicode.h"
#include "test.h"

using namespace bankml;
using namespace bankml::model;

namespace {

const Tokenizer& qwen3() {
    static const Tokenizer tok = [] {
        auto f = gguf::File::open(bt::data_path("qwen3-vocab.gguf"));
        return Tokenizer::from_gguf(f);
    }();
    return tok;
}

// Returns logits whose argmax is script[k] after the k-th eval (then the last entry forever).
class Scripted : public LogitSource {
public:
    Scripted(std::vector<int32_t> script, int n_ctx, int n_vocab) : script_(std::move(script)), n_ctx_(n_ctx), n_vocab_(n_vocab) {}
    int n_vocab() const override { return n_vocab_; }
    int n_ctx() const override { return n_ctx_; }
    int n_past() const override { return past_; }
    void eval(std::span<const int32_t> tokens, std::vector<float>& l) override {
        if (past_ + int(tokens.size()) > n_ctx_) throw std::runtime_error("Scripted: past the context");
        past_ += int(tokens.size());
        evaluated.insert(evaluated.end(), tokens.begin(), tokens.end());
        l.assign(size_t(n_vocab_), 0.0f);
        l[size_t(script_[std::min(calls_, script_.size() - 1)])] = 10.0f;
        if (second >= 0) l[size_t(second)] = 9.9f;
        ++calls_;
    }
    std::vector<int32_t> evaluated;
    int32_t second = -1;  // a runner-up token, just below the scripted one

private:
    std::vector<int32_t> script_;
    size_t calls_ = 0;
    int n_ctx_, n_vocab_, past_ = 0;
};

SamplerParams greedy() {
    SamplerParams p;
    p.temp = 0.0f;
    return p;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

TEST(generate_stops_at_end_of_generation) {
    const auto& tok = qwen3();
    auto words = tok.encode("Hello world");
    Scripted m(concat(words, {tok.find("<|im_end|>"), 11}), 64, tok.n_vocab());
    Sampler s(greedy());
    std::string streamed;
    auto prompt = tok.encode("Say hi");
    auto r = generate(m, tok, s, prompt, {}, [&](std::string_view t) { streamed += t; });
    CHECK_EQ(int(r.reason), int(StopReason::EndOfGeneration));
    CHECK_EQ(std::string(stop_reason_name(r.reason)), std::string("eog"));
    CHECK_EQ(r.text, "Hello world");
    CHECK_EQ(streamed, r.text);
    CHECK(r.ids == words);
    CHECK_EQ(r.eog_token, tok.find("<|im_end|>"));
    CHECK_EQ(r.n_prompt, int(prompt.size()));
    CHECK(m.evaluated == concat(prompt, words));  // the stopping token is not evaluated
    // <|endoftext|> stops too; with ignore_eos generation goes on (and prints nothing for it).
    Scripted m2({tok.find("<|endoftext|>"), 9707}, 64, tok.n_vocab());
    Sampler s2(greedy());
    GenerateOptions o;
    o.ignore_eos = true;
    o.n_predict = 3;
    auto r2 = generate(m2, tok, s2, prompt, o, {});
    CHECK_EQ(int(r2.reason), int(StopReason::Length));
    CHECK_EQ(r2.ids.size(), 3u);
    CHECK_EQ(r2.text, "HelloHello");
}

TEST(generate_n_predict_and_no_extra_eval) {
    const auto& tok = qwen3();
    Scripted m({9707, 11, 1879, 0}, 64, tok.n_vocab());
    Sampler s(greedy());
    GenerateOptions o;
    o.n_predict = 3;
    auto r = generate(m, tok, s, tok.encode("x"), o, {});
    CHECK_EQ(int(r.reason), int(StopReason::Length));
    CHECK(r.ids == (std::vector<int32_t>{9707, 11, 1879}));
    CHECK_EQ(r.text, "Hello, world");
    CHECK_EQ(m.n_past(), 1 + 2);  // the prompt, then every token but the last
    Scripted z({9707}, 64, tok.n_vocab());
    o.n_predict = 0;
    auto r0 = generate(z, tok, s, tok.encode("x"), o, {});
    CHECK(r0.ids.empty());
}

TEST(generate_stop_string_across_tokens_is_never_shown) {
    const auto& tok = qwen3();
    auto body = tok.encode("One two. END of it");
    Scripted m(body, 64, tok.n_vocab());
    Sampler s(greedy());
    GenerateOptions o;
    o.stop = {"END", "never"};
    std::vector<std::string> chunks;
    auto r = generate(m, tok, s, tok.encode("x"), o, [&](std::string_view t) { chunks.emplace_back(t); });
    CHECK_EQ(int(r.reason), int(StopReason::StopString));
    CHECK_EQ(r.text, "One two. ");
    std::string all;
    for (auto& c : chunks) all += c;
    CHECK_EQ(all, "One two. ");
    // A stop string split over two tokens ("E" + "ND"): still caught, its start never shown.
    std::vector<int32_t> split = tok.encode("go E");
    auto nd = tok.encode("ND!");
    Scripted m2(concat(split, nd), 64, tok.n_vocab());
    Sampler s2(greedy());
    std::string shown;
    auto r2 = generate(m2, tok, s2, tok.encode("x"), o, [&](std::string_view t) { shown += t; });
    CHECK_EQ(r2.text, "go ");
    CHECK_EQ(shown, "go ");
    // A held prefix that does not complete is shown in the end.
    GenerateOptions o3;
    o3.stop = {"ENDING"};
    o3.n_predict = int(split.size());
    Scripted m3(split, 64, tok.n_vocab());
    Sampler s3(greedy());
    auto r3 = generate(m3, tok, s3, tok.encode("x"), o3, {});
    CHECK_EQ(r3.text, "go E");
}

TEST(generate_context_full_and_prompt_too_long) {
    const auto& tok = qwen3();
    Scripted m({9707, 11, 1879, 0, 9707}, 6, tok.n_vocab());
    Sampler s(greedy());
    auto prompt = tok.encode("a b c");  // 3 tokens
    REQUIRE_EQ(prompt.size(), 3u);
    auto r = generate(m, tok, s, prompt, {}, {});
    CHECK_EQ(int(r.reason), int(StopReason::ContextFull));
    CHECK_EQ(std::string(stop_reason_name(r.reason)), std::string("context_full"));
    CHECK_EQ(r.ids.size(), 4u);  // 3 more fit in the cache; the 4th is sampled from the last logits
    CHECK_EQ(m.n_past(), 6);
    Scripted small({9707}, 2, tok.n_vocab());
    CHECK_THROWS(generate(small, tok, s, prompt, {}, {}), "the prompt has 3 tokens");
    Scripted wrong({1}, 64, 1000);
    CHECK_THROWS(generate(wrong, tok, s, prompt, {}, {}), "logits but the tokenizer");
}

TEST(generate_streams_whole_characters_only) {
    const auto& tok = qwen3();
    auto byte_token = [&](uint8_t b) {
        std::string s;
        utf8::append(s, unicode::byte_to_cp(b));
        return tok.find(s);
    };
    // An emoji spelled as four byte tokens, then a word.
    std::vector<int32_t> script = {byte_token(0xF0), byte_token(0x9F), byte_token(0x98), byte_token(0x80), 9707};
    Scripted m(script, 64, tok.n_vocab());
    Sampler s(greedy());
    GenerateOptions o;
    o.n_predict = 5;
    std::vector<std::string> chunks;
    auto r = generate(m, tok, s, tok.encode("x"), o, [&](std::string_view t) { chunks.emplace_back(t); });
    CHECK_EQ(r.text, "\xF0\x9F\x98\x80Hello");
    REQUIRE_EQ(chunks.size(), 2u);
    CHECK_EQ(chunks[0], "\xF0\x9F\x98\x80");
}

TEST(generate_hides_reasoning_when_asked) {
    const auto& tok = qwen3();
    auto body = concat(concat({tok.find("<think>")}, tok.encode("\nhmm, let me see\n")),
                       concat({tok.find("</think>")}, tok.encode("\n\nThe answer.")));
    Scripted m(concat(body, {tok.find("<|im_end|>")}), 64, tok.n_vocab());
    Sampler s(greedy());
    GenerateOptions o;
    o.hide_think = true;
    auto r = generate(m, tok, s, tok.encode("q"), o, {});
    CHECK_EQ(r.text, "The answer.");
    CHECK(r.ids == body);  // the ids keep everything
    Scripted m2(concat(body, {tok.find("<|im_end|>")}), 64, tok.n_vocab());
    Sampler s2(greedy());
    auto shown = generate(m2, tok, s2, tok.encode("q"), {}, {});
    CHECK_EQ(shown.text, "<think>\nhmm, let me see\n</think>\n\nThe answer.");
}

TEST(generate_prompt_enters_the_repetition_window) {
    const auto& tok = qwen3();
    // The scripted best token appears in the prompt: a penalty of 1.1 lets the runner-up win.
    Scripted m({9707}, 64, tok.n_vocab());
    m.second = 11;
    SamplerParams p = greedy();
    p.repeat_penalty = 1.1f;
    Sampler s(p);
    GenerateOptions o;
    o.n_predict = 1;
    auto prompt = tok.encode("Hello");
    REQUIRE(prompt == (std::vector<int32_t>{9707}));
    auto r = generate(m, tok, s, prompt, o, {});
    CHECK(r.ids == (std::vector<int32_t>{11}));
    Scripted m2({9707}, 64, tok.n_vocab());
    m2.second = 11;
    Sampler s2(p);
    auto r2 = generate(m2, tok, s2, tok.encode("Bye"), o, {});
    CHECK(r2.ids == (std::vector<int32_t>{9707}));
}

TEST(chat_chatml_matches_the_qwen3_template) {
    std::vector<ChatMessage> msgs = {{"system", "You are a helpful assistant."}, {"user", "hi"}};
    CHECK_EQ(chatml_render(msgs, true, true),
             "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
             "<|im_start|>assistant\n");
    CHECK_EQ(chatml_render({{"user", "hi"}}, true, false),
             "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    // The rendered first turn tokenizes to llama.cpp's ids for the same text (oracle case 15).
    CHECK(qwen3().encode(chatml_render(msgs, true, true)) ==
          (std::vector<int32_t>{151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 6023,
                                151645, 198, 151644, 77091, 198}));
    // Earlier assistant turns lose their reasoning; the one after the last question keeps it.
    std::vector<ChatMessage> conv = {{"user", "q1"},
                                     {"assistant", "<think>\nr1\n</think>\n\na1"},
                                     {"user", "q2"},
                                     {"assistant", "<think>\nr2\n</think>\n\na2"}};
    CHECK_EQ(chatml_render(conv, false, true),
             "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
             "<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n");
    CHECK_EQ(strip_thinking("<think>\nx\n</think>\n\nanswer"), "answer");
    CHECK_EQ(strip_thinking("plain"), "plain");
    CHECK_EQ(chatml_next_turn("next", true, true), "<|im_end|>\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ(chatml_next_turn("first", false, false),
             "<|im_start|>user\nfirst<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    CHECK_THROWS(chatml_render({{"tool", "x"}}, false, true), "unknown role");
    // Rendered ChatML tokenizes with the markers as single tokens.
    auto ids = qwen3().encode(chatml_render({{"user", "hi"}}, true, false));
    CHECK_EQ(ids.front(), 151644);
    CHECK(std::count(ids.begin(), ids.end(), 151667) == 1);  // <think>
}

namespace {

std::string prompt_file() {
    // Bytes 1..8: the tiny models' byte tokens 1..8, the prompt of tiny-greedy.txt's first case.
    std::string path = bt::temp_dir() + "/p8.bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    for (char c = 1; c <= 8; ++c) std::fputc(c, f);
    std::fclose(f);
    return path;
}

// The ids of a --json result.
std::vector<int32_t> json_ids_of(const std::string& out) {
    std::vector<int32_t> ids;
    size_t p = out.find("\"ids\":[");
    if (p == std::string::npos) return ids;
    size_t e = out.find(']', p);
    std::string list = out.substr(p + 7, e - p - 7);
    size_t s = 0;
    while (s < list.size()) {
        size_t c = list.find(',', s);
        ids.push_back(std::stoi(list.substr(s, c == std::string::npos ? std::string::npos : c - s)));
        if (c == std::string::npos) break;
        s = c + 1;
    }
    return ids;
}

std::string json_field(const std::string& out, const std::string& key) {
    size_t p = out.find("\"" + key + "\":");
    if (p == std::string::npos) return "";
    p += key.size() + 3;
    size_t e = out.find_first_of(",}", out[p] == '"' ? out.find('"', p + 1) : p);
    return out.substr(p, e - p);
}

}  // namespace

TEST(generate_cli_greedy_text_run_gives_llama_cpp_tokens) {
    const std::string bin = bt::bankml_bin(), p8 = prompt_file();
    // tiny-greedy.txt, first case: llama.cpp's 64 greedy tokens after ids 1..8 (Q1_0).
    const std::vector<int32_t> want = {622, 339, 953, 921, 251, 876, 115, 215, 69, 432, 775, 804, 681, 1016, 343, 91,
                                       728, 335, 192, 488, 100, 354, 192, 488, 100, 354, 192, 488, 100, 354, 192, 488,
                                       224, 587, 493, 640, 953, 538, 56, 126, 330, 100, 354, 192, 488, 857, 810, 1018,
                                       837, 772, 488, 224, 587, 220, 758, 722, 482, 912, 473, 1016, 315, 159, 764, 752};
    auto r = bt::run_cmd(bin + " run -m " + bt::data_path("tiny-q1_0.gguf") + " -f " + p8 +
                         " --temp 0 --ignore-eos -n 64 --json -t 2");
    REQUIRE_EQ(r.code, 0);
    CHECK(json_ids_of(r.out) == want);
    CHECK_EQ(json_field(r.out, "stop_reason"), "\"length\"");
    CHECK_EQ(json_field(r.out, "n_prompt"), "8");
    // Q2_0's second greedy token is <|im_end|> (1021): without --ignore-eos the run stops there.
    auto e = bt::run_cmd(bin + " run -m " + bt::data_path("tiny-q2_0.gguf") + " -f " + p8 + " --temp 0 --json");
    REQUIRE_EQ(e.code, 0);
    CHECK(json_ids_of(e.out) == (std::vector<int32_t>{461}));
    CHECK_EQ(json_field(e.out, "stop_reason"), "\"eog\"");
}

TEST(generate_cli_same_seed_same_tokens_at_any_thread_count) {
    const std::string bin = bt::bankml_bin(), p8 = prompt_file(), q1 = bt::data_path("tiny-q1_0.gguf");
    auto run = [&](const std::string& extra) {
        auto r = bt::run_cmd(bin + " run -m " + q1 + " -f " + p8 + " -n 40 --ignore-eos --json " + extra);
        CHECK_EQ(r.code, 0);
        return json_ids_of(r.out);
    };
    auto a = run("--seed 5 -t 1"), b = run("--seed 5 -t 2"), c = run("--seed 6 -t 2");
    CHECK_EQ(a.size(), 40u);
    CHECK(a == b);
    CHECK(a != c);
    auto d = run("--seed 5 -t 2 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --repeat-penalty 1.3");
    CHECK(d == run("--seed 5 -t 1 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --repeat-penalty 1.3"));
    CHECK(d != a);
}

TEST(generate_cli_stops_context_chat_and_errors) {
    const std::string bin = bt::bankml_bin(), p8 = prompt_file(), q1 = bt::data_path("tiny-q1_0.gguf");
    // Context full: 8 prompt tokens in a context of 12: 4 more evaluated, 5 sampled; said on stderr.
    auto full = bt::run_cmd(bin + " run -m " + q1 + " -f " + p8 + " -c 12 --ignore-eos --temp 0");
    CHECK_EQ(full.code, 0);
    CHECK(full.err.find("the context is full (12 tokens)") != std::string::npos);
    CHECK(full.err.find("generated 5 tokens") != std::string::npos);
    CHECK(full.err.find("stop: context_full") != std::string::npos);
    // --stop: the text ends just before the first occurrence of the string.
    auto base = bt::run_cmd(bin + " run -m " + q1 + " -f " + p8 + " --temp 0 --ignore-eos -n 30 --json");
    REQUIRE_EQ(base.code, 0);
    auto plain = bt::run_cmd(bin + " run -m " + q1 + " -f " + p8 + " --temp 0 --ignore-eos -n 30");
    std::string text = plain.out.substr(0, plain.out.size() - 1);  // the final newline added for the terminal
    REQUIRE(text.size() > 40u);
    std::string stop = text.substr(text.size() / 2, 5);
    auto s = bt::run_cmd(bin + " run -m " + q1 + " -f " + p8 + " --temp 0 --ignore-eos -n 30 --stop '" + stop + "'");
    CHECK_EQ(s.code, 0);
    CHECK_EQ(s.out, text.substr(0, text.find(stop)) + (text.find(stop) ? "\n" : ""));
    CHECK(s.err.find("stop: stop") != std::string::npos);
    // --chat: the prompt is the ChatML turn.
    auto f = gguf::File::open(q1);
    auto tok = Tokenizer::from_gguf(f);
    auto want = tok.encode(chatml_render({{"system", "Be brief."}, {"user", "hi"}}, true, false));
    auto c = bt::run_cmd(bin + " run -m " + q1 + " --chat --system 'Be brief.' --no-think -p hi -n 3 --temp 0 --json");
    CHECK_EQ(c.code, 0);
    CHECK_EQ(json_field(c.out, "n_prompt"), std::to_string(want.size()));
    // Interactive chat on piped lines: two turns, then /exit.
    auto chat = bt::run_cmd("printf 'hello\\nagain\\n/exit\\nnever\\n' | " + bin + " chat -m " + q1 + " -n 4 --temp 0 --timings");
    CHECK_EQ(chat.code, 0);
    size_t turns = 0;
    for (size_t p = 0; (p = chat.err.find("generated 4 tokens", p)) != std::string::npos; ++p) ++turns;
    CHECK_EQ(turns, 2u);
    // Errors: one line, the right exit code.
    struct Bad {
        std::string args;
        int code;
        const char* msg;
    };
    const Bad bad[] = {
        {"-p hi", 2, "-m FILE is required"},
        {"-m " + q1, 2, "give a prompt"},
        {"-m " + q1 + " -p hi --tokens 1", 2, "not both"},
        {"-m " + q1 + " --tokens 1 --temp 0", 2, "--temp needs a text prompt"},
        {"-m " + q1 + " -p hi --stop ''", 2, "--stop wants"},
        {"-m " + q1 + " -p hi --seed -2", 2, "--seed wants"},
        {"-m " + q1 + " -p hi --top-p 2", 2, "--top-p must be between"},
        {"-m " + q1 + " -p hi --system x", 2, "go with --chat"},
        {"-m " + q1 + " -p ''", 2, "the prompt is empty"},
        {"-m " + q1 + " -f " + p8 + " -c 4", 1, "the prompt has 8 tokens"},
    };
    for (const auto& b : bad) {
        auto e = bt::run_cmd(bin + " run " + b.args);
        CHECK_EQ(e.code, b.code);
        CHECK_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1);
        if (!CHECK(e.err.find(b.msg) != std::string::npos)) bt::fail(__FILE__, __LINE__, b.args + " -> " + e.err);
    }
}
