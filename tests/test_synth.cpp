// Synthetic models and the GGUF writer: the tiny shape reproduces the oracle files' tensor table and
// vocabulary, the same seed gives the same bytes, the reader reads back everything the writer
// wrote, --vocab-from copies the tokenizer, and the weights have the promised scale.
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/f16.h"
#include "core/json.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/synth.h"
#include "test.h"

using namespace bankml;
using gguf::File;
using gguf::Type;

namespace {

std::string write_model(const synth::Spec& spec, const std::string& file = "m.gguf") {
    std::string p = bt::temp_dir() + "/" + file;
    synth::write(p, spec);
    return p;
}

synth::Spec tiny(Type t, uint64_t seed) {
    synth::Spec s;
    s.shape = *synth::shape_named("tiny");
    s.type = t;
    s.seed = seed;
    return s;
}

}  // namespace

TEST(synth_tiny_tensor_table_equals_the_oracle_files) {
    for (auto [type, file] : {std::pair{Type::Q1_0, "tiny-q1_0.gguf"}, std::pair{Type::Q2_0, "tiny-q2_0.gguf"},
                              std::pair{Type::F16, "tiny-f16.gguf"}}) {
        File oracle = File::open(bt::data_path(file));
        File ours = File::open(write_model(tiny(type, 3)));
        REQUIRE_EQ(ours.tensors().size(), oracle.tensors().size());
        for (size_t i = 0; i < ours.tensors().size(); ++i) {
            const auto& a = ours.tensors()[i];
            const auto& b = oracle.tensors()[i];
            CHECK_EQ(a.name, b.name);
            CHECK(a.type == b.type);
            CHECK_EQ(a.n_dims, b.n_dims);
            for (int d = 0; d < 4; ++d) CHECK_EQ(a.ne[d], b.ne[d]);
            CHECK_EQ(a.offset, b.offset);
            CHECK_EQ(a.nbytes, b.nbytes);
        }
        // Every model key the oracle has, with the same value; the tokenizer too.
        for (const auto& kv : oracle.metadata()) {
            if (kv.key == "general.name") continue;
            const gguf::Value* v = ours.find_kv(kv.key);
            if (!CHECK(v != nullptr)) continue;
            CHECK(v->type == kv.value.type);
            CHECK_EQ(v->summary(2000), kv.value.summary(2000));
        }
        CHECK_EQ(std::string(ours.require_str("general.name")), std::string("synthetic-qwen3-tiny-") + gguf::type_name(type));
    }
}

TEST(synth_same_seed_same_bytes_other_seed_other_weights) {
    for (Type t : {Type::Q1_0, Type::Q2_0, Type::F16, Type::F32}) {
        auto a = bt::read_file(write_model(tiny(t, 7)));
        auto b = bt::read_file(write_model(tiny(t, 7)));
        CHECK(a == b);
        std::string pc = write_model(tiny(t, 8));
        auto c = bt::read_file(pc);
        REQUIRE_EQ(a.size(), c.size());
        File fa = File::parse("a", a), fc = File::parse("c", c);
        for (size_t i = 0; i < fa.tensors().size(); ++i) {
            const auto& x = fa.tensors()[i];
            const auto& y = fc.tensors()[i];
            CHECK(std::memcmp(x.data, y.data, x.nbytes) != 0);
        }
        // Tensors of one model differ from each other too (each has its own stream).
        CHECK(std::memcmp(fa.get("blk.0.ffn_gate.weight").data, fa.get("blk.0.ffn_up.weight").data,
                          fa.get("blk.0.ffn_up.weight").nbytes) != 0);
    }
}

