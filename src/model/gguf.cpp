#include "model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "core/error.h"
#include "core/file.h"
#include "core/utf8.h"

namespace bankml::gguf {

// ---------------------------------------------------------------------------------------------
// Types

namespace {
std::string hex32(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%08x", v);
    return b;
}

std::string quoted(std::string_view s) { return "'" + utf8::escape(s, 80) + "'"; }

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
}  // namespace

uint64_t row_bytes(Type t, int64_t n) {
    const TypeInfo* i = type_info(uint32_t(t));
    if (!i) throw Error("gguf::row_bytes: unknown type " + std::to_string(uint32_t(t)));
    if (n < 0 || n % i->block)
        throw Error(std::string("gguf::row_bytes: ") + std::to_string(n) + " weights is not a whole number of " +
                    i->name + " blocks of " + std::to_string(i->block));
    return uint64_t(n / i->block) * i->block_bytes;
}

const char* value_type_name(ValueType t) {
    switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STR: return "str";
    case ValueType::ARR: return "arr";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
    }
    return "?";
}

size_t value_type_size(ValueType t) {
    switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STR: case ValueType::ARR: return 0;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Values

namespace {
// Reads one fixed-size number of type t at p, as a double and (for integers) exactly as integers.
struct Num {
    bool is_int;
    bool neg;        // integers: negative
    uint64_t mag;    // integers: two's complement bits for signed, value for unsigned
    double f;
};
Num read_num(ValueType t, const uint8_t* p) {
    switch (t) {
    case ValueType::U8: return {true, false, load<uint8_t>(p), double(load<uint8_t>(p))};
    case ValueType::I8: { int64_t v = load<int8_t>(p); return {true, v < 0, uint64_t(v), double(v)}; }
    case ValueType::U16: return {true, false, load<uint16_t>(p), double(load<uint16_t>(p))};
    case ValueType::I16: { int64_t v = load<int16_t>(p); return {true, v < 0, uint64_t(v), double(v)}; }
    case ValueType::U32: return {true, false, load<uint32_t>(p), double(load<uint32_t>(p))};
    case ValueType::I32: { int64_t v = load<int32_t>(p); return {true, v < 0, uint64_t(v), double(v)}; }
    case ValueType::U64: return {true, false, load<uint64_t>(p), double(load<uint64_t>(p))};
    case ValueType::I64: { int64_t v = load<int64_t>(p); return {true, v < 0, uint64_t(v), double(v)}; }
    case ValueType::BOOL: return {true, false, uint64_t(load<uint8_t>(p) != 0), double(load<uint8_t>(p) != 0)};
    case ValueType::F32: return {false, false, 0, double(load<float>(p))};
    case ValueType::F64: return {false, false, 0, load<double>(p)};
    default: return {false, false, 0, std::nan("")};
    }
}
}  // namespace

std::optional<int64_t> Value::as_i64() const {
    if (type == ValueType::STR || type == ValueType::ARR || !raw) return std::nullopt;
    Num n = read_num(type, raw);
    if (!n.is_int) return std::nullopt;
    if (!n.neg && n.mag > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return int64_t(n.mag);
}

std::optional<uint64_t> Value::as_u64() const {
    if (type == ValueType::STR || type == ValueType::ARR || !raw) return std::nullopt;
    Num n = read_num(type, raw);
    if (!n.is_int || n.neg) return std::nullopt;
    return n.mag;
}

std::optional<double> Value::as_f64() const {
    if (type == ValueType::STR || type == ValueType::ARR || !raw) return std::nullopt;
    return read_num(type, raw).f;
}

int64_t Value::int_at(uint64_t i) const {
    size_t sz = value_type_size(elem);
    if (type != ValueType::ARR || i >= count || sz == 0 || !is_integer(elem))
        throw Error("gguf::Value::int_at(" + std::to_string(i) + "): not an integer array element");
    return int64_t(read_num(elem, raw + i * sz).mag);
}

double Value::float_at(uint64_t i) const {
    size_t sz = value_type_size(elem);
    if (type != ValueType::ARR || i >= count || sz == 0)
        throw Error("gguf::Value::float_at(" + std::to_string(i) + "): not a numeric array element");
    return read_num(elem, raw + i * sz).f;
}

std::string Value::summary(size_t max_items) const {
    auto scalar = [](ValueType t, const uint8_t* p) -> std::string {
        Num n = read_num(t, p);
        if (t == ValueType::BOOL) return n.mag ? "true" : "false";
        if (n.is_int) return n.neg ? std::to_string(int64_t(n.mag)) : std::to_string(n.mag);
        char b[40];
        std::snprintf(b, sizeof b, "%.9g", n.f);
        return b;
    };
    if (type == ValueType::STR) return quoted(str);
    if (type != ValueType::ARR) return scalar(type, raw);
    std::string s = "[";
    s += value_type_name(elem);
    s += " x " + std::to_string(count);
    if (max_items && count) {
        s += ": ";
        uint64_t n = std::min<uint64_t>(count, max_items);
        for (uint64_t i = 0; i < n; ++i) {
            if (i) s += ", ";
            if (elem == ValueType::STR) s += quoted(strs[i]);
            else if (elem == ValueType::ARR) s += items[i].summary(max_items);
            else s += scalar(elem, raw + i * value_type_size(elem));
        }
        if (count > n) s += ", ...";
    }
    return s + "]";
}

std::string Tensor::shape_string() const {
    std::string s = "[";
    for (uint32_t i = 0; i < std::max<uint32_t>(n_dims, 1); ++i) {
        if (i) s += ", ";
        s += std::to_string(ne[i]);
    }
    return s + "]";
}

// ---------------------------------------------------------------------------------------------
// Parsing

namespace {
// Nested arrays deeper than this are refused: each level costs the parser stack.
constexpr int MAX_NESTING = 16;
// Counts are only checked against the bytes left, so a forged count in a large file could still ask
// for gigabytes: containers grow with what is actually parsed, reserving at most this up front.
constexpr uint64_t RESERVE_CAP = 1u << 18;

// Reads the file front to back. Field descriptions are built only when something fails (`what` is a
// callable returning the description), so the fast path over 150,000 token strings builds none.
class Cursor {
public:
    Cursor(const std::string& label, const uint8_t* base, uint64_t size) : label_(label), base_(base), size_(size) {}
    uint64_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }
    const uint8_t* at(uint64_t p) const { return base_ + p; }

    [[noreturn]] void fail(const std::string& what) const { throw Error(label_ + ": " + what); }

    template <class W>
    void need(uint64_t n, W&& what) const {
        if (n > left())
            fail("truncated: " + what() + " needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                 ", the file has " + std::to_string(size_));
    }
    template <class T, class W>
    T get(W&& what) {
        need(sizeof(T), what);
        T v = load<T>(base_ + pos_);
        pos_ += sizeof(T);
        return v;
    }
    template <class W>
    const uint8_t* skip(uint64_t n, W&& what) {
        need(n, what);
        const uint8_t* p = base_ + pos_;
        pos_ += n;
        return p;
    }
    template <class W>
    std::string_view str(W&& what) {
        uint64_t n = get<uint64_t>([&] { return what() + " length"; });
        if (n > left())
            fail(what() + " length = " + std::to_string(n) + " at offset " + std::to_string(pos_ - 8) +
                 " runs past the end of the file (" + std::to_string(left()) + " bytes left): truncated or corrupt");
        const uint8_t* p = base_ + pos_;
        pos_ += n;
        return {reinterpret_cast<const char*>(p), size_t(n)};
    }

private:
    const std::string& label_;
    const uint8_t* base_;
    uint64_t size_;
    uint64_t pos_ = 0;
};

template <class W>
void read_value(Cursor& c, Value& v, ValueType t, const W& what, int depth);

template <class W>
void read_array(Cursor& c, Value& v, const W& what, int depth) {
    if (depth >= MAX_NESTING) c.fail(what() + ": arrays nested deeper than " + std::to_string(MAX_NESTING));
    uint32_t et = c.get<uint32_t>([&] { return what() + " element type"; });
    if (et > uint32_t(ValueType::F64))
        c.fail(what() + " element type = " + std::to_string(et) + " is not a GGUF value type");
    v.elem = ValueType(et);
    uint64_t n = c.get<uint64_t>([&] { return what() + " count"; });
    size_t esz = value_type_size(v.elem);
    uint64_t min_each = esz ? esz : (v.elem == ValueType::STR ? 8 : 12);
    if (n > c.left() / min_each)
        c.fail(what() + " count = " + std::to_string(n) + " (" + value_type_name(v.elem) + ") needs at least " +
               std::to_string(min_each) + " bytes each, only " + std::to_string(c.left()) +
               " bytes left: truncated or corrupt");
    v.count = n;
    v.raw = c.at(c.pos());
    if (esz) {
        c.skip(n * esz, what);
    } else if (v.elem == ValueType::STR) {
        v.strs.reserve(std::min<uint64_t>(n, RESERVE_CAP));
        for (uint64_t i = 0; i < n; ++i)
            v.strs.push_back(c.str([&] { return what() + "[" + std::to_string(i) + "]"; }));
    } else {
        v.items.reserve(std::min<uint64_t>(n, RESERVE_CAP));
        for (uint64_t i = 0; i < n; ++i) {
            auto item = [&] { return what() + "[" + std::to_string(i) + "]"; };
            read_value(c, v.items.emplace_back(), ValueType::ARR, item, depth + 1);
        }
    }
}

template <class W>
void read_value(Cursor& c, Value& v, ValueType t, const W& what, int depth) {
    v.type = t;
    v.offset = c.pos();
    if (t == ValueType::STR) {
        v.str = c.str(what);
        return;
    }
    if (t == ValueType::ARR) {
        // Nested lambdas have distinct types per level: erase them to keep the recursion finite.
        std::function<std::string()> w = what;
        read_array(c, v, w, depth);
        return;
    }
    size_t sz = value_type_size(t);
    if (sz == 0) c.fail(what() + " type = " + std::to_string(uint32_t(t)) + " is not a GGUF value type");
    v.raw = c.skip(sz, what);
    v.count = 1;
}

bool mul_ok(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
}  // namespace

void File::fail(const std::string& what) const { throw Error(path_ + ": " + what); }

void File::parse_all() {
    Cursor c(path_, base_, size_);
    uint32_t magic = c.get<uint32_t>([] { return std::string("magic"); });
    if (magic != MAGIC) fail("magic = " + hex32(magic) + " is not GGUF (0x46554747, \"GGUF\")");
    version_ = c.get<uint32_t>([] { return std::string("version"); });
    if (version_ == 1) fail("version = 1: GGUF v1 is not supported (versions 2 and 3 are)");
    if (version_ != 2 && version_ != 3) {
        if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3)
            fail("version = " + hex32(version_) + ": a big-endian GGUF, which bankml does not read");
        fail("version = " + std::to_string(version_) + " is not supported (versions 2 and 3 are)");
    }
    uint64_t n_tensors = c.get<uint64_t>([] { return std::string("tensor count"); });
    uint64_t n_kv = c.get<uint64_t>([] { return std::string("metadata count"); });
    // The smallest metadata entry is 13 bytes (empty key, type, u8); the smallest tensor info 24.
    if (n_kv > c.left() / 13)
        fail("metadata count = " + std::to_string(n_kv) + " cannot fit in the " + std::to_string(c.left()) +
             " bytes left: truncated or corrupt");
    if (n_tensors > c.left() / 24)
        fail("tensor count = " + std::to_string(n_tensors) + " cannot fit in the " + std::to_string(c.left()) +
             " bytes left: truncated or corrupt");

    kvs_.reserve(std::min<uint64_t>(n_kv, RESERVE_CAP));
    std::unordered_set<std::string_view> keys;
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string idx = "metadata " + std::to_string(i);
        KV& kv = kvs_.emplace_back();
        kv.key = c.str([&] { return idx + " key"; });
        if (!keys.insert(kv.key).second) fail(idx + " key = " + quoted(kv.key) + " is a duplicate");
        std::string what = "metadata " + quoted(kv.key);
        uint32_t t = c.get<uint32_t>([&] { return what + " type"; });
        if (t > uint32_t(ValueType::F64)) fail(what + " type = " + std::to_string(t) + " is not a GGUF value type");
        read_value(c, kv.value, ValueType(t), [&] { return what; }, 0);
    }

    if (const Value* a = find_kv("general.alignment")) {
        if (a->type != ValueType::U32)
            fail(std::string("metadata 'general.alignment' has type ") + value_type_name(a->type) + ", expected u32");
        uint32_t al = load<uint32_t>(a->raw);
        if (al == 0 || (al & (al - 1)))
            fail("metadata 'general.alignment' = " + std::to_string(al) + " is not a power of two");
        alignment_ = al;
    }

    tensors_.reserve(std::min<uint64_t>(n_tensors, RESERVE_CAP));
    std::unordered_set<std::string_view> names;
    for (uint64_t i = 0; i < n_tensors; ++i) {
        Tensor& t = tensors_.emplace_back();
        std::string idx = "tensor " + std::to_string(i);
        t.name = c.str([&] { return idx + " name"; });
        if (!names.insert(t.name).second) fail(idx + " name = " + quoted(t.name) + " is a duplicate");
        std::string what = "tensor " + quoted(t.name);
        t.n_dims = c.get<uint32_t>([&] { return what + " n_dims"; });
        if (t.n_dims > MAX_DIMS)
            fail(what + " n_dims = " + std::to_string(t.n_dims) + " exceeds " + std::to_string(MAX_DIMS));
        uint64_t n_el = 1;
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            int64_t ne = c.get<int64_t>([&] { return what + " ne[" + std::to_string(d) + "]"; });
            if (ne < 0) fail(what + " ne[" + std::to_string(d) + "] = " + std::to_string(ne) + " is negative");
            if (!mul_ok(n_el, uint64_t(ne), n_el) || n_el > uint64_t(std::numeric_limits<int64_t>::max()))
                fail(what + " ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                     ": the element count overflows 64 bits");
            t.ne[d] = ne;
        }
        uint32_t ty = c.get<uint32_t>([&] { return what + " type"; });
        const TypeInfo* ti = type_info(ty);
        if (!ti) fail(what + " type = " + std::to_string(ty) + " is not a tensor type bankml knows");
        t.type = Type(ty);
        if (t.ne[0] % ti->block)
            fail(what + " ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " + ti->name +
                 " block size " + std::to_string(ti->block));
        uint64_t nb;
        if (!mul_ok(n_el / ti->block, ti->block_bytes, nb))
            fail(what + " shape " + t.shape_string() + ": the byte size overflows 64 bits");
        t.nbytes = nb;
        t.offset = c.get<uint64_t>([&] { return what + " offset"; });
        if (t.offset % alignment_)
            fail(what + " offset = " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                 std::to_string(alignment_));
    }

    // The data section starts at the next multiple of the alignment after the header.
    uint64_t hdr_end = c.pos();
    data_offset_ = hdr_end + (alignment_ - hdr_end % alignment_) % alignment_;
    if (n_tensors == 0) return;
    if (data_offset_ > size_)
        fail("truncated: the tensor data section starts at offset " + std::to_string(data_offset_) +
             ", past the end of the file (" + std::to_string(size_) + " bytes)");
    uint64_t data_size = size_ - data_offset_;
    for (Tensor& t : tensors_) {
        if (t.offset > data_size || t.nbytes > data_size - t.offset)
            fail("tensor " + quoted(t.name) + " offset = " + std::to_string(t.offset) + " + " + std::to_string(t.nbytes) +
                 " bytes runs past the end of the data section (" + std::to_string(data_size) +
                 " bytes): truncated or corrupt");
        t.data = base_ + data_offset_ + t.offset;
    }
    std::vector<size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
        const Tensor& p = tensors_[order[k - 1]];
        const Tensor& q = tensors_[order[k]];
        if (p.nbytes && q.nbytes && p.offset + p.nbytes > q.offset)
            fail("tensor " + quoted(q.name) + " offset = " + std::to_string(q.offset) + " overlaps tensor " +
                 quoted(p.name) + " (bytes " + std::to_string(p.offset) + ".." + std::to_string(p.offset + p.nbytes) + ")");
    }
}

