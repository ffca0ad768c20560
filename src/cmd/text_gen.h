// What `bankml run -p` and `bankml chat` share: the sampling and stopping flags, the forward
// pass seen as a logit source, and the timing line.
#pragma once
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/cli.h"
#include "core/json.h"
#include "model/forward.h"
#include "model/generate.h"
#include "model/sampler.h"

namespace bankml::cmd {

// The flags of text generation (sampling, stopping, model), to append to a command's own.
std::vector<cli::Flag> text_gen_flags();
// llama.cpp's model flags that map onto bankml (-ngl, -fa, -ctk, -ctv); text_gen_flags() has them.
std::vector<cli::Flag> llama_model_flags();
// The key/value cache type from --kv, -ctk and -ctv (f16 or f32; they must agree). A bad value is
// a UsageError. llama_model_notes: -ngl 0 keeps the model on the CPU (BANKML_GPU=off).
std::string kv_type(const cli::Args& a);
void llama_model_notes(const cli::Args& a, const char* command);
// The help text for them (a literal, so a command's help can append it).
#define BANKML_TEXT_GEN_HELP \
    "\nsampling (llama.cpp's defaults and order: repeat penalty, top-k, top-p, min-p, temperature):\n" \
    "  --temp T            temperature (default 0.8; 0: greedy, the most likely token)\n" \
    "  --top-k K           keep the K most likely tokens (default 40; 0: off)\n" \
    "  --top-p P           keep the most likely tokens up to probability P (default 0.95; 1: off)\n" \
    "  --min-p P           drop tokens less likely than P times the best (default 0.05; 0: off)\n" \
    "  --repeat-penalty R  divide (multiply, if negative) the logits of recent tokens by R\n" \
    "                      (default 1.0: off)\n" \
    "  --repeat-last-n N   how many recent tokens (prompt included) the penalty sees (default 64)\n" \
    "  -s, --seed N        the generator's seed (default and -1: random, printed with the timings); the\n" \
    "                      same seed gives the same tokens at any thread count\n" \
    "stopping:\n" \
    "  -n, --n-predict N   at most N tokens (default -1: until an end token or a full context)\n" \
    "  --stop STRING       stop before STRING appears (not printed; \\n, \\t and \\\\ are escapes);\n" \
    "                      also -r, --reverse-prompt\n" \
    "  --ignore-eos        do not stop at <|im_end|>, <|endoftext|> or the file's EOS\n" \
    "model:\n" \
    "  -t, --threads N     threads (default: BANKML_THREADS, else every core)\n" \
    "  -c, --ctx-size N    context size (default: the model's, at most 4096)\n" \
    "  --kv f16|f32        the key/value cache's precision (default f16, as llama.cpp); llama.cpp's\n" \
    "                      -ctk/-ctv f16|f32 say the same (both alike)\n" \
    "  -ngl N              llama.cpp's GPU layers: 0 keeps the model on the CPU; any other N lets\n" \
    "                      a verified card run the whole decode (the default, as BANKML_GPU says)\n" \
    "  -fa [on|off|auto]   accepted: attention is computed one way, the same bits either way\n"

struct TextGenSettings {
    model::SamplerParams sampling;
    bool seed_given = false;
    model::GenerateOptions gen;
    model::ModelOptions model;
};
// Reads the flags; a bad value is a UsageError. Without --seed the seed is drawn at random (and
// reported, so the run can be repeated).
TextGenSettings parse_text_gen(const cli::Args& a);

// Thrown by ModelLogits::eval when its stop flag is set (Ctrl-C in `bankml chat`).
struct Interrupted {};

// The forward pass as generate() sees it. A long prompt shows its progress on stderr when stderr
// is a terminal (evaluated in slices then: a batch never changes a token); `stop`, when set,
// ends the generation before the next evaluation.
class ModelLogits : public model::LogitSource {
public:
    explicit ModelLogits(model::Model& m, const volatile std::sig_atomic_t* stop = nullptr);
    int n_vocab() const override { return m_.n_vocab(); }
    int n_ctx() const override { return m_.n_ctx(); }
    int n_past() const override { return m_.n_past(); }
    void eval(std::span<const int32_t> tokens, std::vector<float>& logits) override;
    // --logits FILE: every evaluation's logits are appended as raw little-endian f32.
    void write_logits_to(const std::string& path);

private:
    void eval_model(std::span<const int32_t> tokens, std::vector<float>& logits);
    model::Model& m_;
    const volatile std::sig_atomic_t* stop_;
    bool progress_;
    std::shared_ptr<std::FILE> logits_;
    std::string logits_path_;
};

// The --logits FILE flag's help line.
#define BANKML_LOGITS_HELP "  --logits FILE every step's logits (n_vocab little-endian f32 each) appended to FILE\n"

// "prompt 12 tokens at 85.3 t/s, generated 40 tokens at 12.1 t/s (stop: eog, seed 42)"
std::string timing_line(const model::GenerateResult& r, uint64_t seed);
// The --json object of one generation.
std::string result_json(const model::GenerateResult& r, uint64_t seed, double load_seconds, const model::Model& m);
// "backend": "vulkan" or "cpu", and "device" (the card's name, or null), for --json outputs.
void set_backend(json::Value& doc, const model::Model& m);

}  // namespace bankml::cmd