TEST(synth_reader_reads_back_every_tensor_with_the_promised_scale) {
    synth::Spec s;
    s.shape = *synth::shape_named("tiny");
    s.shape.name = "custom";
    s.shape.n_embd = 384;
    s.shape.n_layer = 3;
    s.shape.n_head = 6;
    s.shape.n_head_kv = 3;
    s.shape.head_dim = 64;
    s.shape.n_ff = 512;
    s.shape.n_vocab = 300;
    s.shape.tied = true;
    for (Type t : {Type::Q1_0, Type::Q2_0, Type::F16, Type::F32}) {
        s.type = t;
        if (t == Type::Q1_0) s.shape.n_embd = 384, s.shape.n_head = 6;
        File f = File::open(write_model(s));
        auto table = synth::tensor_table(s.shape, t);
        REQUIRE_EQ(f.tensors().size(), table.size());
        CHECK(f.find("output.weight") == nullptr);  // tied
        CHECK_EQ(table.size(), size_t(1 + 3 * 11 + 1));
        for (size_t i = 0; i < table.size(); ++i) {
            const auto& r = f.tensors()[i];
            CHECK_EQ(r.name, table[i].name);
            CHECK(r.type == table[i].type);
            CHECK_EQ(size_t(r.n_dims), table[i].ne.size());
            for (size_t d = 0; d < table[i].ne.size(); ++d) CHECK_EQ(r.ne[d], table[i].ne[d]);
            CHECK_EQ(r.nbytes, gguf::row_bytes(r.type, r.ne[0]) * uint64_t(r.nrows()));
        }
        CHECK_EQ(f.require_u32("qwen3.embedding_length"), 384u);
        CHECK_EQ(f.require_u32("qwen3.attention.head_count"), 6u);
        CHECK_EQ(f.get_str_array("tokenizer.ggml.tokens")->size(), 300u);
        CHECK_EQ(f.get_str_array("tokenizer.ggml.merges")->size(), 300u - 261u);
        CHECK_EQ(f.require_u32("general.file_type"), synth::file_type(t));
        // Norms are near 1; matrix weights have variance about 1/K (output keeps the input's scale).
        const auto& norm = f.get("blk.2.ffn_norm.weight");
        for (int64_t i = 0; i < norm.ne[0]; ++i) {
            float v;
            std::memcpy(&v, norm.data + 4 * i, 4);
            CHECK(v >= 0.875f && v <= 1.125f);
        }
        const auto& m = f.get("blk.1.ffn_down.weight");
        const int64_t k = m.ne[0];
        double sum2 = 0;
        int bad_codes = 0;
        for (int64_t r = 0; r < m.nrows(); ++r) {
            const uint8_t* row = m.data + uint64_t(r) * m.row_bytes();
            if (t == Type::Q1_0 || t == Type::Q2_0) {
                int per = t == Type::Q1_0 ? 128 : 64;
                for (int64_t b = 0; b < k / per; ++b) {
                    const uint8_t* blk = row + 18 * b;
                    float d = bankml::f16_to_f32(uint16_t(blk[0] | blk[1] << 8));
                    double lo = (t == Type::Q1_0 ? 1.0 : std::sqrt(2.0)) / std::sqrt(double(k));
                    CHECK(d >= 0.74 * lo && d <= 1.26 * lo);
                    for (int j = 0; j < per; ++j) {
                        double w;
                        if (t == Type::Q1_0) w = (blk[2 + j / 8] >> (j % 8) & 1) ? d : -d;
                        else {
                            int q = blk[2 + j / 4] >> (2 * (j % 4)) & 3;
                            bad_codes += q == 3;
                            w = (q - 1) * d;
                        }
                        sum2 += w * w;
                    }
                }
            } else {
                for (int64_t j = 0; j < k; ++j) {
                    float w;
                    if (t == Type::F16) w = bankml::f16_to_f32(uint16_t(row[2 * j] | row[2 * j + 1] << 8));
                    else std::memcpy(&w, row + 4 * j, 4);
                    CHECK(std::fabs(w) <= std::sqrt(3.0 / double(k)) * 1.001);
                    sum2 += double(w) * w;
                }
            }
        }
        CHECK_EQ(bad_codes, 0);
        double var_times_k = sum2 / double(m.nelements()) * double(k);
        CHECK_NEAR(var_times_k, 1.0, 0.1);
    }
}