File File::open(const std::string& path) {
    File f;
    f.path_ = path;
    int fd = file::open_regular(path);  // never blocks on a FIFO; refuses what cannot be mapped
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        throw Error("fstat(" + path + ") failed: " + std::strerror(e));
    }
    f.size_ = uint64_t(st.st_size);
    if (f.size_ > 0) {
        void* m = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            throw Error("mmap(" + path + ", " + std::to_string(f.size_) + " bytes) failed: " + std::strerror(e));
        }
        f.map_ = m;
        f.map_len_ = f.size_;
        f.base_ = static_cast<const uint8_t*>(m);
    }
    ::close(fd);
    static const uint8_t empty[1] = {0};
    if (!f.base_) f.base_ = empty;
    f.parse_all();
    return f;
}

File File::parse(std::string label, std::span<const uint8_t> bytes) {
    File f;
    f.path_ = std::move(label);
    static const uint8_t empty[1] = {0};
    f.base_ = bytes.empty() ? empty : bytes.data();
    f.size_ = bytes.size();
    f.parse_all();
    return f;
}

File File::parse(std::string label, std::vector<uint8_t>&& bytes) {
    File f;
    f.path_ = std::move(label);
    f.owned_ = std::move(bytes);
    static const uint8_t empty[1] = {0};
    f.base_ = f.owned_.empty() ? empty : f.owned_.data();
    f.size_ = f.owned_.size();
    f.parse_all();
    return f;
}

