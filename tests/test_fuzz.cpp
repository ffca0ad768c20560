// GGUF fuzzing: malformed files through what `info`, `tokenize` and `run` do with them, in-process.
// Each case must either work or throw one bankml::Error of one line; a crash, a hang or a
// sanitizer report (make check-asan, make fuzz) fails. Bounded here to a few seconds;
// `make fuzz SEED=N COUNT=N` runs the seeded byte flips for longer under the sanitizers.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "core/error.h"
#include "core/utf8.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/tokenizer.h"
#include "test.h"

using namespace bankml;

namespace {

struct Tally {
    int cases = 0, errors = 0, bad = 0;
};

// What the three commands do with a file; returns normally or throws bankml::Error.
void exercise(const std::string& path) {
    {  // info
        auto f = gguf::File::open(path);
        std::string sink;
        for (const auto& kv : f.metadata()) sink += utf8::escape(kv.key) + kv.value.summary(5);
        for (const auto& t : f.tensors()) sink += utf8::escape(t.name) + t.shape_string();
        // tokenize
        auto tok = model::Tokenizer::from_gguf(f);
        auto ids = tok.encode("hello world <|im_start|> \xff", true, true);
        (void)tok.decode(ids, true);
    }
    // run
    model::ModelOptions o;
    o.threads = 1;
    o.ctx = 8;
    auto m = model::Model::open(path, o);
    const int32_t t[2] = {1, 2};
    (void)m->eval(std::span<const int32_t>(t, 2));
}

void one(const std::string& path, const std::string& bytes, Tally& tally, const std::string& what) {
    {
        std::ofstream o(path, std::ios::binary | std::ios::trunc);
        o.write(bytes.data(), std::streamsize(bytes.size()));
    }
    ++tally.cases;
    try {
        exercise(path);
    } catch (const Error& e) {
        ++tally.errors;
        std::string m = e.what();
        if (m.empty() || m.find('\n') != std::string::npos) {
            ++tally.bad;
            std::printf("    %s: not one line: '%s'\n", what.c_str(), m.c_str());
        }
    } catch (const std::exception& e) {
        ++tally.bad;
        std::printf("    %s: not a bankml::Error: %s\n", what.c_str(), e.what());
    }
}

uint64_t env_u64(const char* name, uint64_t dflt) {
    const char* v = std::getenv(name);
    return v && *v ? std::strtoull(v, nullptr, 10) : dflt;
}

std::string load(const char* name) {
    auto b = bt::read_file(bt::data_path(name));
    return std::string(b.begin(), b.end());
}

}  // namespace

TEST(fuzz_gguf_truncations_every_64th_offset) {
    const std::string src = load("tiny-q1_0.gguf"), path = bt::temp_dir() + "/t.gguf";
    const size_t data = gguf::File::open(bt::data_path("tiny-q1_0.gguf")).data_offset();
    Tally t;
    for (size_t n = 0; n < src.size(); n += n < data ? 64 : 4096) one(path, src.substr(0, n), t, "truncated at " + std::to_string(n));
    std::printf("    %d truncations, %d errors\n", t.cases, t.errors);
    CHECK_EQ(t.bad, 0);
    CHECK_EQ(t.errors, t.cases);  // a truncated file never passes
}

TEST(fuzz_gguf_seeded_byte_flips_and_forged_fields) {
    const std::string src = load("tiny-q1_0.gguf"), path = bt::temp_dir() + "/f.gguf";
    const size_t header = gguf::File::open(bt::data_path("tiny-q1_0.gguf")).data_offset();
    const uint64_t seed = env_u64("BANKML_FUZZ_SEED", 1), count = env_u64("BANKML_FUZZ_COUNT", 300);
    std::mt19937_64 rng(seed);
    Tally t;
    for (uint64_t i = 0; i < count; ++i) {
        std::string b = src;
        const int flips = 1 + int(rng() % 4);
        for (int k = 0; k < flips; ++k) b[rng() % header] ^= char(1u << (rng() % 8));
        one(path, b, t, "seed " + std::to_string(seed) + " case " + std::to_string(i));
    }
    // Forged fields: every 8-byte-aligned word of the header set to values a count, a length, a
    // dimension, a type or an offset must survive.
    const uint64_t forged[] = {0, 1, 0xffffffffull, 0x7fffffffffffffffull, ~0ull, uint64_t(src.size()), 1ull << 40};
    for (size_t off = 0; off + 8 <= header; off += 8 * 37)
        for (uint64_t v : forged) {
            std::string b = src;
            std::memcpy(&b[off], &v, 8);
            one(path, b, t, "forged " + std::to_string(v) + " at " + std::to_string(off));
        }
    std::printf("    %d cases (seed %llu), %d errors\n", t.cases, (unsigned long long)seed, t.errors);
    CHECK_EQ(t.bad, 0);
    CHECK_GT(t.errors, 0);
}

TEST(fuzz_gguf_special_files) {
    std::string d = bt::temp_dir();
    const int made = bt::run_cmd("mkfifo " + d + "/fifo && : >" + d + "/empty").code;
    REQUIRE_EQ(made, 0);
    for (const std::string& p : {d + "/fifo", d, d + "/empty", std::string("/dev/null"), d + "/missing"}) {
        bool threw = false;
        try {
            exercise(p);
        } catch (const Error& e) {
            threw = std::string(e.what()).find('\n') == std::string::npos;
        }
        CHECK(threw);
    }
}
