// The kernel benchmark. "ggml-shaped" is bankml's own code written to follow the structure of
// ggml's AVX2 Q1_0 dot (per row and column: expand the sign bits of each 32-weight sub-block to
// bytes, make +-1 bytes, sign/maddubs/madd, convert both f16 scales per sub-block, fma), so that
// ggml's speed is measured side by side on the same noisy machine; it is not ggml's code. For
// Q2_0 ggml's x86 result is its generic C loop, which is our scalar reference.
#pragma GCC optimize("fp-contract=off")
#include "quant/bench.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cpu.h"
#include "core/kernels.h"
#include "par/bench.h"
#include "par/pool.h"
#include "quant/avx2.h"
#include "quant/matmul.h"
#include "quant/q8_0.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bankml::quant {

namespace {

using Clock = std::chrono::steady_clock;

// Microseconds per call of f: the best of five batches of about seconds/5 each (at least one call
// per batch, after one warm-up call). The best batch is the one least disturbed by the other
// processes on a shared machine.
// One batch: calls f until `seconds` have passed (at least once); microseconds per call.
static double batch_us(double seconds, const std::function<void()>& f) {
    int n = 0;
    auto t0 = Clock::now();
    double el = 0;
    do {
        f();
        ++n;
        el = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (el < seconds);
    return el / n * 1e6;
}

double time_us(double seconds, const std::function<void()>& f) {
    f();
    double best = 1e300;
    for (int b = 0; b < 5; ++b) best = std::min(best, batch_us(seconds / 5, f));
    return best;
}

// Two functions timed in alternating batches (best of five each), so that a ratio between them
// sees the same machine load.
std::pair<double, double> time_pair(double seconds, const std::function<void()>& fa, const std::function<void()>& fb) {
    fa();
    fb();
    double best[2] = {1e300, 1e300};
    for (int b = 0; b < 10; ++b) {
        best[b % 2] = std::min(best[b % 2], batch_us(seconds / 5, b % 2 ? fb : fa));
    }
    return {best[0], best[1]};
}

#if defined(__x86_64__)
BANKML_AVX2 float ggml_shaped_dot(size_t n, const BlockQ1_0* w, const BlockQ8_0* x) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    const __m256i bitm = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL);
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (size_t ib = 0; ib < n / QK1_0; ++ib) {
        const __m256 d0 = _mm256_set1_ps(_cvtsh_ss(w[ib].d));
        __m256 ab = _mm256_setzero_ps();
        for (int k = 0; k < 4; ++k) {
            uint32_t b;
            std::memcpy(&b, w[ib].qs + 4 * k, 4);
            __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int(b)), shuf);
            __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bitm), _mm256_set1_epi64x(-1));
            __m256i pm = _mm256_or_si256(_mm256_andnot_si256(set, _mm256_set1_epi8(-1)), ones);  // -1 clear, +1 set
            __m256i qy = _mm256_loadu_si256((const __m256i*)x[ib * 4 + k].qs);
            __m256i dot = _mm256_maddubs_epi16(_mm256_sign_epi8(pm, pm), _mm256_sign_epi8(qy, pm));
            __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot));
            const __m256 d1 = _mm256_set1_ps(_cvtsh_ss(x[ib * 4 + k].d));
            ab = k == 0 ? _mm256_mul_ps(d1, s) : _mm256_fmadd_ps(d1, s, ab);
        }
        acc = _mm256_fmadd_ps(d0, ab, acc);
    }
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
#endif

// The ggml-shaped baseline over a matrix: every (row, column) pair calls the dot, as ggml's
// mul_mat does for Q1_0 (vec_dot with one row and one column at a time).
void ggml_shaped_mat(par::Pool& pool, const BlockQ1_0* w, size_t rows, size_t cols, const BlockQ8_0* x, size_t ncols,
                     float* y) {
#if defined(__x86_64__)
    const size_t nb = cols / QK1_0, nbx = cols / QK8_0;
    pool.chunks(rows, par::CHUNK_ROWS, [&](size_t r0, size_t r1) {
        for (size_t c = 0; c < ncols; ++c)
            for (size_t r = r0; r < r1; ++r) y[c * rows + r] = ggml_shaped_dot(cols, w + r * nb, x + c * nbx);
    });
#else
    mat_mat_par(pool, Type::Q1_0, w, rows, cols, x, ncols, y, Path::Reference);
#endif
}

