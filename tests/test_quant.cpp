// The fast paths against the scalar references, bit for bit, on random and adversarial inputs;
// batches against single columns; the pool against one thread; bad shapes.
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/f16.h"
#include "par/pool.h"
#include "quant/dot.h"
#include "quant/matmul.h"
#include "quant/q8_0.h"
#include "test.h"

using namespace bankml;
using namespace bankml::quant;

namespace {

enum class Regime { Random, MinusQuants, Extremes };

// A finite f16 scale: mostly moderate, sometimes subnormal or near the top of the range.
uint16_t rand_scale(std::mt19937& g, Regime r) {
    if (r == Regime::Extremes) {
        const uint16_t pick[] = {0x7bff, 0xfbff, 0x0001, 0x8001, 0x0000, 0x3c00, 0x0400};
        return pick[g() % 7];
    }
    float v = std::ldexp(float(g() % 1000 + 1) / 1000.0f, int(g() % 16) - 12) * ((g() & 1) ? 1.0f : -1.0f);
    return f32_to_f16(v);
}

std::vector<uint8_t> rand_weights(std::mt19937& g, WeightType t, size_t rows, size_t cols, Regime r) {
    std::vector<uint8_t> w(rows * row_bytes(t, cols));
    if (t == WeightType::F16) {
        auto* h = reinterpret_cast<uint16_t*>(w.data());
        for (size_t i = 0; i < rows * cols; ++i) {
            h[i] = rand_scale(g, r == Regime::Extremes ? Regime::Random : r);
            if (r == Regime::Extremes && g() % 8 == 0) h[i] = (g() & 1) ? 0x7bff : 0x0001;  // f16 max, smallest subnormal
        }
        return w;
    }
    const size_t bsz = sizeof(BlockQ1_0);  // 18, the same for Q2_0
    for (size_t b = 0; b < w.size() / bsz; ++b) {
        uint8_t* p = w.data() + b * bsz;
        uint16_t d = rand_scale(g, r);
        std::memcpy(p, &d, 2);
        for (size_t i = 2; i < bsz; ++i) {
            p[i] = uint8_t(g());
            if (r == Regime::MinusQuants) p[i] = (g() & 1) ? 0x00 : 0xff;  // all-minus / all-plus (Q2_0: -1 / +2)
        }
    }
    return w;
}

// Activation columns; Q8_0 quants include -128 (the wrap case), raw as in golden kinds 2 and 3.
std::vector<uint8_t> rand_acts(std::mt19937& g, WeightType t, size_t cols, size_t ncols, Regime r) {
    std::vector<uint8_t> x(ncols * act_bytes(t, cols));
    if (t == WeightType::F16) {
        auto* h = reinterpret_cast<uint16_t*>(x.data());
        for (size_t i = 0; i < ncols * cols; ++i) h[i] = rand_scale(g, r == Regime::Extremes ? Regime::Random : r);
        return x;
    }
    auto* b = reinterpret_cast<BlockQ8_0*>(x.data());
    for (size_t i = 0; i < ncols * cols / QK8_0; ++i) {
        b[i].d = rand_scale(g, r);
        for (auto& q : b[i].qs) {
            q = int8_t(g());
            if (r == Regime::MinusQuants) q = (g() % 4) ? -128 : 127;
            if (r == Regime::Extremes && g() % 3 == 0) q = (g() & 1) ? -128 : 127;
        }
    }
    return x;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

const WeightType TYPES[] = {WeightType::Q1_0, WeightType::Q2_0, WeightType::F16};

}  // namespace

TEST(quant_fast_equals_reference_every_block_multiple_to_16384) {
    if (!cpu_has_avx2_fma_f16c()) SKIP("avx2", "no AVX2/FMA/F16C: the fast path is the reference here");
    std::mt19937 g(11);
    for (WeightType t : TYPES) {
        const size_t step = t == WeightType::F16 ? 32 : block_size(t);
        for (size_t cols = step; cols <= 16384; cols += step) {
            const size_t rows = 1 + 2 * ((cols / step) % 5);  // odd row counts 1..9
            const Regime r = Regime((cols / step) % 3);
            auto w = rand_weights(g, t, rows, cols, r);
            auto x = rand_acts(g, t, cols, 1, r);
            std::vector<float> ref(rows), fast(rows);
            mat_vec(t, w.data(), rows, cols, x.data(), ref.data(), Path::Reference);
            mat_vec(t, w.data(), rows, cols, x.data(), fast.data(), Path::Fast);
            if (!CHECK(same(ref, fast))) {
                bt::fail(__FILE__, __LINE__, std::string(weight_type_name(t)) + " cols " + std::to_string(cols));
                return;
            }
        }
    }
}

TEST(quant_f16_products_with_tails_match_reference) {
    std::mt19937 g(5);
    for (size_t cols : {1, 7, 31, 33, 63, 100, 257, 1000}) {
        auto w = rand_weights(g, WeightType::F16, 5, cols, Regime::Random);
        auto x = rand_acts(g, WeightType::F16, cols, 3, Regime::Random);
        std::vector<float> ref(15), fast(15), one(5);
        mat_mat(WeightType::F16, w.data(), 5, cols, x.data(), 3, ref.data(), Path::Reference);
        mat_mat(WeightType::F16, w.data(), 5, cols, x.data(), 3, fast.data(), Path::Fast);
        CHECK(same(ref, fast));
        mat_vec(WeightType::F16, w.data(), 5, cols, x.data(), one.data(), Path::Fast);
        CHECK(std::memcmp(one.data(), ref.data(), 20) == 0);
        // The reference dot itself, element by element.
        const auto* wh = reinterpret_cast<const uint16_t*>(w.data());
        CHECK_EQ(vec_dot_f16_ref(cols, wh, reinterpret_cast<const uint16_t*>(x.data())), ref[0]);
    }
}

TEST(quant_mat_mat_columns_equal_mat_vec) {
    std::mt19937 g(3);
    for (WeightType t : TYPES)
        for (Path path : {Path::Reference, Path::Fast})
            for (size_t ncols : {2, 3, 8, 64}) {
                const size_t rows = 37, cols = 512;
                if (path == Path::Reference && ncols == 64) continue;  // slow and adds nothing
                auto w = rand_weights(g, t, rows, cols, Regime::Random);
                auto x = rand_acts(g, t, cols, ncols, Regime(ncols % 3));
                std::vector<float> ym(rows * ncols), yv(rows);
                mat_mat(t, w.data(), rows, cols, x.data(), ncols, ym.data(), path);
                bool ok = true;
                for (size_t c = 0; c < ncols; ++c) {
                    mat_vec(t, w.data(), rows, cols, x.data() + c * act_bytes(t, cols), yv.data(), path);
                    ok &= std::memcmp(yv.data(), ym.data() + c * rows, rows * 4) == 0;
                }
                if (!CHECK(ok)) bt::fail(__FILE__, __LINE__, weight_type_name(t) + std::string(" ncols ") + std::to_string(ncols));
            }
}

TEST(par_bit_exact_with_single_thread) {
    std::mt19937 g(9);
    for (int threads : {2, 3, 5}) {
        par::Pool pool(threads);
        for (WeightType t : TYPES)
            for (Path path : {Path::Reference, Path::Fast})
                for (size_t ncols : {1, 5}) {
                    const size_t rows = 16 * 7 + 3, cols = 1024;
                    auto w = rand_weights(g, t, rows, cols, Regime::Random);
                    auto x = rand_acts(g, t, cols, ncols, Regime::Extremes);
                    std::vector<float> one(rows * ncols), many(rows * ncols, -1.0f);
                    mat_mat(t, w.data(), rows, cols, x.data(), ncols, one.data(), path);
                    if (ncols == 1) mat_vec_par(pool, t, w.data(), rows, cols, x.data(), many.data(), path);
                    else mat_mat_par(pool, t, w.data(), rows, cols, x.data(), ncols, many.data(), path);
                    CHECK(same(one, many));
                }
    }
}

TEST(quant_q8_0_fast_equals_reference_with_ties_and_zero_blocks) {
    std::mt19937 g(2);
    std::normal_distribution<float> nd;
    for (int rep = 0; rep < 200; ++rep) {
        const size_t n = 32 * (1 + rep % 17);
        std::vector<float> x(n);
        for (size_t i = 0; i < n; ++i) {
            switch (rep % 4) {
                case 0: x[i] = nd(g); break;
                case 1: x[i] = nd(g) * std::exp(2.0f * nd(g)); break;
                case 2: x[i] = float(int(g() % 255) - 127) * 0.5f; break;  // max 63.5 or 127/2 steps: ties
                case 3: x[i] = (i / 32) % 2 ? 0.0f : float(int(g() % 255) - 127) + ((g() & 1) ? 0.5f : 0.0f); break;
            }
        }
        if (rep % 4 == 2) x[0] = 127.0f;  // multiplier exactly 1 in the first block
        std::vector<BlockQ8_0> a(n / 32), b(n / 32);
        quantize_row_q8_0_ref(x.data(), a.data(), n);
        quantize_row_q8_0(x.data(), b.data(), n, Path::Fast);
        if (!CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(BlockQ8_0)) == 0)) return;
    }
    // Ties go to even, as the AVX2 rounding does.
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f, x[1] = 2.5f, x[2] = -3.5f, x[3] = 0.5f;
    BlockQ8_0 q;
    quantize_row_q8_0_ref(x.data(), &q, 32);
    CHECK_EQ(int(q.qs[0]), 127);
    CHECK_EQ(int(q.qs[1]), 2);
    CHECK_EQ(int(q.qs[2]), -4);
    CHECK_EQ(int(q.qs[3]), 0);
    CHECK_EQ(f16_to_f32(q.d), f16_to_f32(f32_to_f16(1.0f)));
}

