// Reading the tokenizer out of a GGUF's tokenizer.ggml.* metadata (llama.cpp's keys).
#include "core/error.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace bankml::model {

VocabData vocab_from_gguf(const gguf::File& f) {
    VocabData v;
    auto model = f.get_str("tokenizer.ggml.model");
    if (!model) throw Error(f.path() + ": no tokenizer (missing metadata key tokenizer.ggml.model)");
    v.model = std::string(*model);
    v.pre = std::string(f.get_str("tokenizer.ggml.pre").value_or("default"));
    auto tokens = f.get_str_array("tokenizer.ggml.tokens");
    if (!tokens) throw Error(f.path() + ": missing metadata key tokenizer.ggml.tokens");
    v.tokens.assign(tokens->begin(), tokens->end());
    if (auto types = f.get_int_array("tokenizer.ggml.token_type")) {
        if (types->size() != v.tokens.size())
            throw Error(f.path() + ": tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                        " entries for " + std::to_string(v.tokens.size()) + " tokens");
        v.types.assign(types->begin(), types->end());
    }
    if (auto merges = f.get_str_array("tokenizer.ggml.merges")) v.merges.assign(merges->begin(), merges->end());
    auto id = [&](const char* key) -> int32_t {
        auto x = f.get_i64(key);
        return x && *x >= 0 && *x < int64_t(v.tokens.size()) ? int32_t(*x) : -1;
    };
    v.bos = id("tokenizer.ggml.bos_token_id");
    v.eos = id("tokenizer.ggml.eos_token_id");
    v.eot = id("tokenizer.ggml.eot_token_id");
    v.pad = id("tokenizer.ggml.padding_token_id");
    v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
    v.chat_template = std::string(f.get_str("tokenizer.chat_template").value_or(""));
    return v;
}

Tokenizer Tokenizer::from_gguf(const gguf::File& f) {
    VocabData v = vocab_from_gguf(f);  // names the file itself
    try {
        return Tokenizer(std::move(v));
    } catch (const Error& e) {
        throw Error(f.path() + ": " + e.what(), e.code);
    }
}

}  // namespace bankml::model
