// The tokenizer: Unicode classes, the hand-written Qwen2 pre-tokenizer (checked against
// std::regex running the same pattern over class-collapsed text), BPE against llama.cpp's ids for
// the real Qwen3 vocabulary, special tokens, decoding and the streaming hold-back.
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

// libstdc++ 12's regex compiler trips -Wmaybe-uninitialized inside its own headers at -O1 with
// the sanitizers (a false positive in std::function's move); keep the build clean.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop

#include "core/utf8.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/tokenizer.h"
#include "model/unicode.h"
#include "model/unicode_split.h"
#include "test.h"

using namespace bankml;
using bankml::unicode::CpClass;

namespace {

std::string utf8_of(std::initializer_list<uint32_t> cps) {
    std::string s;
    for (uint32_t c : cps) utf8::append(s, c);
    return s;
}

// The pieces of the split, as UTF-8 strings.
std::vector<std::string> pieces(const std::string& text) {
    auto cps = utf8::decode(text);
    std::vector<std::string> out;
    size_t p = 0;
    for (size_t n : unicode::split_qwen2(cps)) {
        std::string s;
        for (size_t i = p; i < p + n; ++i) utf8::append(s, cps[i]);
        out.push_back(s);
        p += n;
    }
    return out;
}

const model::Tokenizer& qwen3() {
    static const model::Tokenizer tok = [] {
        auto f = gguf::File::open(bt::data_path("qwen3-vocab.gguf"));
        return model::Tokenizer::from_gguf(f);
    }();
    return tok;
}

std::string unescape(const std::string& s) {
    std::string o;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) {
            char c = s[++i];
            o += c == 'n' ? '\n' : c == 't' ? '\t' : c;
        } else {
            o += s[i];
        }
    }
    return o;
}

}  // namespace

TEST(tokenizer_unicode_tables_version_and_categories) {
    CHECK_EQ(std::string(unicode::UNICODE_VERSION), std::string("14.0.0"));
    // Every letter category (Lu Ll Lt Lm Lo), number category (Nd Nl No) and whitespace kind.
    for (uint32_t cp : {0x41u, 0x7Au, 0xC9u, 0xE9u, 0x1C5u, 0x2B0u, 0x5D0u, 0x4E00u, 0xAC00u, 0x3042u, 0x1D400u, 0x20000u})
        CHECK_EQ(int(unicode::classify(cp)), int(CpClass::Letter));
    for (uint32_t cp : {0x30u, 0x39u, 0x663u, 0x966u, 0x2160u, 0xB2u, 0xBDu, 0x2460u, 0x1D7CEu})
        CHECK_EQ(int(unicode::classify(cp)), int(CpClass::Number));
    for (uint32_t cp : {0x20u, 0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u})
        CHECK_EQ(int(unicode::classify(cp)), int(CpClass::Space));
    // Marks, punctuation, symbols, controls, format, unassigned, private use: Other. U+001C..1F
    // are whitespace to Python but not to std::regex's \s, which llama.cpp uses: Other.
    for (uint32_t cp : {0x301u, 0x93Eu, 0x21u, 0x2Eu, 0x5Fu, 0x24u, 0x2Bu, 0x1F600u, 0x00u, 0x1Cu, 0x1Fu, 0x7Fu, 0x200Bu, 0x180Eu, 0xE000u, 0x378u, 0x10FFFFu, 0xFFFDu})
        CHECK_EQ(int(unicode::classify(cp)), int(CpClass::Other));
}

TEST(tokenizer_unicode_byte_level_alphabet_is_a_bijection) {
    std::vector<bool> seen(400, false);
    for (int b = 0; b < 256; ++b) {
        uint32_t cp = unicode::byte_to_cp(uint8_t(b));
        REQUIRE(cp < 400);
        CHECK(!seen[cp]);
        seen[cp] = true;
        CHECK_EQ(unicode::cp_to_byte(cp), b);
    }
    CHECK_EQ(unicode::byte_to_cp(' '), 0x120u);   // 'Ġ'
    CHECK_EQ(unicode::byte_to_cp('\n'), 0x10Au);  // 'Ċ'
    CHECK_EQ(unicode::byte_to_cp('A'), uint32_t('A'));
    CHECK_EQ(unicode::byte_to_cp(0xAD), 0x143u);
    CHECK_EQ(unicode::cp_to_byte(0x144), -1);
    CHECK_EQ(unicode::cp_to_byte(0x4E00), -1);
}

