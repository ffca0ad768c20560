// UTF-8, the one decoder everything uses (the JSON reader and writer, the tokenizer, streamed
// text). Well-formed means Unicode's table 3-7 (RFC 3629): no overlong forms, no UTF-16
// surrogates, nothing above U+10FFFF, no truncated sequence.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bankml::utf8 {

inline constexpr uint32_t REPLACEMENT = 0xFFFD;

// The length of the well-formed sequence starting at s[0], or 0 if there is none.
size_t sequence_length(std::string_view s);
// Appends cp's UTF-8 bytes (cp must be <= 0x10FFFF).
void append(std::string& out, uint32_t cp);
// Decodes s. A byte that does not begin a well-formed sequence becomes one U+FFFD and decoding
// resumes at the next byte.
std::vector<uint32_t> decode(std::string_view s);
// s with the same replacement: valid UTF-8 unchanged, each bad byte as U+FFFD's three bytes.
std::string sanitize(std::string_view s);
// For streaming: the length of the longest prefix of s that does not end inside a sequence that
// could still complete; the rest (at most 3 bytes) is an unfinished sequence to hold back.
size_t stable_prefix(std::string_view s);

// s made printable on one line: \n, \t, other control bytes (NUL included) and bytes that are
// not well-formed UTF-8 as \xNN; at most max_bytes of s are shown (whole characters), then "...".
std::string escape(std::string_view s, size_t max_bytes = SIZE_MAX);

}  // namespace bankml::utf8
