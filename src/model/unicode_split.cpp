#include "model/unicode_split.h"

#include "model/unicode.h"

namespace bankml::unicode {

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }
static bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

// The length of the contraction ('s 't 're 've 'm 'll 'd, any ASCII case) at p, or 0.
static size_t contraction(std::span<const uint32_t> cps, size_t p) {
    size_t n = cps.size();
    if (cps[p] != '\'' || p + 1 >= n) return 0;
    uint32_t a = ascii_lower(cps[p + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (p + 2 >= n) return 0;
    uint32_t b = ascii_lower(cps[p + 2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

std::vector<size_t> split_qwen2(std::span<const uint32_t> cps) {
    const size_t n = cps.size();
    std::vector<CpClass> cls(n);
    for (size_t i = 0; i < n; ++i) cls[i] = classify(cps[i]);
    auto is = [&](size_t i, CpClass c) { return i < n && cls[i] == c; };

    std::vector<size_t> out;
    size_t p = 0;
    while (p < n) {
        size_t len = contraction(cps, p);
        if (len == 0) {
            // [^\r\n\p{L}\p{N}]?\p{L}+ : the optional prefix is tried first (greedy).
            bool prefix_ok = !is_crlf(cps[p]) && cls[p] != CpClass::Letter && cls[p] != CpClass::Number;
            size_t q = prefix_ok && is(p + 1, CpClass::Letter) ? p + 1 : cls[p] == CpClass::Letter ? p : n;
            if (q < n) {
                size_t e = q;
                while (is(e, CpClass::Letter)) ++e;
                len = e - p;
            }
        }
        if (len == 0 && cls[p] == CpClass::Number) len = 1;  // \p{N}
        if (len == 0) {
            // " ?[^\s\p{L}\p{N}]+[\r\n]*" : the optional space only counts if an Other follows.
            size_t q = cps[p] == ' ' && is(p + 1, CpClass::Other) ? p + 1 : cls[p] == CpClass::Other ? p : n;
            if (q < n) {
                size_t e = q;
                while (is(e, CpClass::Other)) ++e;
                while (e < n && is_crlf(cps[e])) ++e;
                len = e - p;
            }
        }
        if (len == 0) {
            // Whitespace: the run, then the three whitespace alternatives in order.
            size_t e = p, last_crlf = 0;
            while (is(e, CpClass::Space)) {
                if (is_crlf(cps[e])) last_crlf = e + 1;
                ++e;
            }
            size_t run = e - p;
            if (last_crlf) len = last_crlf - p;       // \s*[\r\n]+ : up to the last CR/LF of the run
            else if (run >= 2 && e < n) len = run - 1;  // \s+(?!\S) : leave one space for the next word
            else len = run;                              // \s+ (or the run reaches the end)
        }
        if (len == 0) len = 1;  // unreachable: every class is covered above; never loop forever
        out.push_back(len);
        p += len;
    }
    return out;
}

}  // namespace bankml::unicode
