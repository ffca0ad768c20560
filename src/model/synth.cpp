#include "model/synth.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/f16.h"
#include "core/model_shapes.h"
#include "model/gguf_writer.h"
#include "model/products.h"
#include "quant/blocks.h"
#include "quant/traits.h"

namespace bankml::synth {

// ---------------------------------------------------------------------------------------------
// Shapes

namespace {
Shape make(const char* name, int64_t embd, int64_t layers, int64_t heads, int64_t kv, int64_t hd, int64_t ff,
           int64_t vocab, bool tied) {
    Shape s;
    s.name = name;
    s.n_embd = embd;
    s.n_layer = layers;
    s.n_head = heads;
    s.n_head_kv = kv;
    s.head_dim = hd;
    s.n_ff = ff;
    s.n_vocab = vocab;
    s.tied = tied;
    return s;
}
}  // namespace

const std::vector<std::string>& shape_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const ModelShape& s : MODEL_SHAPES) v.push_back(s.name);
        return v;
    }();
    return names;
}

std::optional<Shape> shape_named(std::string_view n) {
    const ModelShape* s = model_shape(n);
    if (!s) return std::nullopt;
    return make(s->name, s->embd, s->layers, s->heads, s->kv_heads, s->head_dim, s->ff, s->vocab, s->tied);
}

uint32_t file_type(gguf::Type t) {
    const quant::TypeTraits* tt = quant::find_traits(uint32_t(t));
    if (!tt || tt->file_type < 0 || !model::product_type_supported(t))
        throw Error(std::string("synth: matrices of type ") + gguf::type_name(t) + " are not supported (" +
                    model::product_type_names() + ")");
    return uint32_t(tt->file_type);
}

void check(const Spec& spec) {
    const Shape& s = spec.shape;
    file_type(spec.type);
    auto positive = [](const char* what, int64_t v) {
        if (v <= 0 || v > (int64_t(1) << 24))
            throw Error(std::string("synth: ") + what + " = " + std::to_string(v) + " must be in 1..16777216");
    };
    positive("n_embd", s.n_embd);
    positive("n_layer", s.n_layer);
    positive("n_head", s.n_head);
    positive("n_head_kv", s.n_head_kv);
    positive("head_dim", s.head_dim);
    positive("n_ff", s.n_ff);
    if (spec.vocab_from.empty()) positive("n_vocab", s.n_vocab);
    if (spec.vocab_from.empty() && s.n_vocab < MIN_VOCAB)
        throw Error("synth: n_vocab = " + std::to_string(s.n_vocab) + " is below " + std::to_string(MIN_VOCAB) +
                    " (256 byte tokens and 5 special tokens)");
    if (s.n_head % s.n_head_kv)
        throw Error("synth: n_head = " + std::to_string(s.n_head) + " is not a multiple of n_head_kv = " +
                    std::to_string(s.n_head_kv));
    if (s.head_dim % 2) throw Error("synth: head_dim = " + std::to_string(s.head_dim) + " must be even (rotary pairs)");
    uint32_t block = gguf::type_info(uint32_t(spec.type))->block;
    auto rows_fit = [&](const char* what, int64_t v) {
        if (v % block)
            throw Error(std::string("synth: ") + what + " = " + std::to_string(v) + " is not a multiple of the " +
                        gguf::type_name(spec.type) + " block size " + std::to_string(block));
    };
    rows_fit("n_embd", s.n_embd);
    rows_fit("n_head * head_dim", s.n_head * s.head_dim);
    rows_fit("n_ff", s.n_ff);
}

