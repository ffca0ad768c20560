// The qwen3 shapes bankml knows, written once: `bankml synth --shape` writes them, and the
// benchmarks size their matrices and byte counts from them.
#pragma once
#include <cstdint>
#include <string_view>

namespace bankml {

struct ModelShape {
    const char* name;     // "tiny", "1.7b", "4b", "8b" (synth's --shape)
    const char* title;    // "Qwen3-1.7B", as the benchmarks print it
    int embd, layers, heads, kv_heads, head_dim, ff;
    int64_t vocab;
    bool tied;            // the output matrix is the token embedding (no output.weight)
    int q_rows() const { return heads * head_dim; }
    int kv_rows() const { return kv_heads * head_dim; }
};

// tiny is the shape of tests/data/tiny-*.gguf; the others are PrismML's Bonsai (Qwen3) models.
inline constexpr ModelShape MODEL_SHAPES[] = {
    {"tiny", "Qwen3-tiny", 256, 2, 4, 2, 64, 768, 1024, false},
    {"1.7b", "Qwen3-1.7B", 2048, 28, 16, 8, 128, 6144, 151936, true},
    {"4b", "Qwen3-4B", 2560, 36, 32, 8, 128, 9728, 151936, true},
    {"8b", "Qwen3-8B", 4096, 36, 32, 8, 128, 12288, 151936, false},
};

// The shape named `name`, or nullptr.
inline const ModelShape* model_shape(std::string_view name) {
    for (const ModelShape& s : MODEL_SHAPES)
        if (name == s.name) return &s;
    return nullptr;
}

}  // namespace bankml