TEST(quant_q1_0_reference_small_cases_by_hand) {
    // One block, every bit set: +q; the product is d0 * d1 * sum(q) through the lane order.
    BlockQ1_0 w{};
    w.d = f32_to_f16(2.0f);
    std::memset(w.qs, 0xff, sizeof w.qs);
    BlockQ8_0 x[4];
    for (auto& b : x) {
        b.d = f32_to_f16(0.5f);
        for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(j - 16);
    }
    CHECK_EQ(vec_dot_q1_0_ref(128, &w, x), 2.0f * 0.5f * 4 * -16.0f);
    // Every bit clear with -128 quants: the wrap makes each term -128, not +128.
    std::memset(w.qs, 0, sizeof w.qs);
    for (auto& b : x) std::memset(b.qs, 0x80, 32);
    CHECK_EQ(vec_dot_q1_0_ref(128, &w, x), 2.0f * 0.5f * 128 * -128.0f);
    BlockQ2_0 w2{};
    w2.d = f32_to_f16(1.0f);
    std::memset(w2.qs, 0xaa, sizeof w2.qs);  // code 2 everywhere: +1
    for (auto& b : x) std::memset(b.qs, 3, 32);
    CHECK_EQ(vec_dot_q2_0_ref(64, &w2, x), 0.5f * 32 * 3 * 2);
}

