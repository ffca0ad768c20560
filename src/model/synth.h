// Synthetic qwen3 models: a GGUF with the metadata keys and tensors llama.cpp's qwen3 loader reads,
// random but well-scaled weights from a seed (the same seed, the same bytes), and a vocabulary that
// is synthetic or copied from another GGUF. bankml's tests and `bankml bench` use them so nothing
// has to be downloaded.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf.h"

namespace bankml::synth {

struct Shape {
    std::string name;  // "tiny", "1.7b", ... or "custom"
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    int64_t n_ff = 0;
    int64_t n_vocab = 0;
    bool tied = false;  // the output matrix is the token embedding (no output.weight)
    uint32_t context_length = 40960;
    float rope_base = 1e6f;
    float rms_eps = 1e-6f;
};

// tiny (the shape of tests/data/tiny-*.gguf: 256, 2 layers, 4/2 heads of 64, FF 768, vocab 1024,
// untied), 1.7b (2048/28/16/8/6144, tied), 4b (2560/36/32/8/9728, tied), 8b (4096/36/32/8/12288,
// untied); head 128 and vocabulary 151,936 for the real ones. nullopt for any other name.
std::optional<Shape> shape_named(std::string_view name);
const std::vector<std::string>& shape_names();

struct Spec {
    Shape shape;
    gguf::Type type = gguf::Type::Q1_0;  // the matrices' type: Q1_0, Q2_0, F16 or F32 (norms are F32)
    uint64_t seed = 0;
    std::string vocab_from;  // a GGUF whose tokenizer.* metadata is copied ("" = synthetic vocabulary)
    std::string name;        // general.name ("" = synthetic-qwen3-<shape>-<type>)
};

// Throws bankml::Error naming the dimension that is zero, negative, or not a whole number of
// the type's blocks, or a head count that does not divide.
void check(const Spec& spec);

// One tensor of the model: its name, type and dims in ggml order, in file order.
struct TensorSpec {
    std::string name;
    gguf::Type type;
    std::vector<int64_t> ne;
};
std::vector<TensorSpec> tensor_table(const Shape& shape, gguf::Type matrix_type);

// The synthetic vocabulary for n tokens: 256 byte tokens (GPT-2's byte-to-unicode spelling, in
// byte order), merges of 13 frequent characters (as many as fit), "[fillerN]" tokens, then
// <|endoftext|>, <|im_start|>, <|im_end|>, <think>, </think> (control tokens) at the end.
struct Vocab {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    std::vector<std::string> merges;
    uint32_t bos = 0, eos = 0, pad = 0;
};
Vocab synthetic_vocab(int64_t n_vocab);
inline constexpr int64_t MIN_VOCAB = 256 + 5;

// llama.cpp's general.file_type for a model whose matrices are of this type.
uint32_t file_type(gguf::Type t);

// Writes the model to path (streaming; PATH.part then renamed). With vocab_from, the vocabulary
// size is that file's token count (spec.shape.n_vocab is ignored). Returns the bytes written.
uint64_t write(const std::string& path, const Spec& spec);

}  // namespace bankml::synth