struct Shape {
    size_t rows, cols;
    const char* model;
};

std::vector<uint8_t> random_weights(std::mt19937& g, Type t, size_t rows, size_t cols) {
    std::vector<uint8_t> w(rows * row_bytes(t, cols));
    for (auto& b : w) b = uint8_t(g());
    if (t == Type::F16) {
        auto* h = reinterpret_cast<uint16_t*>(w.data());
        for (size_t i = 0; i < rows * cols; ++i) h[i] = uint16_t(0x3000 + g() % 0x800) | ((g() & 1) << 15);
    } else {
        const size_t bsz = traits(t).block_bytes;  // an f16 scale, then packed codes
        for (size_t b = 0; b < w.size() / bsz; ++b) {
            uint16_t d = uint16_t(0x2000 + g() % 0x400);
            std::memcpy(w.data() + b * bsz, &d, 2);
        }
    }
    return w;
}

std::vector<uint8_t> random_acts(std::mt19937& g, Type t, size_t cols, size_t ncols) {
    std::normal_distribution<float> nd;
    std::vector<float> x(cols * ncols);
    for (auto& v : x) v = nd(g);
    std::vector<uint8_t> a(act_bytes(t, cols) * ncols);
    prepare_activations(t, x.data(), cols, ncols, a.data());
    return a;
}

}  // namespace

par::QuantFormat weight_format(Type t) {
    const TypeTraits& tt = traits(t);
    par::QuantFormat f{tt.name, int(tt.block_bytes), int(tt.block)};
    for (char& c : f.name) c = char(std::toupper((unsigned char)c));
    return f;
}

