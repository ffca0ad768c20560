// Text generation: evaluate the prompt, then sample, stream and evaluate one token at a time
// until an end-of-generation token, -n tokens, a stop string, or a full context. The loop sees
// the model only through LogitSource (the forward pass, or a scripted source in tests).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/sampler.h"
#include "model/tokenizer.h"

namespace bankml::model {

// What generation needs from a model: a KV cache that grows by eval().
class LogitSource {
public:
    virtual ~LogitSource() = default;
    virtual int n_vocab() const = 0;
    virtual int n_ctx() const = 0;
    virtual int n_past() const = 0;
    // Appends tokens to the cache; sets logits to the last token's (n_vocab floats). generate()
    // passes the same vector every token, so a source that resizes it allocates once.
    virtual void eval(std::span<const int32_t> tokens, std::vector<float>& logits) = 0;
};

enum class StopReason { EndOfGeneration, Length, StopString, ContextFull };
const char* stop_reason_name(StopReason r);  // "eog", "length", "stop", "context_full"

struct GenerateOptions {
    int n_predict = -1;              // -1: until another reason stops it
    std::vector<std::string> stop;   // stop strings (not printed)
    bool ignore_eos = false;         // keep going past end-of-generation tokens (they print nothing)
    bool hide_think = false;         // do not show <think>...</think> blocks
};

struct GenerateResult {
    std::string text;              // what was shown (stop string and hidden reasoning excluded)
    std::vector<int32_t> ids;      // every sampled token, the end-of-generation one excluded
    int32_t eog_token = -1;        // the end-of-generation token that stopped it, if one did
    StopReason reason = StopReason::Length;
    int n_prompt = 0;
    double prompt_seconds = 0, gen_seconds = 0;
    double prompt_tps() const { return prompt_seconds > 0 ? n_prompt / prompt_seconds : 0; }
    double gen_tps() const { return gen_seconds > 0 ? double(ids.size()) / gen_seconds : 0; }
};

// Evaluates `prompt` (appended to whatever the source holds), accepts it into the sampler's
// repetition window, then generates. on_text receives the text as it becomes final: never half
// a UTF-8 character, never the start of what may turn out to be a stop string. Throws
// bankml::Error if the prompt does not fit in the context.
GenerateResult generate(LogitSource& model, const Tokenizer& tok, Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& opt, const std::function<void(std::string_view)>& on_text);

}  // namespace bankml::model
