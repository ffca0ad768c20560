// The fast paths against the scalar references, bit for bit, on random and adversarial inputs;
// batches against single columns; the pool against one thread; bad shapes.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu.h"
#include "core/f16.h"
#include "par/pool.h"
#include "quant/dot.h"
#include "quant/matmul.h"
#include "quant/q8_0.h"
#include "quant/traits.h"
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

// A finite f32: mostly moderate, with Extremes sometimes zero, tiny or near the top of the range.
float rand_f32(std::mt19937& g, Regime r) {
    if (r == Regime::Extremes && g() % 4 == 0) {
        const float pick[] = {0.0f, -0.0f, 1e-40f, -3e38f, 3e38f, 1.0f};
        return pick[g() % 6];
    }
    return std::ldexp(float(g() % 100000 + 1) / 100000.0f, int(g() % 24) - 12) * ((g() & 1) ? 1.0f : -1.0f);
}

std::vector<uint8_t> rand_weights(std::mt19937& g, Type t, size_t rows, size_t cols, Regime r) {
    std::vector<uint8_t> w(rows * row_bytes(t, cols));
    if (t == Type::F32) {  // finite f32 values of many sizes, zeros and the largest among them
        auto* f = reinterpret_cast<float*>(w.data());
        for (size_t i = 0; i < rows * cols; ++i) f[i] = rand_f32(g, r);
        return w;
    }
    if (traits(t).block == 1) {  // f16 values
        auto* h = reinterpret_cast<uint16_t*>(w.data());
        for (size_t i = 0; i < rows * cols; ++i) {
            h[i] = rand_scale(g, r == Regime::Extremes ? Regime::Random : r);
            if (r == Regime::Extremes && g() % 8 == 0) h[i] = (g() & 1) ? 0x7bff : 0x0001;  // f16 max, smallest subnormal
        }
        return w;
    }
    const size_t bsz = traits(t).block_bytes;  // an f16 scale, then packed codes
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
std::vector<uint8_t> rand_acts(std::mt19937& g, Type t, size_t cols, size_t ncols, Regime r) {
    std::vector<uint8_t> x(ncols * act_bytes(t, cols));
    if (traits(t).dot_type == Type::F32) {
        auto* f = reinterpret_cast<float*>(x.data());
        for (size_t i = 0; i < ncols * cols; ++i) f[i] = rand_f32(g, r);
        return x;
    }
    if (traits(t).dot_type == Type::F16) {
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

// Every type the table gives a product kernel: a new entry is tested here without a word changed.
std::vector<Type> computed_types() {
    std::vector<Type> v;
    for (const TypeTraits& t : all_traits())
        if (t.rows_ref) v.push_back(t.type);
    return v;
}
const std::vector<Type> TYPES = computed_types();

// Every fast level this CPU runs (avx2, avxvnni, avx512, avx512vnni where present), each forced.
std::vector<Path> fast_levels() {
    std::vector<Path> v;
    for (Isa l : supported_isas())
        if (l != Isa::Scalar) v.push_back(path_of(l));
    return v;
}
std::string level_name(Path p) { return isa_name(path_isa(p)); }

}  // namespace

TEST(quant_fast_equals_reference_every_block_multiple_to_16384) {
    if (!cpu_has_avx2_fma_f16c()) SKIP("avx2", "no AVX2/FMA/F16C: the fast path is the reference here");
    std::mt19937 g(11);
    for (Type t : TYPES) {
        const size_t step = t == Type::F16 ? 32 : block_size(t);
        for (size_t cols = step; cols <= 16384; cols += step) {
            const size_t rows = 1 + 2 * ((cols / step) % 5);  // odd row counts 1..9
            const Regime r = Regime((cols / step) % 3);
            auto w = rand_weights(g, t, rows, cols, r);
            auto x = rand_acts(g, t, cols, 1, r);
            std::vector<float> ref(rows), fast(rows);
            mat_vec(t, w.data(), rows, cols, x.data(), ref.data(), Path::Reference);
            for (Path level : fast_levels()) {
                mat_vec(t, w.data(), rows, cols, x.data(), fast.data(), level);
                if (!CHECK(same(ref, fast))) {
                    bt::fail(__FILE__, __LINE__, std::string(type_name(t)) + " cols " + std::to_string(cols) + " at " + level_name(level));
                    return;
                }
            }
        }
    }
}

TEST(quant_f16_products_with_tails_match_reference) {
    std::mt19937 g(5);
    for (size_t cols : {1, 2, 7, 31, 33, 63, 100, 257, 1000, 4097}) {
        // Odd column counts also take f16 max and the smallest subnormal among the weights.
        auto w = rand_weights(g, Type::F16, 5, cols, cols % 2 ? Regime::Extremes : Regime::Random);
        auto x = rand_acts(g, Type::F16, cols, 3, Regime::Random);
        std::vector<float> ref(15), fast(15), one(5);
        mat_mat(Type::F16, w.data(), 5, cols, x.data(), 3, ref.data(), Path::Reference);
        for (Path level : fast_levels()) {
            mat_mat(Type::F16, w.data(), 5, cols, x.data(), 3, fast.data(), level);
            CHECK(same(ref, fast));
            mat_vec(Type::F16, w.data(), 5, cols, x.data(), one.data(), level);
            CHECK(std::memcmp(one.data(), ref.data(), 20) == 0);
            CHECK_EQ(dot_f16(cols, reinterpret_cast<const uint16_t*>(w.data()), reinterpret_cast<const uint16_t*>(x.data()), level), ref[0]);
        }
        // Every product against an independent double-precision dot. f16 to f32 is exact and an f16
        // product has at most 22 significant bits, so each w·x is exact in f32; the error comes from
        // the sums: per lane ⌊n/32⌋ fmas, then 5 levels of the tree (3 over the lanes, 2 over t0),
        // each rounding once with u = 2⁻²⁴ relative to its partial sum, so at most γ_k·Σ|w·x| with
        // k = ⌊n/32⌋ + 5 (γ_k = k·u/(1 − k·u)); the tail is summed in double (2⁻⁵³ per term, inside
        // the margin) and the result rounded to f32 once more: + u·|exact|. A dropped, doubled or
        // misplaced tail element moves the result by a whole |w·x|, far outside this bound.
        const auto* wh = reinterpret_cast<const uint16_t*>(w.data());
        const auto* xh = reinterpret_cast<const uint16_t*>(x.data());
        const double u = std::ldexp(1.0, -24), k = double(cols / 32 + 5);
        for (size_t c = 0; c < 3; ++c)
            for (size_t r = 0; r < 5; ++r) {
                double exact = 0, mag = 0;
                for (size_t i = 0; i < cols; ++i) {
                    double p = double(f16_to_f32(wh[r * cols + i])) * double(f16_to_f32(xh[c * cols + i]));
                    exact += p, mag += std::fabs(p);
                }
                const double bound = k * u / (1 - k * u) * mag + u * std::fabs(exact) + 1e-30;
                if (!CHECK_NEAR(ref[c * 5 + r], exact, bound))
                    bt::fail(__FILE__, __LINE__, "cols " + std::to_string(cols) + " row " + std::to_string(r) + " column " + std::to_string(c));
            }
    }
    bt::fast_path_checked();
}

TEST(quant_mat_mat_columns_equal_mat_vec) {
    std::mt19937 g(3);
    std::vector<Path> paths = fast_levels();
    paths.insert(paths.begin(), Path::Reference);
    for (Type t : TYPES)
        for (Path path : paths)
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
                if (!CHECK(ok))
                    bt::fail(__FILE__, __LINE__, type_name(t) + std::string(" ncols ") + std::to_string(ncols) + " at " + level_name(path));
            }
}

TEST(par_bit_exact_with_single_thread) {
    std::mt19937 g(9);
    std::vector<Path> paths = fast_levels();
    paths.insert(paths.begin(), Path::Reference);
    for (int threads : {2, 3, 5}) {
        par::Pool pool(threads);
        for (Type t : TYPES)
            for (Path path : paths)
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

// Columns prepared once serve several matrices and row ranges in any order (the products' grouped
// pool job), with mat_mat's bits, at every level.
TEST(quant_prepared_columns_serve_several_matrices) {
    std::mt19937 g(17);
    std::vector<Path> paths = fast_levels();
    paths.insert(paths.begin(), Path::Reference);
    for (Type t : TYPES)
        for (Path path : paths)
            for (size_t ncols : {1, 4}) {
                const size_t cols = 256, ra = 37, rb = 21;
                auto wa = rand_weights(g, t, ra, cols, Regime::Random), wb = rand_weights(g, t, rb, cols, Regime::Extremes);
                auto x = rand_acts(g, t, cols, ncols, Regime::Random);
                std::vector<float> refa(ra * ncols), refb(rb * ncols), ya(ra * ncols, -1.0f), yb(rb * ncols, -1.0f);
                mat_mat(t, wa.data(), ra, cols, x.data(), ncols, refa.data(), Path::Reference);
                mat_mat(t, wb.data(), rb, cols, x.data(), ncols, refb.data(), Path::Reference);
                const Columns a = prepare_columns(t, x.data(), cols, ncols, path);
                CHECK_EQ(a.prep != nullptr, use_fast(path));
                rows(a, wb.data(), 8, rb, yb.data(), rb);
                rows(a, wa.data(), 10, ra, ya.data(), ra);
                rows(a, wa.data(), 0, 10, ya.data(), ra);
                rows(a, wb.data(), 0, 8, yb.data(), rb);
                if (!CHECK(same(refa, ya) && same(refb, yb))) bt::fail(__FILE__, __LINE__, std::string(type_name(t)) + " at " + level_name(path));
            }
}

// Columns laid out once and filled in pieces, in any order (the products' pool workers each fill a
// share), give mat_mat's reference bits at every level; the scratch first holds another call's data.
TEST(quant_columns_filled_in_pieces_give_the_reference_bits) {
    std::mt19937 g(23);
    const std::vector<Path> paths = fast_levels();
    for (Type t : TYPES)
        for (Path path : paths)
            for (size_t ncols : {1, 2, 7}) {
                const size_t cols = 512, nr = 45;
                auto w = rand_weights(g, t, nr, cols, Regime::Random);
                auto x = rand_acts(g, t, cols, ncols, ncols == 7 ? Regime::Extremes : Regime::Random);
                auto other = rand_acts(g, t, cols, 7, Regime::Extremes);
                std::vector<float> ref(nr * ncols), y(nr * ncols, -1.0f);
                mat_mat(t, w.data(), nr, cols, x.data(), ncols, ref.data(), Path::Reference);
                prepare_columns(t, other.data(), cols, 7, path);  // leaves the scratch full of other columns
                const Columns a = lay_out_columns(t, x.data(), cols, ncols, path);
                const size_t mid = ncols / 2;
                fill_columns(a, mid, ncols);
                fill_columns(a, 0, mid);
                rows(a, w.data(), 0, nr, y.data(), nr);
                if (!CHECK(same(ref, y))) bt::fail(__FILE__, __LINE__, std::string(type_name(t)) + " at " + level_name(path) + ", " + std::to_string(ncols) + " columns");
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
    bt::fast_path_checked();
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
    CHECK_THROWS(mat_vec(Type::Q1_0, w.data(), 1, 96, x.data(), y.data()), "multiple of 128");
    CHECK_THROWS(mat_vec(Type::Q2_0, w.data(), 1, 0, x.data(), y.data()), "q2_0");
    CHECK_THROWS(mat_vec(Type(7), w.data(), 1, 128, x.data(), y.data()), "unsupported weight type");
    CHECK_THROWS(mat_vec(Type::Q1_0, nullptr, 1, 128, x.data(), y.data()), "null");
}

TEST(quant_kernels_env_forces_the_reference) {
    auto p = bt::run_cmd("BANKML_KERNELS=scalar " + bt::bankml_bin() + " version");
    CHECK_EQ(p.code, 0);
    CHECK(p.out.find("kernels: scalar (BANKML_KERNELS=scalar)") != std::string::npos);
    // Each level caps the kernels at the widest supported level not above it.
    for (Isa l : {Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Avx512Vnni}) {
        auto r = bt::run_cmd(std::string("BANKML_KERNELS=") + isa_name(l) + " " + bt::bankml_bin() + " version");
        CHECK_EQ(r.code, 0);
        const std::string want = std::string("kernels: ") + isa_name(isa_clamp(l)) + " (BANKML_KERNELS=" + isa_name(l) + ")";
        if (!CHECK(r.out.find(want) != std::string::npos)) bt::fail(__FILE__, __LINE__, r.out + " lacks " + want);
    }
    auto q = bt::run_cmd("BANKML_KERNELS= " + bt::bankml_bin() + " version");
    CHECK(q.out.find(std::string("kernels: ") + isa_name(cpu_isa()) + " (f32, f16") != std::string::npos);
    auto bad = bt::run_cmd("BANKML_KERNELS=avx9 " + bt::bankml_bin() + " version");
    CHECK(bad.err.find("ignoring BANKML_KERNELS='avx9'") != std::string::npos);
    bt::fast_path_checked();
}

// The levels' order and the clamp: never above what is asked or what the CPU has.
TEST(quant_isa_levels_clamp_to_the_cpu) {
    CHECK(isa_clamp(Isa::Scalar) == Isa::Scalar);
    CHECK(path_isa(Path::Reference) == Isa::Scalar);
    CHECK(path_isa(Path::Fast) == cpu_isa());
    for (Isa l : {Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Avx512Vnni}) {
        const Isa c = isa_clamp(l);
        CHECK(c <= l && isa_supported(c));
        CHECK(path_isa(path_of(l)) == c);
        if (isa_supported(l)) CHECK(c == l);
    }
    CHECK(supported_isas().front() == Isa::Scalar && supported_isas().back() == cpu_isa());
    CHECK_EQ(isa_supported(Isa::Avx512Vnni), cpu().avx512f && cpu().avx512bw && cpu().avx512vl && cpu().avx512vnni && cpu_has_avx2_fma_f16c());
}

#include "quant/kernels_impl.h"
#include "quant/q1_0_lut.h"

namespace {

// Q1_0 weights and raw activation columns for the batch loops: scales from every regime (subnormal,
// f16 max, zero), quants at both ends. Columns in `with_m128` hold a -128 quant against a clear sign
// bit (the reference wraps -(-128) to -128); every other column has none, so the VNNI loop runs it.
struct Q1Case {
    size_t rows = 23, cols = 1024, ncols = 6;
    std::vector<uint8_t> w, x;
    std::vector<float> ref;
};
Q1Case q1_case(uint32_t seed, std::vector<size_t> with_m128, size_t ncols = 6, size_t rows = 23, size_t cols = 1024) {
    std::mt19937 g(seed);
    Q1Case c;
    c.ncols = ncols, c.rows = rows, c.cols = cols;
    c.w = rand_weights(g, Type::Q1_0, c.rows, c.cols, Regime::Random);
    auto extreme = rand_weights(g, Type::Q1_0, c.rows, c.cols, Regime::Extremes);
    const size_t nb = c.cols / QK1_0;
    for (size_t b = nb + 1; b < c.rows * nb; b += 5) std::memcpy(&c.w[b * 18], &extreme[b * 18], 18);  // rows 1..: every fifth block extreme
    c.x = rand_acts(g, Type::Q1_0, c.cols, c.ncols, Regime(seed % 3));
    auto* xb = reinterpret_cast<BlockQ8_0*>(c.x.data());
    const size_t nbx = c.cols / QK8_0;
    for (size_t i = 0; i < nbx * c.ncols; ++i)
        for (auto& q : xb[i].qs) {
            if (g() % 7 == 0) q = (g() & 1) ? 127 : -127;
            if (q == -128) q = -127;
        }
    // Row 0 against such a column has moderate scales throughout, so that the wrap's 256 shows in its
    // result: element 7 of Q8_0 block 3 is -128 and its weight bit (Q1_0 block 0, byte 12, bit 7) clear.
    auto* w0 = reinterpret_cast<BlockQ1_0*>(c.w.data());
    for (size_t col : with_m128) {
        for (size_t i = 0; i < nbx; ++i) xb[col * nbx + i].d = rand_scale(g, Regime::Random);
        xb[col * nbx + 3].d = f32_to_f16(1.0f);
        xb[col * nbx + 3].qs[7] = -128;
        w0[0].d = f32_to_f16(1.0f);
        w0[0].qs[12] &= uint8_t(~0x80);
    }
    c.ref.resize(c.rows * c.ncols);
    mat_mat(Type::Q1_0, c.w.data(), c.rows, c.cols, c.x.data(), c.ncols, c.ref.data(), Path::Reference);
    return c;
}

// The AVX-VNNI loops (dot4_vnni, dot_row_vnni in q1_0_fast.cpp) instruction by instruction, in
// scalar code, so that their logic is tested on every machine:
//   a     = signs + 1 per byte: 2 where the weight bit is set, 0 where clear (vpaddb)
//   s     = vpdpbusd(-T, a, q): per int32 lane, -T + Σ₄ zext(a)·sext(q), wrapping mod 2³² (the AVX
//           form does not saturate); the integer steps are exact, so this is bit-faithful
//   ab    = d1·s for the first sub-block, then fma(d1, s, ab) (vcvtdq2ps, vmulps, vfmadd)
//   acc   = fma(d0, ab, acc); then hsum's order ((0+4)+(2+6)) + ((1+5)+(3+7)).
// negt is q1_0_prepare's neg_lane_sums for the column, xd its f32 scales.
float q1_0_vnni_emulated(size_t nb, const BlockQ1_0* w, const BlockQ8_0* x, const int32_t* negt, const float* xd) {
    float acc[8] = {};
    for (size_t ib = 0; ib < nb; ++ib) {
        float ab[8];
        for (size_t k = 0; k < 4; ++k) {
            const BlockQ8_0& xq = x[ib * 4 + k];
            const float d1 = xd[ib * 4 + k];
            for (size_t lane = 0; lane < 8; ++lane) {
                uint32_t t = uint32_t(negt[(ib * 4 + k) * 8 + lane]);
                for (size_t b = 0; b < 4; ++b) {
                    const size_t e = lane * 4 + b;
                    const uint8_t sign = ((w[ib].qs[4 * k + e / 8] >> (e % 8)) & 1) ? 0x01 : 0xff;  // signs(): +1 / -1
                    const uint8_t a = uint8_t(sign + 1);
                    t += uint32_t(int32_t(a) * int32_t(xq.qs[e]));
                }
                const float sf = float(int32_t(t));
                ab[lane] = k == 0 ? d1 * sf : std::fma(d1, sf, ab[lane]);
            }
        }
        const float d0 = f16_to_f32(w[ib].d);
        for (size_t lane = 0; lane < 8; ++lane) acc[lane] = std::fma(d0, ab[lane], acc[lane]);
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

}  // namespace

#if defined(__x86_64__)
// The VNNI loop's logic on every machine: q1_0_prepare's flags and lane sums (checked against a
// plain count), then the emulated loop on columns without -128 equals the reference bit for bit; on
// a column with -128 under a clear bit the identity gives +128 where the reference wraps to -128, so
// the emulation must differ there: that is why q1_0_prepare sends such a column to the AVX2 loop.
TEST(quant_q1_0_vnni_emulation_equals_reference) {
    for (uint32_t seed : {31u, 32u, 33u}) {
        Q1Case c = q1_case(seed, {2, 5});
        const auto* xb = reinterpret_cast<const BlockQ8_0*>(c.x.data());
        const auto* wb = reinterpret_cast<const BlockQ1_0*>(c.w.data());
        const size_t nb = c.cols / QK1_0, nbx = c.cols / QK8_0;
        detail::Prepared p;
        detail::q1_0_layout(c.cols, c.ncols, Isa::AvxVnni, p);
        detail::q1_0_prepare(xb, p, 0, c.ncols);
        const int32_t* negt = p.part<int32_t>(1);
        const uint8_t* has_m128 = p.part<uint8_t>(2);
        const float* xd = p.part<float>(0);
        for (size_t col = 0; col < c.ncols; ++col) CHECK_EQ(int(has_m128[col]), int(col == 2 || col == 5));
        bool sums_ok = true;
        for (size_t i = 0; i < nbx * c.ncols; ++i)
            for (size_t lane = 0; lane < 8; ++lane) {
                int t = 0;
                for (size_t e = 0; e < 4; ++e) t += xb[i].qs[lane * 4 + e];
                sums_ok &= negt[i * 8 + lane] == -t && xd[i] == f16_to_f32(xb[i].d);
            }
        CHECK(sums_ok);
        size_t same_rows = 0, wrap_rows_differ = 0;
        for (size_t col = 0; col < c.ncols; ++col)
            for (size_t r = 0; r < c.rows; ++r) {
                float e = q1_0_vnni_emulated(nb, wb + r * nb, xb + col * nbx, negt + col * nbx * 8, xd + col * nbx);
                bool eq = std::memcmp(&e, &c.ref[col * c.rows + r], 4) == 0;
                if (has_m128[col]) wrap_rows_differ += r == 0 && !eq;  // row 0 has the clear bit there
                else same_rows += eq;
            }
        CHECK_EQ(same_rows, (c.ncols - 2) * c.rows);
        CHECK_EQ(wrap_rows_differ, 2u);
    }
}

// The Q1_0 loops of one level, batch (all columns) and decode (each column alone), against the
// reference; with VNNI (and at avx2, whose identity loops use the same integer identity), columns
// holding -128 go to the level's psignb or masked-negation loop. Forced through the VNNI or
// identity loop anyway, such a column gives exactly the emulation's bits (not the reference's): the
// emulation above is faithful to the identity, the wrap case included, at 256 and 512 bits (the
// identity loops' float steps differ from its own only in a zero's sign, which cannot reach an output).
static void check_q1_0_loops(Isa level) {
    const bool vnni = level == Isa::AvxVnni || level == Isa::Avx512Vnni;
    for (uint32_t seed : {21u, 22u, 23u}) {
        Q1Case c = q1_case(seed, {5});
        const auto* xb = reinterpret_cast<const BlockQ8_0*>(c.x.data());
        const auto* wb = reinterpret_cast<const BlockQ1_0*>(c.w.data());
        const size_t nb = c.cols / QK1_0, nbx = c.cols / QK8_0;
        detail::Prepared p;
        detail::q1_0_prepare(xb, c.cols, c.ncols, p, level);
        // At avx2 the identity loops (dot4_ident, rows_ident) have the VNNI loops' integer identity.
        const bool ident = vnni || level == Isa::Avx2;
        if (ident) CHECK_EQ(int(p.part<uint8_t>(2)[5]) + int(p.part<uint8_t>(2)[0]), 1);
        std::vector<float> y(c.rows * c.ncols, -1.0f);
        detail::q1_0_rows_fast(c.w.data(), c.cols, 0, c.rows, c.x.data(), p, c.ncols, y.data(), c.rows);
        if (!CHECK(same(c.ref, y))) bt::fail(__FILE__, __LINE__, std::string("batch at ") + isa_name(level));
        for (size_t col = 0; col < c.ncols; ++col) {
            detail::Prepared p1;
            detail::q1_0_prepare(xb + col * nbx, c.cols, 1, p1, level);
            std::vector<float> y1(c.rows, -1.0f);
            detail::q1_0_rows_fast(c.w.data(), c.cols, 0, c.rows, xb + col * nbx, p1, 1, y1.data(), c.rows);
            if (!CHECK(std::memcmp(y1.data(), c.ref.data() + col * c.rows, c.rows * 4) == 0))
                bt::fail(__FILE__, __LINE__, std::string("decode at ") + isa_name(level) + " column " + std::to_string(col));
        }
        // Row ranges that start and end inside a group of rows.
        std::vector<float> yr(c.rows * c.ncols, -1.0f);
        detail::q1_0_rows_fast(c.w.data(), c.cols, 3, c.rows - 2, c.x.data(), p, c.ncols, yr.data(), c.rows);
        bool range_ok = true;
        for (size_t col = 0; col < c.ncols; ++col)
            for (size_t r = 0; r < c.rows; ++r)
                range_ok &= (r >= 3 && r < c.rows - 2) ? std::memcmp(&yr[col * c.rows + r], &c.ref[col * c.rows + r], 4) == 0
                                                       : yr[col * c.rows + r] == -1.0f;
        CHECK(range_ok);
        if (!ident) continue;
        // Column 5 through the VNNI or identity loops regardless, batch (all columns) and decode.
        p.part<uint8_t>(2)[5] = 0;
        detail::q1_0_rows_fast(c.w.data(), c.cols, 0, c.rows, c.x.data(), p, c.ncols, y.data(), c.rows);
        detail::Prepared p5;
        detail::q1_0_prepare(xb + 5 * nbx, c.cols, 1, p5, level);
        p5.part<uint8_t>(2)[0] = 0;
        std::vector<float> y5(c.rows, -1.0f);
        detail::q1_0_rows_fast(c.w.data(), c.cols, 0, c.rows, xb + 5 * nbx, p5, 1, y5.data(), c.rows);
        size_t match = 0;
        for (size_t r = 0; r < c.rows; ++r) {
            float e = q1_0_vnni_emulated(nb, wb + r * nb, xb + 5 * nbx, p.part<int32_t>(1) + 5 * nbx * 8,
                                         p.part<float>(0) + 5 * nbx);
            match += std::memcmp(&e, &y[5 * c.rows + r], 4) == 0 && std::memcmp(&e, &y5[r], 4) == 0;
        }
        CHECK_EQ(match, c.rows);
        CHECK(std::memcmp(&y[5 * c.rows], &c.ref[5 * c.rows], 4) != 0);  // row 0: the wrap case shows
    }
}

// One column's lane tables and rows through one of the decodes of q1_0_lut.h.
struct LaneTables {
    lut::Kernel kernel;
    std::vector<float> tv;
    float* t;
    LaneTables(lut::Kernel k, size_t cols)
        : kernel(k), tv((k == lut::Kernel::Avx512 ? lut::table_floats(cols) : lut::table_bytes_avx2(cols) / 4) + 16) {
        t = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(tv.data()) + 63) & ~uintptr_t(63));
    }
    void tables(const BlockQ8_0* x, size_t cols) {
        if (kernel == lut::Kernel::Avx512) lut::tables(x, cols, t);
        else lut::tables_avx2(x, cols, reinterpret_cast<uint8_t*>(t));
    }
    // The tables of blocks [b0, b1) of the column only, in their place (the products share the
    // blocks out among threads).
    void tables_part(const BlockQ8_0* x, size_t b0, size_t b1) {
        if (kernel == lut::Kernel::Avx512) lut::tables(x + b0, (b1 - b0) * QK8_0, t + b0 * lut::table_floats(QK8_0));
        else lut::tables_avx2(x + b0, (b1 - b0) * QK8_0, reinterpret_cast<uint8_t*>(t) + b0 * lut::TABLE_AVX2_BYTES);
    }
    size_t bytes(size_t cols) const {
        return kernel == lut::Kernel::Avx512 ? lut::table_floats(cols) * sizeof(float) : lut::table_bytes_avx2(cols);
    }
    void rows(const uint8_t* packed, size_t rows, size_t cols, size_t g0, size_t g1, float* y) const {
        if (kernel == lut::Kernel::Avx512) lut::rows(packed, rows, cols, g0, g1, t, y);
        else lut::rows_avx2(packed, rows, cols, g0, g1, reinterpret_cast<const uint8_t*>(t), y);
    }
};

// The lane-table decode against the reference, column by column: extreme scales (subnormal, f16
// max, zero), columns holding -128 against a clear sign bit (the int8 wrap) and one of -128 only,
// 23 rows (a padded last group), a row range of one group that writes nothing else, one weight
// block a row, and a layer's shape.
void check_lut_decode(lut::Kernel kernel) {
    for (uint32_t seed : {31u, 32u, 33u}) {
        Q1Case c = q1_case(seed, {2, 5});
        auto* xb = reinterpret_cast<BlockQ8_0*>(c.x.data());
        const size_t nbx = c.cols / QK8_0;
        for (size_t i = 0; i < nbx; ++i)  // column 4: every quant -128
            for (auto& q : xb[4 * nbx + i].qs) q = -128;
        mat_mat(Type::Q1_0, c.w.data(), c.rows, c.cols, c.x.data(), c.ncols, c.ref.data(), Path::Reference);
        std::vector<uint8_t> packed(lut::packed_bytes(c.rows, c.cols));
        lut::pack(reinterpret_cast<const BlockQ1_0*>(c.w.data()), c.rows, c.cols, packed.data());
        LaneTables lt(kernel, c.cols);
        for (size_t col = 0; col < c.ncols; ++col) {
            lt.tables(xb + col * nbx, c.cols);
            std::vector<float> y(c.rows + 16, -1.0f);
            lt.rows(packed.data(), c.rows, c.cols, 0, lut::groups(c.rows), y.data());
            if (!CHECK(std::memcmp(y.data(), c.ref.data() + col * c.rows, c.rows * 4) == 0))
                bt::fail(__FILE__, __LINE__, "column " + std::to_string(col) + " seed " + std::to_string(seed));
            CHECK(y[c.rows] == -1.0f);  // nothing past the rows
            std::vector<float> yr(c.rows, -1.0f);
            lt.rows(packed.data(), c.rows, c.cols, 1, 2, yr.data());
            bool ok = true;
            for (size_t r = 0; r < c.rows; ++r)
                ok &= r >= lut::ROWS ? std::memcmp(&yr[r], &c.ref[col * c.rows + r], 4) == 0 : yr[r] == -1.0f;
            CHECK(ok);
        }
    }
    // Every group of a matrix through the decode against the reference rows; nothing written past
    // the last row.
    auto whole = [&](uint32_t seed, size_t rows, size_t cols, Regime regime) {
        std::mt19937 g(seed);
        auto w = rand_weights(g, Type::Q1_0, rows, cols, regime);
        auto x = rand_acts(g, Type::Q1_0, cols, 1, regime);
        std::vector<float> ref(rows), y(rows + 16, -1.0f);
        mat_vec(Type::Q1_0, w.data(), rows, cols, x.data(), ref.data(), Path::Reference);
        std::vector<uint8_t> packed(lut::packed_bytes(rows, cols));
        lut::pack(reinterpret_cast<const BlockQ1_0*>(w.data()), rows, cols, packed.data());
        LaneTables lt(kernel, cols);
        lt.tables(reinterpret_cast<const BlockQ8_0*>(x.data()), cols);
        lt.rows(packed.data(), rows, cols, 0, lut::groups(rows), y.data());
        CHECK(std::memcmp(y.data(), ref.data(), rows * 4) == 0);
        CHECK(y[rows] == -1.0f);
        return std::make_pair(x, ref);
    };
    // One weight block a row (128 columns), 33 rows: three groups, the last holding one row.
    whole(35, 33, 128, Regime::Extremes);
    // A layer's shape, random weights and columns.
    const size_t rows = 256, cols = 4096;
    const auto x = whole(34, rows, cols, Regime::Random).first;
    // The same tables made whole and in three uneven parts.
    LaneTables lt(kernel, cols), parts(kernel, cols);
    lt.tables(reinterpret_cast<const BlockQ8_0*>(x.data()), cols);
    const size_t nbx = cols / QK8_0;
    for (auto [b0, b1] : {std::pair<size_t, size_t>{0, 5}, {5, nbx / 2 + 1}, {nbx / 2 + 1, nbx}})
        parts.tables_part(reinterpret_cast<const BlockQ8_0*>(x.data()), b0, b1);
    CHECK(std::memcmp(parts.t, lt.t, lt.bytes(cols)) == 0);
}

TEST(quant_q1_0_lut_decode_equals_reference) {
    if (!isa_supported(Isa::Avx512)) SKIP("avx512", "no AVX-512: the lane-table decode cannot run on this CPU");
    check_lut_decode(lut::Kernel::Avx512);
}

TEST(quant_q1_0_lut_avx2_decode_equals_reference) {
    if (!isa_supported(Isa::Avx2)) SKIP("avx2", "no AVX2/FMA/F16C: the AVX2 lane-table decode cannot run on this CPU");
    check_lut_decode(lut::Kernel::Avx2);
}

// Which decode each kernel level runs: the AVX2 one wherever the level has AVX2 but not AVX-512.
TEST(quant_q1_0_lut_kernel_for_each_level) {
    CHECK(lut::kernel_for(Isa::Scalar) == lut::Kernel::None);
    CHECK(lut::kernel_for(Isa::Avx2) == lut::Kernel::Avx2);
    CHECK(lut::kernel_for(Isa::AvxVnni) == lut::Kernel::Avx2);
    CHECK(lut::kernel_for(Isa::Avx512) == lut::Kernel::Avx512);
    CHECK(lut::kernel_for(Isa::Avx512Vnni) == lut::Kernel::Avx512);
}

// The AVX2 loops (the identity loops dot4_ident and rows_ident; dot_row and dot4_decoded for
// columns holding -128 or a non-finite scale).
TEST(quant_q1_0_avx2_loops_equal_reference) {
    if (!isa_supported(Isa::Avx2)) SKIP("avx2", "no AVX2/FMA/F16C: the Q1_0 AVX2 loops cannot run on this CPU");
    check_q1_0_loops(Isa::Avx2);
}

// The AVX-VNNI loops (dot4_vnni, dot_row_vnni).
TEST(quant_q1_0_vnni_loops_equal_reference) {
    if (!isa_supported(Isa::AvxVnni))
        SKIP("avxvnni", "no AVX-VNNI on this CPU: the VNNI loops are covered by quant_q1_0_vnni_emulation_equals_reference only");
    check_q1_0_loops(Isa::AvxVnni);
}

// The AVX-512 loops (q1_0_avx512.inc), without and with VNNI.
TEST(quant_q1_0_avx512_loops_equal_reference) {
    if (!isa_supported(Isa::Avx512)) SKIP("avx512", "no AVX-512 F/BW/VL on this CPU");
    check_q1_0_loops(Isa::Avx512);
    if (!isa_supported(Isa::Avx512Vnni)) SKIP("avx512vnni", "no AVX-512 VNNI on this CPU: only the avx512 loops ran");
    check_q1_0_loops(Isa::Avx512Vnni);
}

// The several-column loops at every level with each column count from 2 to 9 (the AVX-512 VNNI
// loop's tiles of four columns and their tails of one to three), the -128 columns (which leave the
// tiles for the non-VNNI loop) first, inside and last among them, on all rows and on a range that
// starts and ends inside a group of rows: every output equals the reference, so no column's bits
// depend on which columns share its tile.
TEST(quant_q1_0_batch_tiles_every_column_count) {
    if (!isa_supported(Isa::Avx2)) SKIP("avx2", "no AVX2/FMA/F16C: the Q1_0 batch loops cannot run on this CPU");
    for (Path level : fast_levels())
        for (size_t ncols = 2; ncols <= 9; ++ncols) {
            std::vector<size_t> wrapped = {ncols - 1};
            if (ncols % 3 == 0) wrapped = {0, ncols / 2};
            if (ncols % 4 == 0) wrapped = {};
            Q1Case c = q1_case(uint32_t(50 + ncols), wrapped, ncols);
            detail::Prepared p;
            detail::q1_0_prepare(reinterpret_cast<const BlockQ8_0*>(c.x.data()), c.cols, c.ncols, p, path_isa(level));
            std::vector<float> y(c.rows * c.ncols, -1.0f), yr(c.rows * c.ncols, -1.0f);
            detail::q1_0_rows_fast(c.w.data(), c.cols, 0, c.rows, c.x.data(), p, c.ncols, y.data(), c.rows);
            detail::q1_0_rows_fast(c.w.data(), c.cols, 5, c.rows - 3, c.x.data(), p, c.ncols, yr.data(), c.rows);
            bool range_ok = true;
            for (size_t col = 0; col < c.ncols; ++col)
                for (size_t r = 0; r < c.rows; ++r)
                    range_ok &= (r >= 5 && r < c.rows - 3) ? std::memcmp(&yr[col * c.rows + r], &c.ref[col * c.rows + r], 4) == 0
                                                           : yr[col * c.rows + r] == -1.0f;
            if (!CHECK(same(c.ref, y) && range_ok))
                bt::fail(__FILE__, __LINE__, std::to_string(ncols) + " columns at " + level_name(level));
        }
}

// Rows longer than the AVX-512 VNNI tiles' range of blocks (35 blocks: two full ranges of 16 and
// a short one, the accumulators carried between them) and more rows than one span of groups (77:
// three spans, the last with a short group), with more than two tiles of columns (10 with a -128
// column: tiles of 4, 4 and 1; 13: 4, 4, 4 and 1) and with one tile (4 columns: a span of one
// group over whole rows), over the whole rows and over ranges that start and end inside a group
// or a span: every output equals the reference at every level, the outputs outside a range
// untouched.
TEST(quant_q1_0_batch_tiles_long_rows_and_spans) {
    if (!isa_supported(Isa::Avx2)) SKIP("avx2", "no AVX2/FMA/F16C: the Q1_0 batch loops cannot run on this CPU");
    for (size_t ncols : {4, 10, 13}) {
        Q1Case c = q1_case(uint32_t(70 + ncols), ncols == 10 ? std::vector<size_t>{2} : std::vector<size_t>{}, ncols, 77,
                           35 * QK1_0);
        for (Path level : fast_levels()) {
            detail::Prepared p;
            detail::q1_0_prepare(reinterpret_cast<const BlockQ8_0*>(c.x.data()), c.cols, c.ncols, p, path_isa(level));
            for (auto [r0, r1] : {std::pair<size_t, size_t>{0, 77}, {5, 74}, {33, 70}, {31, 33}}) {
                std::vector<float> y(c.rows * c.ncols, -1.0f);
                detail::q1_0_rows_fast(c.w.data(), c.cols, r0, r1, c.x.data(), p, c.ncols, y.data(), c.rows);
                bool ok = true;
                for (size_t col = 0; col < c.ncols; ++col)
                    for (size_t r = 0; r < c.rows; ++r)
                        ok &= (r >= r0 && r < r1) ? std::memcmp(&y[col * c.rows + r], &c.ref[col * c.rows + r], 4) == 0
                                                  : y[col * c.rows + r] == -1.0f;
                if (!CHECK(ok))
                    bt::fail(__FILE__, __LINE__, std::to_string(ncols) + " columns, rows " + std::to_string(r0) + ".." +
                                                     std::to_string(r1) + " at " + level_name(level));
            }
        }
    }
}

// Columns at the edges of the AVX-512 VNNI tiles' arithmetic, among ordinary ones, at every level:
// all quants zero under negative and negative-zero scales (every lane sum 0, so d1 * s is a zero
// whose sign the tile's first step does not keep; the reference's zeros must still come out), and
// infinite or NaN scales (which the tiles leave to the non-VNNI loop).
TEST(quant_q1_0_batch_zero_sums_and_nonfinite_scales) {
    if (!isa_supported(Isa::Avx2)) SKIP("avx2", "no AVX2/FMA/F16C: the Q1_0 batch loops cannot run on this CPU");
    const uint16_t specials[] = {0xfc00, 0x7c00, 0x7e00};  // -inf, +inf, NaN
    for (Path level : fast_levels()) {
        Q1Case c = q1_case(77, {}, 7);
        auto* xb = reinterpret_cast<BlockQ8_0*>(c.x.data());
        const size_t nbx = c.cols / QK8_0;
        for (size_t i = 0; i < nbx; ++i) {  // column 1: zero quants, scales negative or -0
            xb[nbx + i].d = i % 3 ? f32_to_f16(-0.25f * float(i)) : uint16_t(0x8000);
            std::memset(xb[nbx + i].qs, 0, QK8_0);
        }
        for (size_t i = 0; i < nbx; ++i)  // column 4: zero quants in every other block, scale negative
            if (i % 2) std::memset(xb[4 * nbx + i].qs, 0, QK8_0), xb[4 * nbx + i].d = f32_to_f16(-3.0f);
        // Columns 2, 3, 5: an infinite or NaN scale on the first sub-block of a weight block (the
        // tiles' fused step) and on a later one, the quants there all 1 against row 0's block of
        // set bits, so that row 0's eight lane sums are all +4 and the reference gives an infinity
        // there (not the NaN that infinities of both signs would make).
        auto* w = reinterpret_cast<BlockQ1_0*>(c.w.data());
        std::memset(w[1].qs, 0xff, sizeof w[1].qs);
        w[1].d = f32_to_f16(1.0f);
        for (size_t k = 0; k < 3; ++k)
            for (size_t sb : {4, 6}) {
                BlockQ8_0& b = xb[(2 + 3 * k / 2) * nbx + sb];
                b.d = specials[k];
                std::memset(b.qs, 1, QK8_0);
            }
        std::vector<float> ref(c.rows * c.ncols), y(c.rows * c.ncols, -1.0f);
        mat_mat(Type::Q1_0, c.w.data(), c.rows, c.cols, c.x.data(), c.ncols, ref.data(), Path::Reference);
        mat_mat(Type::Q1_0, c.w.data(), c.rows, c.cols, c.x.data(), c.ncols, y.data(), level);
        if (!CHECK(same(ref, y))) bt::fail(__FILE__, __LINE__, std::string("at ") + level_name(level));
        CHECK(std::isinf(ref[2 * c.rows]) && std::isinf(ref[3 * c.rows]) && std::isnan(ref[5 * c.rows]));
        // Each column alone (the decode loops; at avx2 the identity loop takes the finite ones).
        for (size_t col = 0; col < c.ncols; ++col) {
            std::vector<float> y1(c.rows, -1.0f);
            mat_vec(Type::Q1_0, c.w.data(), c.rows, c.cols, xb + col * nbx, y1.data(), level);
            if (!CHECK(std::memcmp(y1.data(), ref.data() + col * c.rows, c.rows * 4) == 0))
                bt::fail(__FILE__, __LINE__, "column " + std::to_string(col) + " alone at " + level_name(level));
        }
        if (path_isa(level) == Isa::Avx512Vnni || path_isa(level) == Isa::Avx2) {  // the records against a plain count
            detail::Prepared p;
            detail::q1_0_prepare(xb, c.cols, c.ncols, p, path_isa(level));
            bool parts_ok = true;
            for (size_t i = 0; i < nbx * c.ncols; ++i) {
                // Sub-block i's place in the records: block i / 4 of all the columns', sub-block i % 4.
                const uint8_t* rec = p.part<uint8_t>(3) + i / 4 * detail::Q1_TILE_REC;
                const size_t k = i % 4;
                parts_ok &= std::memcmp(rec + 64 * k, xb[i].qs, QK8_0) == 0;
                for (size_t lane = 0; lane < 8; ++lane) {
                    int t = 0;
                    for (size_t e = 0; e < 4; ++e) t += xb[i].qs[lane * 4 + e];
                    int32_t init;
                    std::memcpy(&init, rec + 64 * k + 32 + 4 * lane, 4);
                    parts_ok &= p.part<int32_t>(1)[i * 8 + lane] == -t && init == 0x4B400000 - t;
                }
                float d1, ndm;
                std::memcpy(&d1, rec + 256 + 4 * k, 4);
                std::memcpy(&ndm, rec + 272 + 4 * k, 4);
                const float d = p.part<float>(0)[i];
                parts_ok &= std::isnan(d) ? std::isnan(ndm) && std::isnan(d1)
                                          : (d == f16_to_f32(xb[i].d) && d1 == d && ndm == d * -12582912.0f);
            }
            for (size_t col = 0; col < c.ncols; ++col) parts_ok &= p.part<uint8_t>(4)[col] == (col != 2 && col != 3 && col != 5);
            CHECK(parts_ok);
        }
        bool zeros = true;  // column 1's outputs are all +0 in the reference
        for (size_t r = 0; r < c.rows; ++r) zeros &= std::signbit(ref[c.rows + r]) == false && ref[c.rows + r] == 0.0f;
        CHECK(zeros);
    }
}

// The avx2 level's exact blocks (q1_0_fast.cpp's exact_record and dot4_exact): which weight blocks
// of which columns qualify, and every output against the reference. Column 0: scales within a
// factor of two (every block qualifies, so the whole column runs the integer loop). Column 1: -0,
// +0, subnormal, the smallest normal and negative scales, and a block of zero scales, among narrow
// ones. Column 2: a block whose lane 0 reaches the bound exactly (1200·116 + 32752·508 = 2^24 units),
// the others narrow. Column 3: a block past the bound whose lane 0 sums 32752·508, then 1201·117
// (2^24 + 1317 units, odd: the reference rounds), then 1024·-4 (back below 2^24, where the exact
// sum is a float), the others narrow. Row 0 has every bit of block 1 set and zero scales elsewhere,
// and column 3's block 1 zero quants outside lane 0, so that row 0's output there is lane 0's ab
// alone: the reference's rounded one, not the exact sum an integer loop would give. Column 4: four exponents apart
// (M = 2047·16 = 32752, an int16) with small quants. Column 5: five apart (M = 65504, no int16).
// Columns 6 and 7, the magic loop's edge (lanes MAGIC_BITS - C, sums under 2^22 in magnitude): block
// 1's lane 0 sums 16384·256 + 1024·1 (2^22 + 1024: the column runs the converting loop, and row 0's
// sum there is past what MAGIC_BITS + S can hold) and 16384·255 (the column runs the magic loop).
TEST(quant_q1_0_avx2_exact_blocks_equal_reference) {
    if (!isa_supported(Isa::Avx2)) SKIP("avx2", "no AVX2/FMA/F16C: the Q1_0 avx2 loops cannot run on this CPU");
    std::mt19937 g(91);
    const size_t rows = 23, cols = 1024, ncols = 9, nb = cols / QK1_0, nbx = cols / QK8_0;
    auto w = rand_weights(g, Type::Q1_0, rows, cols, Regime::Random);
    std::vector<BlockQ8_0> x(ncols * nbx);
    for (auto& b : x) {  // narrow: scales in [0.5, 1), quants in [-127, 127]
        b.d = f32_to_f16(0.5f + float(g() % 512) / 1024.0f);
        for (auto& q : b.qs) q = int8_t(int(g() % 255) - 127);
    }
    auto block = [&](size_t col, size_t wb) { return &x[col * nbx + wb * 4]; };
    auto scales = [&](size_t col, size_t wb, std::initializer_list<uint16_t> d) {
        size_t k = 0;
        for (uint16_t h : d) block(col, wb)[k++].d = h;
    };
    scales(1, 0, {0x0000, 0x8000, 0x0001, 0x03ff});  // +0, -0, the smallest and largest subnormals
    scales(1, 1, {0xba00, 0x3800, 0xbc00, 0x3b33});  // -0.75, 0.5, -1, 0.9
    scales(1, 2, {0x0000, 0x0000, 0x8000, 0x0000});  // all zero
    scales(1, 3, {0x0400, 0x03ff, 0x0401, 0x0002});  // the smallest normals among subnormals
    // 1200·2^-20, 0, 0, 2047·2^-16: M = 1200, 0, 0, 32752 over u = 2^-20.
    const uint16_t at_bound[] = {uint16_t(5 << 10 | (1200 - 1024)), 0, 0, uint16_t(9 << 10 | 1023)};
    for (size_t col : {2, 3}) {
        scales(col, 1, {at_bound[0], at_bound[1], at_bound[2], at_bound[3]});
        for (size_t e = 0; e < 4; ++e) block(col, 1)[0].qs[e] = 29, block(col, 1)[3].qs[e] = 127;  // lane 0: 116, 508
    }
    scales(3, 1, {at_bound[3], uint16_t(at_bound[0] + 1), 0x1400, 0});  // M = 32752, 1201, 1024, 0
    for (size_t e = 0; e < 4; ++e)
        block(3, 1)[0].qs[e] = 127, block(3, 1)[1].qs[e] = e ? 29 : 30, block(3, 1)[2].qs[e] = -1;  // 508, 117, -4
    for (size_t k = 0; k < 4; ++k) std::memset(block(3, 1)[k].qs + 4, 0, QK8_0 - 4);
    auto* row0 = reinterpret_cast<BlockQ1_0*>(w.data());
    for (size_t wb = 0; wb < nb; ++wb) row0[wb].d = wb == 1 ? f32_to_f16(1.0f) : uint16_t(0);
    std::memset(row0[1].qs, 0xff, QK1_0 / 8);
    scales(4, 2, {0x0400, 0x0800, 0x0c00, uint16_t(5 << 10 | 1023)});  // 2^-14 .. 2047·2^-20: M up to 32752
    scales(5, 2, {0x0400, 0x0800, 0x0c00, uint16_t(6 << 10 | 1023)});  // M 65504
    for (size_t col : {4, 5})
        for (size_t k = 0; k < 4; ++k)
            for (auto& q : block(col, 2)[k].qs) q = int8_t(int(g() % 3) - 1);
    for (size_t col : {6, 7}) {  // M = 16384 and 1024 over u = 2^-5 (scales 0.5 and 2^-5)
        scales(col, 1, {0x3800, 0x2800, 0, 0});
        std::memset(block(col, 1)[0].qs, 0, QK8_0);
        for (size_t e = 0; e < 4; ++e) block(col, 1)[0].qs[e] = col == 7 && e == 0 ? 63 : 64, block(col, 1)[1].qs[e] = 0;
    }
    block(6, 1)[1].qs[0] = 1;
    // The magic loop's largest and smallest unit in one column: four scales of 65504 (u = 2^5,
    // bound 4·2047·508 < 2^22), then subnormal ones (u = 2^-24).
    scales(8, 0, {0x7bff, 0x7bff, 0x7bff, 0x7bff});
    scales(8, 1, {0x0001, 0x0003, 0x0002, 0x0001});
    detail::Prepared p;
    detail::q1_0_prepare(x.data(), cols, ncols, p, Isa::Avx2);
    const uint8_t want_kind[] = {detail::Q1_EXACT_MAGIC, detail::Q1_EXACT_MAGIC, detail::Q1_EXACT_CVT, detail::Q1_EXACT_NONE,
                                 detail::Q1_EXACT_MAGIC, detail::Q1_EXACT_NONE, detail::Q1_EXACT_CVT, detail::Q1_EXACT_MAGIC,
                                 detail::Q1_EXACT_MAGIC};
    for (size_t col = 0; col < ncols; ++col)
        if (!CHECK(p.part<uint8_t>(6)[col] == want_kind[col]))
            bt::fail(__FILE__, __LINE__, "column " + std::to_string(col) + " kind " + std::to_string(p.part<uint8_t>(6)[col]));
    auto exact = [&](size_t col, size_t wb) { return p.part<uint8_t>(5)[(col * nb + wb) * detail::Q1_EXACT_REC + 52]; };
    bool flags = true;
    for (size_t col = 0; col < ncols; ++col)
        for (size_t wb = 0; wb < nb; ++wb) {
            const bool want = !((col == 3 && wb == 1) || (col == 5 && wb == 2));
            if (exact(col, wb) != want) {
                flags = false;
                bt::fail(__FILE__, __LINE__, "column " + std::to_string(col) + " block " + std::to_string(wb) +
                                                 (want ? ": not exact" : ": exact"));
            }
        }
    CHECK(flags);
    std::vector<float> ref(rows * ncols), y(rows * ncols, -1.0f);
    mat_mat(Type::Q1_0, w.data(), rows, cols, x.data(), ncols, ref.data(), Path::Reference);
    // All rows at once (groups of four, the last one short), then in ranges that start and end
    // inside groups, and single rows.
    const size_t cuts[][4] = {{0, rows, rows, rows}, {0, 4, 6, rows}, {0, 3, 11, rows}, {0, 1, 2, rows}};
    for (const auto& cut : cuts) {
        std::fill(y.begin(), y.end(), -1.0f);
        for (size_t i = 0; i < 3; ++i) detail::q1_0_rows_fast(w.data(), cols, cut[i], cut[i + 1], x.data(), p, ncols, y.data(), rows);
        for (size_t col = 0; col < ncols; ++col)
            if (!CHECK(std::memcmp(&y[col * rows], &ref[col * rows], rows * 4) == 0))
                bt::fail(__FILE__, __LINE__, "column " + std::to_string(col) + ", ranges cut at " + std::to_string(cut[1]) +
                                                 ", " + std::to_string(cut[2]));
    }
    // Row 0 against column 3: the exact sum is a float, and the reference's output is not it.
    double exact_sum = 0;
    for (size_t k = 0; k < 4; ++k) {
        int s = 0;
        for (size_t e = 0; e < 4; ++e) s += block(3, 1)[k].qs[e];
        exact_sum += double(f16_to_f32(block(3, 1)[k].d)) * s;
    }
    CHECK(double(float(exact_sum)) == exact_sum && double(ref[3 * rows]) != exact_sum);
}

// The Q2_0 kernels work on groups of rows (sixteen at AVX-512, one row per lane): whole groups,
// short last groups, ranges that start inside a group, and one, two and five columns, against the
// reference at every level, in the three regimes and in a hand-made one where every sum is at its
// extreme (all codes +2 against -128 quants, all -1 against 127, mixed per row) with scales at the
// f16 range's ends (largest, subnormal, zero, negative zero), and one of zero sums against
// negative, signed-zero, infinite and NaN scales (a zero's sign and a NaN must come out the same).
TEST(quant_q2_0_row_groups_and_extreme_sums_every_level) {
    std::mt19937 g(43);
    const Type t = Type::Q2_0;
    for (size_t rows : {16, 32, 47, 73})
        for (size_t cols : {64, 192, 2048})
            for (int regime = 0; regime < 5; ++regime) {
                const size_t ncols = regime == 1 ? 3 : regime == 2 ? 5 : regime >= 3 ? 2 : 1;
                auto w = rand_weights(g, t, rows, cols, Regime(regime % 3));
                auto x = rand_acts(g, t, cols, ncols, Regime(regime % 3));
                if (regime == 3) {  // extreme sums: whole rows of one code against whole blocks of one quant
                    const uint16_t wd[] = {0x7bff, 0x0001, 0x0000, 0x8000, 0xfbff, 0x3c00, 0x8001};
                    for (size_t r = 0; r < rows; ++r)
                        for (size_t b = 0; b < cols / QK2_0; ++b) {
                            auto* blk = reinterpret_cast<BlockQ2_0*>(w.data()) + r * (cols / QK2_0) + b;
                            blk->d = wd[(r + b) % 7];
                            std::memset(blk->qs, r % 3 == 0 ? 0xff : r % 3 == 1 ? 0x00 : (b & 1 ? 0xff : 0x00), sizeof blk->qs);
                        }
                    auto* xb = reinterpret_cast<BlockQ8_0*>(x.data());
                    for (size_t i = 0; i < ncols * cols / QK8_0; ++i) {
                        xb[i].d = (i % 5 == 0) ? 0x0001 : (i % 5 == 1) ? 0x7bff : 0x3c00;
                        std::memset(xb[i].qs, (i / 3) % 2 ? 0x80 : 0x7f, sizeof xb[i].qs);
                    }
                }
                if (regime == 4) {  // zero sums and signed zeros: rows of 0 codes, negative, infinite and NaN scales
                    const uint16_t wd[] = {0xbc00, 0x8000, 0x7c00, 0x7e00, 0x3c00, 0x0000};
                    for (size_t r = 0; r < rows; ++r)
                        for (size_t b = 0; b < cols / QK2_0; ++b) {
                            auto* blk = reinterpret_cast<BlockQ2_0*>(w.data()) + r * (cols / QK2_0) + b;
                            blk->d = b & 1 && r % 6 == 0 ? 0x3c00 : wd[r % 6];  // a NaN or infinite row stays one
                            if (r % 3 != 2) std::memset(blk->qs, 0x55, sizeof blk->qs);  // every weight 0
                        }
                    auto* xb = reinterpret_cast<BlockQ8_0*>(x.data());
                    for (size_t i = 0; i < ncols * cols / QK8_0; ++i) xb[i].d = i % 3 == 0 ? 0x8000 : i % 3 == 1 ? 0xbc00 : 0x3c00;
                }
                std::vector<float> ref(rows * ncols);
                mat_mat(t, w.data(), rows, cols, x.data(), ncols, ref.data(), Path::Reference);
                if (regime == 4) {  // the reference has +0 results, NaN results, and never -0
                    size_t zeros = 0, nans = 0, negzeros = 0;
                    for (float v : ref) zeros += v == 0.0f, nans += std::isnan(v), negzeros += v == 0.0f && std::signbit(v);
                    if (!CHECK(zeros > 0 && nans > 0 && negzeros == 0)) fprintf(stderr, "%zu %zu %zu %zux%zu\n", zeros, nans, negzeros, rows, cols);
                }
                if (regime == 3) {  // the kind of block used there: a sub-block of +2 codes against -128 quants sums to -8192
                    BlockQ2_0 wb{0x3c00, {}};
                    std::memset(wb.qs, 0xff, sizeof wb.qs);
                    BlockQ8_0 xm[2];
                    for (auto& b : xm) b.d = 0x3c00, std::memset(b.qs, 0x80, sizeof b.qs);
                    CHECK_EQ(vec_dot_q2_0_ref(64, &wb, xm), -16384.0f);
                }
                par::Pool pool(3);
                for (Path level : fast_levels()) {
                    std::vector<float> y(rows * ncols, -1.0f), yp(rows * ncols, -1.0f), yr(rows * ncols, -1.0f);
                    mat_mat(t, w.data(), rows, cols, x.data(), ncols, y.data(), level);
                    mat_mat_par(pool, t, w.data(), rows, cols, x.data(), ncols, yp.data(), level);
                    const TypeTraits& tt = traits(t);
                    detail::Prepared p;
                    tt.prepare_layout(cols, ncols, path_isa(level), p);
                tt.prepare(x.data(), p, 0, ncols);
                    tt.rows_fast(w.data(), cols, 3, rows - 2, x.data(), p, ncols, yr.data(), rows);
                    bool ranged = true;
                    for (size_t c = 0; c < ncols; ++c)
                        for (size_t r = 0; r < rows; ++r)
                            ranged &= (r >= 3 && r < rows - 2) ? std::memcmp(&yr[c * rows + r], &ref[c * rows + r], 4) == 0
                                                               : yr[c * rows + r] == -1.0f;
                    if (!CHECK(same(ref, y) && same(ref, yp) && ranged))
                        bt::fail(__FILE__, __LINE__, std::to_string(rows) + "x" + std::to_string(cols) + " regime " +
                                                         std::to_string(regime) + " at " + level_name(level));
                }
            }
    bt::fast_path_checked();
}

// The Q2_0 and F16 rows of every level on row ranges that start and end inside a group of eight,
// with several columns and one.
TEST(quant_fast_rows_partial_ranges_every_level) {
    std::mt19937 g(41);
    for (Type t : TYPES)
        for (Path level : fast_levels())
            for (size_t ncols : {1, 3}) {
                const size_t rows = 29, cols = 640;
                auto w = rand_weights(g, t, rows, cols, Regime::Random);
                auto x = rand_acts(g, t, cols, ncols, Regime::Extremes);
                std::vector<float> ref(rows * ncols), y(rows * ncols, -1.0f);
                mat_mat(t, w.data(), rows, cols, x.data(), ncols, ref.data(), Path::Reference);
                const TypeTraits& tt = traits(t);
                detail::Prepared p;
                tt.prepare_layout(cols, ncols, path_isa(level), p);
                tt.prepare(x.data(), p, 0, ncols);
                tt.rows_fast(w.data(), cols, 5, 22, x.data(), p, ncols, y.data(), rows);
                bool ok = true;
                for (size_t c = 0; c < ncols; ++c)
                    for (size_t r = 0; r < rows; ++r)
                        ok &= (r >= 5 && r < 22) ? std::memcmp(&y[c * rows + r], &ref[c * rows + r], 4) == 0 : y[c * rows + r] == -1.0f;
                if (!CHECK(ok)) bt::fail(__FILE__, __LINE__, std::string(type_name(t)) + " at " + level_name(level));
            }
    bt::fast_path_checked();
}
#endif

// The table's invariants, which make one entry enough for a type: ids unique and in order, names
// parse back, block bytes match the packed structs, and every computed type has an activation type
// that can be made from f32, blocks that divide each other, a dequantizer, and fast rows only with
// their reference.
TEST(quant_traits_table_is_complete) {
    uint32_t last = 0;
    bool first = true;
    for (const TypeTraits& t : all_traits()) {
        CHECK(first || uint32_t(t.type) > last);
        first = false;
        last = uint32_t(t.type);
        CHECK(find_traits(uint32_t(t.type)) == &t);
        CHECK(type_from_name(t.name) == t.type);
        CHECK(t.block > 0 && t.block_bytes > 0);
        if (!t.rows_ref) {
            CHECK(!t.rows_fast && !t.prepare);
            continue;
        }
        const TypeTraits& d = traits(t.dot_type);
        CHECK(d.from_float != nullptr);
        CHECK(t.to_float != nullptr);
        CHECK(t.block % d.block == 0 || d.block % t.block == 0);
    }
    CHECK_EQ(traits(Type::Q1_0).block_bytes, sizeof(BlockQ1_0));
    CHECK_EQ(traits(Type::Q2_0).block_bytes, sizeof(BlockQ2_0));
    CHECK_EQ(traits(Type::Q8_0).block_bytes, sizeof(BlockQ8_0));
    CHECK_EQ(traits(Type::Q1_0).block, QK1_0);
    CHECK(type_from_name("Q2_0") == Type::Q2_0);
    CHECK(!type_from_name("q3_0"));
    CHECK(find_traits(4) == nullptr && find_traits(43) == nullptr);
    CHECK(TYPES.size() == 4);  // F32, F16, Q1_0, Q2_0
}

// Dequantizing through the table: Q1_0 bit set +d, clear -d; Q2_0 code q (q - 1) * d; F16 exact.
TEST(quant_traits_to_float_by_hand) {
    BlockQ1_0 b1{};
    b1.d = f32_to_f16(0.5f);
    b1.qs[0] = 0x05;  // values 0 and 2 are +d
    float y1[QK1_0];
    traits(Type::Q1_0).to_float(&b1, y1, QK1_0);
    CHECK_EQ(y1[0], 0.5f);
    CHECK_EQ(y1[1], -0.5f);
    CHECK_EQ(y1[2], 0.5f);
    CHECK_EQ(y1[127], -0.5f);
    BlockQ2_0 b2{};
    b2.d = f32_to_f16(2.0f);
    b2.qs[0] = 0x1B;  // codes 3, 2, 1, 0
    float y2[QK2_0];
    traits(Type::Q2_0).to_float(&b2, y2, QK2_0);
    CHECK_EQ(y2[0], 4.0f);
    CHECK_EQ(y2[1], 2.0f);
    CHECK_EQ(y2[2], 0.0f);
    CHECK_EQ(y2[3], -2.0f);
    CHECK_EQ(y2[4], -2.0f);
    const uint16_t h[2] = {f32_to_f16(1.5f), f32_to_f16(-3.0f)};
    float yh[2];
    traits(Type::F16).to_float(h, yh, 2);
    CHECK_EQ(yh[0], 1.5f);
    CHECK_EQ(yh[1], -3.0f);
}