File::File(File&& o) noexcept { *this = std::move(o); }

File& File::operator=(File&& o) noexcept {
    if (this == &o) return *this;
    if (map_) munmap(map_, map_len_);
    path_ = std::move(o.path_);
    base_ = o.base_;
    size_ = o.size_;
    map_ = o.map_;
    map_len_ = o.map_len_;
    owned_ = std::move(o.owned_);
    version_ = o.version_;
    alignment_ = o.alignment_;
    data_offset_ = o.data_offset_;
    kvs_ = std::move(o.kvs_);
    tensors_ = std::move(o.tensors_);
    o.map_ = nullptr;
    o.base_ = nullptr;
    o.size_ = o.map_len_ = 0;
    return *this;
}

File::~File() {
    if (map_) munmap(map_, map_len_);
}

// ---------------------------------------------------------------------------------------------
// Lookups

const Value* File::find_kv(std::string_view key) const {
    for (const KV& kv : kvs_)
        if (kv.key == key) return &kv.value;
    return nullptr;
}

const Value& File::typed(std::string_view key, const Value& v, bool ok, const char* want) const {
    if (!ok)
        fail("metadata " + quoted(key) + " = " + v.summary(3) + " (" + value_type_name(v.type) + ") is not " + want);
    return v;
}

std::optional<uint32_t> File::get_u32(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    auto u = v->as_u64();
    typed(key, *v, is_integer(v->type) && u && *u <= std::numeric_limits<uint32_t>::max(), "a u32");
    return uint32_t(*u);
}

