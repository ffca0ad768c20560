// `bankml info FILE`: what a GGUF file holds: header, metadata (long arrays summarised),
// tensors with type, shape and bytes.
#include <cstdio>
#include <string>

#include "cmd/commands.h"
#include "core/error.h"
#include "model/gguf.h"

namespace bankml::cmd {

namespace {

// Arrays print their type, length and first items; the tokenizer's 151,936 strings stay one line.
constexpr size_t SHOWN_ITEMS = 5;

void print_table(const gguf::File& f) {
    uint64_t tensor_bytes = 0, params = 0;
    for (const auto& t : f.tensors()) {
        tensor_bytes += t.nbytes;
        params += uint64_t(t.nelements());
    }
    std::printf("file: %s\n", f.path().c_str());
    std::printf("size: %llu bytes, GGUF v%u, alignment %llu, tensor data at %llu\n",
                (unsigned long long)f.size(), f.version(), (unsigned long long)f.alignment(),
                (unsigned long long)f.data_offset());
    std::printf("\nmetadata (%zu keys):\n", f.metadata().size());
    size_t kw = 0;
    for (const auto& kv : f.metadata()) kw = std::max(kw, kv.key.size());
    for (const auto& kv : f.metadata()) {
        std::string v = kv.value.summary(SHOWN_ITEMS);
        if (v.size() > 160) v = v.substr(0, 157) + "...";
        std::printf("  %-*.*s  %-4s  %s\n", int(kw), int(kv.key.size()), kv.key.data(),
                    gguf::value_type_name(kv.value.type), v.c_str());
    }
    std::printf("\ntensors (%zu, %llu bytes, %llu parameters):\n", f.tensors().size(),
                (unsigned long long)tensor_bytes, (unsigned long long)params);
    if (f.tensors().empty()) return;
    size_t nw = 4;
    for (const auto& t : f.tensors()) nw = std::max(nw, t.name.size());
    std::printf("  %-*s  %-5s  %-22s  %12s  %12s\n", int(nw), "name", "type", "shape", "bytes", "offset");
    for (const auto& t : f.tensors())
        std::printf("  %-*.*s  %-5s  %-22s  %12llu  %12llu\n", int(nw), int(t.name.size()), t.name.data(),
                    gguf::type_name(t.type), t.shape_string().c_str(), (unsigned long long)t.nbytes,
                    (unsigned long long)t.offset);
}

int run_info(const std::vector<std::string>& args) {
    cli::Args a(args, {}, 1);
    if (a.positional().size() != 1) throw UsageError("give one GGUF file");
    gguf::File f = gguf::File::open(a.positional()[0]);
    print_table(f);
    return 0;
}

}  // namespace

const cli::Command info_command = {
    "info", "what a GGUF file holds: metadata and tensors (name, type, shape, bytes)",
    "usage: bankml info FILE\n\n"
    "Opens a GGUF file (versions 2 and 3) with every field checked, and prints its header, its\n"
    "metadata (arrays such as the tokenizer's are summarised: type, length, first items) and its\n"
    "tensors: name, type, shape in ggml order (row length first), bytes and offset in the data\n"
    "section. A malformed file is one line naming the field.\n",
    run_info};

}  // namespace bankml::cmd
