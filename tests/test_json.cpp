#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/json.h"
#include "test.h"

using namespace bankml;
using json::Value;

static std::string bits_of(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return std::to_string(u);
}

TEST(json_writer_escapes_every_required_character) {
    CHECK_EQ(json::write(Value("a\"b\\c/d")), "\"a\\\"b\\\\c/d\"");
    CHECK_EQ(json::write(Value("\b\f\n\r\t")), "\"\\b\\f\\n\\r\\t\"");
    std::string ctl;
    for (int c = 0; c < 0x20; ++c) ctl += char(c);
    std::string w = json::write(Value(ctl));
    CHECK_EQ(w, "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f"
                "\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c"
                "\\u001d\\u001e\\u001f\"");
    CHECK_EQ(json::parse(w).as_string(), ctl);
    CHECK_EQ(json::write(Value(std::string("a\0b", 3))), "\"a\\u0000b\"");
    CHECK_EQ(json::write(Value("\x7f")), "\"\x7f\"");
}

TEST(json_writer_passes_utf8_through_and_replaces_invalid_bytes) {
    std::string u = "h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD";  // é € 😀 中
    CHECK_EQ(json::write(Value(u)), "\"" + u + "\"");
    CHECK_EQ(json::parse(json::write(Value(u))).as_string(), u);
    // A stray continuation byte, a truncated sequence and an overlong form each become U+FFFD.
    CHECK_EQ(json::write(Value("a\x80z")), "\"a\xEF\xBF\xBDz\"");
    CHECK_EQ(json::write(Value("a\xE2\x82")), "\"a\xEF\xBF\xBD\xEF\xBF\xBD\"");
    CHECK_EQ(json::write(Value("\xC0\xAF")), "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");
    CHECK(json::try_parse(json::write(Value("x\xFF\xED\xA0\x80y"))).has_value());
}

TEST(json_numbers_round_trip_exactly) {
    // Doubles: the shortest form that reads back to the same bits, and the type stays double.
    for (double d : {0.1, 1e300, -0.0, 0.0, 1.0, -2.5, 1.0 / 3, 5e-324, 2.2250738585072014e-308,
                     1.7976931348623157e308, 123456789012345680.0, 9007199254740993.0, -1e-7}) {
        std::string s = json::write(Value(d));
        Value r = json::parse(s);
        REQUIRE(r.is_double());
        CHECK_EQ(bits_of(r.as_double()), bits_of(d));
    }
    CHECK_EQ(json::write(Value(0.1)), "0.1");
    CHECK_EQ(json::write(Value(1e300)), "1e+300");
    CHECK_EQ(json::write(Value(-0.0)), "-0.0");
    CHECK_EQ(json::write(Value(3.0)), "3.0");
    CHECK(std::signbit(json::parse("-0").as_double()));
    CHECK(std::signbit(json::parse("-0.0").as_double()));
    CHECK(json::parse("0").is_integer());
    // Integers are exact: 2^53+1 has no double.
    Value big = json::parse("9007199254740993");
    REQUIRE(big.is_integer());
    CHECK_EQ(big.as_int(), int64_t(9007199254740993));
    CHECK_EQ(json::write(big), "9007199254740993");
    CHECK_EQ(json::write(Value(int64_t(9007199254740993))), "9007199254740993");
    CHECK_EQ(json::parse("-9223372036854775808").as_int(), INT64_MIN);
    CHECK_EQ(json::parse("9223372036854775807").as_int(), INT64_MAX);
    CHECK_EQ(json::parse("18446744073709551615").as_uint(), UINT64_MAX);
    CHECK_EQ(json::write(Value(UINT64_MAX)), "18446744073709551615");
    CHECK_THROWS(json::parse("18446744073709551615").as_int(), "does not fit int64");
    CHECK_THROWS(json::parse("-1").as_uint(), "negative");
    CHECK_EQ(json::parse("1e2").as_int(), 100);
    CHECK_THROWS(json::parse("1.5").as_int(), "not an integer");
    CHECK_NEAR(json::parse("2.5E-3").as_double(), 0.0025, 0);
}

