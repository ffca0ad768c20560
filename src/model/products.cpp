#include "model/products.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "quant/traits.h"
#include "quant/matmul.h"
#include "quant/q1_0_lut.h"
#include "model/ops.h"

namespace bankml::model {

namespace {

// Whether the quant kernels compute products of type t.
bool kernel_type(gguf::Type t) {
    const quant::TypeTraits* tt = quant::find_traits(uint32_t(t));
    return tt && tt->rows_ref;
}

}  // namespace

bool product_type_supported(gguf::Type t) { return kernel_type(t); }

std::string product_type_names(const char* sep, const char* last, bool upper) {
    std::vector<std::string> names;
    for (const quant::TypeTraits& t : quant::all_traits())
        if (product_type_supported(t.type)) names.push_back(t.name);
    std::string out;
    for (size_t i = 0; i < names.size(); ++i) {
        if (upper)
            for (char& c : names[i]) c = char(std::toupper((unsigned char)c));
        out += (i == 0 ? "" : i + 1 == names.size() ? last : sep) + names[i];
    }
    return out;
}

std::string product_type_names() { return product_type_names(", ", " or "); }

void Products::mm(par::Pool& pool, const Matrix& w, const float* x, size_t n, float* y) {
    const size_t cols = (size_t)w.cols, rows = (size_t)w.rows;
    const quant::Type wt = w.type;
    if (kernel_type(wt)) {
        const size_t ab = quant::act_bytes(wt, cols);
        if (act_.size() < ab * n) act_.resize(ab * n);
        quant::prepare_activations(wt, x, cols, n, act_.data());
        if (n == 1) quant::mat_vec_par(pool, wt, w.data, rows, cols, act_.data(), y);
        else quant::mat_mat_par(pool, wt, w.data, rows, cols, act_.data(), n, y);
        return;
    }
    throw Error(std::string("no product kernel for ") + quant::type_name(wt) + " matrices");
}

// Rows per job of a grouped product (a one-column run's largest jobs: they shrink towards its
// end): with up to eight columns (decoded tokens) about eight jobs per thread (each claim is one
// atomic add, so many small jobs balance a token's products over 16 threads), at most 256 rows
// (the per-call work is noise then) and at least 16: a job's first rows wait for memory (the
// kernels prefetch only within a job), so few columns want long jobs. A prompt's jobs are 32 rows
// (the batch kernels decode a few rows' weights once and run every column over them), shrinking
// to BATCH_GROUP rows towards a run's end: a prompt's job of 32 rows is long enough to leave the
// other workers waiting for it.
constexpr size_t BATCH_GROUP = 4;  // the rows the batch kernels gather at a time
static size_t job_rows(size_t total, size_t n, int threads) {
    if (n > 8) return 2 * par::CHUNK_ROWS;
    const size_t per = total / (size_t(threads) * 8) / par::CHUNK_ROWS * par::CHUNK_ROWS;
    return std::clamp<size_t>(per, par::CHUNK_ROWS, 256);
}

// One pool run over a group: each worker first does share(i0, i1), its share of `items` (the
// column's preparation: each item's result is its own, so the split changes no bit), and waits for
// the others (par::Phases); then the workers take jobs of rows of the matrices stacked in order
// (`total` rows in all) until none is left, rows(i, lo, hi) computing rows [lo, hi) of matrix i.
// Jobs are `job` rows; with a `unit`, a job shrinks towards the end of the run, to a half of each
// worker's share of the rows left but not below unit, so that the workers finish together (a job
// is claimed with one atomic add: its size is read from the rows left just before, and jobs never
// overlap). Both are multiples of unit, so jobs keep its alignment. Which worker computes a row
// changes no bit.
template <class Share, class Rows>
static void share_then_rows(par::Pool& pool, size_t items, size_t total, size_t job, std::span<const Products::Out> outs,
                            Share&& share, Rows&& rows, size_t unit = 0) {
    const int workers = pool.threads();
    par::Phases shared(workers);
    std::atomic<size_t> next{0};  // the first row not yet claimed
    pool.run([&](int w) {
        shared.first([&] {
            const size_t i0 = items * (size_t)w / (size_t)workers, i1 = items * (size_t)(w + 1) / (size_t)workers;
            if (i0 < i1) share(i0, i1);
        });
        for (size_t left; (left = total - std::min(total, next.load(std::memory_order_relaxed))) > 0;) {
            const size_t size = unit ? std::clamp(left / (2 * (size_t)workers) / unit * unit, unit, job) : job;
            const size_t r0 = next.fetch_add(size, std::memory_order_relaxed);
            if (r0 >= total) break;
            const size_t r1 = std::min(total, r0 + size);
            size_t off = 0;
            for (size_t i = 0; i < outs.size(); ++i) {
                const size_t n = (size_t)outs[i].w->rows, lo = std::max(r0, off), hi = std::min(r1, off + n);
                if (lo < hi) rows(i, lo - off, hi - off);
                off += n;
            }
        }
    });
}

void Products::group(par::Pool& pool, std::span<const Out> outs, const float* x, size_t n, const Make* make) {
    const quant::Type wt = outs.empty() ? gguf::Type::F32 : outs[0].w->type;
    bool same = !outs.empty() && kernel_type(wt);
    for (const Out& o : outs) same = same && o.w->type == outs[0].w->type && o.w->cols == outs[0].w->cols;
    if (make && n != 1) throw Error("Products::group: a column made on the way needs n = 1, not " + std::to_string(n));
    bool takes = false;  // the offload takes a share of these rows
    if (same && n == 1 && offload_ && wt == quant::Type::Q1_0)
        for (const Out& o : outs) takes = takes || offload_->takes((size_t)o.w->rows, (size_t)o.w->cols);
    const size_t cols = outs.empty() ? 0 : (size_t)outs[0].w->cols;
    const size_t ab = same ? quant::act_bytes(wt, cols) : 0;
    if (act_.size() < ab * n) act_.resize(ab * n);
    if (same && n == 1 && wt == quant::Type::Q1_0 && !takes && lane_tables(pool, outs, x, make)) return;
    if (make) (*make)(0, cols);
    if (takes) {
        offloaded(pool, outs, x);
        return;
    }
    if (!same) {
        for (const Out& o : outs) mm(pool, *o.w, x, n, o.y);
        return;
    }
    // The columns quantized and prepared once for every matrix, then all their rows, in one pool
    // run: each worker first quantizes and prepares a share of the columns (each column's are its
    // own), waits for the others, then takes jobs of rows.
    const quant::Columns a = quant::lay_out_columns(wt, act_.data(), cols, n);
    size_t total = 0;
    for (const Out& o : outs) total += (size_t)o.w->rows;
    const size_t job = job_rows(total, n, pool.threads());
    share_then_rows(
        pool, n, total, job, outs,
        [&](size_t c0, size_t c1) {
            quant::prepare_activations(wt, x + c0 * cols, cols, c1 - c0, act_.data() + c0 * ab);
            quant::fill_columns(a, c0, c1);
        },
        [&](size_t i, size_t lo, size_t hi) { quant::rows(a, outs[i].w->data, lo, hi, outs[i].y, (size_t)outs[i].w->rows); },
        n == 1 ? par::CHUNK_ROWS : n > 8 ? BATCH_GROUP : 0);
}

const uint8_t* Products::decode_layout(par::Pool& pool, const Matrix& w) {
    auto it = decode_.find(w.data);
    if (it != decode_.end()) return it->second.get();
    const size_t rows = (size_t)w.rows, cols = (size_t)w.cols;
    // Not zeroed first (pack writes every byte), and written on the pool: the first decoded token
    // makes every matrix's layout, a pass over the weights.
    std::unique_ptr<uint8_t[]> p(new uint8_t[quant::lut::packed_bytes(rows, cols)]);
    pool.chunks(quant::lut::groups(rows), 8, [&](size_t g0, size_t g1) {
        quant::lut::pack(reinterpret_cast<const quant::BlockQ1_0*>(w.data), rows, cols, p.get(), g0, g1);
    });
    return decode_.emplace(w.data, std::move(p)).first->second.get();
}

#if defined(__x86_64__)
// BANKML_LANE_TABLES=off: one-column Q1_0 products keep the row loops, and the weights one copy.
static bool lane_tables_allowed() {
    static const bool on = [] {
        const char* e = std::getenv("BANKML_LANE_TABLES");
        return !(e && std::string(e) == "off");
    }();
    return on;
}
#endif

bool Products::lane_tables(par::Pool& pool, std::span<const Out> outs, const float* x, const Make* make) {
#if !defined(__x86_64__)
    (void)pool, (void)outs, (void)x, (void)make;
    return false;  // (the tables need AVX2 or AVX-512)
#else
    namespace lut = quant::lut;
    const lut::Kernel kernel = lut::kernel_for(quant::path_isa(quant::Path::Auto));
    if (!lane_tables_allowed() || kernel == lut::Kernel::None) return false;
    for (const Out& o : outs)
        if (o.w->rows % int64_t(lut::ROWS) != 0) return false;
    const size_t cols = (size_t)outs[0].w->cols, nb = cols / quant::QK8_0;
    const bool wide = kernel == lut::Kernel::Avx512;
    const size_t floats = wide ? lut::table_floats(cols) : lut::table_bytes_avx2(cols) / 4;
    if (tables_.size() < floats + 16) tables_.resize(floats + 16);
    float* t = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(tables_.data()) + 63) & ~uintptr_t(63));
    uint8_t* tb = reinterpret_cast<uint8_t*>(t);
    auto* act = reinterpret_cast<quant::BlockQ8_0*>(act_.data());
    packed_.clear();
    size_t total = 0;
    for (const Out& o : outs) packed_.push_back(decode_layout(pool, *o.w)), total += (size_t)o.w->rows;
    // One pool run. First each worker quantizes its share of the column's Q8_0 blocks and makes
    // their tables (each block's quants and tables are its own, so the split changes no bit), and
    // waits for the others (par::Phases); then the workers take jobs of rows. Jobs are whole pairs
    // of groups (the AVX-512 kernel runs two at a time), and every matrix starts on a group.
    constexpr size_t PAIR = 2 * lut::ROWS;
    const size_t job = std::max(PAIR, job_rows(total, 1, pool.threads()) / PAIR * PAIR);
    const quant::TypeTraits& q8 = quant::traits(quant::Type::Q8_0);
    share_then_rows(
        pool, nb, total, job, outs,
        [&](size_t b0, size_t b1) {
            if (make) (*make)(b0 * quant::QK8_0, b1 * quant::QK8_0);
            q8.from_float(x + b0 * quant::QK8_0, reinterpret_cast<uint8_t*>(act + b0), (b1 - b0) * quant::QK8_0, quant::Path::Auto);
            if (wide) lut::tables(act + b0, (b1 - b0) * quant::QK8_0, t + b0 * lut::table_floats(quant::QK8_0));
            else lut::tables_avx2(act + b0, (b1 - b0) * quant::QK8_0, tb + b0 * lut::TABLE_AVX2_BYTES);
        },
        [&](size_t i, size_t lo, size_t hi) {
            const size_t rows = (size_t)outs[i].w->rows, g0 = lo / lut::ROWS, g1 = (hi + lut::ROWS - 1) / lut::ROWS;
            if (wide) lut::rows(packed_[i], rows, cols, g0, g1, t, outs[i].y);
            else lut::rows_avx2(packed_[i], rows, cols, g0, g1, tb, outs[i].y);
        },
        PAIR);
    return true;
