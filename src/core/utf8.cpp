#include "core/utf8.h"

#include <algorithm>

namespace bankml::utf8 {

static bool cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// The bytes a well-formed sequence needs after lead byte c, and the range its second byte must be
// in (table 3-7); 0 needed for a byte that cannot lead.
static size_t needed_after(unsigned char c, unsigned char& lo, unsigned char& hi) {
    lo = 0x80;
    hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) return 1;
    if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        return 2;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        return 3;
    }
    return 0;
}

size_t sequence_length(std::string_view s) {
    if (s.empty()) return 0;
    unsigned char c = (unsigned char)s[0];
    if (c < 0x80) return 1;
    unsigned char lo, hi;
    size_t need = needed_after(c, lo, hi);
    if (need == 0 || s.size() < need + 1) return 0;
    for (size_t i = 1; i <= need; ++i) {
        unsigned char b = (unsigned char)s[i];
        if (i == 1 ? (b < lo || b > hi) : !cont(b)) return 0;
    }
    return need + 1;
}

// The code point of the well-formed sequence s[0..n).
static uint32_t decode_one(std::string_view s, size_t n) {
    const auto b = [&](size_t i) { return uint32_t((unsigned char)s[i]); };
    switch (n) {
        case 1: return b(0);
        case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
        case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
        default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    }
}

void append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

std::vector<uint32_t> decode(std::string_view s) {
    std::vector<uint32_t> out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        size_t n = sequence_length(s.substr(i));
        if (n == 0) {
            out.push_back(REPLACEMENT);
            ++i;
        } else {
            out.push_back(decode_one(s.substr(i), n));
            i += n;
        }
    }
    return out;
}

std::string sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        size_t n = sequence_length(s.substr(i));
        if (n == 0) {
            append(out, REPLACEMENT);
            ++i;
        } else {
            out.append(s.substr(i, n));
            i += n;
        }
    }
    return out;
}

// Is tail a proper prefix of some well-formed sequence (a lead byte and too few valid followers)?
static bool could_complete(std::string_view tail) {
    unsigned char lo, hi;
    size_t need = needed_after((unsigned char)tail[0], lo, hi);
    if (need == 0 || tail.size() > need) return false;
    for (size_t i = 1; i < tail.size(); ++i) {
        unsigned char c = (unsigned char)tail[i];
        if (i == 1 ? (c < lo || c > hi) : !cont(c)) return false;
    }
    return true;
}

size_t stable_prefix(std::string_view s) {
    // Only the last three bytes can start an unfinished sequence.
    size_t from = s.size() > 3 ? s.size() - 3 : 0;
    for (size_t i = from; i < s.size(); ++i) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0xC0 && could_complete(s.substr(i))) return i;
    }
    return s.size();
}

std::string escape(std::string_view s, size_t max_bytes) {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        const size_t len = c < 0x80 ? 1 : sequence_length(s.substr(i));
        if (i + std::max<size_t>(len, 1) > max_bytes) break;
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7f || (c >= 0x80 && len == 0)) {
            static const char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out.append(s.substr(i, len));
            i += len;
            continue;
        }
        ++i;
    }
    if (i < s.size()) out += "...";
    return out;
}

}  // namespace bankml::utf8