TEST(json_nan_and_infinities_are_written_as_null) {
    CHECK_EQ(json::write(Value(std::nan(""))), "null");
    CHECK_EQ(json::write(Value(HUGE_VAL)), "null");
    CHECK_EQ(json::write(Value(-HUGE_VAL)), "null");
    Value a = Value::array();
    a.push(1).push(std::nan("")).push("x");
    CHECK_EQ(json::write(a), "[1,null,\"x\"]");
}

TEST(json_huge_and_tiny_numbers_are_decided) {
    // Longer than 64 bits: the nearest double.
    Value v = json::parse("123456789012345678901234567890");
    REQUIRE(v.is_double());
    CHECK_EQ(v.as_double(), 1.2345678901234568e29);
    CHECK(json::parse("-99999999999999999999").is_double());
    // Overflowing a double is an error naming the number; underflow reads as 0 or a subnormal.
    CHECK_THROWS(json::parse("1e400"), "overflows");
    CHECK_THROWS(json::parse("[1, -1e999]"), "at byte 4");
    CHECK_THROWS(json::parse(std::string(400, '9')), "overflows");
    CHECK_EQ(json::parse("1e-400").as_double(), 0.0);
    CHECK_EQ(json::parse("4e-324").as_double(), 5e-324);
}

TEST(json_indented_and_compact_forms) {
    Value o;
    o.set("name", "h200").set("count", 8).set("tags", Value::array().push(1).push(Value::object()));
    o.set("empty", Value::array());
    CHECK_EQ(json::write(o), "{\"name\":\"h200\",\"count\":8,\"tags\":[1,{}],\"empty\":[]}");
    CHECK_EQ(json::write(o, 2),
             "{\n  \"name\": \"h200\",\n  \"count\": 8,\n  \"tags\": [\n    1,\n    {}\n  ],\n  \"empty\": []\n}");
    CHECK_EQ(json::write(Value::object(), 2), "{}");
    CHECK(json::parse(json::write(o, 4)) == o);
    // Insertion order is kept, and set() on an existing key replaces in place.
    o.set("name", "x");
    CHECK_EQ(o.as_object()[0].first, "name");
    CHECK_EQ(o["name"].as_string(), "x");
    CHECK_EQ(o.size(), size_t(4));
}

TEST(json_reader_accepts_valid_documents) {
    Value v = json::parse(" \t\r\n{\"a\": [true, false, null, -1.5e+2, \"\\u00e9\\uD83D\\uDE00\\/\"], \"b\": {}} \n");
    CHECK_EQ(v["a"].size(), size_t(5));
    CHECK_EQ(v["a"][0].as_bool(), true);
    CHECK(v["a"][2].is_null());
    CHECK_EQ(v["a"][3].as_double(), -150.0);
    CHECK_EQ(v["a"][4].as_string(), "\xC3\xA9\xF0\x9F\x98\x80/");
    CHECK(v["b"].is_object());
    CHECK_EQ(json::parse("\"\"").as_string(), "");
    CHECK_EQ(json::parse("\"\\u0000\"").as_string(), std::string(1, '\0'));
    CHECK(json::parse("[]").is_array());
    CHECK_EQ(json::parse("\"\xF4\x8F\xBF\xBF\"").as_string(), "\xF4\x8F\xBF\xBF");  // U+10FFFF
}

