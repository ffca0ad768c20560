#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

#include "cmd/gpu_verify.h"
#include "core/error.h"
#include "core/json.h"
#include "gpu/compute.h"
#include "gpu/fma_exact.h"
#include "gpu/kernels.h"
#include "gpu/op_kernels.h"
#include "gpu/shader.h"
#include "core/f16.h"
#include "quant/dot.h"
#include "gpu_device.h"
#include "test.h"

using namespace bankml::gpu;

// The card these tests use (tests/gpu_device.h).
static Gpu* test_gpu() {
    bt::TestGpu& t = bt::test_gpu_device();
    if (!t.gpu) SKIP("gpu", t.why);
    return t.gpu.get();
}

static uint32_t fbits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }

TEST(q1_0_lane_sum_matches_the_plain_loop) {
    auto plain = [](uint32_t q, uint32_t nib) {
        int s = 0;
        for (int t = 0; t < 4; ++t) {
            int8_t x = int8_t(q >> (8 * t));
            s += (nib >> t) & 1 ? x : int8_t(-int(x));
        }
        return s;
    };
    long bad = 0;
    // Every pair of byte values in every position pair, with -128 and 0 around them, every nibble.
    for (uint32_t nib = 0; nib < 16; ++nib)
        for (uint32_t a = 0; a < 256; ++a)
            for (uint32_t b = 0; b < 256; ++b) {
                uint32_t q1 = a | b << 8 | 0x80u << 16 | 0u << 24, q2 = 0x80u | a << 8 | 0u << 16 | b << 24;
                bad += plain(q1, nib) != kernels::q1_0_lane_sum(q1, nib);
                bad += plain(q2, nib) != kernels::q1_0_lane_sum(q2, nib);
            }
    std::mt19937 rng(3);
    for (int k = 0; k < 2000000; ++k) {
        uint32_t q = rng(), nib = rng() & 15;
        bad += plain(q, nib) != kernels::q1_0_lane_sum(q, nib);
    }
    CHECK_EQ(bad, 0L);
}

TEST(pack_q1_0_is_chunked_lane_planar_and_exact) {
    // 2 rows × 640 (5 blocks: a whole chunk and one padded): scales 1.0, -2.0, 0.5, 65504, ... (f16 bits)
    size_t rows = 2, blocks = 5;
    std::vector<uint8_t> w(rows * blocks * 18, 0);
    uint16_t h[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF};
    std::mt19937 rng(5);
    for (size_t blk = 0; blk < rows * blocks; ++blk) {
        w[blk * 18] = uint8_t(h[blk % 4]), w[blk * 18 + 1] = uint8_t(h[blk % 4] >> 8);
        for (int k = 0; k < 16; ++k) w[blk * 18 + 2 + k] = uint8_t(rng());
    }
    auto p = kernels::pack_q1_0(w, rows, blocks * 128);
    // Two chunks: per chunk and row, four scales; the second chunk's last three are padding.
    // Rows padded to 256 (zero), chunks to four blocks.
    const size_t R = kernels::padded_rows(rows);
    REQUIRE_EQ(R, 256u);
    REQUIRE_EQ(p.scales.size(), 2 * R * 2);  // f16 pairs
    REQUIRE_EQ(p.bits.size(), 2 * 8 * R * 2);
    for (size_t r = 0; r < rows; ++r)
        for (size_t b = 0; b < 8; ++b) {
            size_t c = b / 4, j = b % 4;
            uint32_t want = b < blocks ? h[(r * blocks + b) % 4] : 0u;
            CHECK_EQ(p.scales[(c * R + r) * 2 + j / 2] >> (16 * (j % 2)) & 0xFFFF, want);
            for (size_t l = 0; l < 8; ++l) {
                uint32_t got = p.bits[((c * 8 + l) * R + r) * 2 + j / 2] >> (16 * (j % 2)) & 0xFFFF, expect = 0;
                if (b < blocks)
                    for (size_t s = 0; s < 4; ++s) {  // lane l's sign bits of sub-block s: quants 32s + 4l .. +3
                        uint32_t word;
                        std::memcpy(&word, &w[(r * blocks + b) * 18 + 2 + 4 * s], 4);
                        expect |= (word >> (4 * l) & 15) << (4 * s);
                    }
                CHECK_EQ(got, expect);
            }
        }
    // The padding rows are zero: scales 0, so they add nothing and no kernel reads past the data.
    size_t nonzero = 0;
    for (size_t c = 0; c < 2; ++c)
        for (size_t r = rows; r < R; ++r) {
            nonzero += p.scales[(c * R + r) * 2] != 0 || p.scales[(c * R + r) * 2 + 1] != 0;
            for (size_t l = 0; l < 8; ++l) nonzero += p.bits[((c * 8 + l) * R + r) * 2] != 0 || p.bits[((c * 8 + l) * R + r) * 2 + 1] != 0;
        }
    CHECK_EQ(nonzero, 0u);
    CHECK_THROWS(kernels::pack_q1_0(w, 3, 640), "pack_q1_0");
    CHECK_THROWS(kernels::pack_q1_0(w, 2, 200), "multiple of 128");
    // The activation's table is padded to whole chunks with zero products.
    std::vector<uint8_t> q8(20 * 34, 0x11);
    auto a = kernels::pack_act(q8, 640);
    REQUIRE_EQ(a.lane_products.size(), 32u * 8 * 16);
    CHECK(a.lane_products[20 * 128 - 1] != 0.0f);
    for (size_t i = 20 * 128; i < a.lane_products.size(); ++i) CHECK_EQ(a.lane_products[i], 0.0f);
}

