// The Qwen3 tokenizer: GPT-2 byte-level BPE with ranked merges behind the Qwen2 pre-tokenizer, as
// llama.cpp runs it (model "gpt2", pre "qwen2"). Control and user-defined tokens (<|im_start|>,
// <think>, ...) are matched whole in the text first, longest first; the text between them is split
// by the pattern (unicode_split.h), each piece is written in the byte-level alphabet and merged by
// rank. Decoding maps each token back to its bytes; StreamDecoder holds back an unfinished UTF-8
// sequence so a stream never shows half a character.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace bankml::gguf {
class File;
}

namespace bankml::model {

// GGUF's tokenizer.ggml.token_type values.
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// What the tokenizer is built from: the tokenizer.ggml.* metadata.
struct VocabData {
    std::string model = "gpt2";            // tokenizer.ggml.model
    std::string pre = "qwen2";             // tokenizer.ggml.pre
    std::vector<std::string> tokens;       // tokenizer.ggml.tokens
    std::vector<int32_t> types;            // tokenizer.ggml.token_type (empty: all normal)
    std::vector<std::string> merges;       // tokenizer.ggml.merges, "left right", rank = index
    int32_t bos = -1, eos = -1, eot = -1, pad = -1;
    bool add_bos = false;
    std::string chat_template;             // tokenizer.chat_template
};

// Reads VocabData from a GGUF's metadata; throws bankml::Error naming the file and key when the
// tokenizer is missing, of another kind than gpt2/qwen2, or inconsistent.
VocabData vocab_from_gguf(const gguf::File& f);

class Tokenizer {
public:
    explicit Tokenizer(VocabData v);
    // Errors name the file ("FILE: tokenizer: merge 74 'n\x00' is not 'left right'").
    static Tokenizer from_gguf(const gguf::File& f);

    // Text to ids. parse_special: control tokens written in the text (<|im_start|>) become their
    // ids; user-defined ones (<think>) always do, as in llama.cpp. add_bos: prepend BOS if the
    // vocabulary asks for it (Qwen3's does not).
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true, bool add_bos = false) const;
    // The bytes of one token. Control tokens give their text only when `special`; unused ones
    // give nothing. Throws bankml::Error for an id outside the vocabulary.
    std::string piece(int32_t id, bool special = true) const;
    std::string decode(std::span<const int32_t> ids, bool special = true) const;

    int32_t n_vocab() const { return int32_t(tokens_.size()); }
    const std::string& token_text(int32_t id) const;  // as stored (byte-level alphabet)
    TokenType type(int32_t id) const;
    // The id of the token whose stored text is exactly `text`, or -1.
    int32_t find(std::string_view text) const;
    // End-of-generation: EOS, EOT, and the tokens llama.cpp treats so by name (<|im_end|>,
    // <|endoftext|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>, ...).
    bool is_eog(int32_t id) const { return eog_.count(id) != 0; }
    int32_t bos() const { return bos_; }
    int32_t eos() const { return eos_; }
    const std::string& chat_template() const { return chat_template_; }

private:
    void bpe(std::string_view piece, std::vector<int32_t>& out) const;
    void encode_text(std::string_view text, std::vector<int32_t>& out) const;
    int rank(std::string_view left, std::string_view right) const;

    std::vector<std::string> tokens_;
    std::vector<TokenType> types_;
    std::unordered_map<std::string_view, int32_t> ids_;   // views into tokens_
    std::unordered_map<std::string, int32_t> ranks_;       // "left right" -> rank
    std::vector<int32_t> special_;  // control/user-defined/unknown ids, longest text first
    std::unordered_set<int32_t> eog_;
    int32_t bos_ = -1, eos_ = -1;
    bool add_bos_ = false;
    std::string chat_template_;
};

// Turns generated ids into text piece by piece without ever emitting part of a UTF-8 character:
// the bytes of an unfinished sequence wait for the next token. A sequence that turns out invalid
// is written as U+FFFD, so the stream is always valid UTF-8.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tok, bool special = false) : tok_(tok), special_(special) {}
    // The text that is ready after this token (possibly empty).
    std::string push(int32_t id);
    // Whatever is held at the end of the stream (an unfinished sequence: U+FFFD each byte).
    std::string flush();

private:
    const Tokenizer& tok_;
    bool special_;
    std::string held_;
};

}  // namespace bankml::model
