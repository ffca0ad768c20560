// Unicode for the tokenizer (UTF-8 itself is core/utf8.h): the code point classes the Qwen2
// pre-tokenizer pattern names (\p{L}, \p{N}, \s), and GPT-2's byte-level alphabet. The class
// tables are generated (scripts/gen_unicode_tables.py, Unicode version in UNICODE_VERSION).
#pragma once
#include <cstddef>
#include <cstdint>

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

// The classes the pre-tokenizer tells apart. ASCII follows the C locale's isspace (llama.cpp runs
// its pattern through std::regex, so U+001C..U+001F are not whitespace there); above ASCII the
// Unicode White_Space property wins, then letters, then numbers; everything else is Other.
enum class CpClass : uint8_t { Other, Letter, Number, Space };
CpClass classify(uint32_t cp);

// GPT-2 byte-level BPE writes each byte as one printable code point: printable Latin-1 bytes as
// themselves, the others (controls, space, 0x7F-0xA0, 0xAD) as U+0100 upward in byte order.
uint32_t byte_to_cp(uint8_t b);
// The inverse; -1 for a code point that encodes no byte.
int cp_to_byte(uint32_t cp);

}  // namespace bankml::unicode