TEST(gpu_buffers_round_trip_and_misuse_is_an_error) {
    Gpu* g = test_gpu();
    uint64_t before = g->allocated();
    std::vector<float> v{1.5f, -2.0f, 3.25f};
    Buffer b = g->upload<float>(v);
    CHECK_EQ(g->allocated(), before + 12);
    CHECK_EQ(g->read_f32(b, 3), v);
    CHECK_THROWS(g->read_f32(b, 4), "read_f32");
    CHECK_THROWS(g->wait(), "no submission in flight");
    CHECK_THROWS(g->buffer(0), "at least one byte");
    g->free(b);
    CHECK_EQ(g->allocated(), before);
    CHECK_THROWS(g->read_f32(b, 1), "not live");
    CHECK_THROWS(g->pipeline(std::vector<uint32_t>{}, 1, 0), "empty");  // drivers do not validate SPIR-V: never hand them junk
}

TEST(gpu_q1_0_mat_vec_bit_exact) {
    Gpu* g = test_gpu();
    kernels::VerifyOptions opt;
    opt.full = false;
    kernels::FmaPath chosen = kernels::FmaPath::native;
    opt.chosen = &chosen;
    auto lines = kernels::verify_q1_0(*g, opt);
    // The probe, 1, 4, 9 (two chunks and a padded one), 8, 16 (four chunks: one batch loaded
    // ahead) and 36 (nine chunks: two batches and one after them) blocks per row for four kernels
    // (q1_0_mat_vec, q1_0_mat_vec8 with 1, 2, 4 rows per invocation; eight where the card's Fma is
    // proven), the path used.
    bool native = chosen == kernels::FmaPath::native;
    REQUIRE_EQ(lines.size(), native ? 50u : 26u);
    CHECK(lines[0].find("native Fma probe: ") == 0);
    CHECK_EQ(lines[0].find("native Fma proven") != std::string::npos, native);
    for (size_t i = 1; i + 1 < lines.size(); ++i) CHECK(lines[i].find("rows bit-exact") != std::string::npos);
    CHECK(lines.back().find(native ? "uses q1_0_mat_vec_fma" : "uses q1_0_mat_vec and q1_0_mat_vec8 (fma_exact)") == 0);
    std::printf("    %s\n", lines[0].c_str());  // what the probe says on this card (lavapipe: its Fma does not fuse)
    // And directly: a shape that is not a multiple of a workgroup, against the CPU kernel.
    size_t rows = 77, n = 384;
    std::mt19937_64 rng(7);
    std::vector<uint8_t> w(rows * n / 128 * 18), q8(n / 32 * 34);
    for (auto& x : w) x = uint8_t(rng());
    for (auto& x : q8) x = uint8_t(rng());
    for (size_t i = 0; i < w.size(); i += 18) w[i + 1] = uint8_t(0x20 + rng() % 16);  // scales about 2^-6
    for (size_t i = 0; i < q8.size(); i += 34) q8[i + 1] = uint8_t(0x1C + rng() % 8);
    auto pw = kernels::pack_q1_0(w, rows, n);
    auto pa = kernels::pack_act(q8, n);
    Buffer bs = g->upload<uint32_t>(pw.scales), bb = g->upload<uint32_t>(pw.bits);
    Buffer as = g->upload<float>(pa.scales), aq = g->upload<float>(pa.lane_products), out = g->buffer(rows * 4 + 64);
    const Buffer* bufs[] = {&bs, &bb, &as, &aq, &out};
    uint32_t push[] = {uint32_t(rows), uint32_t(n / 128)};
    for (uint32_t k = 0; k <= 4; k = k ? 2 * k : 1) {  // q1_0_mat_vec, then q1_0_mat_vec8 with 1, 2, 4 rows per invocation
        Pipeline p = g->pipeline(k ? kernels::q1_0_mat_vec8(kernels::FmaPath::exact, k) : kernels::q1_0_mat_vec(), kernels::Q1_0_BINDINGS, 8);
        std::vector<float> sentinel(rows + 16, -7.0f);
        g->write<float>(out, sentinel);
        g->submit(p, bufs, push, k ? kernels::groups_mat_vec8(rows, k) : kernels::groups_mat_vec(rows));
        CHECK_THROWS(g->submit(p, bufs, push, 1), "already in flight");
        g->wait();
        auto got = g->read_f32(out, rows + 16);
        for (size_t r = 0; r < rows; ++r)
            CHECK_EQ(fbits(got[r]), fbits(bankml::quant::vec_dot_q1_0_ref(n, reinterpret_cast<const bankml::quant::BlockQ1_0*>(&w[r * n / 128 * 18]), reinterpret_cast<const bankml::quant::BlockQ8_0*>(q8.data()))));
        for (size_t r = rows; r < rows + 16; ++r) CHECK_EQ(got[r], -7.0f);  // nothing past the last row
    }
    for (Buffer* b : {&bs, &bb, &as, &aq, &out}) g->free(*b);
}

