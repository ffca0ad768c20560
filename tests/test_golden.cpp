// ggml's own results (golden-kernels.bin), compared bit for bit (memcmp) with the reference and
// the fast path, on one thread and on the pool at 2, 3 and 5 threads, through mat_vec and mat_mat.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "golden.h"
#include "quant/matmul.h"
#include "quant/q8_0.h"
#include "test.h"

using namespace bankml::quant;

namespace {

const std::vector<bt::GoldenCase>& cases() {
    static const std::vector<bt::GoldenCase> c = bt::read_golden(bt::golden_path());
    return c;
}

Type type_of(uint32_t kind) {
    return kind == 2 || kind == 4 ? Type::Q1_0 : kind == 3 || kind == 5 ? Type::Q2_0 : Type::F16;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Every product case through mat_vec (threads 1) or mat_vec_par / mat_mat_par (threads > 1), and
// through mat_mat with the case's column placed among two and among four other columns.
void check_products(Path path, int threads) {
    int checked = 0;
    std::unique_ptr<bankml::par::Pool> pool;
    if (threads > 1) pool = std::make_unique<bankml::par::Pool>(threads);
    for (size_t i = 0; i < cases().size(); ++i) {
        const auto& c = cases()[i];
        if (c.kind < 2) continue;
        Type t = type_of(c.kind);
        std::vector<uint8_t> act = c.q;
        if (c.kind >= 4) {
            act.resize(act_bytes(t, c.cols));
            prepare_activations(t, c.x.data(), c.cols, 1, act.data(), path);
        }
        std::vector<float> y(c.rows, -1.0f);
        if (pool) mat_vec_par(*pool, t, c.w.data(), c.rows, c.cols, act.data(), y.data(), path);
        else mat_vec(t, c.w.data(), c.rows, c.cols, act.data(), y.data(), path);
        if (!CHECK(same_bits(y, c.y))) {
            bt::fail(__FILE__, __LINE__, std::string(bankml::isa_name(path_isa(path))) + ": case " + std::to_string(i) + " kind " + std::to_string(c.kind) + " " +
                                             std::to_string(c.rows) + "x" + std::to_string(c.cols));
            continue;
        }
        // The same column in the middle of a batch of three, and third of five (inside the AVX-512
        // VNNI loop's tile of four columns); the others: the column reversed.
        const size_t ab = act.size();
        for (size_t n : {3, 5}) {
            const size_t at = n / 2;
            std::vector<uint8_t> batch(n * ab);
            for (size_t k = 0; k < n; ++k) {
                if (k == at) {
                    std::memcpy(batch.data() + k * ab, act.data(), ab);
                    continue;
                }
                for (size_t j = 0; j < ab; ++j) batch[k * ab + j] = act[ab - 1 - j];
                if (t != Type::F16)  // keep the reversed bytes valid Q8_0 blocks: scale bytes from the column
                    for (size_t b = 0; b < ab / 34; ++b) std::memcpy(batch.data() + k * ab + b * 34, act.data() + b * 34, 2);
            }
            std::vector<float> ym(n * c.rows);
            if (pool) mat_mat_par(*pool, t, c.w.data(), c.rows, c.cols, batch.data(), n, ym.data(), path);
            else mat_mat(t, c.w.data(), c.rows, c.cols, batch.data(), n, ym.data(), path);
            CHECK(std::memcmp(ym.data() + at * c.rows, c.y.data(), c.rows * 4) == 0);
        }
        ++checked;
    }
    size_t products = 0;
    for (const auto& c : cases()) products += c.kind >= 2;
    CHECK_EQ(size_t(checked), products);
    CHECK_GT(checked, 0);
}

void check_quantize(Path path) {
    int checked = 0;
    for (const auto& c : cases()) {
        if (c.kind != 1) continue;
        std::vector<BlockQ8_0> q(c.cols / 32);
        quantize_row_q8_0(c.x.data(), q.data(), c.cols, path);
        CHECK(std::memcmp(q.data(), c.q.data(), c.q.size()) == 0);
        ++checked;
    }
    CHECK_GT(checked, 0);
}

}  // namespace

TEST(golden_file_reads_whole) {
    if (!std::getenv("BANKML_GOLDEN")) CHECK_EQ(cases().size(), size_t(57));  // the shipped file
    size_t rows = 0;
    for (const auto& c : cases()) rows += c.rows;
    CHECK_GT(rows, size_t(1000));
}

TEST(golden_q8_0_quantize_reference) { check_quantize(Path::Reference); }
// Every fast level the CPU has (avx2, avxvnni, avx512, avx512vnni), each forced in turn.
static std::vector<Path> fast_levels() {
    std::vector<Path> v;
    for (bankml::Isa l : bankml::supported_isas())
        if (l != bankml::Isa::Scalar) v.push_back(path_of(l));
    return v;
}

TEST(golden_q8_0_quantize_fast) {
    for (Path p : fast_levels()) check_quantize(p);
    bt::fast_path_checked();
}
TEST(golden_products_reference_single_thread) { check_products(Path::Reference, 1); }
TEST(golden_products_reference_pool_2_3_5) {
    for (int t : {2, 3, 5}) check_products(Path::Reference, t);
}
TEST(golden_products_fast_single_thread) {
    for (Path p : fast_levels()) check_products(p, 1);
    bt::fast_path_checked();
}
TEST(golden_products_fast_pool_2_3_5) {
    for (Path p : fast_levels())
        for (int t : {2, 3, 5}) check_products(p, t);
    bt::fast_path_checked();
}