TEST(tokenizer_split_each_alternative) {
    using V = std::vector<std::string>;
    CHECK(pieces("Hello, world!") == (V{"Hello", ",", " world", "!"}));
    CHECK(pieces("I'LL you'RE she's") == (V{"I", "'LL", " you", "'RE", " she", "'s"}));
    CHECK(pieces("'x") == (V{"'x"}));                       // no contraction: prefix + letters
    CHECK(pieces("a'") == (V{"a", "'"}));
    CHECK(pieces("12345") == (V{"1", "2", "3", "4", "5"}));  // \p{N}: one digit at a time
    CHECK(pieces("x1") == (V{"x", "1"}));
    CHECK(pieces(" 1") == (V{" ", "1"}));
    CHECK(pieces(" ...!\n\nx") == (V{" ...!\n\n", "x"}));   // punctuation takes trailing newlines
    CHECK(pieces("(x)") == (V{"(x", ")"}));                 // one non-letter prefix joins a word
    CHECK(pieces("\tand") == (V{"\tand"}));
    CHECK(pieces("\nand") == (V{"\n", "and"}));             // but never CR or LF
    CHECK(pieces("a  \n  b") == (V{"a", "  \n", " ", " b"}));  // \s*[\r\n]+ stops at the last newline
    CHECK(pieces("a\r\n\r\nb") == (V{"a", "\r\n\r\n", "b"}));
}

TEST(tokenizer_split_runs_of_spaces_and_newlines) {
    using V = std::vector<std::string>;
    for (int n = 1; n <= 40; n += 3) {
        std::string sp(n, ' ');
        // Before a word, the run leaves its last space to the word (\s+(?!\S)).
        V want = n == 1 ? V{"a", " b"} : V{"a", std::string(n - 1, ' '), " b"};
        CHECK(pieces("a" + sp + "b") == want);
        CHECK(pieces("a" + sp) == (V{"a", sp}));            // at the end it stays whole
        std::string nl(n, '\n');
        CHECK(pieces("a" + nl + "b") == (V{"a", nl, "b"}));
        // The run up to the last newline is one piece, then the spaces before "b" as above.
        CHECK(pieces(sp + nl + sp + "b") == (n == 1 ? V{" " + nl, " b"} : V{sp + nl, std::string(n - 1, ' '), " b"}));
    }
    CHECK(pieces("   ") == (V{"   "}));
    CHECK(pieces("  \t x") == (V{"  \t", " x"}));
    // Non-ASCII whitespace behaves like the space in runs, and may lead a word like any non-letter.
    std::string ideo = utf8_of({0x3000});
    CHECK(pieces("a" + ideo + ideo + "b") == (V{"a", ideo, ideo + "b"}));
}

TEST(tokenizer_split_categories) {
    using V = std::vector<std::string>;
    std::string e_acute = utf8_of({0xE9}), comb = utf8_of({0x301}), han = utf8_of({0x4E2D, 0x6587});
    CHECK(pieces("caf" + e_acute + " x") == (V{"caf" + e_acute, " x"}));
    CHECK(pieces("cafe" + comb + "s") == (V{"cafe", comb + "s"}));  // a mark is not \p{L}
    CHECK(pieces(han + "abc") == (V{han + "abc"}));                   // letters of any script join
    CHECK(pieces("x" + utf8_of({0x663, 0x664})) == (V{"x", utf8_of({0x663}), utf8_of({0x664})}));  // Nd
    CHECK(pieces(utf8_of({0x2160, 0xB2})) == (V{utf8_of({0x2160}), utf8_of({0xB2})}));            // Nl, No
    CHECK(pieces(utf8_of({0x1C5}) + "a" + utf8_of({0x2B0})) == (V{utf8_of({0x1C5}) + "a" + utf8_of({0x2B0})}));  // Lt Lm
    std::string emoji = utf8_of({0x1F600, 0x1F389});
    CHECK(pieces("ok " + emoji + "\n") == (V{"ok", " " + emoji + "\n"}));   // symbols: Other
    CHECK(pieces(" " + utf8_of({0x200B}) + "x") == (V{" " + utf8_of({0x200B}), "x"}));  // Cf: Other
    std::string nbsp = utf8_of({0xA0});
    CHECK(pieces("a" + nbsp + "b") == (V{"a", nbsp + "b"}));
    std::string ctl(1, '\x1c');
    CHECK(pieces("a" + ctl + ctl + " b") == (V{"a", ctl + ctl, " b"}));
}

