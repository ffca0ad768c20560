// The GGUF reader on the real oracle files, and on malformed copies of them: cut at many offsets,
// bytes flipped at random, counts and lengths forged. Every malformed file must give one
// bankml::Error naming the file, never a crash or a read outside the bytes.
#include <cstring>
#include <random>
#include <span>
#include <string>

#include "core/error.h"
#include "model/gguf.h"
#include "test.h"

using namespace bankml;
using gguf::File;

namespace {

std::vector<uint8_t> tiny_bytes() { return bt::read_file(bt::data_path("tiny-q1_0.gguf")); }

// Parses bytes and says how it went: "" when it parsed, else the error text. Anything other than
// bankml::Error escaping is a test failure.
std::string try_parse(std::span<const uint8_t> b, File* out = nullptr) {
    try {
        File f = File::parse("mem.gguf", b);
        // A parsed file's tensors must lie inside the bytes.
        for (const auto& t : f.tensors()) {
            if (t.data < b.data() || t.data + t.nbytes > b.data() + b.size()) return "tensor outside the bytes";
        }
        if (out) *out = std::move(f);
        return "";
    } catch (const Error& e) {
        return e.what();
    }
}

void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }
void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }

// Offset of the tensor info of tensor i in the tiny file (its name's length field).
size_t tensor_info_offset(const std::vector<uint8_t>& b, const File& f, size_t i) {
    std::string_view name = f.tensors()[i].name;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(name.data());
    return size_t(p - b.data()) - 8;
}

}  // namespace

TEST(gguf_reads_tiny_q1_0_header_metadata_and_tensors) {
    File f = File::open(bt::data_path("tiny-q1_0.gguf"));
    CHECK_EQ(f.version(), 3u);
    CHECK_EQ(f.alignment(), 32u);
    CHECK_EQ(f.data_offset(), 24000u);
    CHECK_EQ(f.metadata().size(), 22u);
    CHECK_EQ(f.require_str("general.architecture"), std::string_view("qwen3"));
    CHECK_EQ(f.require_u32("qwen3.embedding_length"), 256u);
    CHECK_EQ(f.require_u32("qwen3.block_count"), 2u);
    CHECK_EQ(f.require_u32("qwen3.attention.head_count_kv"), 2u);
    CHECK_EQ(f.require_f32("qwen3.rope.freq_base"), 1e6f);
    CHECK_EQ(f.require_f32("qwen3.attention.layer_norm_rms_epsilon"), 1e-6f);
    CHECK_EQ(f.require_bool("tokenizer.ggml.add_bos_token"), false);
    CHECK_EQ(*f.get_i64("tokenizer.ggml.eos_token_id"), 1021);
    CHECK(!f.get_u32("no.such.key").has_value());
    CHECK_THROWS(f.require_u32("no.such.key"), "missing metadata key 'no.such.key'");
    CHECK_THROWS(f.get_u32("general.architecture"), "'general.architecture' = 'qwen3' (str) is not a u32");
    CHECK_THROWS(f.get_str_array("general.architecture"), "is not an array of strings");

    auto toks = f.get_str_array("tokenizer.ggml.tokens");
    REQUIRE(toks.has_value());
    REQUIRE_EQ(toks->size(), 1024u);
    CHECK_EQ((*toks)[0], std::string_view("\xc4\x80"));  // byte 0 as GPT-2's U+0100
    CHECK_EQ((*toks)[1021], std::string_view("<|im_end|>"));
    auto types = f.get_int_array("tokenizer.ggml.token_type");
    REQUIRE(types.has_value());
    CHECK_EQ((*types)[0], 1);
    CHECK_EQ((*types)[1023], 3);
    CHECK_EQ(f.get_str_array("tokenizer.ggml.merges")->size(), 169u);

    CHECK_EQ(f.tensors().size(), 25u);
    const auto& e = f.get("token_embd.weight");
    CHECK(e.type == gguf::Type::Q1_0);
    CHECK_EQ(e.n_dims, 2u);
    CHECK_EQ(e.ne[0], 256);
    CHECK_EQ(e.ne[1], 1024);
    CHECK_EQ(e.nbytes, 1024u * 2 * 18);
    CHECK_EQ(e.row_bytes(), 36u);
    CHECK(e.data == f.bytes() + 24000);
    const auto& d = f.get("blk.1.ffn_down.weight");
    CHECK_EQ(d.ne[0], 768);
    CHECK_EQ(d.ne[1], 256);
    CHECK_EQ(f.get("blk.0.attn_q_norm.weight").ne[0], 64);
    CHECK(f.get("output_norm.weight").type == gguf::Type::F32);
    CHECK(f.find("nope") == nullptr);
    CHECK_THROWS(f.get("nope"), "missing tensor 'nope'");
    // Tensors live in the mapping, in place.
    const auto& last = f.get("output.weight");
    CHECK(last.data + last.nbytes == f.bytes() + f.size());
}

