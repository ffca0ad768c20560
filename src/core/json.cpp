#include "core/json.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/utf8.h"

namespace bankml::json {

const char* type_name(Type t) {
    switch (t) {
        case Type::Null: return "null";
        case Type::Bool: return "bool";
        case Type::Int: return "integer";
        case Type::UInt: return "integer";
        case Type::Double: return "number";
        case Type::String: return "string";
        case Type::Array: return "array";
        case Type::Object: return "object";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------
// Value

static Error type_error(const char* want, Type got) {
    return Error(std::string("json: expected ") + want + ", got " + type_name(got));
}

const Value& Value::null_value() {
    static const Value n;
    return n;
}

bool Value::as_bool() const {
    if (!is_bool()) throw type_error("bool", type());
    return std::get<bool>(v_);
}

int64_t Value::as_int() const {
    switch (type()) {
        case Type::Int: return std::get<int64_t>(v_);
        case Type::UInt: throw Error("json: integer " + std::to_string(std::get<uint64_t>(v_)) + " does not fit int64");
        case Type::Double: {
            double d = std::get<double>(v_);
            // 2^63 is exactly representable; anything below it that is integral converts exactly.
            if (d >= -9223372036854775808.0 && d < 9223372036854775808.0 && std::trunc(d) == d) return int64_t(d);
            throw Error("json: number is not an integer in int64 range");
        }
        default: throw type_error("integer", type());
    }
}

uint64_t Value::as_uint() const {
    switch (type()) {
        case Type::Int: {
            int64_t i = std::get<int64_t>(v_);
            if (i < 0) throw Error("json: integer " + std::to_string(i) + " is negative");
            return uint64_t(i);
        }
        case Type::UInt: return std::get<uint64_t>(v_);
        case Type::Double: {
            double d = std::get<double>(v_);
            if (d >= 0 && d < 18446744073709551616.0 && std::trunc(d) == d) return uint64_t(d);
            throw Error("json: number is not an integer in uint64 range");
        }
        default: throw type_error("integer", type());
    }
}

double Value::as_double() const {
    switch (type()) {
        case Type::Int: return double(std::get<int64_t>(v_));
        case Type::UInt: return double(std::get<uint64_t>(v_));
        case Type::Double: return std::get<double>(v_);
        default: throw type_error("number", type());
    }
}

const std::string& Value::as_string() const {
    if (!is_string()) throw type_error("string", type());
    return std::get<std::string>(v_);
}
const Array& Value::as_array() const {
    if (!is_array()) throw type_error("array", type());
    return std::get<Array>(v_);
}
Array& Value::as_array() {
    if (!is_array()) throw type_error("array", type());
    return std::get<Array>(v_);
}
const Object& Value::as_object() const {
    if (!is_object()) throw type_error("object", type());
    return std::get<Object>(v_);
}
Object& Value::as_object() {
    if (!is_object()) throw type_error("object", type());
    return std::get<Object>(v_);
}

size_t Value::size() const {
    if (is_array()) return std::get<Array>(v_).size();
    if (is_object()) return std::get<Object>(v_).size();
    return 0;
}

const Value* Value::find(std::string_view key) const {
    if (!is_object()) return nullptr;
    for (const auto& m : std::get<Object>(v_))
        if (m.first == key) return &m.second;
    return nullptr;
}
Value* Value::find(std::string_view key) {
    return const_cast<Value*>(static_cast<const Value*>(this)->find(key));
}

const Value& Value::operator[](std::string_view key) const {
    const Value* v = find(key);
    return v ? *v : null_value();
}
const Value& Value::operator[](size_t i) const {
    if (!is_array() || i >= std::get<Array>(v_).size()) return null_value();
    return std::get<Array>(v_)[i];
}

Value& Value::set(std::string key, Value v) {
    if (is_null()) v_ = Object{};
    if (Value* old = find(key)) *old = std::move(v);
    else as_object().emplace_back(std::move(key), std::move(v));
    return *this;
}

Value& Value::push(Value v) {
    if (is_null()) v_ = Array{};
    as_array().push_back(std::move(v));
    return *this;
}

bool Value::operator==(const Value& o) const {
    if (is_integer() && o.is_integer()) {
        if (type() == o.type()) return v_ == o.v_;
        return false;  // an Int and a UInt never hold the same value: UInt is used only above INT64_MAX
    }
    return v_ == o.v_;
}

// ---------------------------------------------------------------------------------------------
// Writer

void write_string(std::string& out, std::string_view s) {
    static const char* hex = "0123456789abcdef";
    out += '"';
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    size_t n = s.size(), i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c == '"') out += "\\\"";
        else if (c == '\\') out += "\\\\";
        else if (c == '\b') out += "\\b";
        else if (c == '\f') out += "\\f";
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20) {
            out += "\\u00";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else if (c < 0x80) {
            out += char(c);
        } else {
            size_t len = utf8::sequence_length(s.substr(i));
            if (len == 0) {
                out += "\xEF\xBF\xBD";  // U+FFFD for a byte that is not valid UTF-8
                ++i;
                continue;
            }
            out.append(reinterpret_cast<const char*>(p + i), len);
            i += len;
            continue;
        }
        ++i;
    }
    out += '"';
}

static void write_double(std::string& out, double d) {
    if (!std::isfinite(d)) {
        out += "null";
        return;
    }
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, d);
    std::string_view s(buf, size_t(r.ptr - buf));
    out += s;
    // "3" or "-0" would read back as an integer; keep the number a double.
    if (s.find_first_of(".eE") == std::string_view::npos) out += ".0";
}

