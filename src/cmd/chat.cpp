// `bankml chat`: an interactive ChatML conversation on the terminal (or on piped lines).
#include <chrono>
#include <csignal>
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

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

const char* const CHAT_HELP =
    "/help   this list\n"
    "/reset  clear the conversation (the system message stays)\n"
    "/exit   quit (also /quit, Ctrl-D, or Ctrl-C at the prompt)\n"
    "Ctrl-C during a reply stops it and returns to the prompt.\n";

}  // namespace

static int run_chat(const std::vector<std::string>& args) {
    std::vector<cli::Flag> flags = {{"-m|--model", true}, {"--system|-sys|--system-prompt", true}, {"--no-think", false},
                                    {"--timings", false}};
    for (const auto& f : text_gen_flags()) flags.push_back(f);
    cli::Args a(args, flags);
    if (!a.has("model")) throw UsageError("-m FILE is required");
    TextGenSettings st = parse_text_gen(a);
    llama_model_notes(a, "chat");
    const bool think = !a.has("no-think"), show_timings = a.has("timings");
    st.gen.hide_think = !think;
    const bool tty = isatty(0) && isatty(2);

    auto m = model::Model::open(a.get("model", ""), st.model);
    attach_gpu(*m, st.model.threads);
    auto tok = model::Tokenizer::from_gguf(m->file());
    model::Sampler sampler(st.sampling);
    ModelLogits src(*m, &g_interrupted);
    if (tty)
        std::fprintf(stderr, "bankml chat: %s, context %d tokens, seed %llu. /help lists the commands, /exit or Ctrl-D quits.\n",
                     m->file().path().c_str(), m->n_ctx(), (unsigned long long)st.sampling.seed);

    // Ctrl-C stops a reply; at the prompt it ends the chat. No SA_RESTART: a read waiting at the
    // prompt returns at once.
    struct sigaction sa {}, old {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    struct Restore {
        struct sigaction old;
        ~Restore() { sigaction(SIGINT, &old, nullptr); }
    } restore{old};

    bool replied = false;  // an assistant reply is open in the context
    std::string line;
    while (true) {
        g_interrupted = 0;
        if (tty) std::fputs("> ", stderr);
        if (!std::getline(std::cin, line)) {
            if (tty) std::fputc('\n', stderr);
            break;
        }
        if (line == "/exit" || line == "/quit") break;
        if (line == "/help" || line == "/?") {
            std::fputs(CHAT_HELP, stderr);
            continue;
        }
        if (line == "/reset") {
            m->reset();
            sampler.reset();
            replied = false;
            std::fputs("(conversation cleared)\n", stderr);
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
        if (int(ids.size()) >= m->n_ctx()) {
            std::fprintf(stderr, "bankml chat: the message is %zu tokens, longer than the context of %d\n", ids.size(),
                         m->n_ctx());
            continue;
        }
        if (m->n_past() + int(ids.size()) >= m->n_ctx()) {
            std::fprintf(stderr, "bankml chat: the context is full (%d of %d tokens); /reset to start over\n", m->n_past(),
                         m->n_ctx());
            continue;
        }
        model::GenerateResult r;
        try {
            r = model::generate(src, tok, sampler, ids, st.gen, [&](std::string_view t) {
                if (g_interrupted) throw Interrupted{};
                file::put(t);
            });
        } catch (const Interrupted&) {
            replied = true;  // the reply so far stays in the context, closed by the next turn
            file::put("\n");
            std::fputs("(stopped)\n", stderr);
            continue;
        }
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
    "and hides any that comes. /help lists the commands: /reset clears the conversation, /exit or\n"
    "end of input quits. Ctrl-C stops a reply and returns to the prompt; at the prompt it quits. On\n"
    "a terminal a \"> \" prompt goes to stderr.\n\n"
    "  -m FILE        a qwen3 GGUF with its tokenizer\n"
    "  --system TEXT  the system message (also -sys, --system-prompt)\n"
    "  --no-think     answers without reasoning\n"
    "  --timings      the timings of each reply on stderr\n"
    BANKML_TEXT_GEN_HELP,
    run_chat};

}  // namespace bankml::cmd
