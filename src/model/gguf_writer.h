// GGUF writer (version 3, little-endian), streaming: metadata is kept in memory, tensor data is
// produced row chunk by row chunk while the file is written, so a multi-gigabyte model never sits
// in memory. What it writes, gguf::File reads back.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "model/gguf.h"

namespace bankml::gguf {

class Writer {
public:
    // Fills rows [row0, row0 + nrows) of a tensor into out (nrows * row_bytes bytes). A row is
    // ne[0] weights; rows are numbered over ne[1] * ne[2] * ne[3].
    using RowFill = std::function<void(int64_t row0, int64_t nrows, uint8_t* out)>;

    // A non-default alignment is written as general.alignment (u32, a power of two).
    void set_alignment(uint32_t a);

    // Metadata, written in the order added. A key added twice is an error.
    void add_u32(std::string_view key, uint32_t v);
    void add_i32(std::string_view key, int32_t v);
    void add_u64(std::string_view key, uint64_t v);
    void add_f32(std::string_view key, float v);
    void add_bool(std::string_view key, bool v);
    void add_str(std::string_view key, std::string_view v);
    void add_str_array(std::string_view key, std::span<const std::string> v);
    void add_str_array(std::string_view key, std::span<const std::string_view> v);
    void add_i32_array(std::string_view key, std::span<const int32_t> v);
    void add_f32_array(std::string_view key, std::span<const float> v);
    // Copies a value read from another file, whatever its type (nested arrays included).
    void add_value(std::string_view key, const Value& v);

    // A tensor of ne (ggml order, 1 to 4 dims; ne[0] a multiple of the type's block).
    void add_tensor(std::string name, Type type, std::vector<int64_t> ne, RowFill fill);

    size_t tensor_count() const { return tensors_.size(); }
    // Total bytes the file will have.
    uint64_t file_size() const;

    // Writes the file: to PATH.part, then renamed to PATH, so a failure leaves no half file.
    // Throws bankml::Error naming the path and the failing call.
    void write(const std::string& path) const;

private:
    struct Pending {
        std::string name;
        Type type;
        std::vector<int64_t> ne;
        uint64_t nbytes;
        uint64_t row_bytes;
        uint64_t offset;
        RowFill fill;
    };
    void key(std::string_view k, ValueType t);
    void put_value(const Value& v);
    std::string header() const;

    uint32_t alignment_ = uint32_t(DEFAULT_ALIGNMENT);
    std::string meta_;  // serialized key/value pairs
    uint64_t n_kv_ = 0;
    std::unordered_set<std::string> keys_;
    std::vector<Pending> tensors_;
    uint64_t data_size_ = 0;
};

}  // namespace bankml::gguf