static void newline(std::string& out, int indent, int depth) {
    out += '\n';
    out.append(size_t(indent) * size_t(depth), ' ');
}

static void write_value(std::string& out, const Value& v, int indent, int depth) {
    switch (v.type()) {
        case Type::Null: out += "null"; return;
        case Type::Bool: out += v.as_bool() ? "true" : "false"; return;
        case Type::Int: out += std::to_string(v.as_int()); return;
        case Type::UInt: out += std::to_string(v.as_uint()); return;
        case Type::Double: write_double(out, v.as_double()); return;
        case Type::String: write_string(out, v.as_string()); return;
        case Type::Array: {
            const Array& a = v.as_array();
            out += '[';
            for (size_t i = 0; i < a.size(); ++i) {
                if (i) out += ',';
                if (indent >= 0) newline(out, indent, depth + 1);
                write_value(out, a[i], indent, depth + 1);
            }
            if (indent >= 0 && !a.empty()) newline(out, indent, depth);
            out += ']';
            return;
        }
        case Type::Object: {
            const Object& o = v.as_object();
            out += '{';
            for (size_t i = 0; i < o.size(); ++i) {
                if (i) out += ',';
                if (indent >= 0) newline(out, indent, depth + 1);
                write_string(out, o[i].first);
                out += indent >= 0 ? ": " : ":";
                write_value(out, o[i].second, indent, depth + 1);
            }
            if (indent >= 0 && !o.empty()) newline(out, indent, depth);
            out += '}';
            return;
        }
    }
}

std::string write(const Value& v, int indent) {
    std::string out;
    write_value(out, v, indent, 0);
    return out;
}

// ---------------------------------------------------------------------------------------------
// Reader: recursive descent over the bytes, depth-limited.

namespace {

class Reader {
public:
    Reader(std::string_view t, const ParseOptions& o) : s_(t), opt_(o) {}

    Value document() {
        ws();
        Value v = value(0);
        ws();
        if (i_ != s_.size()) fail("end of document");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& expected) const { fail_at(i_, expected); }
    [[noreturn]] void fail_at(size_t at, const std::string& expected) const {
        std::string what = "expected " + expected;
        if (at >= s_.size()) what += " (got end of input)";
        else {
            unsigned char c = (unsigned char)s_[at];
            if (c >= 0x20 && c < 0x7F) what += std::string(" (got '") + char(c) + "')";
            else {
                char b[32];
                std::snprintf(b, sizeof b, " (got byte 0x%02X)", c);
                what += b;
            }
        }
        throw ParseError(at, what);
    }
    [[noreturn]] void fail_msg(size_t at, const std::string& msg) const { throw ParseError(at, msg); }

    bool eof() const { return i_ >= s_.size(); }
    char peek() const { return eof() ? '\0' : s_[i_]; }

    void ws() {
        while (!eof()) {
            char c = s_[i_];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ++i_;
            else break;
        }
    }

