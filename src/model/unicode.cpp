#include "model/unicode.h"

#include <algorithm>
#include <array>

namespace bankml::unicode {

static bool in_ranges(const CpRange* r, size_t n, uint32_t cp) {
    const CpRange* end = r + n;
    const CpRange* it = std::upper_bound(r, end, cp, [](uint32_t v, const CpRange& x) { return v < x.lo; });
    return it != r && cp <= (it - 1)->hi;
}

CpClass classify(uint32_t cp) {
    if (cp < 128) {
        if ((cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z')) return CpClass::Letter;
        if (cp >= '0' && cp <= '9') return CpClass::Number;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CpClass::Space;
        return CpClass::Other;
    }
    if (in_ranges(SPACE_RANGES, SPACE_RANGES_COUNT, cp)) return CpClass::Space;
    if (in_ranges(LETTER_RANGES, LETTER_RANGES_COUNT, cp)) return CpClass::Letter;
    if (in_ranges(NUMBER_RANGES, NUMBER_RANGES_COUNT, cp)) return CpClass::Number;
    return CpClass::Other;
}

static const std::array<int32_t, 256>& byte_table() {
    static const std::array<int32_t, 256> t = [] {
        std::array<int32_t, 256> m{};
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            m[b] = printable ? b : 256 + n++;
        }
        return m;
    }();
    return t;
}

uint32_t byte_to_cp(uint8_t b) { return uint32_t(byte_table()[b]); }

int cp_to_byte(uint32_t cp) {
    static const std::array<int16_t, 324> inv = [] {
        std::array<int16_t, 324> m;
        m.fill(-1);
        for (int b = 0; b < 256; ++b) m[byte_table()[b]] = int16_t(b);
        return m;
    }();
    return cp < inv.size() ? inv[cp] : -1;
}

}  // namespace bankml::unicode
