// bankml tokenize / detokenize: text to token ids and back with a GGUF's tokenizer.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include "cmd/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "core/json.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace bankml::cmd {

// The text to work on: the one positional argument, or the bytes of -f FILE ("-": stdin).
static std::string input_text(const cli::Args& a) {
    if (auto p = a.value("prompt")) {
        if (!a.positional().empty() || a.has("file")) throw UsageError("give the text once: TEXT, -p TEXT or -f FILE");
        return *p;
    }
    if (auto f = a.value("file")) {
        if (!a.positional().empty()) throw UsageError("give the text or -f FILE, not both");
        if (*f == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
        return file::read_all(*f);
    }
    if (a.positional().size() != 1) throw UsageError("give the text to tokenize (one argument) or -f FILE");
    return a.positional()[0];
}

static std::string model_path(const cli::Args& a) {
    auto m = a.value("model");
    if (!m) throw UsageError("-m FILE (a GGUF with a tokenizer) is required");
    return *m;
}

static int run_tokenize(const std::vector<std::string>& args) {
    cli::Args a(args, {{"-m|--model", true}, {"-f|--file", true}, {"-p|--prompt", true}, {"--json", false},
                       {"--no-special|--no-parse-special", false}, {"--ids", false}, {"--no-bos", false}}, 1);
    std::string path = model_path(a);
    std::string text = input_text(a);
    auto file = gguf::File::open(path);
    auto tok = model::Tokenizer::from_gguf(file);
    // BOS as `run` adds it: when the file's tokenizer.ggml.add_bos_token asks, unless --no-bos.
    auto ids = tok.encode(text, !a.has("no-special"), !a.has("no-bos"));
    if (a.has("json")) {
        json::Value jids = json::Value::array(), pieces = json::Value::array();
        for (int32_t id : ids) {
            jids.push(id);
            pieces.push(tok.piece(id, true));
        }
        json::Value doc;
        doc.set("n_tokens", ids.size()).set("ids", std::move(jids)).set("pieces", std::move(pieces));
        std::printf("%s\n", json::write(doc).c_str());
        return 0;
    }
    // --ids: llama-tokenize's form, "[9707, 11, 1879]".
    const bool ids_form = a.has("ids");
    std::string line = ids_form ? "[" : "";
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? (ids_form ? ", " : ",") : "") + std::to_string(ids[i]);
    if (ids_form) line += "]";
    std::printf("%s\n", line.c_str());
    return 0;
}

static int run_detokenize(const std::vector<std::string>& args) {
    cli::Args a(args, {{"-m|--model", true}, {"--json", false}, {"--no-special", false}}, 1 << 20);
    std::string path = model_path(a);
    if (a.positional().empty()) throw UsageError("give the token ids, e.g. 9707,11,1879");
    std::vector<int32_t> ids;
    for (const auto& arg : a.positional()) {
        // Commas and/or spaces separate ids ("1,2,3", "1 2 3", or several arguments).
        std::string s = arg;
        for (char& c : s)
            if (c == ' ' || c == '\t' || c == '\n') c = ',';
        size_t b = s.find_first_not_of(','), e = s.find_last_not_of(',');
        if (b == std::string::npos) continue;
        std::string trimmed = s.substr(b, e - b + 1);
        auto list = cli::parse_int_list(trimmed);
        if (!list) throw UsageError("'" + arg + "' is not a list of token ids");
        for (int64_t v : *list) {
            if (v < 0 || v > INT32_MAX) throw UsageError("token id " + std::to_string(v) + " is out of range");
            ids.push_back(int32_t(v));
        }
    }
    auto file = gguf::File::open(path);
    auto tok = model::Tokenizer::from_gguf(file);
    for (int32_t id : ids)
        if (id >= tok.n_vocab())
            throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " + path + " (" +
                        std::to_string(tok.n_vocab()) + " tokens)");
    std::string text = tok.decode(ids, !a.has("no-special"));
    if (a.has("json")) {
        std::printf("%s\n", json::write(json::Value::object().set("text", text)).c_str());
        return 0;
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
}

const cli::Command tokenize_command = {
    "tokenize", "text to token ids with a model's tokenizer",
    "usage: bankml tokenize -m FILE [--json | --ids] [--no-special] [--no-bos] (TEXT | -p TEXT | -f FILE)\n\n"
    "Prints the token ids of TEXT (or of the bytes of FILE; '-' reads stdin) as one comma-separated\n"
    "line, ready for `bankml detokenize`. Only the GGUF's tokenizer metadata is read. A BOS token\n"
    "comes first when the file's tokenizer.ggml.add_bos_token asks for it, as `bankml run` adds it.\n"
    "A TEXT that starts with '-' goes after \"--\" (or with -p).\n\n"
    "  -m, --model FILE  a GGUF with a Qwen2/Qwen3 tokenizer (gpt2 model, qwen2 pre-tokenizer)\n"
    "  -p, --prompt TEXT the text (llama-tokenize's flag)\n"
    "  -f, --file FILE   read the text from FILE ('-': stdin) instead of the argument\n"
    "  --ids             the ids as llama-tokenize --ids prints them: [9707, 11, 1879]\n"
    "  --no-bos          no BOS token, whatever the file says\n"
    "  --json            {\"n_tokens\":N,\"ids\":[...],\"pieces\":[...]} (pieces: each token's text;\n"
    "                    a piece ending mid-character shows U+FFFD)\n"
    "  --no-special      control tokens written in the text (<|im_start|>) are plain text (also\n"
    "                    --no-parse-special);\n"
    "                    user-defined ones (<think>) still match, as in llama.cpp\n\n"
    "Text that is not valid UTF-8: each bad byte is tokenized as U+FFFD.\n",
    run_tokenize};

const cli::Command detokenize_command = {
    "detokenize", "token ids to text with a model's tokenizer",
    "usage: bankml detokenize -m FILE [--json] [--no-special] IDS...\n\n"
    "Prints the text of the token ids (\"9707,11,1879\", or separated by spaces), then a newline.\n\n"
    "  -m, --model FILE  a GGUF with a tokenizer\n"
    "  --json            {\"text\":\"...\"} (exact: no newline added; invalid UTF-8 as U+FFFD)\n"
    "  --no-special      control tokens (<|im_start|>, <|im_end|>) print nothing\n",
    run_detokenize};

}  // namespace bankml::cmd
