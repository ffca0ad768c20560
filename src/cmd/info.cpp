// `bankml info FILE [--json]`: what a GGUF file holds: header, metadata (long arrays summarised),
// tensors with type, shape and bytes.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "cmd/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "core/utf8.h"
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
    // Keys and names are escaped as values are: a NUL or a stray byte in them shows as \xNN.
    size_t kw = 0;
    for (const auto& kv : f.metadata()) kw = std::max(kw, utf8::escape(kv.key).size());
    for (const auto& kv : f.metadata()) {
        std::string v = kv.value.summary(SHOWN_ITEMS);
        if (v.size() > 160) v = v.substr(0, 157) + "...";
        std::printf("  %-*s  %-4s  %s\n", int(kw), utf8::escape(kv.key).c_str(), gguf::value_type_name(kv.value.type),
                    v.c_str());
    }
    std::printf("\ntensors (%zu, %llu bytes, %llu parameters):\n", f.tensors().size(),
                (unsigned long long)tensor_bytes, (unsigned long long)params);
    if (f.tensors().empty()) return;
    size_t nw = 4;
    for (const auto& t : f.tensors()) nw = std::max(nw, utf8::escape(t.name).size());
    std::printf("  %-*s  %-5s  %-22s  %12s  %12s\n", int(nw), "name", "type", "shape", "bytes", "offset");
    for (const auto& t : f.tensors())
        std::printf("  %-*s  %-5s  %-22s  %12llu  %12llu\n", int(nw), utf8::escape(t.name).c_str(),
                    gguf::type_name(t.type), t.shape_string().c_str(), (unsigned long long)t.nbytes,
                    (unsigned long long)t.offset);
}

// Arrays up to this long appear whole in --json; longer ones as their first SHOWN_ITEMS items.
constexpr uint64_t JSON_WHOLE_ARRAY = 16;

json::Value scalar_json(gguf::ValueType t, const uint8_t* raw, const gguf::Value& holder, uint64_t i) {
    using VT = gguf::ValueType;
    switch (t) {
    case VT::BOOL: return json::Value(raw[0] != 0);
    case VT::F32:
    case VT::F64: return json::Value(holder.type == VT::ARR ? holder.float_at(i) : *holder.as_f64());
    case VT::U64: {
        uint64_t u;
        std::memcpy(&u, raw, 8);
        return json::Value((unsigned long long)u);
    }
    default: return json::Value((long long)(holder.type == VT::ARR ? holder.int_at(i) : *holder.as_i64()));
    }
}

json::Value value_json(const gguf::Value& v) {
    using VT = gguf::ValueType;
    if (v.type == VT::STR) return json::Value(v.str);
    if (v.type != VT::ARR) return scalar_json(v.type, v.raw, v, 0);
    json::Value o = json::Value::object();
    o.set("element_type", gguf::value_type_name(v.elem));
    o.set("count", (unsigned long long)v.count);
    bool whole = v.count <= JSON_WHOLE_ARRAY;
    uint64_t n = whole ? v.count : SHOWN_ITEMS;
    json::Value items = json::Value::array();
    size_t esz = gguf::value_type_size(v.elem);
    for (uint64_t i = 0; i < n; ++i) {
        if (v.elem == VT::STR) items.push(json::Value(v.strs[i]));
        else if (v.elem == VT::ARR) items.push(value_json(v.items[i]));
        else items.push(scalar_json(v.elem, v.raw + i * esz, v, i));
    }
    o.set(whole ? "values" : "first", std::move(items));
    return o;
}

std::string info_json(const gguf::File& f) {
    json::Value root = json::Value::object();
    root.set("file", f.path());
    root.set("size", (unsigned long long)f.size());
    root.set("version", f.version());
    root.set("alignment", (unsigned long long)f.alignment());
    root.set("data_offset", (unsigned long long)f.data_offset());
    json::Value meta = json::Value::object();
    for (const auto& kv : f.metadata()) meta.set(std::string(kv.key), value_json(kv.value));
    root.set("metadata", std::move(meta));
    uint64_t tensor_bytes = 0, params = 0;
    json::Value ts = json::Value::array();
    for (const auto& t : f.tensors()) {
        tensor_bytes += t.nbytes;
        params += uint64_t(t.nelements());
        json::Value shape = json::Value::array();
        for (uint32_t d = 0; d < std::max<uint32_t>(t.n_dims, 1); ++d) shape.push((long long)t.ne[d]);
        json::Value o = json::Value::object();
        o.set("name", std::string(t.name));
        o.set("type", gguf::type_name(t.type));
        o.set("shape", std::move(shape));
        o.set("bytes", (unsigned long long)t.nbytes);
        o.set("offset", (unsigned long long)t.offset);
        ts.push(std::move(o));
    }
    root.set("tensor_bytes", (unsigned long long)tensor_bytes);
    root.set("parameters", (unsigned long long)params);
    root.set("tensors", std::move(ts));
    return json::write(root, 2);
}

int run_info(const std::vector<std::string>& args) {
    cli::Args a(args, {{"--json", false}}, 1);
    if (a.positional().size() != 1) throw UsageError("give one GGUF file");
    gguf::File f = gguf::File::open(a.positional()[0]);
    if (a.has("json")) std::printf("%s\n", info_json(f).c_str());
    else print_table(f);
    return 0;
}

}  // namespace

const cli::Command info_command = {
    "info", "what a GGUF file holds: metadata and tensors (name, type, shape, bytes)",
    "usage: bankml info FILE [--json]\n\n"
    "Opens a GGUF file (versions 2 and 3) with every field checked, and prints its header, its\n"
    "metadata (arrays such as the tokenizer's are summarised: type, length, first items) and its\n"
    "tensors: name, type, shape in ggml order (row length first), bytes and offset in the data\n"
    "section. --json prints one JSON object instead: file, size, version, alignment, data_offset,\n"
    "metadata (key -> value; an array is {element_type, count, values} when it has at most 16\n"
    "items, else {element_type, count, first} with its first 5), tensor_bytes, parameters and\n"
    "tensors [{name, type, shape, bytes, offset}]. A malformed file is one line naming the field.\n",
    run_info};

}  // namespace bankml::cmd