TEST(gguf_reads_q2_0_f16_and_the_tensorless_vocab_file) {
    File q2 = File::open(bt::data_path("tiny-q2_0.gguf"));
    CHECK(q2.get("blk.0.ffn_up.weight").type == gguf::Type::Q2_0);
    CHECK_EQ(q2.get("blk.0.ffn_up.weight").nbytes, 768u * 256 / 64 * 18);
    File f16 = File::open(bt::data_path("tiny-f16.gguf"));
    CHECK(f16.get("output.weight").type == gguf::Type::F16);
    CHECK_EQ(f16.get("output.weight").nbytes, 256u * 1024 * 2);
    File v = File::open(bt::data_path("qwen3-vocab.gguf"));
    CHECK_EQ(v.tensors().size(), 0u);
    CHECK_EQ(v.get_str_array("tokenizer.ggml.tokens")->size(), 151936u);
    CHECK_EQ(v.get_str_array("tokenizer.ggml.merges")->size(), 151387u);
    CHECK_EQ((*v.get_str_array("tokenizer.ggml.tokens"))[151645], std::string_view("<|im_end|>"));
    CHECK(v.get_str("tokenizer.chat_template")->find("<|im_start|>") != std::string_view::npos);
}

TEST(gguf_open_errors_name_the_path) {
    CHECK_THROWS(File::open("/nonexistent/x.gguf"), "open(/nonexistent/x.gguf) failed");
    CHECK_THROWS(File::open("/tmp"), "/tmp: Is a directory");
    std::string dir = bt::temp_dir();
    std::string p = dir + "/empty.gguf";
    std::fclose(std::fopen(p.c_str(), "wb"));
    CHECK_THROWS(File::open(p), p + ": truncated: magic");
}

TEST(gguf_every_cut_of_a_valid_file_is_an_error) {
    auto full = tiny_bytes();
    REQUIRE(try_parse(full).empty());
    // Every offset through the header and the first tensors, then a stride to the end.
    std::vector<size_t> cuts;
    for (size_t n = 0; n < 24200; ++n) cuts.push_back(n);
    for (size_t n = 24200; n < full.size(); n += 997) cuts.push_back(n);
    cuts.push_back(full.size() - 1);
    int bad = 0;
    for (size_t n : cuts) {
        std::string e = try_parse(std::span<const uint8_t>(full.data(), n));
        if (e.empty() || e.find("mem.gguf: ") != 0) {
            if (++bad < 5) CHECK_EQ(std::string("cut at ") + std::to_string(n), std::string("an error: ") + e);
        }
    }
    CHECK_EQ(bad, 0);
}

TEST(gguf_random_byte_flips_parse_or_fail_cleanly) {
    auto full = tiny_bytes();
    std::mt19937_64 rng(12345);
    int errors = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        std::vector<uint8_t> b = full;
        int flips = 1 + int(rng() % 4);
        for (int k = 0; k < flips; ++k) {
            // Mostly the header, where the structure is.
            size_t at = (rng() % 8) ? rng() % 24000 : rng() % b.size();
            b[at] ^= uint8_t(1u << (rng() % 8));
        }
        std::string e = try_parse(b);
        if (!e.empty()) {
            ++errors;
            CHECK(e.find("mem.gguf: ") == 0);
        }
        CHECK(e != "tensor outside the bytes");
    }
    CHECK_GT(errors, 100);  // the flips do hit structure
}