std::vector<TensorSpec> tensor_table(const Shape& s, gguf::Type mt) {
    using gguf::Type;
    std::vector<TensorSpec> t;
    int64_t q = s.n_head * s.head_dim, kv = s.n_head_kv * s.head_dim;
    t.push_back({"token_embd.weight", mt, {s.n_embd, s.n_vocab}});
    for (int64_t l = 0; l < s.n_layer; ++l) {
        std::string b = "blk." + std::to_string(l) + ".";
        t.push_back({b + "attn_norm.weight", Type::F32, {s.n_embd}});
        t.push_back({b + "attn_q.weight", mt, {s.n_embd, q}});
        t.push_back({b + "attn_k.weight", mt, {s.n_embd, kv}});
        t.push_back({b + "attn_v.weight", mt, {s.n_embd, kv}});
        t.push_back({b + "attn_q_norm.weight", Type::F32, {s.head_dim}});
        t.push_back({b + "attn_k_norm.weight", Type::F32, {s.head_dim}});
        t.push_back({b + "attn_output.weight", mt, {q, s.n_embd}});
        t.push_back({b + "ffn_norm.weight", Type::F32, {s.n_embd}});
        t.push_back({b + "ffn_gate.weight", mt, {s.n_embd, s.n_ff}});
        t.push_back({b + "ffn_up.weight", mt, {s.n_embd, s.n_ff}});
        t.push_back({b + "ffn_down.weight", mt, {s.n_ff, s.n_embd}});
    }
    t.push_back({"output_norm.weight", Type::F32, {s.n_embd}});
    if (!s.tied) t.push_back({"output.weight", mt, {s.n_embd, s.n_vocab}});
    return t;
}

// ---------------------------------------------------------------------------------------------
// Vocabulary

namespace {
// GPT-2's byte-level spelling: printable Latin-1 bytes stand for themselves, the others (controls,
// space, 127-160, 173) map in order to U+0100 upwards.
std::string byte_token(int b) {
    bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    uint32_t cp = uint32_t(b);
    if (!self) {
        int n = 0;
        for (int c = 0; c < b; ++c)
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) ++n;
        cp = 256 + uint32_t(n);
    }
    std::string s;
    if (cp < 0x80) s += char(cp);
    else {
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
    }
    return s;
}

const char* const SPECIALS[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};

const char* const CHAT_TEMPLATE =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}";
}  // namespace

Vocab synthetic_vocab(int64_t n) {
    if (n < MIN_VOCAB) throw Error("synth: a vocabulary needs at least " + std::to_string(MIN_VOCAB) + " tokens");
    Vocab v;
    v.tokens.reserve(size_t(n));
    for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_token(b));
    // Pairs of frequent English letters and the space (GPT-2's 'Ġ'), as many as fit before the specials.
    const std::vector<std::string> chars = {"e", "t", "a", "o", "i", "n", "s", "h", "r", "d", "l", "u", byte_token(' ')};
    int64_t room = n - 256 - 5;
    for (const auto& a : chars)
        for (const auto& b : chars)
            if (int64_t(v.merges.size()) < room) {
                v.merges.push_back(a + " " + b);
                v.tokens.push_back(a + b);
            }
    while (int64_t(v.tokens.size()) < n - 5) v.tokens.push_back("[filler" + std::to_string(v.tokens.size()) + "]");
    v.types.assign(size_t(n), 1);
    for (int i = 0; i < 5; ++i) {
        v.types[v.tokens.size()] = 3;
        v.tokens.push_back(SPECIALS[i]);
    }
    v.bos = uint32_t(n - 5);  // <|endoftext|>
    v.eos = uint32_t(n - 3);  // <|im_end|>
    v.pad = v.bos;
    return v;
}

// ---------------------------------------------------------------------------------------------
// Weights

