// `bankml chat`: an interactive ChatML conversation on the terminal (or on piped lines).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <unistd.h>

#include "cmd/commands.h"
#include "cmd/gpu_offload.h"
#include "cmd/text_gen.h"
#include "core/error.h"
#include "core/file.h"
#include "model/chat.h"
#include "model/forward.h"
#include "model/tokenizer.h"

namespace bankml::cmd {

static int run_chat(const std::vector<std::string>& args) {
    std::vector<cli::Flag> flags = {{"-m|--model", true}, {"--system", true}, {"--no-think", false}, {"--timings", false}};
    for (const auto& f : text_gen_flags()) flags.push_back(f);
    cli::Args a(args, flags);
    if (!a.has("model")) throw UsageError("-m FILE is required");
    TextGenSettings st = parse_text_gen(a);
    const bool think = !a.has("no-think"), show_timings = a.has("timings");
    st.gen.hide_think = !think;
    const bool tty = isatty(0) && isatty(2);

    auto m = model::Model::open(a.get("model", ""), st.model);
    attach_gpu(*m, st.model.threads);
    auto tok = model::Tokenizer::from_gguf(m->file());
    model::Sampler sampler(st.sampling);
    ModelLogits src(*m);
    if (tty)
        std::fprintf(stderr, "bankml chat: %s, context %d tokens, seed %llu. /reset starts over, /exit or Ctrl-D quits.\n",
                     m->file().path().c_str(), m->n_ctx(), (unsigned long long)st.sampling.seed);

    bool replied = false;  // an assistant reply is open in the context
    std::string line;
    while (true) {
        if (tty) std::fputs("> ", stderr);
        if (!std::getline(std::cin, line)) break;
        if (line == "/exit" || line == "/quit") break;
        if (line == "/reset") {
            m->reset();
            sampler.reset();
            replied = false;
            if (tty) std::fputs("(conversation cleared)\n", stderr);
            continue;
        }
        if (line.empty()) continue;
        std::string turn;
        if (!replied) {
            std::vector<model::ChatMessage> msgs;
            if (a.has("system")) msgs.push_back({"system", a.get("system", "")});
            msgs.push_back({"user", line});
            turn = model::chatml_render(msgs, true, think);
        } else {
            turn = model::chatml_next_turn(line, true, think);
        }
        auto ids = tok.encode(turn, true);
        if (m->n_past() + int(ids.size()) >= m->n_ctx()) {
            std::fprintf(stderr, "bankml chat: the context is full (%d of %d tokens); /reset to start over\n", m->n_past(),
                         m->n_ctx());
            continue;
        }
        auto r = model::generate(src, tok, sampler, ids, st.gen, [&](std::string_view t) {
            file::put(t);
        });
        replied = true;
        std::fputc('\n', stdout);
        std::fflush(stdout);
        if (r.reason == model::StopReason::ContextFull)
            std::fprintf(stderr, "bankml chat: the context is full (%d tokens); /reset to start over\n", m->n_ctx());
        if (show_timings) std::fprintf(stderr, "bankml chat: %s\n", timing_line(r, st.sampling.seed).c_str());
    }
    return 0;
}

const cli::Command chat_command = {
    "chat", "an interactive chat with a qwen3 GGUF model (ChatML)",
    "usage: bankml chat -m FILE [--system TEXT] [--no-think] [--timings] [OPTIONS]\n\n"
    "Reads one user message per line from stdin and streams the assistant's reply to stdout, in\n"
    "ChatML as the Qwen3 template writes it. The conversation stays in the context (each turn is\n"
    "appended, as llama-cli does, so earlier reasoning stays there too). Qwen3 shows its reasoning\n"
    "in <think>...</think> first; --no-think asks for answers without it (the empty think block)\n"
    "and hides any that comes. /reset clears the conversation, /exit or end of input quits. On a\n"
    "terminal a \"> \" prompt goes to stderr.\n\n"
    "  -m FILE        a qwen3 GGUF with its tokenizer\n"
    "  --system TEXT  the system message\n"
    "  --no-think     answers without reasoning\n"
    "  --timings      the timings of each reply on stderr\n"
    BANKML_TEXT_GEN_HELP,
    run_chat};

}  // namespace bankml::cmd