TEST(synth_vocab_from_copies_the_tokenizer) {
    synth::Spec s = tiny(Type::Q1_0, 1);
    s.vocab_from = bt::data_path("qwen3-vocab.gguf");
    s.shape.n_vocab = 5;  // ignored: the source's count wins
    File f = File::open(write_model(s));
    File v = File::open(s.vocab_from);
    CHECK_EQ(f.get("token_embd.weight").ne[1], 151936);
    CHECK_EQ(f.get("output.weight").ne[1], 151936);
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
        auto a = *f.get_str_array(key);
        auto b = *v.get_str_array(key);
        REQUIRE_EQ(a.size(), b.size());
        bool same = true;
        for (size_t i = 0; i < a.size(); ++i) same = same && a[i] == b[i];
        CHECK(same);
    }
    CHECK(*f.get_int_array("tokenizer.ggml.token_type") == *v.get_int_array("tokenizer.ggml.token_type"));
    for (const auto& kv : v.metadata())
        if (kv.key.starts_with("tokenizer.")) {
            const gguf::Value* ours = f.find_kv(kv.key);
            if (CHECK(ours != nullptr)) CHECK_EQ(ours->summary(3), kv.value.summary(3));
        }
    CHECK_EQ(*f.get_str("tokenizer.chat_template"), *v.get_str("tokenizer.chat_template"));
    synth::Spec bad = tiny(Type::Q1_0, 1);
    bad.vocab_from = bt::data_path("tiny-perplexity.txt");
    CHECK_THROWS(write_model(bad), "tiny-perplexity.txt: magic");
}

TEST(synth_real_shapes_have_the_qwen3_dimensions) {
    auto s17 = *synth::shape_named("1.7b");
    CHECK_EQ(s17.n_embd, 2048);
    CHECK_EQ(s17.n_layer, 28);
    CHECK(s17.tied);
    auto t = synth::tensor_table(s17, Type::Q1_0);
    CHECK_EQ(t.size(), size_t(1 + 28 * 11 + 1));
    CHECK_EQ(t[2].name, std::string("blk.0.attn_q.weight"));
    CHECK(t[2].ne == std::vector<int64_t>({2048, 2048}));
    CHECK(t[3].ne == std::vector<int64_t>({2048, 1024}));
    auto s4 = *synth::shape_named("4b");
    CHECK_EQ(s4.n_ff, 9728);
    CHECK_EQ(synth::tensor_table(s4, Type::Q1_0)[7].ne[0], 4096);  // attn_output: 32 heads x 128
    auto s8 = *synth::shape_named("8b");
    CHECK(!s8.tied);
    CHECK_EQ(synth::tensor_table(s8, Type::Q2_0).back().name, std::string("output.weight"));
    CHECK_EQ(synth::tensor_table(s8, Type::Q2_0).back().ne[1], 151936);
    CHECK(!synth::shape_named("70b"));
    for (const auto& n : synth::shape_names()) {
        synth::Spec sp;
        sp.shape = *synth::shape_named(n);
        for (Type ty : {Type::Q1_0, Type::Q2_0, Type::F16, Type::F32}) {
            sp.type = ty;
            synth::check(sp);  // every named shape fits every type's blocks
        }
    }
    synth::Spec bad = tiny(Type::Q1_0, 0);
    bad.shape.n_embd = 320;
    CHECK_THROWS(synth::check(bad), "n_embd = 320 is not a multiple of the q1_0 block size 128");
    bad = tiny(Type::Q1_0, 0);
    bad.shape.n_head_kv = 3;
    CHECK_THROWS(synth::check(bad), "n_head = 4 is not a multiple of n_head_kv = 3");
    bad = tiny(Type::Q8_0, 0);
    CHECK_THROWS(synth::check(bad), "matrices of type q8_0 are not supported");
    bad = tiny(Type::Q1_0, 0);
    bad.shape.n_vocab = 100;
    CHECK_THROWS(synth::check(bad), "n_vocab = 100 is below 261");
}