int bench_kernels(const KernelBenchOptions& opt) {
    par::Pool one(1), all = par::Pool::from_env();
    const int nt = all.threads();
    const double s = opt.seconds;
    std::mt19937 g(42);
    std::printf("bankml bench kernels: cpu %s, kernels %s, %d threads, %.2f s per measurement\n",
                cpu_features_string().c_str(), kernels_description().c_str(), nt, s);
    std::printf("ggml-shaped = bankml's own AVX2 code with the structure of ggml's Q1_0 kernel (see bench.cpp)\n");
    const double dram = par::bench_memory_bandwidth(size_t(256) << 20, nt, 3).back().gb_per_s;
    std::printf("DRAM read floor: %.1f GB/s (par::bench_memory_bandwidth, %d threads, 256 MiB)\n\n", dram, nt);

    // A layer's distinct products: q and o (d x d), k and v (kv x d), gate and up (ff x d), down (d x ff).
    const ModelShape& m17 = par::QWEN3_1_7B;
    const ModelShape& m8 = par::QWEN3_8B;
    const size_t d17 = size_t(m17.embd), d8 = size_t(m8.embd);
    std::vector<Shape> shapes = {{d17, d17, "1.7B"}, {size_t(m17.kv_rows()), d17, "1.7B"}, {size_t(m17.ff), d17, "1.7B"},
                                 {d17, size_t(m17.ff), "1.7B"}};
    if (!opt.quick) {
        shapes.push_back({d8, d8, "8B"});
        shapes.push_back({size_t(m8.ff), d8, "8B"});
        shapes.push_back({d8, size_t(m8.ff), "8B"});
    }
    auto gbps = [](size_t bytes, double us) { return double(bytes) / (us * 1e-6) / 1e9; };

    std::vector<double> fast_all, ggml_all;  // per shape, for the per-token estimate
    std::printf("Q1_0 mat_vec (one column, decode), us per call [GB/s of weights]\n");
    std::printf("%-5s %-12s %11s %18s %18s %18s %18s %9s %11s\n", "model", "rows x cols", "reference 1t",
                "ggml-shaped 1t", "fast 1t", "ggml-shaped all", "fast all", "fast/ggml", "DRAM floor");
    for (const Shape& sh : shapes) {
        const Type t = Type::Q1_0;
        auto w = random_weights(g, t, sh.rows, sh.cols);
        auto x = random_acts(g, t, sh.cols, 1);
        std::vector<float> y(sh.rows);
        const size_t bytes = w.size();
        const auto* wq = reinterpret_cast<const BlockQ1_0*>(w.data());
        const auto* xq = reinterpret_cast<const BlockQ8_0*>(x.data());
        double ref = time_us(s / 3, [&] { mat_vec(t, w.data(), sh.rows, sh.cols, x.data(), y.data(), Path::Reference); });
        auto [gg1, f1] = time_pair(s, [&] { ggml_shaped_mat(one, wq, sh.rows, sh.cols, xq, 1, y.data()); },
                                   [&] { mat_vec(t, w.data(), sh.rows, sh.cols, x.data(), y.data()); });
        auto [ggn, fn] = time_pair(s, [&] { ggml_shaped_mat(all, wq, sh.rows, sh.cols, xq, 1, y.data()); },
                                   [&] { mat_vec_par(all, t, w.data(), sh.rows, sh.cols, x.data(), y.data()); });
        char b[5][48];
        double us[5] = {ref, gg1, f1, ggn, fn};
        for (int i = 0; i < 5; ++i) std::snprintf(b[i], sizeof b[i], "%.1f [%.1f]", us[i], gbps(bytes, us[i]));
        std::printf("%-5s %5zux%-6zu %11s %18s %18s %18s %18s %8.2fx %9.1fus\n", sh.model, sh.rows, sh.cols, b[0], b[1],
                    b[2], b[3], b[4], ggn / fn, double(bytes) / (dram * 1e3));
        fast_all.push_back(fn);
        ggml_all.push_back(ggn);
    }
    {
        // Qwen3 1.7B per token: each layer's q, o, k, v, gate, up and down, and the tied output matrix
        // (vocab x d, scaled from the d x d row).
        auto per_token = [&](const std::vector<double>& t) {
            return m17.layers * (2 * t[0] + 2 * t[1] + 2 * t[2] + t[3]) + t[0] * double(m17.vocab) / double(m17.embd);
        };
        const double floor_tps = dram * 1e9 / double(par::bytes_per_token(par::QWEN3_1_7B, weight_format(Type::Q1_0)));
        std::printf("1.7B Q1_0 decode, matrix products only (estimated from the rows above, all threads): fast %.1f "
                    "tokens/s, ggml-shaped %.1f tokens/s; memory floor %.1f tokens/s\n",
                    1e6 / per_token(fast_all), 1e6 / per_token(ggml_all), floor_tps);
    }

    std::printf("\nQ2_0 mat_vec (one column), us per call [GB/s of weights]; ggml's x86 Q2_0 is the scalar loop\n");
    std::printf("%-5s %-12s %18s %18s %18s %18s %12s\n", "model", "rows x cols", "reference 1t", "fast 1t",
                "reference all", "fast all", "fast/scalar");
    for (const Shape& sh : shapes) {
        const Type t = Type::Q2_0;
        auto w = random_weights(g, t, sh.rows, sh.cols);
        auto x = random_acts(g, t, sh.cols, 1);
        std::vector<float> y(sh.rows);
        double ref = time_us(s / 3, [&] { mat_vec(t, w.data(), sh.rows, sh.cols, x.data(), y.data(), Path::Reference); });
        double f1 = time_us(s, [&] { mat_vec(t, w.data(), sh.rows, sh.cols, x.data(), y.data()); });
        double refn = time_us(s / 3, [&] {
            mat_vec_par(all, t, w.data(), sh.rows, sh.cols, x.data(), y.data(), Path::Reference);
        });
        double fn = time_us(s, [&] { mat_vec_par(all, t, w.data(), sh.rows, sh.cols, x.data(), y.data()); });
        char b[4][48];
        double us[4] = {ref, f1, refn, fn};
        for (int i = 0; i < 4; ++i) std::snprintf(b[i], sizeof b[i], "%.1f [%.1f]", us[i], gbps(w.size(), us[i]));
        std::printf("%-5s %5zux%-6zu %18s %18s %18s %18s %11.1fx\n", sh.model, sh.rows, sh.cols, b[0], b[1], b[2], b[3],
                    refn / fn);
    }

    std::printf("\nF16 mat_vec (one column), us per call [GB/s of weights]\n");
    {
        const Shape sh = {d17, d17, "1.7B"};
        const Type t = Type::F16;
        auto w = random_weights(g, t, sh.rows, sh.cols);
        auto x = random_acts(g, t, sh.cols, 1);
        std::vector<float> y(sh.rows);
        double ref = time_us(s / 3, [&] { mat_vec(t, w.data(), sh.rows, sh.cols, x.data(), y.data(), Path::Reference); });
        double fn = time_us(s, [&] { mat_vec_par(all, t, w.data(), sh.rows, sh.cols, x.data(), y.data()); });
        std::printf("%-5s %5zux%-6zu reference 1t %.1f [%.1f]   fast all %.1f [%.1f]\n", sh.model, sh.rows, sh.cols, ref,
                    gbps(w.size(), ref), fn, gbps(w.size(), fn));
    }

    std::printf("\nmat_mat on all threads (prompt), us per column; ggml-shaped = one dot per (row, column)\n");
    std::printf("%-5s %-12s %-5s %9s %14s %12s %9s %14s %12s\n", "model", "rows x cols", "cols", "Q1_0", "ggml-shaped",
                "fast", "fast/ggml", "Q2_0 scalar", "Q2_0 fast");
    for (const Shape& sh : {Shape{d17, d17, "1.7B"}, Shape{size_t(m17.ff), d17, "1.7B"}})
        for (size_t nc : {size_t(1), size_t(8), size_t(64)}) {
            auto w1 = random_weights(g, Type::Q1_0, sh.rows, sh.cols);
            auto w2 = random_weights(g, Type::Q2_0, sh.rows, sh.cols);
            auto x = random_acts(g, Type::Q1_0, sh.cols, nc);
            std::vector<float> y(sh.rows * nc);
            const auto* wq = reinterpret_cast<const BlockQ1_0*>(w1.data());
            const auto* xq = reinterpret_cast<const BlockQ8_0*>(x.data());
            auto [gg, f] = time_pair(s, [&] { ggml_shaped_mat(all, wq, sh.rows, sh.cols, xq, nc, y.data()); },
                                     [&] { mat_mat_par(all, Type::Q1_0, w1.data(), sh.rows, sh.cols, x.data(), nc, y.data()); });
            gg /= double(nc);
            f /= double(nc);
            double r2 = nc > 8 ? 0.0 : time_us(s / 3, [&] {
                mat_mat_par(all, Type::Q2_0, w2.data(), sh.rows, sh.cols, x.data(), nc, y.data(), Path::Reference);
            }) / double(nc);
            double f2 = time_us(s, [&] {
                mat_mat_par(all, Type::Q2_0, w2.data(), sh.rows, sh.cols, x.data(), nc, y.data());
            }) / double(nc);
            char r2s[32];
            if (nc > 8) std::snprintf(r2s, sizeof r2s, "(skipped)");
            else std::snprintf(r2s, sizeof r2s, "%.1f", r2);
            std::printf("%-5s %5zux%-6zu %-5zu %9s %14.1f %12.1f %8.2fx %14s %12.1f\n", sh.model, sh.rows, sh.cols, nc, "",
                        gg, f, gg / f, r2s, f2);
        }
    return 0;
}

}  // namespace bankml::quant
