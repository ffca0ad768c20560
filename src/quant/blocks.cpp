#include "quant/blocks.h"

#include <string>

#include "core/error.h"

namespace bankml::quant {

const char* weight_type_name(WeightType t) {
    switch (t) {
        case WeightType::F16: return "F16";
        case WeightType::Q1_0: return "Q1_0";
        case WeightType::Q2_0: return "Q2_0";
    }
    return "?";
}

size_t block_size(WeightType t) {
    switch (t) {
        case WeightType::F16: return 1;
        case WeightType::Q1_0: return QK1_0;
        case WeightType::Q2_0: return QK2_0;
    }
    return 1;
}

size_t row_bytes(WeightType t, size_t cols) {
    switch (t) {
        case WeightType::F16: return cols * 2;
        case WeightType::Q1_0: return cols / QK1_0 * sizeof(BlockQ1_0);
        case WeightType::Q2_0: return cols / QK2_0 * sizeof(BlockQ2_0);
    }
    return 0;
}

size_t act_bytes(WeightType t, size_t cols) {
    return t == WeightType::F16 ? cols * 2 : cols / QK8_0 * sizeof(BlockQ8_0);
}

void check_cols(WeightType t, size_t cols, const char* caller) {
    size_t need = block_size(t);
    if (t != WeightType::F16 && t != WeightType::Q1_0 && t != WeightType::Q2_0)
        throw Error(std::string(caller) + ": unsupported weight type " + std::to_string(uint32_t(t)));
    if (cols == 0 || cols % need != 0)
        throw Error(std::string(caller) + ": " + weight_type_name(t) + " product with " + std::to_string(cols) +
                    " columns (wants a positive multiple of " + std::to_string(need) + ")");
}

}  // namespace bankml::quant
