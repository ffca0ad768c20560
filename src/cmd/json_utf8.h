// JSON output for the text commands (tokenize, run, chat, perplexity): string escaping. Text
// that is not valid UTF-8 (a token piece that ends mid-character) is written with U+FFFD in place
// of each bad byte, so the output is always valid JSON.
#pragma once
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "model/tokenizer.h"

namespace bankml::cmd {

inline std::string json_string(std::string_view raw) {
    std::string s = model::sanitize_utf8(raw), out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20 || c == 0x7F) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += char(c);
                }
        }
    }
    return out + "\"";
}

inline std::string json_ids(std::span<const int32_t> ids) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
    return out + "]";
}

}  // namespace bankml::cmd