TEST(verification_fails_closed) {
    Gpu* g = test_gpu();
    kernels::VerifyOptions opt;
    opt.full = false;
    opt.corrupt = [](std::vector<float>& out) {
        if (out.size() > 5) out[5] = std::nextafter(out[5], INFINITY);  // one ulp on one row
    };
    try {
        kernels::verify_q1_0(*g, opt);
        CHECK(!"verify_q1_0 accepted a card whose output differs in one row");
    } catch (const bankml::Error& e) {
        CHECK(std::string(e.what()).find("row 5 differs") != std::string::npos);
        CHECK_EQ(e.code, 2);
    }
}

static float unfused_fma(float a, float b, float c) { volatile float p = a * b; volatile float r = p + c; return r; }
static float fma_via_double(float a, float b, float c) { return float(double(a) * double(b) + double(c)); }

// The probe's judgement on the CPU: a fusing card passes; one that multiplies then adds, or rounds
// through double, is refused; flushing subnormals alone is reported, not refused.
TEST(fma_probe_refuses_unfused_and_double_rounding) {
    auto t = kernels::fma_probe_triples();
    std::vector<float> fused, plain, dbl, ftz;
    size_t fused_kind = 0, fused_differs = 0, dr_kind = 0, dr_differs = 0;
    for (auto& x : t) {
        float want = std::fma(x.a, x.b, x.c);
        fused.push_back(want);
        plain.push_back(unfused_fma(x.a, x.b, x.c));
        dbl.push_back(fma_via_double(x.a, x.b, x.c));
        bool sub = std::fpclassify(want) == FP_SUBNORMAL;
        ftz.push_back(sub ? std::copysign(0.0f, want) : want);
        if (!std::strcmp(x.kind, "fused")) ++fused_kind, fused_differs += fbits(plain.back()) != fbits(want);
        if (!std::strcmp(x.kind, "double rounding")) ++dr_kind, dr_differs += fbits(dbl.back()) != fbits(want);
        if (sub) CHECK(!std::strcmp(x.kind, "subnormal"));
    }
    CHECK_GE(fused_kind, 4096u);
    CHECK_EQ(fused_differs, fused_kind);  // every "fused" triple tells a fused Fma from an unfused one
    CHECK_GE(dr_kind, 64u);
    CHECK_EQ(dr_differs, dr_kind);        // and every "double rounding" one catches rounding through double
    auto ok = kernels::judge_fma_probe(t, fused);
    CHECK(ok.native);
    CHECK(ok.line.find("native Fma proven") != std::string::npos);
    auto p = kernels::judge_fma_probe(t, plain);
    CHECK(!p.native);
    CHECK(p.line.find("first difference: fused triple 0") != std::string::npos);
    CHECK(p.line.find("native Fma refused") != std::string::npos);
    auto d = kernels::judge_fma_probe(t, dbl);
    CHECK(!d.native);
    CHECK(d.line.find("first difference: double rounding triple") != std::string::npos);
    auto z = kernels::judge_fma_probe(t, ftz);
    CHECK(z.native);
    CHECK(z.line.find("the kernels never meet a subnormal") != std::string::npos);
    std::vector<float> one = fused;
    one[4100] = std::nextafter(one[4100], INFINITY);  // a cancellation triple one ulp off
    CHECK(!kernels::judge_fma_probe(t, one).native);
    CHECK(!kernels::judge_fma_probe(t, {}).native);
}

