// Reads golden-kernels.bin (tests/data/ORACLES.md): ggml's own kernel results. BANKML_GOLDEN=path
// reads another file of the same format instead.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bt {

struct GoldenCase {
    uint32_t kind = 0, rows = 0, cols = 0;
    std::vector<uint8_t> w;  // weights (kinds 2-6)
    std::vector<float> x;    // f32 activations (kinds 1, 4-6)
    std::vector<uint8_t> q;  // Q8_0 blocks (kinds 1-3)
    std::vector<float> y;    // expected outputs (kinds 2-6)
};

std::string golden_path();
// Throws std::runtime_error on a malformed file.
std::vector<GoldenCase> read_golden(const std::string& path);

}  // namespace bt