TEST(json_accessors_chain_and_name_wrong_types) {
    Value v = json::parse(R"({"acc": {"model": "H200", "quantity": "8"}, "cost": 1234, "list": [1, 2]})");
    CHECK_EQ(v["acc"]["model"].as_string(), "H200");
    CHECK(v["missing"]["deeper"].is_null());
    CHECK(v["list"][7].is_null());
    CHECK(v["cost"]["x"].is_null());
    CHECK(v.find("acc") != nullptr);
    CHECK(v.find("nope") == nullptr);
    CHECK(v.contains("list"));
    CHECK_EQ(v["list"].size(), size_t(2));
    CHECK_EQ(v["cost"].size(), size_t(0));
    CHECK_EQ(v["acc"]["model"].string_or("?"), "H200");
    CHECK_EQ(v["acc"]["nope"].string_or("?"), "?");
    CHECK_EQ(v["cost"].number_or(0), 1234.0);
    CHECK_EQ(v["acc"].number_or(-1), -1.0);
    CHECK_THROWS(v["cost"].as_string(), "expected string, got integer");
    CHECK_THROWS(v["missing"].as_array(), "expected array, got null");
    CHECK_THROWS(v["acc"].as_double(), "expected number, got object");
    Value n;
    n.push(1);
    CHECK(n.is_array());
    CHECK(Value(1) == Value(1));
    CHECK(!(Value(1) == Value(1.0)));
}

// Every malformed class: the error is a ParseError at the right byte, saying what was expected.
TEST(json_malformed_documents_give_the_offset_and_what_was_expected) {
    struct Bad { std::string doc; size_t offset; const char* says; };
    const Bad cases[] = {
        {"", 0, "expected a value"},
        {"   ", 3, "expected a value"},
        {"[1, 2", 5, "',' or ']'"},
        {"{\"a\": 1", 7, "',' or '}'"},
        {"\"abc", 4, "closing the string"},
        {"[1, 2,]", 6, "a value after ','"},
        {"{\"a\": 1,}", 8, "a string key"},
        {"{,}", 1, "a string key or '}'"},
        {"{\"a\" 1}", 5, "':'"},
        {"{a: 1}", 1, "a string key"},
        {"[1 2]", 3, "',' or ']'"},
        {"1 2", 2, "end of document"},
        {"tru", 3, "'true'"},
        {"nul", 3, "'null'"},
        {"True", 0, "a value"},
        {"\"\\x\"", 2, "an escape character"},
        {"\"\\u12G4\"", 5, "4 hex digits"},
        {"\"\\u12", 5, "4 hex digits"},
        {"\"a\nb\"", 2, "control characters must be escaped"},
        {"\"a\tb\"", 2, "control characters must be escaped"},
        {"\"\x80\"", 1, "valid UTF-8"},
        {"\"\xC3\"", 1, "valid UTF-8"},
        {"\"\xC0\xAF\"", 1, "valid UTF-8"},           // overlong '/'
        {"\"\xE0\x80\xAF\"", 1, "valid UTF-8"},       // overlong
        {"\"\xED\xA0\x80\"", 1, "valid UTF-8"},       // UTF-8-encoded surrogate
        {"\"\xF4\x90\x80\x80\"", 1, "valid UTF-8"},   // above U+10FFFF
        {"\"\xFF\"", 1, "valid UTF-8"},
        {"\"\\uD800\"", 7, "a low surrogate after \\uD800"},
        {"\"\\uD800\\u0041\"", 7, "a low surrogate"},
        {"\"\\uDC00\"", 1, "lone \\uDC00"},
        {"01", 1, "no leading zeros"},
        {"-", 1, "a digit"},
        {"1.", 2, "a digit after '.'"},
        {".5", 0, "a value"},
        {"1e", 2, "a digit in the exponent"},
        {"1e+", 3, "a digit in the exponent"},
        {"+1", 0, "a value"},
        {"NaN", 0, "a value"},
        {"Infinity", 0, "a value"},
        {"0x10", 1, "end of document"},
        {"\xEF\xBB\xBF{}", 0, "a value"},  // a byte-order mark is not JSON
        {std::string("[1]\0", 4), 3, "end of document"},
        {"{\"a\": 1, \"b\": 2, \"a\": 3}", 17, "duplicate key \"a\""},
        {"/* c */ 1", 0, "a value"},
        {"'a'", 0, "a value"},
    };
    for (const auto& c : cases) {
        const std::string& doc = c.doc;
        json::ParseFailure why;
        auto r = json::try_parse(doc, &why);
        if (!CHECK(!r.has_value())) {
            std::printf("    accepted: %s\n", c.doc.c_str());
            continue;
        }
        if (!CHECK_EQ(why.offset, c.offset) || !CHECK(why.message.find(c.says) != std::string::npos))
            std::printf("    for %s: %s\n", json::write(Value(c.doc)).c_str(), why.message.c_str());
        CHECK(why.message.rfind("json: at byte " + std::to_string(c.offset) + ": ", 0) == 0);
    }
    CHECK_THROWS(json::parse("[1,]"), "json: at byte 3: expected a value after ','");
    // ParseError is a bankml::Error, so the CLI prints it as one line.
    try {
        json::parse("{");
        CHECK(false);
    } catch (const Error& e) {
        CHECK_EQ(e.code, 1);
    }
}