// A card whose Fma fails the probe (here: made to look unfused) keeps the fma_exact kernels and is
// still verified through them.
TEST(native_fma_refused_when_the_probe_fails) {
    Gpu* g = test_gpu();
    auto t = kernels::fma_probe_triples();
    kernels::VerifyOptions opt;
    opt.full = false;
    opt.corrupt_probe = [&](std::vector<float>& got) {
        for (size_t i = 0; i < t.size() && i < got.size(); ++i) got[i] = unfused_fma(t[i].a, t[i].b, t[i].c);
    };
    kernels::FmaPath chosen = kernels::FmaPath::native;
    opt.chosen = &chosen;
    auto lines = kernels::verify_q1_0(*g, opt);
    CHECK(chosen == kernels::FmaPath::exact);
    REQUIRE_EQ(lines.size(), 26u);  // the probe, 6 shapes × 4 fma_exact kernels, the path
    CHECK(lines[0].find("native Fma refused") != std::string::npos);
    CHECK_EQ(lines.back(), "uses q1_0_mat_vec and q1_0_mat_vec8 (fma_exact)");
    for (auto& l : lines) CHECK(l.find("_fma ") == std::string::npos);  // no native kernel ran
}

// The native kernels' order on any card: against the CPU kernel with its outer fma replaced by
// what this card's Fma computes (std::fma where the probe proved it; a multiply then an add where
// the card does not fuse, as lavapipe does), every row bit for bit. With the probe, this is what
// makes the native kernels the CPU's bits on a card that fuses.
TEST(native_kernels_follow_the_cpu_order) {
    Gpu* g = test_gpu();
    auto t = kernels::fma_probe_triples();
    std::vector<float> seen;
    auto probe = kernels::probe_native_fma(*g, [&](std::vector<float>& got) { seen = got; });
    bool unfused = seen.size() == t.size();
    for (size_t i = 0; i < t.size() && unfused; ++i)
        if (std::strcmp(t[i].kind, "subnormal")) unfused = fbits(seen[i]) == fbits(unfused_fma(t[i].a, t[i].b, t[i].c));
    if (!probe.native && !unfused) SKIP("gpu", "this card's Fma is neither correctly rounded nor a multiply then an add: " + probe.line);
    auto outer = [&](float a, float b, float c) { return probe.native ? std::fma(a, b, c) : unfused_fma(a, b, c); };
    size_t rows = 333, n = 1152;  // a partial last workgroup of both kernels (256 + 77; 10·32 + 13)
    std::mt19937_64 rng(17);
    std::vector<uint8_t> w(rows * n / 128 * 18), q8(n / 32 * 34);
    for (auto& x : w) x = uint8_t(rng());
    for (auto& x : q8) x = uint8_t(rng());
    for (size_t i = 0; i < w.size(); i += 18) w[i + 1] = uint8_t(0x18 + rng() % 24);  // scales of many sizes
    for (size_t i = 0; i < q8.size(); i += 34) q8[i + 1] = uint8_t(0x14 + rng() % 24);
    std::vector<float> want(rows);
    for (size_t r = 0; r < rows; ++r) {
        float acc[8] = {};
        for (size_t ib = 0; ib < n / 128; ++ib) {
            const uint8_t* blk = &w[(r * n / 128 + ib) * 18];
            float d0 = bankml::f16_to_f32(uint16_t(blk[0] | blk[1] << 8)), ab[8];
            for (size_t k = 0; k < 4; ++k) {
                const uint8_t* xb = &q8[(ib * 4 + k) * 34];
                float d1 = bankml::f16_to_f32(uint16_t(xb[0] | xb[1] << 8));
                uint32_t word;
                std::memcpy(&word, blk + 2 + 4 * k, 4);
                for (uint32_t l = 0; l < 8; ++l) {
                    uint32_t q;
                    std::memcpy(&q, xb + 2 + 4 * l, 4);
                    float s = float(kernels::q1_0_lane_sum(q, (word >> (4 * l)) & 15));
                    ab[l] = k == 0 ? d1 * s : std::fma(d1, s, ab[l]);
                }
            }
            for (int l = 0; l < 8; ++l) acc[l] = outer(d0, ab[l], acc[l]);
        }
        want[r] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    }
    auto pw = kernels::pack_q1_0(w, rows, n);
    auto pa = kernels::pack_act(q8, n);
    Buffer bs = g->upload<uint32_t>(pw.scales), bb = g->upload<uint32_t>(pw.bits);
    Buffer as = g->upload<float>(pa.scales), aq = g->upload<float>(pa.lane_products), out = g->buffer(rows * 4);
    const Buffer* bufs[] = {&bs, &bb, &as, &aq, &out};
    uint32_t push[] = {uint32_t(rows), uint32_t(n / 128)};
    size_t differs_from_ref = 0;
    for (uint32_t per : {0u, 1u, 4u}) {  // 0: q1_0_mat_vec
        Pipeline p = g->pipeline(per ? kernels::q1_0_mat_vec8(kernels::FmaPath::native, per) : kernels::q1_0_mat_vec(kernels::FmaPath::native),
                                 kernels::Q1_0_BINDINGS, kernels::Q1_0_PUSH_BYTES);
        g->write<float>(out, std::vector<float>(rows, std::nanf("")));  // a row not written cannot pass
        g->run(p, bufs, push, per ? kernels::groups_mat_vec8(rows, per) : kernels::groups_mat_vec(rows));
        auto got = g->read_f32(out, rows);
        for (size_t r = 0; r < rows; ++r) {
            CHECK_EQ(fbits(got[r]), fbits(want[r]));
            differs_from_ref += fbits(got[r]) != fbits(bankml::quant::vec_dot_q1_0_ref(n, reinterpret_cast<const bankml::quant::BlockQ1_0*>(&w[r * n / 128 * 18]), reinterpret_cast<const bankml::quant::BlockQ8_0*>(q8.data())));
        }
    }
    // Where the card does not fuse, the data must show it (else this test would prove nothing).
    if (!probe.native) CHECK_GT(differs_from_ref, 0u);
    for (Buffer* b : {&bs, &bb, &as, &aq, &out}) g->free(*b);
}

