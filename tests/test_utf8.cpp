// core/utf8: the one UTF-8 decoder (the JSON reader and writer, the tokenizer, streamed text):
// well-formedness per Unicode table 3-7, one U+FFFD per bad byte, and the streaming hold-back.
#include <string>
#include <vector>

#include "core/utf8.h"
#include "test.h"

using namespace bankml;

TEST(utf8_decode_replaces_each_bad_byte) {
    auto d = [](const std::string& s) { return utf8::decode(s); };
    using V = std::vector<uint32_t>;
    const uint32_t R = utf8::REPLACEMENT;
    CHECK(d("a\xC3\xA9z") == (V{'a', 0xE9, 'z'}));
    CHECK(d("\xF0\x9F\x98\x80") == (V{0x1F600}));
    CHECK(d("\xFF") == (V{R}));
    CHECK(d("\x80x") == (V{R, 'x'}));              // stray continuation byte
    CHECK(d("\xE2\x82" "A") == (V{R, R, 'A'}));      // truncated sequence
    CHECK(d("\xC0\x80") == (V{R, R}));              // overlong NUL
    CHECK(d("\xE0\x80\xAF") == (V{R, R, R}));       // overlong '/'
    CHECK(d("\xED\xA0\x80") == (V{R, R, R}));       // surrogate U+D800
    CHECK(d("\xF4\x90\x80\x80") == (V{R, R, R, R})); // above U+10FFFF
    CHECK(d("\xF4\x8F\xBF\xBF") == (V{0x10FFFF}));
    CHECK(d(std::string("\0", 1)) == (V{0}));
    // Round trip of every scalar value through utf8::append.
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x3000 ? 1 : 97)) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        std::string s;
        utf8::append(s, cp);
        auto back = d(s);
        if (!CHECK(back.size() == 1 && back[0] == cp)) break;
    }
    // sanitize: the same replacement on bytes, in agreement with decode on every case above.
    const std::string rep = "\xEF\xBF\xBD";
    CHECK_EQ(utf8::sanitize("a\xC3\xA9z"), "a\xC3\xA9z");
    CHECK_EQ(utf8::sanitize("\xE2\x82" "A"), rep + rep + "A");
    CHECK_EQ(utf8::sanitize("\xF4\x90\x80\x80"), rep + rep + rep + rep);
    for (const char* bad : {"\x80x", "\xC0\x80", "\xE0\x80\xAF", "\xED\xA0\x80", "\xFF", "\xF0\x9F\x98\x80"}) {
        std::string want;
        for (uint32_t cp : d(bad)) utf8::append(want, cp);
        CHECK_EQ(utf8::sanitize(bad), want);
    }
}

TEST(utf8_stable_prefix_holds_only_unfinished_sequences) {
    auto sp = [](const std::string& s) { return utf8::stable_prefix(s); };
    CHECK_EQ(sp("abc"), 3u);
    CHECK_EQ(sp("ab\xC3"), 2u);
    CHECK_EQ(sp("ab\xE2\x82"), 2u);
    CHECK_EQ(sp("ab\xE2\x82\xAC"), 5u);
    CHECK_EQ(sp("\xF0\x9F\x98"), 0u);
    CHECK_EQ(sp("\xF0\x9F\x98\x80"), 4u);
    CHECK_EQ(sp("a\xFF"), 2u);         // can never complete: not held
    CHECK_EQ(sp("a\xE0\x80"), 3u);     // overlong start: not held
    CHECK_EQ(sp("a\xED\xA0"), 3u);     // surrogate start: not held
    CHECK_EQ(sp("a\xF5"), 2u);
    CHECK_EQ(sp("\xC3\xE2\x82"), 1u);  // a dead lead byte, then a live one
}
