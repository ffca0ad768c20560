// The AVX-512 Q2_0 x Q8_0 kernel (levels avx512 and avx512vnni): sixteen rows at a time, one row per
// f32 lane, with the reference's float steps lane by lane: sumi = 0 + d1a*sa, sumi += d1b*sb,
// sumf += d0*sumi (contraction is off in this file), so the per-block float work is done for
// sixteen rows at once and no lane is ever summed across.
//
// The integer sums need the sixteen rows' codes with one row per 32-bit lane: each row's 16 code
// bytes of a block go into one 128-bit lane (four rows per register), and a 4x4 transpose of dwords
// inside every 128-bit lane (eight unpacks) leaves in register q dword q of each of the sixteen
// rows. Byte b of dword q holds four codes (bits 2s, 2s + 1: weight 4(4(q % 2) + b) + s of
// sub-block q / 2); shifted right by 2s and masked with 3 it is one byte per weight, and one
// vpdpbusd against the four matching quants broadcast to every lane (laid out once per call,
// q2_0_prepare in q2_0_fast.cpp) adds four products to each row's sum. Eight of them per sub-block, started
// from the sub-block's -T (the negated sum of its quants), give sum (c - 1)·q exactly: integers,
// so the order is free. The sixteen f16 scales come from one gather.
#pragma GCC optimize("fp-contract=off")
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* idiom).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "core/f16.h"
#include "quant/kernels_impl.h"

namespace bankml::quant::detail {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
namespace {
namespace bw {
#define Q2_VNNI 0
#include "quant/q2_0_avx512.inc"
#undef Q2_VNNI
}  // namespace bw
}  // namespace
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace {
namespace vnni {
#define Q2_VNNI 1
#include "quant/q2_0_avx512.inc"
#undef Q2_VNNI
}  // namespace vnni
}  // namespace
#pragma GCC pop_options

void q2_0_rows_avx512(const BlockQ2_0* wb, size_t cols, size_t r0, size_t r1, const Prepared& p, size_t ncols,
                      float* y, size_t ldy) {
    const size_t nb = cols / QK2_0, stride = nb * sizeof(BlockQ2_0);
    const bool vnni = p.isa == Isa::Avx512Vnni;
    q2_0_row_groups<16>(wb, nb, r0, r1, ncols, y, ldy, [&](const uint8_t* rows, float* sums) {
        if (ncols == 1) (vnni ? vnni::rows16<true> : bw::rows16<true>)(rows, stride, nb, p, 1, sums);
        else (vnni ? vnni::rows16<false> : bw::rows16<false>)(rows, stride, nb, p, ncols, sums);
    });
}

}  // namespace bankml::quant::detail
#endif