// fma_exact's sequence on the card against std::fma: the shader computes out = fma_exact(a, b, c).
TEST(fma_exact_on_the_card) {
    Gpu* g = test_gpu();
    std::vector<uint32_t> words;
    {
        using namespace bankml::gpu::shader;
        Shader sh(64, false);
        auto a = buffer<K::f32>(0, true, "a"), b = buffer<K::f32>(1, true, "b"), c = buffer<K::f32>(2, true, "c");
        auto out = buffer<K::f32>(3, false, "out");
        U32 i = global_id();
        out.set(i, fma_exact(a[i], b[i], c[i]));
        words = sh.finish();
    }
    Pipeline p = g->pipeline(words, 4, 0);
    const size_t n = 1 << 18;
    std::mt19937_64 rng(11);
    std::vector<float> a(n), b(n), c(n);
    for (size_t k = 0; k < n; ++k) {
        uint32_t ea = uint32_t(100 + rng() % 50), eb = uint32_t(100 + rng() % 50);
        uint32_t ab = (uint32_t(rng()) & 0x807FF000u) | ea << 23, bbits = (uint32_t(rng()) & 0x807FFFFFu) | eb << 23;
        std::memcpy(&a[k], &ab, 4);
        std::memcpy(&b[k], &bbits, 4);
        float prod = a[k] * b[k];
        c[k] = k % 3 == 0 ? -prod : std::ldexp(prod, int(rng() % 40) - 20) * (rng() & 1 ? 1.0f : -1.0f);
        if (k % 5 == 0) { uint32_t cb = fbits(c[k]) ^ uint32_t(rng() % 4); std::memcpy(&c[k], &cb, 4); }
    }
    Buffer A = g->upload<float>(a), B = g->upload<float>(b), C = g->upload<float>(c), O = g->buffer(n * 4);
    const Buffer* bufs[] = {&A, &B, &C, &O};
    g->run(p, bufs, {}, uint32_t(n / 64));
    auto got = g->read_f32(O, n);
    size_t bad = 0;
    for (size_t k = 0; k < n; ++k) bad += fbits(got[k]) != fbits(std::fma(a[k], b[k], c[k]));
    CHECK_EQ(bad, 0u);
    for (Buffer* x : {&A, &B, &C, &O}) g->free(*x);
}