    void literal(const char* word) {
        size_t n = std::strlen(word);
        for (size_t k = 0; k < n; ++k) {
            if (i_ + k >= s_.size() || s_[i_ + k] != word[k]) fail_at(i_ + k, std::string("'") + word + "'");
        }
        i_ += n;
    }

    Value value(int depth) {
        if (eof()) fail("a value");
        char c = s_[i_];
        switch (c) {
            case '{': return object(depth + 1);
            case '[': return array(depth + 1);
            case '"': return Value(string());
            case 't': literal("true"); return Value(true);
            case 'f': literal("false"); return Value(false);
            case 'n': literal("null"); return Value();
            default:
                if (c == '-' || (c >= '0' && c <= '9')) return number();
                fail("a value");
        }
    }

    void enter(int depth) {
        if (depth > opt_.max_depth)
            fail_msg(i_, "nesting deeper than " + std::to_string(opt_.max_depth) + " levels");
    }

    Value array(int depth) {
        enter(depth);
        ++i_;  // '['
        Array a;
        ws();
        if (peek() == ']') {
            ++i_;
            return Value(std::move(a));
        }
        for (;;) {
            ws();
            a.push_back(value(depth));
            ws();
            if (peek() == ',') {
                ++i_;
                ws();
                if (peek() == ']') fail("a value after ','");
                continue;
            }
            if (peek() == ']') {
                ++i_;
                return Value(std::move(a));
            }
            fail("',' or ']'");
        }
    }

    Value object(int depth) {
        enter(depth);
        ++i_;  // '{'
        Object o;
        std::vector<size_t> key_at;
        ws();
        if (peek() == '}') {
            ++i_;
            return Value(std::move(o));
        }
        for (;;) {
            ws();
            if (peek() != '"') fail(o.empty() ? "a string key or '}'" : "a string key");
            size_t at = i_;
            std::string key = string();
            ws();
            if (peek() != ':') fail("':'");
            ++i_;
            ws();
            Value v = value(depth);
            key_at.push_back(at);
            o.emplace_back(std::move(key), std::move(v));
            ws();
            if (peek() == ',') {
                ++i_;
                continue;
            }
            if (peek() == '}') {
                ++i_;
                check_unique(o, key_at);
                return Value(std::move(o));
            }
            fail("',' or '}'");
        }
    }