TEST(synth_vocabulary_matches_the_oracle_layout) {
    auto v = synth::synthetic_vocab(1024);
    File oracle = File::open(bt::data_path("tiny-q1_0.gguf"));
    auto toks = *oracle.get_str_array("tokenizer.ggml.tokens");
    REQUIRE_EQ(v.tokens.size(), toks.size());
    for (size_t i = 0; i < toks.size(); ++i) CHECK_EQ(v.tokens[i], std::string(toks[i]));
    CHECK_EQ(v.eos, 1021u);
    CHECK_EQ(v.bos, 1019u);
    auto small = synth::synthetic_vocab(synth::MIN_VOCAB);
    CHECK_EQ(small.merges.size(), 0u);
    CHECK_EQ(small.tokens.back(), std::string("</think>"));
    CHECK_THROWS(synth::synthetic_vocab(200), "at least 261");
}

TEST(gguf_writer_round_trips_every_value_type_and_alignment) {
    gguf::Writer w;
    w.set_alignment(64);
    w.add_u32("a.u32", 4000000000u);
    w.add_i32("a.i32", -5);
    w.add_u64("a.u64", ~uint64_t(0));
    w.add_f32("a.f32", 0.1f);
    w.add_bool("a.bool", true);
    w.add_str("a.str", std::string_view("x\0y", 3));
    std::vector<std::string> ss = {"", "α", "abc"};
    w.add_str_array("a.strs", ss);
    std::vector<int32_t> is = {-1, 0, 7};
    w.add_i32_array("a.ints", is);
    std::vector<float> fs = {1.5f, -2.0f};
    w.add_f32_array("a.floats", fs);
    CHECK_THROWS(w.add_u32("a.u32", 1), "'a.u32' added twice");
    CHECK_THROWS(w.add_u32("general.alignment", 8), "set_alignment");
    w.add_tensor("t1", Type::F32, {3, 2}, [](int64_t r0, int64_t n, uint8_t* out) {
        for (int64_t r = r0; r < r0 + n; ++r)
            for (int j = 0; j < 3; ++j) {
                float v = float(10 * r + j);
                std::memcpy(out, &v, 4);
                out += 4;
            }
    });
    w.add_tensor("t2", Type::Q1_0, {128, 1, 1, 2}, [](int64_t, int64_t n, uint8_t* out) { std::memset(out, 0xAB, size_t(n) * 18); });
    CHECK_THROWS(w.add_tensor("t1", Type::F32, {1}, nullptr), "added twice");
    CHECK_THROWS(w.add_tensor("t3", Type::Q1_0, {100}, nullptr), "not a whole number of q1_0 blocks");
    std::string dir = bt::temp_dir();
    w.write(dir + "/w.gguf");
    CHECK_EQ(bt::read_file(dir + "/w.gguf").size(), w.file_size());
    File f = File::open(dir + "/w.gguf");
    CHECK_EQ(f.alignment(), 64u);
    CHECK_EQ(*f.get_u32("a.u32"), 4000000000u);
    CHECK_EQ(*f.get_i64("a.i32"), -5);
    CHECK_EQ(*f.get_u64("a.u64"), ~uint64_t(0));
    CHECK_THROWS(f.get_i64("a.u64"), "is not an i64");
    CHECK_THROWS(f.get_u32("a.i32"), "is not a u32");
    CHECK_EQ(*f.get_f32("a.f32"), 0.1f);
    CHECK_EQ(*f.get_bool("a.bool"), true);
    CHECK_EQ(*f.get_str("a.str"), std::string_view("x\0y", 3));
    auto rs = *f.get_str_array("a.strs");
    CHECK(rs.size() == 3 && rs[0].empty() && rs[1] == "α" && rs[2] == "abc");
    CHECK(*f.get_int_array("a.ints") == std::vector<int64_t>({-1, 0, 7}));
    CHECK(*f.get_f32_array("a.floats") == fs);
    const auto& t1 = f.get("t1");
    CHECK_EQ(t1.data - f.bytes(), int64_t(f.data_offset()));
    CHECK_EQ(f.data_offset() % 64, 0u);
    float v;
    std::memcpy(&v, t1.data + 4 * 4, 4);
    CHECK_EQ(v, 11.0f);
    const auto& t2 = f.get("t2");
    CHECK_EQ(t2.offset, 64u);
    CHECK_EQ(t2.n_dims, 4u);
    CHECK_EQ(t2.ne[3], 2);
    CHECK_EQ(t2.data[35], 0xAB);

    // add_value copies any value, nested arrays included, from a file that was read.
    std::vector<uint8_t> nested;
    {
        auto u32 = [&](uint32_t x) { nested.insert(nested.end(), (uint8_t*)&x, (uint8_t*)&x + 4); };
        auto u64 = [&](uint64_t x) { nested.insert(nested.end(), (uint8_t*)&x, (uint8_t*)&x + 8); };
        u32(gguf::MAGIC); u32(3); u64(0); u64(1);
        u64(1); nested.push_back('n');
        u32(9); u32(9); u64(2);           // array of 2 arrays
        u32(4); u64(1); u32(42);          // [u32 42]
        u32(8); u64(1); u64(2); nested.push_back('h'); nested.push_back('i');  // ["hi"]
    }
    File nf = File::parse("nested", nested);
    const gguf::Value* nv = nf.find_kv("n");
    REQUIRE(nv != nullptr);
    CHECK_EQ(nv->summary(5), std::string("[arr x 2: [u32 x 1: 42], [str x 1: 'hi']]"));
    gguf::Writer w2;
    for (const auto& kv : f.metadata())
        if (kv.key != "general.alignment") w2.add_value(kv.key, kv.value);
    w2.add_value("n", *nv);
    w2.write(dir + "/w2.gguf");
    File f2 = File::open(dir + "/w2.gguf");
    for (const auto& kv : f.metadata()) {
        if (kv.key == "general.alignment") continue;
        CHECK_EQ(f2.find_kv(kv.key)->summary(9), kv.value.summary(9));
    }
    CHECK_EQ(f2.find_kv("n")->summary(5), nv->summary(5));
    CHECK_THROWS(w2.write("/nonexistent-dir/x.gguf"), "open(/nonexistent-dir/x.gguf.part) failed: No such file");
}

