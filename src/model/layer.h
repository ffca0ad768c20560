// One qwen3 layer's weights, in place in the mapped file: shared by the CPU and GPU forward passes.
#pragma once
#include "model/products.h"

namespace bankml::model {

struct Layer {
    const float* attn_norm = nullptr;  // [n_embd]
    const float* q_norm = nullptr;     // [head_dim]
    const float* k_norm = nullptr;     // [head_dim]
    const float* ffn_norm = nullptr;   // [n_embd]
    Matrix wq, wk, wv, wo, gate, up, down;
};

}  // namespace bankml::model
