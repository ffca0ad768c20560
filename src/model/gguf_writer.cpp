#include "model/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/file.h"

namespace bankml::gguf {

namespace {
template <class T>
void put(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof v);
    out.append(b, sizeof v);
}
void put_str(std::string& out, std::string_view s) {
    put<uint64_t>(out, s.size());
    out.append(s.data(), s.size());
}
uint64_t pad_to(uint64_t n, uint64_t a) { return (a - n % a) % a; }

// Tensor data is produced and written in chunks of about this many bytes.
constexpr uint64_t CHUNK_BYTES = 8u << 20;
}  // namespace

void Writer::set_alignment(uint32_t a) {
    if (a == 0 || (a & (a - 1))) throw Error("gguf::Writer::set_alignment(" + std::to_string(a) + "): not a power of two");
    if (!tensors_.empty()) throw Error("gguf::Writer::set_alignment: set it before adding tensors");
    alignment_ = a;
}

void Writer::key(std::string_view k, ValueType t) {
    if (k == "general.alignment") throw Error("gguf::Writer: use set_alignment() for general.alignment");
    if (!keys_.insert(std::string(k)).second) throw Error("gguf::Writer: metadata key '" + std::string(k) + "' added twice");
    put_str(meta_, k);
    put<uint32_t>(meta_, uint32_t(t));
    ++n_kv_;
}

void Writer::add_u32(std::string_view k, uint32_t v) { key(k, ValueType::U32); put(meta_, v); }
void Writer::add_i32(std::string_view k, int32_t v) { key(k, ValueType::I32); put(meta_, v); }
void Writer::add_u64(std::string_view k, uint64_t v) { key(k, ValueType::U64); put(meta_, v); }
void Writer::add_f32(std::string_view k, float v) { key(k, ValueType::F32); put(meta_, v); }
void Writer::add_bool(std::string_view k, bool v) { key(k, ValueType::BOOL); put<uint8_t>(meta_, v ? 1 : 0); }
void Writer::add_str(std::string_view k, std::string_view v) { key(k, ValueType::STR); put_str(meta_, v); }

void Writer::add_str_array(std::string_view k, std::span<const std::string> v) {
    key(k, ValueType::ARR);
    put<uint32_t>(meta_, uint32_t(ValueType::STR));
    put<uint64_t>(meta_, v.size());
    for (const auto& s : v) put_str(meta_, s);
}

void Writer::add_str_array(std::string_view k, std::span<const std::string_view> v) {
    key(k, ValueType::ARR);
    put<uint32_t>(meta_, uint32_t(ValueType::STR));
    put<uint64_t>(meta_, v.size());
    for (const auto& s : v) put_str(meta_, s);
}

void Writer::add_i32_array(std::string_view k, std::span<const int32_t> v) {
    key(k, ValueType::ARR);
    put<uint32_t>(meta_, uint32_t(ValueType::I32));
    put<uint64_t>(meta_, v.size());
    meta_.append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
}

void Writer::add_f32_array(std::string_view k, std::span<const float> v) {
    key(k, ValueType::ARR);
    put<uint32_t>(meta_, uint32_t(ValueType::F32));
    put<uint64_t>(meta_, v.size());
    meta_.append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
}

void Writer::put_value(const Value& v) {
    if (v.type == ValueType::STR) {
        put_str(meta_, v.str);
    } else if (v.type != ValueType::ARR) {
        meta_.append(reinterpret_cast<const char*>(v.raw), value_type_size(v.type));
    } else {
        put<uint32_t>(meta_, uint32_t(v.elem));
        put<uint64_t>(meta_, v.count);
        if (v.elem == ValueType::STR) {
            for (const auto& s : v.strs) put_str(meta_, s);
        } else if (v.elem == ValueType::ARR) {
            for (const auto& item : v.items) put_value(item);
        } else {
            meta_.append(reinterpret_cast<const char*>(v.raw), v.count * value_type_size(v.elem));
        }
    }
}

void Writer::add_value(std::string_view k, const Value& v) {
    key(k, v.type);
    put_value(v);
}

void Writer::add_tensor(std::string name, Type type, std::vector<int64_t> ne, RowFill fill) {
    const TypeInfo* ti = type_info(uint32_t(type));
    if (!ti) throw Error("gguf::Writer::add_tensor(" + name + "): unknown type " + std::to_string(uint32_t(type)));
    if (ne.empty() || ne.size() > MAX_DIMS)
        throw Error("gguf::Writer::add_tensor(" + name + "): " + std::to_string(ne.size()) + " dims (1 to 4 allowed)");
    for (const auto& t : tensors_)
        if (t.name == name) throw Error("gguf::Writer::add_tensor(" + name + "): added twice");
    uint64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) {
        if (ne[i] < 0) throw Error("gguf::Writer::add_tensor(" + name + "): negative dimension");
        rows *= uint64_t(ne[i]);
    }
    uint64_t rb = row_bytes(type, ne[0]);
    Pending p{std::move(name), type, std::move(ne), rb * rows, rb, data_size_, std::move(fill)};
    data_size_ += p.nbytes + pad_to(p.nbytes, alignment_);
    tensors_.push_back(std::move(p));
}

std::string Writer::header() const {
    std::string h;
    put<uint32_t>(h, MAGIC);
    put<uint32_t>(h, 3);
    put<uint64_t>(h, tensors_.size());
    put<uint64_t>(h, n_kv_ + (alignment_ != DEFAULT_ALIGNMENT ? 1 : 0));
    if (alignment_ != DEFAULT_ALIGNMENT) {
        put_str(h, "general.alignment");
        put<uint32_t>(h, uint32_t(ValueType::U32));
        put<uint32_t>(h, alignment_);
    }
    h += meta_;
    for (const auto& t : tensors_) {
        put_str(h, t.name);
        put<uint32_t>(h, uint32_t(t.ne.size()));
        for (int64_t d : t.ne) put<int64_t>(h, d);
        put<uint32_t>(h, uint32_t(t.type));
        put<uint64_t>(h, t.offset);
    }
    if (!tensors_.empty()) h.append(pad_to(h.size(), alignment_), '\0');
    return h;
}

uint64_t Writer::file_size() const { return header().size() + data_size_; }

void Writer::write(const std::string& path) const {
    // PATH is replaced whole or not at all; a device, FIFO or directory is refused untouched.
    file::Output f(path);
    std::string h = header();
    f.write(h.data(), h.size());
    std::vector<uint8_t> buf;
    static const char zeros[256] = {};
    for (const auto& t : tensors_) {
        uint64_t rows = t.row_bytes ? t.nbytes / t.row_bytes : 0;
        uint64_t chunk = std::max<uint64_t>(1, CHUNK_BYTES / std::max<uint64_t>(t.row_bytes, 1));
        for (uint64_t r = 0; r < rows; r += chunk) {
            uint64_t n = std::min(chunk, rows - r);
            buf.assign(n * t.row_bytes, 0);
            t.fill(int64_t(r), int64_t(n), buf.data());
            f.write(buf.data(), buf.size());
        }
        for (uint64_t pad = pad_to(t.nbytes, alignment_); pad;) {
            uint64_t k = std::min<uint64_t>(pad, sizeof zeros);
            f.write(zeros, k);
            pad -= k;
        }
    }
    f.commit();
}

}  // namespace bankml::gguf
