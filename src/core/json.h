// JSON for bankml: a value type, a writer (compact or indented) and a strict RFC 8259 reader.
//
// Design decisions (docs/modules/json.md says why):
// - Errors are exceptions: parse() throws json::ParseError (a bankml::Error) carrying the byte
//   offset and what was expected there; try_parse() is the no-throw form. Accessors used on the
//   wrong type (as_string() on a number) throw bankml::Error naming both types.
// - Objects keep insertion order (a vector of members); lookup is linear, which is what the small
//   documents bankml reads and writes need.
// - Duplicate keys are rejected by the reader (RFC 8259 leaves their meaning open; silently picking
//   one would hide a broken producer). set() on an existing key replaces its value.
// - Numbers: an integer literal that fits int64 is an Int, one that fits only uint64 a UInt, a
//   longer one a Double (nearest value). A literal whose magnitude overflows a double (1e400) is an
//   error; underflow reads as the nearest double (0 or a subnormal). "-0" reads as the double -0.0,
//   since no integer holds a negative zero.
// - Strings must be valid UTF-8 with no raw control characters; \u escapes must pair surrogates.
//   The writer escapes '"', '\\' and every control character, passes valid UTF-8 through, and
//   replaces each byte of invalid UTF-8 with U+FFFD so that its output is always valid JSON.
// - Doubles are written in the shortest form that reads back to the same bits (std::to_chars), with
//   ".0" added when that form looks like an integer so the type survives a round trip; NaN and the
//   infinities are written as null.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace bankml::json {

class Value;
using Array = std::vector<Value>;
using Member = std::pair<std::string, Value>;
using Object = std::vector<Member>;

enum class Type { Null, Bool, Int, UInt, Double, String, Array, Object };
const char* type_name(Type t);

class Value {
public:
    Value() = default;
    Value(std::nullptr_t) {}
    Value(bool b) : v_(b) {}
    Value(int i) : v_(int64_t(i)) {}
    Value(long i) : v_(int64_t(i)) {}
    Value(long long i) : v_(int64_t(i)) {}
    Value(unsigned u) : v_(int64_t(u)) {}
    Value(unsigned long u) { set_unsigned(u); }
    Value(unsigned long long u) { set_unsigned(u); }
    Value(double d) : v_(d) {}
    Value(float f) : v_(double(f)) {}
    Value(const char* s) : v_(std::string(s)) {}
    Value(std::string s) : v_(std::move(s)) {}
    Value(std::string_view s) : v_(std::string(s)) {}
    Value(Array a) : v_(std::move(a)) {}
    Value(Object o) : v_(std::move(o)) {}
    static Value array() { return Value(Array{}); }
    static Value object() { return Value(Object{}); }

    Type type() const { return Type(v_.index()); }
    bool is_null() const { return type() == Type::Null; }
    bool is_bool() const { return type() == Type::Bool; }
    bool is_integer() const { return type() == Type::Int || type() == Type::UInt; }
    bool is_double() const { return type() == Type::Double; }
    bool is_number() const { return is_integer() || is_double(); }
    bool is_string() const { return type() == Type::String; }
    bool is_array() const { return type() == Type::Array; }
    bool is_object() const { return type() == Type::Object; }

    // Strict accessors: the wrong type throws bankml::Error ("json: expected string, got null").
    bool as_bool() const;
    // An Int, a UInt that fits, or a Double holding an exact integer in range.
    int64_t as_int() const;
    uint64_t as_uint() const;
    double as_double() const;  // any number
    const std::string& as_string() const;
    const Array& as_array() const;
    Array& as_array();
    const Object& as_object() const;
    Object& as_object();

    // Forgiving accessors for optional fields: the default when absent or of another type.
    std::string string_or(std::string_view dflt) const { return is_string() ? as_string() : std::string(dflt); }
    double number_or(double dflt) const { return is_number() ? as_double() : dflt; }
    bool bool_or(bool dflt) const { return is_bool() ? as_bool() : dflt; }

    // Elements of an array or members of an object; 0 for anything else.
    size_t size() const;
    // The member named key, or nullptr (also when this is not an object).
    const Value* find(std::string_view key) const;
    Value* find(std::string_view key);
    bool contains(std::string_view key) const { return find(key) != nullptr; }
    // Lookups that chain: a missing key, an index past the end or a non-container give null.
    const Value& operator[](std::string_view key) const;
    const Value& operator[](const char* key) const { return (*this)[std::string_view(key)]; }
    const Value& operator[](size_t i) const;
    const Value& operator[](int i) const { return i < 0 ? null_value() : (*this)[size_t(i)]; }

    // Building: set() adds the member or replaces its value (a null Value becomes an object first);
    // push() appends (a null Value becomes an array first). Both return *this.
    Value& set(std::string key, Value v);
    Value& push(Value v);

    // Same type and value, objects compared member by member in order. Int 1 == UInt 1, and
    // Int 1 != Double 1.0; doubles compare with ==, so NaN != NaN.
    bool operator==(const Value& o) const;

    static const Value& null_value();

private:
    template <class U>
    void set_unsigned(U u) {
        if (u <= uint64_t(INT64_MAX)) v_ = int64_t(u);
        else v_ = uint64_t(u);
    }
    std::variant<std::nullptr_t, bool, int64_t, uint64_t, double, std::string, Array, Object> v_;
};

// Writes v as JSON. indent < 0: compact, no whitespace. indent >= 0: one element per line,
// nested levels indented by that many spaces, ": " after keys.
std::string write(const Value& v, int indent = -1);
// Appends one JSON string literal (with quotes) for s to out.
void write_string(std::string& out, std::string_view s);

struct ParseOptions {
    int max_depth = 256;  // arrays and objects nested deeper than this are an error
    // Where set, the parser adds the key comparisons its duplicate-key check made (its cost is
    // measured by counting work, not time: O(n log n) per object of n keys).
    uint64_t* key_comparisons = nullptr;
};

// A document that is not valid JSON: offset is the byte where reading stopped, expected says what
// would have been valid there. what() reads "json: at byte N: expected X".
struct ParseError : Error {
    size_t offset;
    std::string expected;
    ParseError(size_t off, std::string exp)
        : Error("json: at byte " + std::to_string(off) + ": " + exp), offset(off), expected(std::move(exp)) {}
};

// Parses exactly one JSON value (surrounded by optional whitespace); throws ParseError.
Value parse(std::string_view text, const ParseOptions& opt = {});

struct ParseFailure {
    size_t offset = 0;
    std::string message;  // the whole ParseError::what() line
};
// The same without exceptions: nullopt on failure, with *why filled when given.
std::optional<Value> try_parse(std::string_view text, ParseFailure* why = nullptr, const ParseOptions& opt = {});

}  // namespace bankml::json