// The pattern as llama.cpp runs it: std::regex over text where every code point >= 128 is replaced
// by one byte standing for its class, with \p{L} and \p{N} widened to include those bytes.
static std::vector<size_t> split_by_std_regex(const std::vector<uint32_t>& cps) {
    static const std::string L = "\xD2" "A-Za-z", N = "\xD1" "0-9";
    static const std::regex re(
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n" + L + N + "]?[" + L + "]+|[" + N +
            "]| ?[^\\s" + L + N + "]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        std::regex::ECMAScript | std::regex::nosubs);
    std::string text;
    for (uint32_t c : cps) {
        if (c < 128) text += char(c);
        else switch (unicode::classify(c)) {
            case CpClass::Space: text += '\x0B'; break;
            case CpClass::Letter: text += '\xD2'; break;
            case CpClass::Number: text += '\xD1'; break;
            default: text += '\xD0';
        }
    }
    std::vector<size_t> out;
    size_t last = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
        size_t pos = size_t(it->position());
        if (pos > last) out.push_back(pos - last);
        out.push_back(size_t(it->length()));
        last = pos + size_t(it->length());
    }
    if (last < text.size()) out.push_back(text.size() - last);
    return out;
}

TEST(tokenizer_split_agrees_with_std_regex_on_random_text) {
    const uint32_t alphabet[] = {'a', 'Z', 's', 'S', 'r', 'e', 'E', 'l', 'L', 'v', 'm', 'd', 't', 'D', '\'', '1', '0',
                                 ' ', ' ', ' ', '\t', '\n', '\n', '\r', '\x0b', '\x0c', '\x1c', '.', '!', '(', '_', '$',
                                 0x00, 0x7F, 0xA0, 0x85, 0x3000, 0x2028, 0xE9, 0x4E2D, 0x1C5, 0x2B0, 0x663, 0x2160,
                                 0xB2, 0x301, 0x1F600, 0x200B, 0xFFFD, 0xE000};
    std::mt19937 rng(1234);
    size_t total = 0;
    for (int iter = 0; iter < 5000; ++iter) {
        std::vector<uint32_t> cps(rng() % 24);
        for (auto& c : cps) c = alphabet[rng() % std::size(alphabet)];
        auto mine = unicode::split_qwen2(cps);
        auto ref = split_by_std_regex(cps);
        total += ref.size();
        if (!CHECK(mine == ref)) {
            std::string s;
            for (uint32_t c : cps) s += std::to_string(c) + " ";
            bt::fail(__FILE__, __LINE__, "code points: " + s);
            break;
        }
    }
    CHECK_GT(total, 20000u);  // the strings were split into many pieces, not compared empty
}

TEST(tokenizer_matches_llama_cpp_on_the_oracle_cases) {
    const auto& tok = qwen3();
    CHECK_EQ(tok.n_vocab(), 151936);
    std::ifstream txt(bt::data_path("tokenizer-cases.txt")), ids(bt::data_path("tokenizer-cases.ids"));
    REQUIRE(txt && ids);
    std::string lt, li;
    int n = 0;
    while (std::getline(txt, lt) && std::getline(ids, li)) {
        ++n;
        std::istringstream is(li);
        std::string word;
        is >> word;
        REQUIRE_EQ(word, std::string("ids"));
        std::vector<int32_t> want;
        int32_t x;
        while (is >> x) want.push_back(x);
        std::string text = unescape(lt);
        auto got = tok.encode(text);
        if (!CHECK(got == want)) bt::fail(__FILE__, __LINE__, "case " + std::to_string(n) + ": " + lt);
        CHECK_EQ(tok.decode(got), text);  // round trip
    }
    CHECK_EQ(n, 20);
}