TEST(gguf_forged_counts_lengths_and_fields_name_the_field) {
    auto full = tiny_bytes();
    File f = File::parse("mem.gguf", full);
    auto expect = [&](std::vector<uint8_t> b, const std::string& sub) {
        std::string e = try_parse(b);
        if (e.find(sub) == std::string::npos) CHECK_EQ(e, "... " + sub + " ...");
    };
    {
        auto b = full;
        b[0] = 'X';
        expect(b, "mem.gguf: magic = 0x46554758 is not GGUF");
        b = full;
        put_u32(b, 4, 1);
        expect(b, "version = 1: GGUF v1 is not supported");
        put_u32(b, 4, 0x03000000);
        expect(b, "big-endian");
        put_u32(b, 4, 7);
        expect(b, "version = 7 is not supported");
    }
    {
        auto b = full;
        put_u64(b, 8, uint64_t(1) << 60);
        expect(b, "tensor count = 1152921504606846976 cannot fit");
        b = full;
        put_u64(b, 16, ~uint64_t(0));
        expect(b, "metadata count = 18446744073709551615 cannot fit");
        b = full;
        put_u64(b, 16, 23);  // one more entry than there is: the tensor infos are read as metadata
        CHECK(!try_parse(b).empty());
    }
    {
        auto b = full;
        put_u64(b, 24, uint64_t(1) << 62);  // first key's length
        expect(b, "metadata 0 key length = 4611686018427387904 at offset 24 runs past the end");
    }
    {
        // The first value is general.architecture's string: forge its type, then its length.
        size_t type_at = 24 + 8 + std::strlen("general.architecture");
        auto b = full;
        put_u32(b, type_at, 13);
        expect(b, "metadata 'general.architecture' type = 13 is not a GGUF value type");
        put_u32(b, type_at, 9);  // now an array with element type from the length's low bytes
        CHECK(!try_parse(b).empty());
        b = full;
        put_u64(b, type_at + 4, ~uint64_t(0) >> 1);
        expect(b, "metadata 'general.architecture' length = 9223372036854775807");
    }
    {
        // Token array count forged huge.
        const gguf::Value* tv = f.find_kv("tokenizer.ggml.tokens");
        REQUIRE(tv != nullptr);
        size_t count_at = size_t(tv->offset) + 4;
        auto b = full;
        put_u64(b, count_at, uint64_t(1) << 40);
        expect(b, "metadata 'tokenizer.ggml.tokens' count = 1099511627776 (str) needs at least 8 bytes each");
        put_u32(b, count_at - 4, 77);
        expect(b, "metadata 'tokenizer.ggml.tokens' element type = 77");
    }
    {
        // Tensor 0 (token_embd.weight): n_dims, dims, type, offset.
        size_t ti = tensor_info_offset(full, f, 0) + 8 + std::strlen("token_embd.weight");
        auto b = full;
        put_u32(b, ti, 5);
        expect(b, "tensor 'token_embd.weight' n_dims = 5 exceeds 4");
        b = full;
        put_u64(b, ti + 4, uint64_t(-256));
        expect(b, "tensor 'token_embd.weight' ne[0] = -256 is negative");
        b = full;
        put_u64(b, ti + 4, 100);
        expect(b, "tensor 'token_embd.weight' ne[0] = 100 is not a multiple of the q1_0 block size 128");
        b = full;
        put_u64(b, ti + 4, uint64_t(1) << 40);
        put_u64(b, ti + 12, uint64_t(1) << 40);
        expect(b, "tensor 'token_embd.weight' ne[1] = 1099511627776: the element count overflows 64 bits");
        b = full;
        put_u64(b, ti + 12, uint64_t(1) << 30);
        expect(b, "tensor 'token_embd.weight' offset = 0 + 38654705664 bytes runs past the end of the data section");
        b = full;
        put_u32(b, ti + 20, 99);
        expect(b, "tensor 'token_embd.weight' type = 99 is not a tensor type bankml knows");
        b = full;
        put_u64(b, ti + 24, 16);
        expect(b, "tensor 'token_embd.weight' offset = 16 is not a multiple of the alignment 32");
        b = full;
        put_u64(b, ti + 24, 36864 + 1024);  // onto blk.0.attn_q.weight
        expect(b, "overlaps tensor");
        b = full;
        put_u64(b, ti + 24, uint64_t(-32));
        expect(b, "offset = 18446744073709551584 + 36864 bytes runs past the end");
    }
    {
        // A duplicate tensor name: rename tensor 1 (blk.0.attn_norm.weight) onto tensor 12's name.
        auto b = full;
        size_t n1 = tensor_info_offset(full, f, 1) + 8;
        std::memcpy(b.data() + n1, "blk.1", 5);
        expect(b, "tensor 12 name = 'blk.1.attn_norm.weight' is a duplicate");
    }
}

