// The block formats of GGUF's quantized tensors, as raw packed structs (byte layout = file layout).
// The block lengths are written here once; traits.cpp's table takes them from these structs.
// Q8_0 (activations): 32 values, f16 scale d, value = d * qs[i].
// Q1_0 (GGUF type 41): 128 weights, f16 scale d, bit i of qs set means +d, clear means -d.
// Q2_0 (GGUF type 42): 64 weights, f16 scale d, four 2-bit codes per byte, low bits first,
//                      code q means (q - 1) * d.
#pragma once
#include <cstddef>
#include <cstdint>

namespace bankml::quant {

inline constexpr size_t QK8_0 = 32, QK1_0 = 128, QK2_0 = 64;

#pragma pack(push, 1)
struct BlockQ8_0 {
    uint16_t d;  // f16 bits
    int8_t qs[QK8_0];
};
struct BlockQ1_0 {
    uint16_t d;
    uint8_t qs[QK1_0 / 8];
};
struct BlockQ2_0 {
    uint16_t d;
    uint8_t qs[QK2_0 / 4];
};
#pragma pack(pop)
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ1_0) == 18 && sizeof(BlockQ2_0) == 18);

}  // namespace bankml::quant