TEST(tokenizer_own_cases_round_trip) {
    const auto& tok = qwen3();
    const std::string cases[] = {
        "",
        " ",
        std::string(100, ' '),
        std::string(50, '\n'),
        "x" + std::string(17, ' ') + "y\n\n\n   \n\tz" + std::string(9, '\t'),
        "\r\n\r\nWindows\r\nlines\r\n",
        utf8_of({0x1C5, 0x2B0, 0x5D0, 0x4E00, 0xAC00, 0x3042}) + " letters " + utf8_of({0x663, 0x2160, 0xB2, 0x2460}),
        "nbsp" + utf8_of({0xA0}) + "ideo" + utf8_of({0x3000, 0x2028, 0x85}) + "end",
        "marks e" + utf8_of({0x301}) + " " + utf8_of({0x915, 0x93E}) + " zw" + utf8_of({0x200B, 0x200D}) + "j",
        utf8_of({0x1F468, 0x200D, 0x1F469, 0x200D, 0x1F467}) + " family",
        std::string("nul\0ctl\x1c\x7f", 9),
        "<|im_start|><|im_end|><think></think><|endoftext|><tool_call>",
        "<|im_start<|im_start|>|>",
        "a\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\nb",
    };
    for (const auto& c : cases) {
        auto ids = tok.encode(c);
        if (!CHECK_EQ(tok.decode(ids), c)) bt::fail(__FILE__, __LINE__, "case: " + c);
        for (int32_t id : ids) CHECK(id >= 0 && id < tok.n_vocab());
    }
    CHECK(tok.encode("").empty());
    // A long run of spaces is split as the pattern says: every token is spaces, the text survives.
    auto ids = tok.encode("a" + std::string(100, ' ') + "b");
    CHECK_GT(ids.size(), 2u);
    CHECK_EQ(tok.decode(ids), "a" + std::string(100, ' ') + "b");
}

TEST(tokenizer_special_tokens) {
    const auto& tok = qwen3();
    const int32_t im_start = 151644, im_end = 151645, eot = 151643, think = 151667;
    CHECK_EQ(tok.find("<|im_start|>"), im_start);
    CHECK_EQ(int(tok.type(im_start)), int(model::TokenType::Control));
    CHECK_EQ(int(tok.type(think)), int(model::TokenType::UserDefined));
    // Special parsing on: whole tokens. Off: control tokens are plain text, user-defined stay whole.
    auto on = tok.encode("<|im_start|>hi<think>", true);
    CHECK(on.size() == 3 && on[0] == im_start && on[2] == think);
    auto off = tok.encode("<|im_start|>hi<think>", false);
    CHECK(std::find(off.begin(), off.end(), im_start) == off.end());
    CHECK_EQ(off.back(), think);
    CHECK_GT(off.size(), 3u);
    CHECK_EQ(tok.decode(off), "<|im_start|>hi<think>");
    // Decoding: control tokens print only with special on; user-defined always.
    std::vector<int32_t> ids = {im_start, 6023, im_end, think};
    CHECK_EQ(tok.decode(ids, true), "<|im_start|>hi<|im_end|><think>");
    CHECK_EQ(tok.decode(ids, false), "hi<think>");
    // End of generation: EOS (<|im_end|>), <|endoftext|>, not <|im_start|> nor text.
    CHECK(tok.is_eog(im_end));
    CHECK(tok.is_eog(eot));
    CHECK(!tok.is_eog(im_start));
    CHECK(!tok.is_eog(9707));
    CHECK_EQ(tok.eos(), im_end);
    CHECK_THROWS(tok.piece(151936), "outside the vocabulary");
    CHECK_THROWS(tok.piece(-1), "outside the vocabulary");
}