TEST(gpu_verify_command_lines_and_dump_spirv) {
    std::string dir = bt::temp_dir();
    auto r = bt::run_cmd("BANKML_GPU=off " + bt::bankml_bin() + " gpu --verify");
    CHECK_EQ(r.code, 0);
    CHECK_EQ(r.out, "bankml gpu --verify: no usable GPU found; bankml runs on the CPU\n");
    auto d = bt::run_cmd(bt::bankml_bin() + " gpu --dump-spirv " + dir + "/spv");
    CHECK_EQ(d.code, 0);
    CHECK_EQ(bt::read_file(dir + "/spv/q1_0_mat_vec8.spv").size(), kernels::q1_0_mat_vec8().size() * 4);
    // On lavapipe (allowed for the test) the oracle passes (small shapes: the full ones are for
    // `bankml gpu --verify` itself), and a corrupted row is refused.
    bool lavapipe = false;
    for (auto& dev : Gpu::devices()) lavapipe |= dev.kind == Kind::Cpu;
    if (!lavapipe) SKIP("gpu", "no software renderer here to run the full --verify on");
    auto ok = bt::run_cmd("BANKML_GPU=0 BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU_TEST_SMALL=1 " + bt::bankml_bin() + " gpu --verify");
    CHECK_EQ(ok.code, 0);
    CHECK(ok.out.find("q1_0_mat_vec8 267×512 random: 267 of 267 rows bit-exact") != std::string::npos);
    CHECK(ok.out.find("q1_0_mat_vec 136×1024 layer: 136 of 136 rows bit-exact") != std::string::npos);
    CHECK(ok.out.find("verified: bankml may use this card") != std::string::npos);
    CHECK(ok.out.find("  native Fma probe: ") != std::string::npos);
    CHECK(ok.out.find("  uses q1_0_mat_vec") != std::string::npos);  // which pair this card uses
    auto unfused = bt::run_cmd("BANKML_GPU=0 BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU_TEST_SMALL=1 BANKML_GPU_TEST_UNFUSED_FMA=1 " + bt::bankml_bin() + " gpu --verify");
    CHECK_EQ(unfused.code, 0);
    CHECK(unfused.out.find("first difference: fused triple 0") != std::string::npos);
    CHECK(unfused.out.find("— native Fma refused") != std::string::npos);
    CHECK(unfused.out.find("  uses q1_0_mat_vec and q1_0_mat_vec8 (fma_exact)\n  op kernels' float controls") != std::string::npos);  // the op kernels follow
    CHECK(unfused.out.find("\n  rms_norm ") != std::string::npos);
    CHECK(unfused.out.find("\n  verified: bankml may use this card") != std::string::npos);
    auto bad = bt::run_cmd("BANKML_GPU=0 BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU_TEST_SMALL=1 BANKML_GPU_TEST_CORRUPT_ROW=3 " + bt::bankml_bin() + " gpu --verify");
    CHECK_EQ(bad.code, 2);
    CHECK(bad.out.find("NOT VERIFIED — q1_0_mat_vec 64×128 random: row 3 differs") != std::string::npos);
    CHECK(bad.out.find("; bankml will not use this card\n") != std::string::npos);
}

// Runs last in this file: every Vulkan call of the tests above went through the validation layers.
TEST(vulkan_validation_reports_nothing) {
    Gpu* g = test_gpu();
    (void)g;
    if (!Gpu::validation_enabled()) SKIP("gpu", "VK_LAYER_KHRONOS_validation is not installed (or the GPU tests were not first to use Vulkan)");
    auto msgs = Gpu::validation_messages();
    for (auto& m : msgs) std::printf("    validation: %s\n", m.c_str());
    CHECK_EQ(msgs.size(), 0u);
}

