// Unicode for the tokenizer: UTF-8 in and out, the code point classes the Qwen2 pre-tokenizer
// pattern names (\p{L}, \p{N}, \s), and GPT-2's byte-level alphabet. The class tables are
// generated (scripts/gen_unicode_tables.py, Unicode version in UNICODE_VERSION).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bankml::unicode {

struct CpRange {
    uint32_t lo, hi;  // inclusive
};
extern const char* const UNICODE_VERSION;
extern const CpRange LETTER_RANGES[];
extern const size_t LETTER_RANGES_COUNT;
extern const CpRange NUMBER_RANGES[];
extern const size_t NUMBER_RANGES_COUNT;
extern const CpRange SPACE_RANGES[];
extern const size_t SPACE_RANGES_COUNT;

inline constexpr uint32_t REPLACEMENT = 0xFFFD;

// The classes the pre-tokenizer tells apart. ASCII follows the C locale's isspace (llama.cpp runs
// its pattern through std::regex, so U+001C..U+001F are not whitespace there); above ASCII the
// Unicode White_Space property wins, then letters, then numbers; everything else is Other.
enum class CpClass : uint8_t { Other, Letter, Number, Space };
CpClass classify(uint32_t cp);

// Decodes UTF-8. A byte that does not begin a well-formed sequence (Unicode 14 table 3-7: no
// overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence) becomes one U+FFFD
// and decoding resumes at the next byte.
std::vector<uint32_t> decode_utf8(std::string_view s);
// Appends cp's UTF-8 bytes (cp must be <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cp);
// The length of the well-formed sequence starting at s[0], or 0 if there is none.
size_t utf8_sequence_length(std::string_view s);
// For streaming: the length of the longest prefix of s that does not end inside a sequence that
// could still complete; the rest (at most 3 bytes) is an unfinished sequence to hold back.
size_t utf8_stable_prefix(std::string_view s);

// GPT-2 byte-level BPE writes each byte as one printable code point: printable Latin-1 bytes as
// themselves, the others (controls, space, 0x7F-0xA0, 0xAD) as U+0100 upward in byte order.
uint32_t byte_to_cp(uint8_t b);
// The inverse; -1 for a code point that encodes no byte.
int cp_to_byte(uint32_t cp);

}  // namespace bankml::unicode
