// `bankml synth`: writes a synthetic qwen3 GGUF (shape, matrix type, seed, vocabulary).
#include <chrono>
#include <cstdio>

#include "cmd/commands.h"
#include "core/error.h"
#include "model/products.h"
#include "model/synth.h"

namespace bankml::cmd {

namespace {

int run_synth(const std::vector<std::string>& args) {
    cli::Args a(args, {{"--shape", true}, {"--type", true}, {"--seed", true}, {"-o|--output", true},
                       {"--vocab-from", true}, {"--name", true}, {"--embd", true}, {"--layers", true},
                       {"--heads", true}, {"--kv-heads", true}, {"--head-dim", true}, {"--ff", true},
                       {"--vocab", true}, {"--tied", false}, {"--untied", false}, {"--ctx", true}});
    std::string shape_name = a.get("shape", "tiny");
    auto shape = synth::shape_named(shape_name);
    if (!shape) throw UsageError("--shape " + shape_name + ": expected tiny, 1.7b, 4b or 8b");
    std::string type_name = a.get("type", "q1_0");
    auto type = gguf::type_from_name(type_name);
    if (!type || !model::product_type_supported(*type))
        throw UsageError("--type " + type_name + ": expected " + model::product_type_names());
    auto out = a.value("output");
    if (!out) throw UsageError("-o FILE is required");

    synth::Spec spec;
    spec.shape = *shape;
    spec.type = *type;
    spec.seed = uint64_t(a.get_int("seed", 0, 0, INT64_MAX));
    spec.vocab_from = a.get("vocab-from", "");
    spec.name = a.get("name", "");
    // Explicit dimensions override the shape's.
    bool custom = false;
    auto dim = [&](const char* flag, int64_t& field) {
        if (a.has(flag)) {
            field = a.get_int(flag, field, 1, int64_t(1) << 24);
            custom = true;
        }
    };
    dim("embd", spec.shape.n_embd);
    dim("layers", spec.shape.n_layer);
    dim("heads", spec.shape.n_head);
    dim("kv-heads", spec.shape.n_head_kv);
    dim("head-dim", spec.shape.head_dim);
    dim("ff", spec.shape.n_ff);
    dim("vocab", spec.shape.n_vocab);
    if (a.has("tied") && a.has("untied")) throw UsageError("--tied and --untied exclude each other");
    if (a.has("tied") || a.has("untied")) {
        custom = custom || spec.shape.tied != a.has("tied");
        spec.shape.tied = a.has("tied");
    }
    if (a.has("ctx")) spec.shape.context_length = uint32_t(a.get_int("ctx", 0, 1, UINT32_MAX));
    if (custom) spec.shape.name = "custom";
    try {
        synth::check(spec);
    } catch (const UsageError&) {
        throw;
    } catch (const Error& e) {
        throw UsageError(e.what());
    }

    auto t0 = std::chrono::steady_clock::now();
    uint64_t bytes = synth::write(*out, spec);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %s: qwen3 %s, %s, seed %llu, %llu bytes in %.2f s\n", out->c_str(), spec.shape.name.c_str(),
                gguf::type_name(spec.type), (unsigned long long)spec.seed, (unsigned long long)bytes, s);
    return 0;
}

}  // namespace

// The matrix types are those the products compute (quant's traits table).
static const std::string SYNTH_SUMMARY =
    "write a synthetic qwen3 GGUF (shape, " + model::product_type_names("/", "/", true) + ", seed, vocabulary)";
static const std::string SYNTH_HELP =
    "usage: bankml synth [--shape tiny|1.7b|4b|8b] [--type " + model::product_type_names("|", "|") + "] [--seed N] -o FILE\n"
    "                    [--vocab-from GGUF] [--name NAME] [--embd N] [--layers N] [--heads N]\n"
    "                    [--kv-heads N] [--head-dim N] [--ff N] [--vocab N] [--tied|--untied] [--ctx N]\n\n"
    "Writes a model of llama.cpp's qwen3 architecture with random, well-scaled weights: the same\n"
    "seed gives the same bytes. Shapes: tiny (256, 2 layers, 4/2 heads of 64, FF 768, vocab 1024,\n"
    "the shape of tests/data/tiny-*.gguf), 1.7b (2048, 28 layers, 16/8 heads, FF 6144, tied), 4b\n"
    "(2560, 36, 32/8, 9728, tied), 8b (4096, 36, 32/8, 12288); head 128 and vocab 151,936 for\n"
    "the real ones. The dimension flags override the shape's. Matrices are --type (default q1_0),\n"
    "norms f32. The vocabulary is synthetic (byte tokens, merges, the Qwen special tokens and a\n"
    "chat template), or with --vocab-from every tokenizer.* key of another GGUF (its token count\n"
    "sets the vocabulary size). Defaults: --shape tiny --type q1_0 --seed 0.\n";

const cli::Command synth_command = {"synth", SYNTH_SUMMARY.c_str(), SYNTH_HELP.c_str(), run_synth};

}  // namespace bankml::cmd