TEST(synth_and_info_commands) {
    std::string bin = bt::bankml_bin(), dir = bt::temp_dir();
    auto r = bt::run_cmd(bin + " synth --shape tiny --type q2_0 --seed 5 -o " + dir + "/m.gguf");
    CHECK_EQ(r.code, 0);
    CHECK(r.out.find("qwen3 tiny, q2_0, seed 5") != std::string::npos);
    File f = File::open(dir + "/m.gguf");
    CHECK(f.get("blk.0.attn_q.weight").type == Type::Q2_0);
    r = bt::run_cmd(bin + " synth --shape tiny --type q2_0 --seed 5 --embd 128 --layers 1 --vocab 512 --tied -o " + dir + "/c.gguf");
    CHECK_EQ(r.code, 0);
    File c = File::open(dir + "/c.gguf");
    CHECK_EQ(c.get("token_embd.weight").ne[0], 128);
    CHECK_EQ(c.get("token_embd.weight").ne[1], 512);
    CHECK(c.find("blk.1.attn_q.weight") == nullptr);
    CHECK(c.find("output.weight") == nullptr);
    CHECK_EQ(std::string(c.require_str("general.name")), std::string("synthetic-qwen3-custom-q2_0"));
    r = bt::run_cmd(bin + " synth --shape 70b -o " + dir + "/x.gguf");
    CHECK_EQ(r.code, 2);
    CHECK(r.err.find("--shape 70b") != std::string::npos);
    r = bt::run_cmd(bin + " synth --type q4_0 -o " + dir + "/x.gguf");
    CHECK_EQ(r.code, 2);
    r = bt::run_cmd(bin + " synth --embd 100 -o " + dir + "/x.gguf");
    CHECK_EQ(r.code, 2);
    CHECK(r.err.find("n_embd = 100 is not a multiple of the q1_0 block size 128") != std::string::npos);
    r = bt::run_cmd(bin + " synth");
    CHECK_EQ(r.code, 2);
    r = bt::run_cmd(bin + " synth -o /nonexistent-dir/x.gguf");
    CHECK_EQ(r.code, 1);

    r = bt::run_cmd(bin + " info " + dir + "/m.gguf");
    CHECK_EQ(r.code, 0);
    CHECK(r.out.find("tokenizer.ggml.tokens") != std::string::npos);
    CHECK(r.out.find("[str x 1024: ") != std::string::npos);
    CHECK(r.out.find("blk.1.ffn_down.weight") != std::string::npos);
    CHECK(r.out.find("q2_0   [768, 256]") != std::string::npos);
    // A cut file: exit 1 and one line naming the file.
    auto bytes = bt::read_file(dir + "/m.gguf");
    {
        std::FILE* o = std::fopen((dir + "/cut.gguf").c_str(), "wb");
        std::fwrite(bytes.data(), 1, 5000, o);
        std::fclose(o);
    }
    r = bt::run_cmd(bin + " info " + dir + "/cut.gguf");
    CHECK_EQ(r.code, 1);
    CHECK(r.err.find("bankml info: " + dir + "/cut.gguf: ") == 0);
    CHECK(r.err.find("truncated") != std::string::npos);
    CHECK_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
    r = bt::run_cmd(bin + " info");
    CHECK_EQ(r.code, 2);
}