TEST(gguf_alignment_key_is_checked_and_used) {
    // Build a minimal file by hand: one u32 general.alignment, one f32 tensor of 4.
    auto build = [](uint32_t type, uint32_t align, uint64_t off) {
        std::vector<uint8_t> b;
        auto u32 = [&](uint32_t v) { b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 4); };
        auto u64 = [&](uint64_t v) { b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 8); };
        auto str = [&](const std::string& s) { u64(s.size()); b.insert(b.end(), s.begin(), s.end()); };
        u32(gguf::MAGIC); u32(2); u64(1); u64(1);
        str("general.alignment"); u32(type); u32(align);
        str("t"); u32(1); u64(4); u32(0); u64(off);
        while (b.size() % (align && !(align & (align - 1)) ? align : 32)) b.push_back(0);
        for (int i = 0; i < 16 + int(off); ++i) b.push_back(uint8_t(i));
        return b;
    };
    auto b = build(4, 64, 64);
    File f = File::parse("a.gguf", b);
    CHECK_EQ(f.alignment(), 64u);
    CHECK_EQ(f.data_offset(), 128u);
    CHECK(f.get("t").data == b.data() + 192);
    CHECK_EQ(f.get("t").nbytes, 16u);
    CHECK_THROWS(File::parse("a.gguf", build(4, 48, 0)), "a.gguf: metadata 'general.alignment' = 48 is not a power of two");
    CHECK_THROWS(File::parse("a.gguf", build(4, 0, 0)), "'general.alignment' = 0 is not a power of two");
    CHECK_THROWS(File::parse("a.gguf", build(5, 64, 0)), "'general.alignment' has type i32, expected u32");
    CHECK_THROWS(File::parse("a.gguf", build(4, 64, 32)), "offset = 32 is not a multiple of the alignment 64");
}

TEST(gguf_deeply_nested_arrays_are_refused_not_recursed) {
    auto build = [](int depth) {
        std::vector<uint8_t> b;
        auto u32 = [&](uint32_t v) { b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 4); };
        auto u64 = [&](uint64_t v) { b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 8); };
        u32(gguf::MAGIC); u32(3); u64(0); u64(1);
        u64(1); b.push_back('k');
        u32(9);  // the value is an array ...
        for (int i = 1; i < depth; ++i) { u32(9); u64(1); }  // ... of one array, depth - 1 times
        u32(4); u64(1); u32(7);  // innermost: [u32 7]
        return b;
    };
    File ok = File::parse("n.gguf", build(16));
    const gguf::Value* v = ok.find_kv("k");
    REQUIRE(v != nullptr);
    for (int i = 1; i < 16; ++i) v = &v->items.at(0);
    CHECK_EQ(v->int_at(0), 7);
    CHECK_THROWS(File::parse("n.gguf", build(17)), "n.gguf: metadata 'k'[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]: arrays nested deeper than 16");
    // A million levels claimed in a small file: refused at level 16, no deep recursion.
    CHECK_THROWS(File::parse("n.gguf", build(100000)), "arrays nested deeper than 16");
}