TEST(tokenizer_invalid_utf8_becomes_replacement_characters) {
    const auto& tok = qwen3();
    // Documented choice: each byte that starts no well-formed sequence is tokenized as U+FFFD.
    auto ids = tok.encode("a\xFF" "b\xE2\x82");
    CHECK_EQ(tok.decode(ids), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(tok.encode("\xC0\x80") == tok.encode("\xEF\xBF\xBD\xEF\xBF\xBD"));
}

TEST(tokenizer_stream_decoder_holds_partial_characters) {
    const auto& tok = qwen3();
    auto byte_token = [&](uint8_t b) {
        std::string s;
        utf8::append(s, unicode::byte_to_cp(b));
        return tok.find(s);
    };
    model::StreamDecoder sd(tok);
    const std::string smile = "\xF0\x9F\x98\x80", bad = "\xEF\xBF\xBD";
    // (CHECK_EQ evaluates its arguments twice: push into a list first.)
    std::vector<std::string> got;
    for (int b : {int('x'), 0xF0, 0x9F, 0x98, 0x80, 0xE2, int('a'), 0xFF, 0xC3}) got.push_back(sd.push(byte_token(uint8_t(b))));
    got.push_back(sd.flush());
    got.push_back(sd.flush());
    // A sequence that breaks off is written as U+FFFD once it cannot complete.
    const std::vector<std::string> want = {"x", "", "", "", smile, "", bad + "a", bad, "", bad, ""};
    REQUIRE_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
        if (!CHECK_EQ(got[i], want[i])) bt::fail(__FILE__, __LINE__, "step " + std::to_string(i));
    // Streaming a real encoding token by token gives the same text as decoding it whole.
    std::string text = "emoji " + smile + utf8_of({0x1F389, 0x4E2D, 0x6587}) + " caf" + utf8_of({0xE9});
    model::StreamDecoder sd2(tok);
    std::string streamed;
    for (int32_t id : tok.encode(text)) {
        std::string part = sd2.push(id);
        CHECK_EQ(utf8::stable_prefix(part), part.size());
        for (uint32_t c : utf8::decode(part)) CHECK_NE(c, utf8::REPLACEMENT);
        streamed += part;
    }
    streamed += sd2.flush();
    CHECK_EQ(streamed, text);
}

TEST(tokenizer_tiny_model_vocab) {
    auto f = gguf::File::open(bt::data_path("tiny-q1_0.gguf"));
    auto tok = model::Tokenizer::from_gguf(f);
    CHECK_EQ(tok.n_vocab(), 1024);
    CHECK_EQ(tok.find("<|im_start|>"), 1020);
    CHECK(tok.is_eog(1021));
    CHECK(tok.is_eog(1019));
    std::string text = "Hello, world! <|im_start|>user\n<think>x</think>";
    auto ids = tok.encode(text);
    CHECK_EQ(tok.decode(ids), text);
    CHECK(std::find(ids.begin(), ids.end(), 1020) != ids.end());
}

TEST(tokenizer_rejects_other_kinds) {
    model::VocabData v;
    v.tokens = {"a", "b"};
    v.model = "llama";
    CHECK_THROWS(model::Tokenizer(v), "not supported");
    v.model = "gpt2";
    v.pre = "llama3";
    CHECK_THROWS(model::Tokenizer(v), "not supported");
    v.pre = "qwen2";
    v.tokens = {"a", "a"};
    CHECK_THROWS(model::Tokenizer(v), "duplicate token");
    v.tokens = {"a", "b"};
    v.merges = {"ab"};
    CHECK_THROWS(model::Tokenizer(v), "not 'left right'");
    v.merges = {"a b"};
    v.types = {1};
    CHECK_THROWS(model::Tokenizer(v), "token types");
}

TEST(tokenizer_bpe_merges_by_rank_then_leftmost) {
    // A toy vocabulary: merges decide, lowest rank first, leftmost among equal ranks.
    model::VocabData v;
    v.tokens = {"a", "b", "c", "ab", "bc", "abc", "aa", "aaa"};
    v.merges = {"b c", "a b", "a bc", "a a", "aa a"};
    model::Tokenizer tok(v);
    CHECK(tok.encode("abc") == (std::vector<int32_t>{5}));      // b c first, then a bc
    CHECK(tok.encode("ab") == (std::vector<int32_t>{3}));
    CHECK(tok.encode("aaa") == (std::vector<int32_t>{7}));      // (a a) a, leftmost pair first
    CHECK(tok.encode("aaaa") == (std::vector<int32_t>{6, 6}));  // aa aa: no "aa aa" merge
    CHECK(tok.encode("cab") == (std::vector<int32_t>{2, 3}));
}

TEST(tokenizer_cli_tokenize_detokenize_round_trip) {
    const std::string bin = bt::bankml_bin(), vocab = bt::data_path("qwen3-vocab.gguf");
    auto r = bt::run_cmd(bin + " tokenize -m " + vocab + " 'Hello, world! <|im_start|>'");
    CHECK_EQ(r.code, 0);
    CHECK_EQ(r.out, "9707,11,1879,0,220,151644\n");
    auto n = bt::run_cmd(bin + " tokenize --no-special -m " + vocab + " '<|im_start|>'");
    CHECK_EQ(n.code, 0);
    CHECK(n.out.find("151644") == std::string::npos);
    auto j = bt::run_cmd(bin + " tokenize --json -m " + vocab + " 'a\"b'");
    CHECK_EQ(j.code, 0);
    CHECK_EQ(j.out, "{\"n_tokens\":3,\"ids\":[64,1,65],\"pieces\":[\"a\",\"\\\"\",\"b\"]}\n");
    // A file with every kind of whitespace and invalid bytes goes through -f and comes back.
    std::string dir = bt::temp_dir(), path = dir + "/in.txt";
    {
        std::ofstream f(path, std::ios::binary);
        f << "line one\n\n\tline  two   \r\n" << utf8_of({0x4E2D, 0x1F600}) << " end";
    }
    auto ids = bt::run_cmd(bin + " tokenize -m " + vocab + " -f " + path);
    REQUIRE_EQ(ids.code, 0);
    auto back = bt::run_cmd(bin + " detokenize --json -m " + vocab + " " + ids.out);
    CHECK_EQ(back.code, 0);
    CHECK_EQ(back.out, "{\"text\":\"line one\\n\\n\\tline  two   \\r\\n" + utf8_of({0x4E2D, 0x1F600}) + " end\"}\n");
    auto plain = bt::run_cmd(bin + " detokenize -m " + vocab + " 9707 11 151644");
    CHECK_EQ(plain.out, "Hello,<|im_start|>\n");
    auto nos = bt::run_cmd(bin + " detokenize --no-special -m " + vocab + " 9707,11,151644");
    CHECK_EQ(nos.out, "Hello,\n");
}

TEST(tokenizer_cli_errors_are_one_line) {
    const std::string bin = bt::bankml_bin(), vocab = bt::data_path("qwen3-vocab.gguf");
    auto no_model = bt::run_cmd(bin + " tokenize hello");
    CHECK_EQ(no_model.code, 2);
    CHECK(no_model.err.find("-m FILE") != std::string::npos);
    auto bad_id = bt::run_cmd(bin + " detokenize -m " + vocab + " 151936");
    CHECK_EQ(bad_id.code, 1);
    CHECK(bad_id.err.find("outside the vocabulary") != std::string::npos);
    auto junk = bt::run_cmd(bin + " detokenize -m " + vocab + " 1,x");
    CHECK_EQ(junk.code, 2);
    auto missing = bt::run_cmd(bin + " tokenize -m /nonexistent.gguf hi");
    CHECK_EQ(missing.code, 1);
    CHECK(missing.err.find("/nonexistent.gguf") != std::string::npos);
    auto no_file = bt::run_cmd(bin + " tokenize -m " + vocab + " -f /nonexistent.txt");
    CHECK_EQ(no_file.code, 1);
    CHECK(no_file.err.find("/nonexistent.txt") != std::string::npos);
    // A model file stripped of its tokenizer (every tokenizer.* key dropped, the tensors kept) is a
    // clear error for whatever needs text, and still runs from token ids.
    const std::string stripped = bt::temp_dir() + "/no-tokenizer.gguf";
    {
        auto f = gguf::File::open(bt::data_path("tiny-q1_0.gguf"));
        gguf::Writer w;
        for (const auto& kv : f.metadata())
            if (kv.key != "general.alignment" && kv.key.rfind("tokenizer.", 0) != 0) w.add_value(kv.key, kv.value);
        for (const auto& t : f.tensors()) {
            const uint8_t* data = t.data;
            const uint64_t row = gguf::row_bytes(t.type, t.ne[0]);
            std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
            w.add_tensor(std::string(t.name), t.type, ne, [data, row](int64_t r0, int64_t nr, uint8_t* o) {
                std::memcpy(o, data + uint64_t(r0) * row, uint64_t(nr) * row);
            });
        }
        w.write(stripped);
    }
    auto tok = bt::run_cmd(bin + " tokenize -m " + stripped + " hi");
    CHECK_EQ(tok.code, 1);
    CHECK_EQ(tok.err, "bankml tokenize: " + stripped + ": no tokenizer (missing metadata key tokenizer.ggml.model)\n");
    auto gen = bt::run_cmd(bin + " run -m " + stripped + " -p hi -n 1 -t 1");
    CHECK_EQ(gen.code, 1);
    CHECK(gen.err.find(stripped + ": no tokenizer (missing metadata key tokenizer.ggml.model)") != std::string::npos);
    auto ids = bt::run_cmd(bin + " run -m " + stripped + " --tokens 1,2,3 -n 2 -t 1");
    CHECK_EQ(ids.code, 0);
    for (const auto* p : {&no_model, &bad_id, &junk, &missing, &no_file, &tok, &gen})
        CHECK_EQ(std::count(p->err.begin(), p->err.end(), '\n'), 1);
}
