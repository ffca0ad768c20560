// GGUF reader: versions 2 and 3 as llama.cpp writes them. The file is memory-mapped read-only and
// tensors point into the mapping (weights are used in place, never copied). Every count, length,
// offset, dimension and type is checked against the file before use; anything wrong is one
// bankml::Error naming the file, the field and the offending value.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "quant/traits.h"

namespace bankml::gguf {

// Tensor types and their layouts are quant's table (quant/traits.h): the file accepts only ids it
// knows; any other id is an error when the file is opened.
using Type = quant::Type;
using TypeInfo = quant::TypeTraits;
// nullptr when bankml does not know the id.
inline const TypeInfo* type_info(uint32_t id) { return quant::find_traits(id); }
using quant::type_from_name;
using quant::type_name;
// Bytes of a row of n weights; n must be a multiple of the block size (throws otherwise).
uint64_t row_bytes(Type t, int64_t n);

// GGUF metadata value types (on-disk ids).
enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STR = 8, ARR = 9,
    U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);
// Byte size of a fixed-size scalar type; 0 for STR and ARR.
size_t value_type_size(ValueType t);
inline bool is_integer(ValueType t) {
    return t == ValueType::U8 || t == ValueType::I8 || t == ValueType::U16 || t == ValueType::I16 ||
           t == ValueType::U32 || t == ValueType::I32 || t == ValueType::U64 || t == ValueType::I64;
}

// One metadata value, viewing the mapped file. Scalars: `raw` points at its little-endian bytes
// (STR: `str`). Arrays: `elem` is the element type, `count` the length; fixed-size elements start
// at `raw` (unaligned: read them with the accessors), strings are in `strs` (views into the file),
// nested arrays in `items`.
struct Value {
    ValueType type = ValueType::U8;
    ValueType elem = ValueType::U8;
    uint64_t count = 0;
    const uint8_t* raw = nullptr;
    std::string_view str;
    std::vector<std::string_view> strs;
    std::vector<Value> items;
    uint64_t offset = 0;  // where the value starts in the file (for messages)

    // Scalar as a number: any integer / float / bool type (nullopt for STR and ARR).
    std::optional<int64_t> as_i64() const;  // U64 above INT64_MAX -> nullopt
    std::optional<uint64_t> as_u64() const; // negative -> nullopt
    std::optional<double> as_f64() const;
    // Element i of an array of fixed-size numbers (i < count; no check beyond an assert-like throw).
    int64_t int_at(uint64_t i) const;
    double float_at(uint64_t i) const;
    // A short human description: `42`, `"gpt2"`, `[str × 151936]`.
    std::string summary(size_t max_items = 0) const;
};

struct KV {
    std::string_view key;
    Value value;
};

struct Tensor {
    std::string_view name;
    Type type = Type::F32;
    uint32_t n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ggml order: ne[0] is the row length; unused dims are 1
    uint64_t offset = 0;           // relative to the data section
    uint64_t nbytes = 0;
    const uint8_t* data = nullptr; // in the mapping, aligned to the file's alignment
    int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
    uint64_t row_bytes() const { return nbytes / uint64_t(nrows() ? nrows() : 1); }
    std::string shape_string() const;  // "[256, 1024]"
};

class File {
public:
    // Maps the file read-only and parses it; throws bankml::Error naming the path and field.
    static File open(const std::string& path);
    // Parses bytes the caller keeps alive (tests, fuzzing); `label` names it in messages.
    static File parse(std::string label, std::span<const uint8_t> bytes);
    // The same, keeping the bytes (so a temporary buffer cannot dangle).
    static File parse(std::string label, std::vector<uint8_t>&& bytes);

    File(File&&) noexcept;
    File& operator=(File&&) noexcept;
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    ~File();

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t size() const { return size_; }
    uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
    const uint8_t* bytes() const { return base_; }

    // Metadata, in file order.
    const std::vector<KV>& metadata() const { return kvs_; }
    const Value* find_kv(std::string_view key) const;  // nullptr if absent
    bool has(std::string_view key) const { return find_kv(key) != nullptr; }

    // Typed getters: nullopt when the key is absent; a present key of an incompatible type (or an
    // integer out of range) throws naming the file, the key, its type and value. Integers accept
    // any integer type whose value fits; floats accept F32 and F64.
    std::optional<uint32_t> get_u32(std::string_view key) const;
    std::optional<int64_t> get_i64(std::string_view key) const;
    std::optional<uint64_t> get_u64(std::string_view key) const;
    std::optional<float> get_f32(std::string_view key) const;
    std::optional<double> get_f64(std::string_view key) const;
    std::optional<bool> get_bool(std::string_view key) const;
    std::optional<std::string_view> get_str(std::string_view key) const;
    // The same, throwing "FILE: missing metadata key KEY" when absent.
    uint32_t require_u32(std::string_view key) const;
    int64_t require_i64(std::string_view key) const;
    float require_f32(std::string_view key) const;
    bool require_bool(std::string_view key) const;
    std::string_view require_str(std::string_view key) const;

    // Arrays: nullopt when absent; a present key that is not an array of the right kind throws.
    // Strings are views into the mapping (no copy). Numbers are copied out (the file gives them
    // unaligned); any integer element type converts to int64, F32/F64 to float.
    std::optional<std::span<const std::string_view>> get_str_array(std::string_view key) const;
    std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
    std::optional<std::vector<float>> get_f32_array(std::string_view key) const;

    // Tensors, in file order.
    const std::vector<Tensor>& tensors() const { return tensors_; }
    const Tensor* find(std::string_view name) const;  // nullptr if absent
    const Tensor& get(std::string_view name) const;   // throws "FILE: missing tensor NAME"

private:
    File() = default;
    void parse_all();
    [[noreturn]] void fail(const std::string& what) const;
    const Value& typed(std::string_view key, const Value& v, bool ok, const char* want) const;

    std::string path_;
    const uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
    void* map_ = nullptr;  // mmap'd region we own (nullptr for parse())
    std::vector<uint8_t> owned_;  // parse(label, vector&&): the bytes, whose buffer survives moves
    uint64_t map_len_ = 0;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<KV> kvs_;
    std::vector<Tensor> tensors_;
};

// ggml's tensor data alignment when general.alignment is absent.
inline constexpr uint64_t DEFAULT_ALIGNMENT = 32;
inline constexpr uint32_t MAGIC = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t MAX_DIMS = 4;

}  // namespace bankml::gguf