    // Duplicate keys are an error at the second occurrence; sorting keeps a large object O(n log n).
    void check_unique(const Object& o, const std::vector<size_t>& key_at) const {
        if (o.size() < 2) return;
        std::vector<size_t> idx(o.size());
        for (size_t k = 0; k < idx.size(); ++k) idx[k] = k;
        uint64_t compared = 0;
        std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return ++compared, o[a].first < o[b].first; });
        size_t worst = SIZE_MAX;
        for (size_t k = 1; k < idx.size(); ++k, ++compared)
            if (o[idx[k]].first == o[idx[k - 1]].first) worst = std::min(worst, std::max(idx[k], idx[k - 1]));
        if (opt_.key_comparisons) *opt_.key_comparisons += compared;
        if (worst != SIZE_MAX) {
            std::string name;
            write_string(name, o[worst].first);
            fail_msg(key_at[worst], "a unique key (duplicate key " + name + ")");
        }
    }

    unsigned hex4() {
        unsigned v = 0;
        for (int k = 0; k < 4; ++k) {
            if (eof()) fail("4 hex digits after \\u");
            char c = s_[i_];
            unsigned d;
            if (c >= '0' && c <= '9') d = unsigned(c - '0');
            else if (c >= 'a' && c <= 'f') d = unsigned(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') d = unsigned(c - 'A' + 10);
            else fail("4 hex digits after \\u");
            v = v * 16 + d;
            ++i_;
        }
        return v;
    }

    std::string string() {
        ++i_;  // '"'
        std::string out;
        const auto* p = reinterpret_cast<const unsigned char*>(s_.data());
        for (;;) {
            if (eof()) fail("'\"' closing the string");
            unsigned char c = p[i_];
            if (c == '"') {
                ++i_;
                return out;
            }
            if (c < 0x20) fail("a character (control characters must be escaped)");
            if (c == '\\') {
                size_t esc = i_;
                ++i_;
                if (eof()) fail("an escape character");
                char e = s_[i_++];
                switch (e) {
                    case '"': out += '"'; break;
                    case '\\': out += '\\'; break;
                    case '/': out += '/'; break;
                    case 'b': out += '\b'; break;
                    case 'f': out += '\f'; break;
                    case 'n': out += '\n'; break;
                    case 'r': out += '\r'; break;
                    case 't': out += '\t'; break;
                    case 'u': {
                        unsigned cp = hex4();
                        if (cp >= 0xDC00 && cp <= 0xDFFF) fail_msg(esc, "a high surrogate before a low one (lone \\u" + hexs(cp) + ")");
                        if (cp >= 0xD800 && cp <= 0xDBFF) {
                            size_t second = i_;
                            if (i_ + 1 < s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u') {
                                i_ += 2;
                                unsigned lo = hex4();
                                if (lo < 0xDC00 || lo > 0xDFFF)
                                    fail_msg(second, "a low surrogate after \\u" + hexs(cp));
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            } else {
                                fail_msg(second, "a low surrogate after \\u" + hexs(cp));
                            }
                        }
                        utf8::append(out, cp);
                        break;
                    }
                    default:
                        --i_;
                        fail("an escape character (one of \" \\ / b f n r t u)");
                }
                continue;
            }
            if (c < 0x80) {
                out += char(c);
                ++i_;
                continue;
            }
            size_t len = utf8::sequence_length(s_.substr(i_));
            if (len == 0) fail("valid UTF-8");
            out.append(s_.data() + i_, len);
            i_ += len;
        }
    }

    static std::string hexs(unsigned v) {
        char b[16];
        std::snprintf(b, sizeof b, "%04X", v);
        return b;
    }

    Value number() {
        size_t start = i_;
        bool neg = false;
        if (peek() == '-') {
            neg = true;
            ++i_;
        }
        auto digit = [&] { return !eof() && s_[i_] >= '0' && s_[i_] <= '9'; };
        if (!digit()) fail("a digit");
        if (s_[i_] == '0') {
            ++i_;
            if (digit()) fail("'.', 'e' or the end of the number (no leading zeros)");
        } else {
            while (digit()) ++i_;
        }
        bool integral = true;
        if (peek() == '.') {
            integral = false;
            ++i_;
            if (!digit()) fail("a digit after '.'");
            while (digit()) ++i_;
        }
        if (peek() == 'e' || peek() == 'E') {
            integral = false;
            ++i_;
            if (peek() == '+' || peek() == '-') ++i_;
            if (!digit()) fail("a digit in the exponent");
            while (digit()) ++i_;
        }
        std::string_view tok = s_.substr(start, i_ - start);
        if (integral) {
            if (tok == "-0") return Value(-0.0);
            if (neg) {
                int64_t v;
                auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
                if (r.ec == std::errc() && r.ptr == tok.data() + tok.size()) return Value(v);
            } else {
                uint64_t v;
                auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
                if (r.ec == std::errc() && r.ptr == tok.data() + tok.size()) return Value((unsigned long long)v);
            }
            // Too long for 64 bits: read as the nearest double below.
        }
        double d;
        auto r = std::from_chars(tok.data(), tok.data() + tok.size(), d);
        if (r.ec == std::errc() && r.ptr == tok.data() + tok.size() && std::isfinite(d)) return Value(d);
        // from_chars reports underflow and overflow alike; strtod tells them apart.
        std::string copy(tok);
        errno = 0;
        d = std::strtod(copy.c_str(), nullptr);
        if (!std::isfinite(d)) fail_msg(start, "a number within double range (" + ellipsize(tok) + " overflows)");
        return Value(d);
    }

    static std::string ellipsize(std::string_view t) {
        return t.size() <= 24 ? std::string(t) : std::string(t.substr(0, 20)) + "...";
    }

    std::string_view s_;
    ParseOptions opt_;
    size_t i_ = 0;
};

}  // namespace

Value parse(std::string_view text, const ParseOptions& opt) {
    return Reader(text, opt).document();
}

std::optional<Value> try_parse(std::string_view text, ParseFailure* why, const ParseOptions& opt) {
    try {
        return parse(text, opt);
    } catch (const ParseError& e) {
        if (why) *why = {e.offset, e.what()};
        return std::nullopt;
    }
}

}  // namespace bankml::json