TEST(json_nesting_deeper_than_the_limit_is_an_error) {
    std::string ok = std::string(256, '[') + std::string(256, ']');
    CHECK(json::try_parse(ok).has_value());
    std::string deep = std::string(257, '[') + std::string(257, ']');
    CHECK_THROWS(json::parse(deep), "at byte 256: nesting deeper than 256 levels");
    std::string objs;
    for (int i = 0; i < 100000; ++i) objs += "{\"a\":";
    CHECK_THROWS(json::parse(objs), "nesting deeper");
    json::ParseOptions small;
    small.max_depth = 2;
    CHECK(json::try_parse("[[1]]", nullptr, small).has_value());
    CHECK(!json::try_parse("[[[1]]]", nullptr, small).has_value());
}

// Scaling is counted, not timed: the duplicate-key check's key comparisons for objects of n keys
// stay within a merge sort's n·⌈log₂ n⌉ plus the n − 1 neighbour tests (a pairwise check would make
// n(n−1)/2: 2·10⁹ at 64,000 keys), and grow by ≈ 8·(1 + 3/log₂ n) when n grows eightfold.
TEST(json_duplicate_detection_scales_to_large_objects) {
    std::vector<double> counts;
    for (int n : {1000, 8000, 64000}) {
        std::string doc = "{";
        std::mt19937 g(static_cast<uint32_t>(n));
        std::vector<int> order(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) order[size_t(i)] = i;
        std::shuffle(order.begin(), order.end(), g);  // keys in random order: no sorted best case
        for (int i = 0; i < n; ++i) doc += (i ? ",\"k" : "\"k") + std::to_string(order[size_t(i)]) + "\":" + std::to_string(order[size_t(i)]);
        uint64_t cmp = 0;
        json::ParseOptions opt;
        opt.key_comparisons = &cmp;
        Value v = json::parse(doc + "}", opt);
        CHECK_EQ(v.size(), size_t(n));
        CHECK_EQ(v["k" + std::to_string(n - 1)].as_int(), n - 1);
        const double log2n = std::ceil(std::log2(double(n)));
        CHECK_GE(cmp, uint64_t(n - 1));  // the check ran at all
        CHECK_LE(double(cmp), double(n) * log2n + double(n));
        counts.push_back(double(cmp));
        CHECK_THROWS(json::parse(doc + ",\"k5\":0}"), "duplicate key \"k5\"");
    }
    CHECK_LT(counts[2] / counts[1], 8.0 * 16.0 / 13.0 * 1.05);  // n log n from 8000 to 64000 keys
    CHECK_LT(counts[1] / counts[0], 8.0 * 13.0 / 10.0 * 1.05);
}