std::optional<int64_t> File::get_i64(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    auto i = v->as_i64();
    typed(key, *v, is_integer(v->type) && i.has_value(), "an i64");
    return *i;
}

std::optional<uint64_t> File::get_u64(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    auto u = v->as_u64();
    typed(key, *v, is_integer(v->type) && u.has_value(), "a u64");
    return *u;
}

std::optional<float> File::get_f32(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    typed(key, *v, v->type == ValueType::F32 || v->type == ValueType::F64, "a float");
    return v->type == ValueType::F32 ? load<float>(v->raw) : float(load<double>(v->raw));
}

std::optional<double> File::get_f64(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    typed(key, *v, v->type == ValueType::F32 || v->type == ValueType::F64, "a float");
    return v->type == ValueType::F32 ? double(load<float>(v->raw)) : load<double>(v->raw);
}

std::optional<bool> File::get_bool(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    typed(key, *v, v->type == ValueType::BOOL, "a bool");
    return load<uint8_t>(v->raw) != 0;
}

std::optional<std::string_view> File::get_str(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    typed(key, *v, v->type == ValueType::STR, "a string");
    return v->str;
}

#define BANKML_REQUIRE(T, getter)                                              \
    T File::require_##getter(std::string_view key) const {                     \
        auto r = get_##getter(key);                                            \
        if (!r) fail("missing metadata key " + quoted(key));                   \
        return *r;                                                             \
    }
