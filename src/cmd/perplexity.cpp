// `bankml perplexity`: llama-perplexity's measurement and output.
#include <cstdio>
#include <fstream>
#include <iterator>

#include "cmd/commands.h"
#include "cmd/text_gen.h"
#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "model/forward.h"
#include "cmd/gpu_offload.h"
#include "model/perplexity.h"
#include "model/tokenizer.h"

namespace bankml::cmd {

static int run_perplexity(const std::vector<std::string>& args) {
    std::vector<cli::Flag> flags = {{"-m|--model", true}, {"-f|--file", true}, {"-c|--ctx-size", true},
                                    {"-t|--threads", true}, {"--kv", true}, {"--json", false}, {"--chunks", true}};
    for (const auto& f : llama_model_flags()) flags.push_back(f);
    cli::Args a(args, flags);
    const int64_t max_chunks = a.get_int("chunks", -1, -1, INT32_MAX);
    if (max_chunks == 0) throw UsageError("--chunks wants at least 1 (-1: every chunk)");
    if (!a.has("model")) throw UsageError("-m FILE is required");
    if (!a.has("file")) throw UsageError("-f TEXTFILE is required");
    model::ModelOptions opt;
    opt.ctx = int(a.get_int("ctx-size", 128, 4, 1 << 24));
    opt.threads = int(a.get_int("threads", 0, 0, 4096));
    opt.kv_f32 = kv_type(a) == "f32";
    llama_model_notes(a, "perplexity");
    const bool json = a.has("json");

    std::string text = file::read_all(a.get("file", ""));
    auto m = model::Model::open(a.get("model", ""), opt);
    attach_gpu(*m, opt.threads);
    auto tok = model::Tokenizer::from_gguf(m->file());
    // As llama-perplexity: BOS if the vocabulary adds one, special tokens in the text not parsed.
    auto tokens = tok.encode(text, false, true);
    const int n_ctx = m->n_ctx();
    int32_t bos = -1;
    if (!tokens.empty() && tok.bos() >= 0 && tokens[0] == tok.bos() && tok.encode("", false, true).size() == 1) bos = tok.bos();
    // Checked before the progress line, so that a short text is one line on stderr.
    if (int64_t(tokens.size()) < 2 * int64_t(n_ctx))
        throw Error("the text has " + std::to_string(tokens.size()) + " tokens; a context of " + std::to_string(n_ctx) +
                    " needs at least " + std::to_string(2 * n_ctx));
    if (max_chunks > 0 && tokens.size() / size_t(n_ctx) > size_t(max_chunks)) tokens.resize(size_t(max_chunks) * size_t(n_ctx));
    std::fprintf(stderr, "bankml perplexity: %zu tokens; calculating perplexity over %zu chunks, n_ctx=%d\n", tokens.size(),
                 tokens.size() / size_t(n_ctx), n_ctx);
    auto r = model::perplexity(
        tokens, n_ctx, m->n_vocab(),
        [&](std::span<const int32_t> chunk) {
            m->reset();
            return m->eval(chunk, true);
        },
        bos,
        [&](int c, double p) {
            if (json) return;
            std::printf("[%d]%.4lf,", c + 1, p);
            std::fflush(stdout);
        });
    if (json) {
        json::Value running = json::Value::array();
        for (double v : r.running) running.push(v);
        json::Value doc;
        doc.set("model", m->file().path())
            .set("n_ctx", n_ctx)
            .set("n_tokens", tokens.size())
            .set("n_chunks", r.n_chunks)
            .set("n_scored", (long long)r.n_scored)
            .set("running", std::move(running))
            .set("ppl", r.ppl)
            .set("error", r.error);
        std::printf("%s\n", json::write(doc).c_str());
        return 0;
    }
    std::printf("\n");
    if (r.error > 0) std::printf("Final estimate: PPL = %.4lf +/- %.5lf\n", r.ppl, r.error);
    else std::printf("Final estimate: PPL = %.4lf\n", r.ppl);
    return 0;
}

const cli::Command perplexity_command = {
    "perplexity", "perplexity of a text, as llama-perplexity measures it",
    "usage: bankml perplexity -m FILE -f TEXTFILE [-c 128] [--chunks N] [-t N] [--kv f16|f32] [--json]\n\n"
    "Cuts the text's tokens into chunks of the context size (whole chunks only; at least two),\n"
    "evaluates each chunk from an empty cache and scores the tokens of its second half. Prints the\n"
    "running perplexity after each chunk, \"[1]12.3456,[2]...\", then\n"
    "\"Final estimate: PPL = X +/- Y\" (Y: the standard error, as llama-perplexity).\n\n"
    "  -m FILE       a qwen3 GGUF with its tokenizer\n"
    "  -f TEXTFILE   the text\n"
    "  -c N          the context size, i.e. the chunk length (default 128)\n"
    "  --chunks N    at most the first N chunks (default -1: all), as llama-perplexity\n"
    "  -t N          threads (default: BANKML_THREADS, else every core)\n"
    "  --kv f16|f32  the key/value cache's precision (default f16, as llama.cpp; -ctk/-ctv too)\n"
    "  -ngl N, -fa   llama.cpp's flags, accepted (bankml help run says what they do)\n"
    "  --json        {\"running\":[...],\"ppl\":X,\"error\":Y,...} instead\n",
    run_perplexity};

}  // namespace bankml::cmd
