#include "golden.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "test.h"

namespace bt {

std::string golden_path() {
    const char* g = std::getenv("BANKML_GOLDEN");
    return g && *g ? std::string(g) : data_path("golden-kernels.bin");
}

std::vector<GoldenCase> read_golden(const std::string& path) {
    std::vector<uint8_t> d = read_file(path);
    size_t off = 0;
    auto take = [&](size_t n) {
        if (n > d.size() - off) throw std::runtime_error(path + ": truncated at byte " + std::to_string(off));
        const uint8_t* p = d.data() + off;
        off += n;
        return p;
    };
    auto u32 = [&] {
        uint32_t v;
        std::memcpy(&v, take(4), 4);
        return v;
    };
    auto bytes = [&](size_t n) {
        const uint8_t* p = take(n);
        return std::vector<uint8_t>(p, p + n);
    };
    auto floats = [&](size_t n) {
        std::vector<float> v(n);
        std::memcpy(v.data(), take(n * 4), n * 4);
        return v;
    };
    if (d.size() < 8 || std::memcmp(take(8), "BMLGOLD1", 8) != 0) throw std::runtime_error(path + ": not BMLGOLD1");
    uint32_t count = u32();
    std::vector<GoldenCase> out;
    for (uint32_t i = 0; i < count; ++i) {
        GoldenCase c;
        c.kind = u32();
        c.rows = u32();
        c.cols = u32();
        const size_t r = c.rows, n = c.cols;
        if (n == 0 || n % 32) throw std::runtime_error(path + ": case " + std::to_string(i) + " cols " + std::to_string(n));
        switch (c.kind) {
            case 1: c.x = floats(n); c.q = bytes(n / 32 * 34); break;
            case 2: c.w = bytes(r * n / 128 * 18); c.q = bytes(n / 32 * 34); c.y = floats(r); break;
            case 3: c.w = bytes(r * n / 64 * 18); c.q = bytes(n / 32 * 34); c.y = floats(r); break;
            case 4: c.w = bytes(r * n / 128 * 18); c.x = floats(n); c.y = floats(r); break;
            case 5: c.w = bytes(r * n / 64 * 18); c.x = floats(n); c.y = floats(r); break;
            case 6: c.w = bytes(r * n * 2); c.x = floats(n); c.y = floats(r); break;
            default: throw std::runtime_error(path + ": unknown kind " + std::to_string(c.kind));
        }
        out.push_back(std::move(c));
    }
    if (off != d.size()) throw std::runtime_error(path + ": trailing bytes");
    return out;
}

}  // namespace bt