// Random values through the writer (both forms) and back through the reader: equal.
static Value random_value(std::mt19937_64& rng, int depth) {
    int kind = int(rng() % (depth > 3 ? 6 : 8));
    switch (kind) {
        case 0: return Value();
        case 1: return Value(bool(rng() & 1));
        case 2: return Value(int64_t(rng()));
        case 3: return Value((unsigned long long)(rng() | (1ull << 63)));
        case 4: {
            uint64_t u = rng();
            double d;
            std::memcpy(&d, &u, 8);
            if (!std::isfinite(d)) d = double(int64_t(u)) * 1e-3;
            return Value(d);
        }
        case 5: {
            std::string s;
            size_t n = rng() % 12;
            static const char* pieces[] = {"a", "\"", "\\", "\n", "\x01", "\xC3\xA9", "\xF0\x9F\x98\x80", " ", "/", "\x1f"};
            for (size_t i = 0; i < n; ++i) s += pieces[rng() % 10];
            return Value(s);
        }
        case 6: {
            Value a = Value::array();
            for (size_t i = 0, n = rng() % 5; i < n; ++i) a.push(random_value(rng, depth + 1));
            return a;
        }
        default: {
            Value o = Value::object();
            for (size_t i = 0, n = rng() % 5; i < n; ++i)
                o.set("k" + std::to_string(rng() % 100) + "\xE2\x82\xAC", random_value(rng, depth + 1));
            return o;
        }
    }
}

TEST(json_writer_documents_read_back_equal) {
    std::mt19937_64 rng(42);
    for (int i = 0; i < 2000; ++i) {
        Value v = random_value(rng, 0);
        std::string compact = json::write(v);
        json::ParseFailure why;
        auto back = json::try_parse(compact, &why);
        if (!CHECK(back.has_value())) {
            std::printf("    %s\n    %s\n", compact.c_str(), why.message.c_str());
            break;
        }
        CHECK(*back == v);
        CHECK_EQ(json::write(*back), compact);
        auto pretty = json::try_parse(json::write(v, 2));
        REQUIRE(pretty.has_value());
        CHECK(*pretty == v);
    }
}

// Never a crash: every prefix of some documents, and random byte flips; every failure is a
// ParseError with an offset inside the document.
TEST(json_every_prefix_and_random_byte_flips_never_crash) {
    std::vector<std::string> docs = {
        R"([{"name":"h200x8","prettyName":"8x Nvidia H200","accelerator":{"type":"gpu","quantity":"8","vram":"1128 GB"},"unitCostUSD":0.383,"unitLabel":"minute"}])",
        "{\"a\": [1, -2.5e-3, true, false, null, \"\\u00e9\\uD83D\\uDE00\\n\"], \"b\": {\"c\": {}}, \"\xC3\xA9\": 18446744073709551615}",
    };
    std::mt19937_64 rng(7);
    std::vector<std::string> extra;
    for (int i = 0; i < 30; ++i) extra.push_back(json::write(random_value(rng, 0), int(i % 3) - 1));
    docs.insert(docs.end(), extra.begin(), extra.end());
    size_t parsed = 0, rejected = 0;
    for (const auto& d : docs) {
        REQUIRE(json::try_parse(d).has_value());
        for (size_t n = 0; n < d.size(); ++n) {
            json::ParseFailure why;
            auto r = json::try_parse(std::string_view(d).substr(0, n), &why);
            if (r) ++parsed;
            else {
                ++rejected;
                CHECK_LE(why.offset, n);
            }
        }
        for (int k = 0; k < 300; ++k) {
            std::string m = d;
            for (int f = 0, nf = 1 + int(rng() % 3); f < nf; ++f) m[rng() % m.size()] = char(rng() & 0xFF);
            json::ParseFailure why;
            auto r = json::try_parse(m, &why);
            if (r) {
                ++parsed;
                CHECK(json::try_parse(json::write(*r)).has_value());
            } else {
                ++rejected;
                CHECK_LE(why.offset, m.size());
            }
        }
    }
    CHECK_GT(rejected, size_t(0));
    CHECK_GT(parsed, size_t(0));
}