#endif
}

// One matrix at a time (the card runs one product at a time): the card starts its leading rows,
// the pool computes the others meanwhile, then the card's rows are copied in.
void Products::offloaded(par::Pool& pool, std::span<const Out> outs, const float* x) {
    const quant::Type wt = quant::Type::Q1_0;
    const size_t cols = (size_t)outs[0].w->cols, ab = quant::act_bytes(wt, cols);
    if (act_.size() < ab) act_.resize(ab);
    quant::prepare_activations(wt, x, cols, 1, act_.data());
    const uint8_t* act = act_.data();
    for (const Out& o : outs) {
        const Matrix& w = *o.w;
        const size_t rows = (size_t)w.rows;
        size_t k = 0;
        bool card = offload_ != nullptr;
        if (card) {
            try {
                k = offload_->begin(w.data, w.data, rows, cols, act);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "bankml: GPU dropped, the CPU computes every row: %s\n", e.what());
                offload_.reset();
                card = false;
                k = 0;
            }
        }
        if (k < rows) quant::mat_vec_par(pool, wt, w.data + k * w.row_bytes, rows - k, cols, act, o.y + k);
        if (card) {
            try {
                offload_->finish(o.y);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "bankml: GPU dropped, the CPU computes every row: %s\n", e.what());
                offload_.reset();
                if (k) quant::mat_vec_par(pool, wt, w.data, k, cols, act, o.y);
            }
        }
    }
}

void dequantize_row(const Matrix& w, int64_t row, float* out) {
    const quant::TypeTraits* tt = quant::find_traits(uint32_t(w.type));
    if (!tt || !tt->to_float) throw Error("dequantize_row: unsupported type");
    tt->to_float(w.data + (size_t)row * w.row_bytes, out, (size_t)w.cols);
}

}  // namespace bankml::model
