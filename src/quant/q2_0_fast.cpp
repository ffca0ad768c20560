// The AVX2 Q2_0 x Q8_0 kernel (levels avx2 and avxvnni): eight rows at a time, one row per f32 lane,
// the AVX-512 kernel's design (q2_0_avx512.cpp) at half the width. Same bits as vec_dot_q2_0_ref:
// the two per-block integer sums are exact whatever the order, and the float steps are the
// reference's, lane by lane: sumi = 0 + d1a*sa, sumi += d1b*sb, sumf += d0*sumi, separate
// multiplies and adds (contraction is off in this file).
//
// Each row's 16 code bytes of a block go into one 128-bit lane (rows i and 4 + i in register i), a
// 4x4 transpose of dwords inside each 128-bit lane leaves in register q dword q of each of the
// eight rows, and byte b of that dword, shifted right by 2s and masked with 3, is the code of weight
// 4(4(q % 2) + b) + s of sub-block q / 2. Against the four matching quants broadcast to every lane
// (the records of q2_0_prepare) the codes s = 0, 2 are taken as c and s = 1, 3 as 4c (masks 3 and 12
// of the dword and of it shifted by 4), summed apart as t and u, and each lane ends as
// 4t + u = 4 * sum of (c - 1) * q: at avx2 vpmaddubsw pairs in 16 bits (bounds in q2_0_avx2.inc)
// then vpmaddwd with ones and -4T; at avxvnni vpdpbusd chains, t started from -T. The float steps
// then run on 4x the reference's values (exact: see q2_0_avx2.inc) and a final * 0.25 restores them.
#pragma GCC optimize("fp-contract=off")
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/f16.h"
#include "quant/dot.h"
#include "quant/kernels_impl.h"

namespace bankml::quant::detail {

// One record of Q2_REC bytes per (column, 64-weight block): 16 dwords of quants, dword 4q + s
// holding in byte b the quant of weight 4(4(q % 2) + b) + s of sub-block q / 2 (the weight whose
// code sits at bits 2s of byte b of the rows' dword q); then -T of each sub-block (the negated sum
// of its 32 quants); then the f32 of each sub-block's scale; then -4T of each sub-block (read by the
// avx2 loop). Every level's kernel reads these.
void q2_0_layout(size_t cols, size_t ncols, Isa isa, Prepared& p) {
    p.isa = isa, p.cols = cols, p.ncols = ncols;
    p.layout({cols / QK2_0 * ncols * Q2_REC});  // a record per 64-weight block of every column
}
void q2_0_prepare(const BlockQ8_0* x, Prepared& p, size_t c0, size_t c1) {
    const size_t nbc = p.cols / QK2_0;  // 64-weight blocks a column
    for (size_t bi = c0 * nbc; bi < c1 * nbc; ++bi) {
        uint8_t* rec = p.part<uint8_t>(0) + bi * Q2_REC;
        for (size_t q = 0; q < 4; ++q)
            for (size_t s = 0; s < 4; ++s)
                for (size_t b = 0; b < 4; ++b)
                    rec[4 * (4 * q + s) + b] = uint8_t(x[bi * 2 + q / 2].qs[4 * (4 * (q % 2) + b) + s]);
        for (size_t h = 0; h < 2; ++h) {
            int32_t t = 0;
            for (size_t j = 0; j < QK8_0; ++j) t += x[bi * 2 + h].qs[j];
            t = -t;
            const float d = f16_to_f32(x[bi * 2 + h].d);
            std::memcpy(rec + 64 + 4 * h, &t, 4);
            std::memcpy(rec + 72 + 4 * h, &d, 4);
            t *= 4;
            std::memcpy(rec + 80 + 4 * h, &t, 4);
        }
    }
}

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace {
namespace plain {
#define Q2_AVXVNNI 0
#include "quant/q2_0_avx2.inc"
#undef Q2_AVXVNNI
}  // namespace plain
}  // namespace
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace {
namespace vnni {
#define Q2_AVXVNNI 1
#include "quant/q2_0_avx2.inc"
#undef Q2_AVXVNNI
}  // namespace vnni
}  // namespace
#pragma GCC pop_options

void q2_0_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p,
                    size_t ncols, float* y, size_t ldy) {
    const auto* wb = static_cast<const BlockQ2_0*>(w);
    // Rows over 128 MiB: the AVX-512 gather's 32-bit offsets (up to 15 rows) would not hold them.
    if (cols / QK2_0 * sizeof(BlockQ2_0) > (size_t(1) << 27)) {
        const auto* xb = static_cast<const BlockQ8_0*>(x);
        for (size_t c = 0; c < ncols; ++c)
            for (size_t r = r0; r < r1; ++r) y[c * ldy + r] = vec_dot_q2_0_ref(cols, wb + r * (cols / QK2_0), xb + c * (cols / QK8_0));
        return;
    }
    if (p.isa >= Isa::Avx512) return q2_0_rows_avx512(wb, cols, r0, r1, p, ncols, y, ldy);
    const size_t nb = cols / QK2_0, stride = nb * sizeof(BlockQ2_0);
    const bool vnni = p.isa == Isa::AvxVnni;
    q2_0_row_groups<8>(wb, nb, r0, r1, ncols, y, ldy, [&](const uint8_t* rows, float* sums) {
        if (ncols == 1) (vnni ? vnni::rows8<true> : plain::rows8<true>)(rows, stride, nb, p, 1, sums);
        else (vnni ? vnni::rows8<false> : plain::rows8<false>)(rows, stride, nb, p, ncols, sums);
    });
}

}  // namespace bankml::quant::detail
#endif