TEST(info_json_lists_metadata_and_tensors) {
    std::string bin = bt::bankml_bin(), dir = bt::temp_dir();
    auto r = bt::run_cmd(bin + " info --json " + bt::data_path("tiny-q2_0.gguf"));
    REQUIRE_EQ(r.code, 0);
    json::Value d = json::parse(r.out);
    CHECK_EQ(d["version"].as_int(), 3);
    CHECK_EQ(d["data_offset"].as_int(), 24000);
    CHECK_EQ(d["metadata"]["general.architecture"].as_string(), std::string("qwen3"));
    CHECK_EQ(d["metadata"]["qwen3.embedding_length"].as_int(), 256);
    CHECK_EQ(d["metadata"]["qwen3.rope.freq_base"].as_double(), 1e6);
    CHECK_EQ(d["metadata"]["tokenizer.ggml.add_bos_token"].as_bool(), false);
    const json::Value& toks = d["metadata"]["tokenizer.ggml.tokens"];
    CHECK_EQ(toks["element_type"].as_string(), std::string("str"));
    CHECK_EQ(toks["count"].as_int(), 1024);
    CHECK_EQ(toks["first"].size(), 5u);
    CHECK_EQ(toks["first"][0].as_string(), std::string("\xc4\x80"));
    REQUIRE_EQ(d["tensors"].size(), 25u);
    const json::Value& t = d["tensors"][24];
    CHECK_EQ(t["name"].as_string(), std::string("output.weight"));
    CHECK_EQ(t["type"].as_string(), std::string("q2_0"));
    CHECK(t["shape"] == json::parse("[256, 1024]"));
    CHECK_EQ(t["bytes"].as_int(), 256 * 1024 / 64 * 18);
    CHECK_EQ(d["parameters"].as_int(), 2098688);

    // Short arrays appear whole, with every value type.
    gguf::Writer w;
    std::vector<int32_t> is = {-1, 0, 7};
    w.add_i32_array("ints", is);
    w.add_u64("big", ~uint64_t(0));
    w.add_f32("x", 0.5f);
    w.write(dir + "/s.gguf");
    r = bt::run_cmd(bin + " info --json " + dir + "/s.gguf");
    REQUIRE_EQ(r.code, 0);
    d = json::parse(r.out);
    CHECK(d["metadata"]["ints"]["values"] == json::parse("[-1, 0, 7]"));
    CHECK_EQ(d["metadata"]["big"].as_uint(), ~uint64_t(0));
    CHECK_EQ(d["metadata"]["x"].as_double(), 0.5);
    CHECK_EQ(d["tensors"].size(), 0u);
}