TEST(quant_bad_shapes_are_errors) {
    std::vector<uint8_t> w(18 * 4), x(34 * 8);
    std::vector<float> y(4);
    CHECK_THROWS(mat_vec(WeightType::Q1_0, w.data(), 1, 96, x.data(), y.data()), "multiple of 128");
    CHECK_THROWS(mat_vec(WeightType::Q2_0, w.data(), 1, 0, x.data(), y.data()), "Q2_0");
    CHECK_THROWS(mat_vec(WeightType(7), w.data(), 1, 128, x.data(), y.data()), "unsupported weight type");
    CHECK_THROWS(mat_vec(WeightType::Q1_0, nullptr, 1, 128, x.data(), y.data()), "null");
}

TEST(quant_kernels_env_forces_the_reference) {
    auto p = bt::run_cmd("BANKML_KERNELS=scalar " + bt::bankml_bin() + " version");
    CHECK_EQ(p.code, 0);
    CHECK(p.out.find("kernels: scalar (BANKML_KERNELS=scalar)") != std::string::npos);
    if (cpu_has_avx2_fma_f16c()) {
        auto q = bt::run_cmd("BANKML_KERNELS= " + bt::bankml_bin() + " version");
        CHECK(q.out.find("kernels: avx2+fma+f16c") != std::string::npos);
        auto r = bt::run_cmd("BANKML_KERNELS=avx2 " + bt::bankml_bin() + " version");
        CHECK(r.out.find("kernels: avx2+fma+f16c (") != std::string::npos);
        CHECK(r.out.find("vnni for") == std::string::npos);
    }
}

#include "quant/kernels_impl.h"

// The Q1_0 fast loops, batch and decode (AVX-VNNI where the CPU has it, AVX2 otherwise and for
// columns holding -128) against the reference, on quantized columns (no -128) and raw ones (with -128).
TEST(quant_q1_0_vnni_and_avx2_loops_equal_reference) {
    if (!cpu_has_avx2_fma_f16c()) SKIP("avx2", "no AVX2/FMA/F16C");
    std::mt19937 g(21);
    std::normal_distribution<float> nd;
    const size_t rows = 23, cols = 1024, ncols = 6;
    auto w = rand_weights(g, WeightType::Q1_0, rows, cols, Regime::Random);
    std::vector<float> xf(cols * ncols);
    for (auto& v : xf) v = nd(g) * ((g() % 5) ? 1.0f : 50.0f);
    std::vector<uint8_t> x(ncols * act_bytes(WeightType::Q1_0, cols));
    prepare_activations(WeightType::Q1_0, xf.data(), cols, ncols, x.data(), Path::Reference);
    auto* xb = reinterpret_cast<BlockQ8_0*>(x.data());
    xb[5 * (cols / 32) + 3].qs[7] = -128;  // column 5 takes the AVX2 loop even with VNNI
    std::vector<float> ref(rows * ncols);
    mat_mat(WeightType::Q1_0, w.data(), rows, cols, x.data(), ncols, ref.data(), Path::Reference);
    for (bool vnni : {false, true}) {
        if (vnni && !cpu().avxvnni) continue;
        detail::Prepared p;
        detail::q1_0_prepare(xb, cols, ncols, p, vnni);
        if (vnni) CHECK_EQ(int(p.has_m128[5]) + int(p.has_m128[0]), 1);
        std::vector<float> y(rows * ncols, -1.0f);
        detail::q1_0_rows_avx2(w.data(), cols, 0, rows, x.data(), p, ncols, y.data(), rows);
        CHECK(same(ref, y));
        // One column at a time: the decode loops (VNNI for columns 0-4, AVX2 for column 5).
        for (size_t c = 0; c < ncols; ++c) {
            detail::Prepared p1;
            detail::q1_0_prepare(xb + c * (cols / 32), cols, 1, p1, vnni);
            std::vector<float> y1(rows, -1.0f);
            detail::q1_0_rows_avx2(w.data(), cols, 0, rows, xb + c * (cols / 32), p1, 1, y1.data(), rows);
            CHECK(std::memcmp(y1.data(), ref.data() + c * rows, rows * 4) == 0);
        }
    }
}