TEST(bench_gpu_quick_runs_on_lavapipe) {
    bool lavapipe = false;
    for (auto& dev : Gpu::devices()) lavapipe |= dev.kind == Kind::Cpu;
    if (!lavapipe) SKIP("gpu", "no software renderer here to run the benchmark on");
    // --json: the text on stderr, one JSON document on stdout.
    auto r = bt::run_cmd("BANKML_GPU=0 BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_THREADS=2 " + bt::bankml_bin() + " bench gpu --quick --copy-mib 8 --json");
    CHECK_EQ(r.code, 0);
    const std::string& text = r.err;
    CHECK(text.find("empty dispatch round trip") != std::string::npos);
    CHECK(text.find("device copy 8 MiB") != std::string::npos);
    CHECK(text.find("shader copy 8 MiB") != std::string::npos);
    CHECK(text.find("2048x2048        q1_0_mat_vec8") != std::string::npos);
    CHECK(text.find("2048x2048        cpu mat_vec_par") != std::string::npos);
    // The bench data has random f16 scales, on which a fused and an unfused multiply-add differ: the
    // fma_exact kernels must give the CPU's bits on every row; the native ones only where the probe
    // proved this card's Fma fused (lavapipe's is not: there every native row must differ, which
    // shows the data can tell the two apart).
    const bool native = text.find("— native Fma proven") != std::string::npos;
    CHECK(native || text.find("— native Fma refused") != std::string::npos);
    size_t exact_rows = 0, native_rows = 0;
    std::istringstream lines(text);
    for (std::string l; std::getline(lines, l);) {
        if (l.rfind("512x1024", 0) != 0 && l.rfind("2048x2048", 0) != 0) continue;
        if (l.find("cpu mat_vec_par") != std::string::npos) continue;
        const bool differs = l.find("BITS DIFFER FROM THE CPU") != std::string::npos;
        if (l.find("_fma ") != std::string::npos) {
            ++native_rows;
            if (!CHECK_EQ(differs, !native)) std::printf("    %s\n", l.c_str());
        } else {
            ++exact_rows;
            if (!CHECK(!differs)) std::printf("    %s\n", l.c_str());
        }
    }
    CHECK_EQ(exact_rows, 2 * (1 + std::size(kernels::MAT_VEC8_PERS)));
    CHECK_EQ(native_rows, exact_rows);
    // Every op kernel of the table has rows with its card time (best <= median, both positive):
    // the oracle's small shapes, each run bit-exact once and then timed --reps times.
    CHECK(text.find("op kernels: Fma exact") != std::string::npos || text.find("op kernels: Fma native") != std::string::npos);
    CHECK(text.find("best and median of 3 runs after one bit-exact run (the oracle's small shapes, random data; a run: the dispatch 2 times in a sequence") != std::string::npos);
    CHECK(text.find("NOT VERIFIED") == std::string::npos);
    std::map<std::string, size_t> timed;
    size_t flagged = 0;  // guarded runs that raised the flag, timed all the same
    bool in_table = false;
    std::istringstream rows(text);
    for (std::string l; std::getline(rows, l);) {
        if (l.rfind("kernel ", 0) == 0 && l.find("median us") != std::string::npos) { in_table = true; continue; }
        if (!in_table) continue;
        if (l.rfind("us: ", 0) == 0) break;
        std::string name = l.substr(0, 30);
        name.erase(name.find_last_not_of(' ') + 1);
        flagged += l.find("  (flagged a subnormal: the exact build would run)") != std::string::npos;
        l = l.substr(0, l.find("  ("));  // the numbers end the row, before any remark
        const size_t last = l.find_last_of(' ');
        const size_t before = l.find_last_not_of(' ', last);
        const size_t prev = l.find_last_of(' ', before);
        const double best = std::atof(l.c_str() + prev + 1), median = std::atof(l.c_str() + last + 1);
        if (CHECK_GT(best, 0.0) && CHECK_GE(median, best)) ++timed[name];
        else std::printf("    %s\n", l.c_str());
    }
    for (const auto& k : ops::op_kernels())
        if (!CHECK_GT(timed[k.name], 0u)) std::printf("    no timed row for %s\n", k.name);
    CHECK_GE(timed["attention"], 5u);  // each cache length of the oracle
    // lavapipe needs soft f32: the guarded builds have rows too, the probes' batches flagged.
    if (text.find("f32 soft") != std::string::npos) {
        CHECK_GT(timed["attention (guarded f32)"], 0u);
        CHECK_GT(flagged, 0u);
    }
    // The same rows in the JSON document.
    bankml::json::Value doc;
    try {
        doc = bankml::json::parse(r.out);
    } catch (const std::exception& e) {
        bt::fail(__FILE__, __LINE__, std::string("bench gpu --json: ") + e.what());
        return;
    }
    CHECK(doc["device"].is_string());
    CHECK_GT(doc["empty_dispatch"]["median_us"].as_double(), 0.0);
    CHECK(doc["extra_dispatch_in_sequence"]["after_barrier_us"].is_number());
    CHECK_EQ(doc["q1_0"].size(), 2 * (1 + 2 * (1 + std::size(kernels::MAT_VEC8_PERS))));  // two shapes: the CPU and every kernel
    const bankml::json::Value& ok = doc["op_kernels"];
    CHECK(ok["verified"].as_bool());
    CHECK_EQ(ok["shapes"].as_string(), std::string("small"));
    CHECK(ok["build"]["fma"].is_string() && ok["build"]["expf_fused"].is_bool());
    std::map<std::string, size_t> in_json;
    for (const bankml::json::Value& row : ok["rows"].as_array()) {
        CHECK(row["bit_exact"].as_bool());
        CHECK_GT(row["best_us"].as_double(), 0.0);
        CHECK_GE(row["median_us"].as_double(), row["best_us"].as_double());
        CHECK_EQ(row["reps"].as_int(), 3);
        ++in_json[row["name"].as_string()];
    }
    CHECK(in_json == timed);
    // A card below the kernels' workgroup limits is refused before anything runs on it.
    auto low = bt::run_cmd("BANKML_GPU=0 BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU_TEST_LIMITS=128,128,16384 " + bt::bankml_bin() + " bench gpu --quick --copy-mib 8");
    CHECK_EQ(low.code, 2);
    CHECK(low.err.find("maxComputeWorkGroupInvocations of 256, the card offers 128; bankml refuses the card") != std::string::npos);
    CHECK(low.out.find("empty dispatch") == std::string::npos);
    auto none = bt::run_cmd("BANKML_GPU=off " + bt::bankml_bin() + " bench gpu --quick");
    CHECK_EQ(none.code, 0);
    CHECK(none.out.find("no usable GPU found") != std::string::npos);
}