BANKML_REQUIRE(uint32_t, u32)
BANKML_REQUIRE(int64_t, i64)
BANKML_REQUIRE(float, f32)
BANKML_REQUIRE(bool, bool)
BANKML_REQUIRE(std::string_view, str)
#undef BANKML_REQUIRE

std::optional<std::span<const std::string_view>> File::get_str_array(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    typed(key, *v, v->type == ValueType::ARR && v->elem == ValueType::STR, "an array of strings");
    return std::span<const std::string_view>(v->strs);
}

std::optional<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    typed(key, *v, v->type == ValueType::ARR && is_integer(v->elem), "an array of integers");
    std::vector<int64_t> out(v->count);
    size_t sz = value_type_size(v->elem);
    for (uint64_t i = 0; i < v->count; ++i) out[i] = int64_t(read_num(v->elem, v->raw + i * sz).mag);
    return out;
}

std::optional<std::vector<float>> File::get_f32_array(std::string_view key) const {
    const Value* v = find_kv(key);
    if (!v) return std::nullopt;
    typed(key, *v, v->type == ValueType::ARR && (v->elem == ValueType::F32 || v->elem == ValueType::F64),
          "an array of floats");
    std::vector<float> out(v->count);
    size_t sz = value_type_size(v->elem);
    for (uint64_t i = 0; i < v->count; ++i) out[i] = float(read_num(v->elem, v->raw + i * sz).f);
    return out;
}

const Tensor* File::find(std::string_view name) const {
    for (const Tensor& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

const Tensor& File::get(std::string_view name) const {
    const Tensor* t = find(name);
    if (!t) fail("missing tensor " + quoted(name));
    return *t;
}

}  // namespace bankml::gguf