namespace {
// The PRNG is SplitMix64 (Steele, Lea, Flood 2014). Each tensor gets a key from the seed and its
// name (FNV-1a), each row a stream from that key and its index, so a row's bytes depend on neither
// the chunking nor the order in which rows are made.
struct SplitMix {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double unit() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

uint64_t tensor_key(uint64_t seed, const std::string& name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
    SplitMix m{seed ^ h};
    return m.next();
}

SplitMix row_stream(uint64_t key, int64_t row) {
    SplitMix m{key ^ (uint64_t(row) * 0xD1B54A32D192ED03ull)};
    m.next();
    return m;
}

// Q2_0 bytes from random bytes: each 2-bit code is 1 + a - b for two random bits a, b, so weights
// are -d, 0, 0, +d with probabilities 1/4, 1/2, 1/4 (mean 0, variance d^2/2). Code 3 (+2d) never occurs.
struct TernaryTable {
    uint8_t t[256];
    TernaryTable() {
        for (int r = 0; r < 256; ++r) {
            uint8_t out = 0;
            for (int k = 0; k < 4; ++k) {
                int a = (r >> (2 * k)) & 1, b = (r >> (2 * k + 1)) & 1;
                out |= uint8_t((1 + a - b) << (2 * k));
            }
            t[r] = out;
        }
    }
};
const TernaryTable TERNARY;

void put_f16(uint8_t* p, float v) {
    uint16_t h = bankml::f32_to_f16(v);
    std::memcpy(p, &h, 2);
}

// Scales are chosen so that a matrix keeps the size of its input: output variance ~ input variance
// (every weight's variance is 1/K for a row of K), with each block's scale jittered by +-25 %.
// A quantized type's random block: its f16 scale first, then its codes from two random words.
struct BlockFill {
    quant::Type type;
    double variance;  // of a weight whose scale is 1 (Q1_0: +-1; Q2_0: -1, 0, 0, +1)
    void (*codes)(const uint64_t w[2], uint8_t* out, size_t bytes);
};
void raw_codes(const uint64_t w[2], uint8_t* out, size_t bytes) { std::memcpy(out, w, bytes); }
void ternary_codes(const uint64_t w[2], uint8_t* out, size_t bytes) {
    const uint8_t* rb = reinterpret_cast<const uint8_t*>(w);
    for (size_t i = 0; i < bytes; ++i) out[i] = TERNARY.t[rb[i]];
}
constexpr BlockFill BLOCK_FILLS[] = {{quant::Type::Q1_0, 1.0, raw_codes}, {quant::Type::Q2_0, 0.5, ternary_codes}};

gguf::Writer::RowFill matrix_fill(gguf::Type type, int64_t k, uint64_t key) {
    double inv_k = 1.0 / double(k);
    const quant::TypeTraits* tt = quant::find_traits(uint32_t(type));
    if (!tt || !model::product_type_supported(type))
        throw Error(std::string("synth: matrices of type ") + gguf::type_name(type) + " are not supported");
    if (tt->block == 1) {
        // A float type: uniform values, written by the table's conversion (the reference's bits).
        const quant::FromFloat put = tt->from_float;
        const size_t bytes = tt->block_bytes;
        return [=](int64_t r0, int64_t n, uint8_t* out) {
            float amp = float(std::sqrt(3 * inv_k));  // uniform on [-amp, amp]: variance 1/K
            std::vector<float> row((size_t)k);
            for (int64_t r = r0; r < r0 + n; ++r, out += size_t(k) * bytes) {
                SplitMix g = row_stream(key, r);
                for (int64_t i = 0; i < k; ++i) row[size_t(i)] = amp * (float(g.next() >> 40) * 0x1.0p-23f - 1.0f);
                put(row.data(), out, size_t(k), quant::Path::Reference);
            }
        };
    }
    for (const BlockFill& f : BLOCK_FILLS) {
        if (f.type != type) continue;
        const size_t block = tt->block, block_bytes = tt->block_bytes;
        const double scale = std::sqrt(inv_k / f.variance);
        const auto codes = f.codes;
        return [=](int64_t r0, int64_t n, uint8_t* out) {
            for (int64_t r = r0; r < r0 + n; ++r) {
                SplitMix g = row_stream(key, r);
                for (int64_t b = 0; b < k / int64_t(block); ++b, out += block_bytes) {
                    put_f16(out, float(scale * (0.75 + 0.5 * g.unit())));
                    uint64_t w[2] = {g.next(), g.next()};
                    codes(w, out + 2, block_bytes - 2);
                }
            }
        };
    }
    throw Error(std::string("synth: no random fill for ") + tt->name + " matrices");
}

// Norm weights near 1 (0.875 to 1.125), as a trained model's are.
gguf::Writer::RowFill norm_fill(int64_t k, uint64_t key) {
    return [=](int64_t r0, int64_t n, uint8_t* out) {
        for (int64_t r = r0; r < r0 + n; ++r) {
            SplitMix g = row_stream(key, r);
            for (int64_t i = 0; i < k; ++i, out += 4) {
                float v = float(1.0 + 0.25 * (g.unit() - 0.5));
                std::memcpy(out, &v, 4);
            }
        }
    };
}
}  // namespace

uint64_t write(const std::string& path, const Spec& in) {
    Spec spec = in;
    std::optional<gguf::File> vocab_file;
    if (!spec.vocab_from.empty()) {
        vocab_file.emplace(gguf::File::open(spec.vocab_from));
        auto toks = vocab_file->get_str_array("tokenizer.ggml.tokens");
        if (!toks) throw Error(spec.vocab_from + ": no tokenizer.ggml.tokens to copy the vocabulary from");
        spec.shape.n_vocab = int64_t(toks->size());
        if (spec.shape.n_vocab == 0) throw Error(spec.vocab_from + ": tokenizer.ggml.tokens is empty");
    }
    check(spec);
    const Shape& s = spec.shape;

    gguf::Writer w;
    w.add_str("general.architecture", "qwen3");
    w.add_str("general.name", spec.name.empty()
                                  ? "synthetic-qwen3-" + s.name + "-" + gguf::type_name(spec.type)
                                  : spec.name);
    w.add_u32("qwen3.context_length", s.context_length);
    w.add_u32("qwen3.embedding_length", uint32_t(s.n_embd));
    w.add_u32("qwen3.block_count", uint32_t(s.n_layer));
    w.add_u32("qwen3.feed_forward_length", uint32_t(s.n_ff));
    w.add_u32("qwen3.attention.head_count", uint32_t(s.n_head));
    w.add_u32("qwen3.attention.head_count_kv", uint32_t(s.n_head_kv));
    w.add_u32("qwen3.attention.key_length", uint32_t(s.head_dim));
    w.add_u32("qwen3.attention.value_length", uint32_t(s.head_dim));
    w.add_f32("qwen3.rope.freq_base", s.rope_base);
    w.add_f32("qwen3.attention.layer_norm_rms_epsilon", s.rms_eps);
    w.add_u32("general.file_type", file_type(spec.type));
    if (vocab_file) {
        for (const auto& kv : vocab_file->metadata())
            if (kv.key.starts_with("tokenizer.")) w.add_value(kv.key, kv.value);
    } else {
        Vocab v = synthetic_vocab(s.n_vocab);
        w.add_str("tokenizer.ggml.model", "gpt2");
        w.add_str("tokenizer.ggml.pre", "qwen2");
        w.add_str_array("tokenizer.ggml.tokens", v.tokens);
        w.add_i32_array("tokenizer.ggml.token_type", v.types);
        w.add_str_array("tokenizer.ggml.merges", v.merges);
        w.add_u32("tokenizer.ggml.eos_token_id", v.eos);
        w.add_u32("tokenizer.ggml.bos_token_id", v.bos);
        w.add_u32("tokenizer.ggml.padding_token_id", v.pad);
        w.add_bool("tokenizer.ggml.add_bos_token", false);
        w.add_str("tokenizer.chat_template", CHAT_TEMPLATE);
    }
    for (const TensorSpec& t : tensor_table(s, spec.type)) {
        uint64_t key = tensor_key(spec.seed, t.name);
        auto fill = t.type == gguf::Type::F32 && t.ne.size() == 1 ? norm_fill(t.ne[0], key)
                                                                    : matrix_fill(t.type, t.ne[0], key);
        w.add_tensor(t.name, t.type, t.ne, std::move(fill));
    }
    w.write(path);
    return w.file_size();
}

}  // namespace bankml::synth