// Small matrices keep one row per invocation (the most workgroups); the output matrix shares each
// copy of the table among four rows per invocation.
TEST(mat_vec8_variant_by_rows) {
    CHECK_EQ(kernels::mat_vec8_per(1), 1u);
    CHECK_EQ(kernels::mat_vec8_per(4096), 1u);
    CHECK_EQ(kernels::mat_vec8_per(12288), 1u);
    CHECK_EQ(kernels::mat_vec8_per(64 * 1023), 1u);  // 1023 workgroups of 64 rows: too few
    CHECK_EQ(kernels::mat_vec8_per(64 * 1023 + 1), 2u);
    CHECK_EQ(kernels::mat_vec8_per(151936), 4u);
    CHECK_GE(kernels::groups_mat_vec8(151936, 4), kernels::MAT_VEC8_MIN_GROUPS);
    CHECK_LT(kernels::groups_mat_vec8(151936, 8), kernels::MAT_VEC8_MIN_GROUPS);
}

// A card whose workgroup limits are below what the kernels need is refused with the limit named,
// never dispatched past them (Vulkan guarantees only 128 invocations and 16 KiB).
TEST(kernel_limits_are_checked_before_any_dispatch) {
    CHECK_EQ(kernels::limits_problem(1024, 1024, 49152), "");
    CHECK_EQ(kernels::limits_problem(256, 256, kernels::KERNEL_SHARED_BYTES), "");
    std::string a = kernels::limits_problem(128, 1024, 49152);
    CHECK(a.find("maxComputeWorkGroupInvocations of 256, the card offers 128") != std::string::npos);
    std::string b = kernels::limits_problem(1024, 128, 49152);
    CHECK(b.find("maxComputeWorkGroupSize[0]") != std::string::npos);
    std::string c = kernels::limits_problem(1024, 1024, kernels::KERNEL_SHARED_BYTES - 4);
    CHECK(c.find("maxComputeSharedMemorySize") != std::string::npos);
    Gpu* g = test_gpu();
    const Gpu::Limits& lim = g->limits();
    CHECK_GE(lim.max_invocations, 128u);  // what Vulkan guarantees: the limits were read at all
    CHECK_EQ(kernels::limits_problem(lim.max_invocations, lim.max_size_x, lim.max_shared_bytes), "");
    // The real card made to report low limits (BANKML_GPU_TEST_LIMITS; it then refuses every
    // submission, so a dispatch ahead of the check would fail with another message): `gpu --verify`
    // refuses it with exit 2 and the limit named, before the native-Fma probe or any kernel runs.
    const std::string env = "BANKML_GPU=0 BANKML_GPU_ALLOW_SOFTWARE=1 BANKML_GPU_TEST_SMALL=1 ";
    struct Low { const char* limits; const char* named; };
    for (Low l : {Low{"128,1024,49152", "maxComputeWorkGroupInvocations of 256, the card offers 128"},
                  Low{"1024,128,49152", "maxComputeWorkGroupSize[0] of 256, the card offers 128"},
                  Low{"1024,1024,1024", "maxComputeSharedMemorySize"}}) {
        auto r = bt::run_cmd(env + "BANKML_GPU_TEST_LIMITS=" + l.limits + " " + bt::bankml_bin() + " gpu --verify");
        CHECK_EQ(r.code, 2);
        if (!CHECK(r.out.find(std::string("NOT VERIFIED — the kernels need ") + l.named) != std::string::npos)) std::printf("%s", r.out.c_str());
        CHECK(r.out.find("; bankml refuses the card rather than dispatch past its limits; bankml will not use this card\n") != std::string::npos);
        CHECK(r.out.find("Fma probe") == std::string::npos);
        CHECK(r.out.find("rows bit-exact") == std::string::npos);
    }
    // Limits that pass the check: the first dispatch meets the hook's refusal, which shows the hook
    // would catch a dispatch placed ahead of the check.
    auto high = bt::run_cmd(env + "BANKML_GPU_TEST_LIMITS=1024,1024,49152 " + bt::bankml_bin() + " gpu --verify");
    CHECK_EQ(high.code, 2);
    CHECK(high.out.find("nothing may run on it") != std::string::npos);
    auto bad = bt::run_cmd(env + "BANKML_GPU_TEST_LIMITS=lots " + bt::bankml_bin() + " gpu --verify");
    CHECK_EQ(bad.code, 2);
    CHECK(bad.out.find("BANKML_GPU_TEST_LIMITS='lots': expected invocations,size_x,shared_bytes") != std::string::npos);
}
