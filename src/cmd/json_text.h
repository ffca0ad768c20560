// A JSON string literal for the commands' --json output (quotes, backslashes and control bytes
// escaped; other bytes passed through, so UTF-8 stays UTF-8).
#pragma once
#include <cstdio>
#include <string>
#include <string_view>

namespace bankml::cmd {

inline std::string json_quote(std::string_view s) {
    std::string r = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            r += '\\';
            r += (char)c;
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            r += b;
        } else {
            r += (char)c;
        }
    }
    return r + "\"";
}

}  // namespace bankml::cmd
