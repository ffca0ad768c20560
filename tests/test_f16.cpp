// f16 <-> f32: the software path against the F16C instructions on every half and across the f32
// exponent range, plus values whose answers are known by hand.
#include <cmath>
#include <cstring>
#include <random>

#include "core/cpu.h"
#include "core/f16.h"
#include "test.h"

using namespace bankml;

static uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

TEST(f16_known_values) {
    CHECK_EQ(f16_to_f32(0x3c00), 1.0f);
    CHECK_EQ(f16_to_f32(0xc000), -2.0f);
    CHECK_EQ(f16_to_f32(0x7bff), 65504.0f);
    CHECK_EQ(f16_to_f32(0x0001), 0x1p-24f);
    CHECK_EQ(f16_to_f32(0x0400), 0x1p-14f);
    CHECK_EQ(bits(f16_to_f32(0x8000)), 0x80000000u);
    CHECK(std::isinf(f16_to_f32(0x7c00)));
    CHECK(std::isnan(f16_to_f32(0x7e00)));
    CHECK_EQ(f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ(f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ(f32_to_f16(65519.0f), 0x7bff);
    CHECK_EQ(f32_to_f16(65520.0f), 0x7c00);  // the tie rounds to even: infinity
    CHECK_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);  // tie to even (down)
    CHECK_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie to even (up)
    CHECK_EQ(f32_to_f16(0x1p-25f), 0x0000);  // half the smallest subnormal: tie to even zero
    CHECK_EQ(f32_to_f16(0x1.8p-25f), 0x0001);
    CHECK_EQ(f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ(f32_to_f16(from_bits(0x7f800001u)), 0x7e00);  // signalling NaN comes back quiet
}

TEST(f16_to_f32_every_half_round_trips) {
    for (uint32_t h = 0; h < 65536; ++h) {
        float f = f16_to_f32(uint16_t(h));
        bool nan = ((h >> 10) & 31) == 31 && (h & 0x3ff);
        uint16_t back = f32_to_f16(f);
        if (!CHECK_EQ(back, uint16_t(nan ? (h | 0x200) : h))) return;
    }
}

TEST(f16_to_f32_every_half_matches_f16c) {
    if (!cpu_has_avx2_fma_f16c()) SKIP("avx2", "no F16C on this CPU");
    for (uint32_t h = 0; h < 65536; ++h)
        if (!CHECK_EQ(bits(f16_to_f32(uint16_t(h))), bits(f16_to_f32_f16c(uint16_t(h))))) return;
    // The row converter (F16C inside) agrees too.
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; ++h) all[h] = uint16_t(h);
    std::vector<float> out(65536);
    f16_to_f32_row(all.data(), out.data(), all.size());
    for (uint32_t h = 0; h < 65536; ++h)
        if (!CHECK_EQ(bits(out[h]), bits(f16_to_f32(uint16_t(h))))) return;
}

TEST(f32_to_f16_matches_f16c_over_the_exponent_range) {
    if (!cpu_has_avx2_fma_f16c()) SKIP("avx2", "no F16C on this CPU");
    std::mt19937 rng(7);
    std::vector<float> xs;
    // Every exponent (f32 subnormals, half subnormals, normals, overflow, inf/NaN) with mantissas
    // that hit ties, just-below and just-above ties, and random ones.
    for (uint32_t e = 0; e < 256; ++e)
        for (uint32_t s = 0; s < 2; ++s) {
            uint32_t base = (s << 31) | (e << 23);
            for (uint32_t m : {0u, 1u, 0x1000u, 0x0fffu, 0x1001u, 0x3000u, 0x2000u, 0x7fffffu, 0x400000u, 0x7fe000u,
                               0x7ff000u, 0x7fefffu})
                xs.push_back(from_bits(base | m));
            for (int i = 0; i < 200; ++i) xs.push_back(from_bits(base | (rng() & 0x7fffffu)));
            for (uint32_t k = 1; k < 24; ++k) {  // the tie at every subnormal shift
                xs.push_back(from_bits(base | (1u << (k - 1))));
                xs.push_back(from_bits(base | (1u << (k - 1)) | (1u << k)));
                xs.push_back(from_bits(base | ((1u << (k - 1)) + 1)));
            }
        }
    for (int i = 0; i < 300000; ++i) xs.push_back(from_bits(uint32_t(rng())));
    size_t bad = 0;
    for (float x : xs) bad += f32_to_f16(x) != f32_to_f16_f16c(x);
    CHECK_EQ(bad, size_t(0));
    std::vector<uint16_t> a(xs.size());
    f32_to_f16_row(xs.data(), a.data(), xs.size());
    bad = 0;
    for (size_t i = 0; i < xs.size(); ++i) bad += a[i] != f32_to_f16(xs[i]);
    CHECK_EQ(bad, size_t(0));
}
