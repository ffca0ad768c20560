// The generation loop and ChatML, with a scripted logit source standing in for the model (the
// real forward pass is tested with the tiny models where it is wired in): stop reasons, -n,
// stop strings across tokens, the context limit, UTF-8-safe streaming, hidden reasoning, and
// that the prompt enters the repetition window.
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
    std::vector<float> eval(std::span<const int32_t> tokens) override {
        if (past_ + int(tokens.size()) > n_ctx_) throw std::runtime_error("Scripted: past the context");
        past_ += int(tokens.size());
        evaluated.insert(evaluated.end(), tokens.begin(), tokens.end());
        std::vector<float> l(size_t(n_vocab_), 0.0f);
        l[size_t(script_[std::min(calls_, script_.size() - 1)])] = 10.0f;
        if (second >= 0) l[size_t(second)] = 9.9f;
        ++calls_;
        return l;
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
        unicode::append_utf8(s, unicode::byte_to_cp(b));
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
