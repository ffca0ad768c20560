// The AVX-512 Q2_0 x Q8_0 kernel (levels avx512 and avx512vnni): eight rows at a time, one row per
// f32 lane as in the AVX2 loop (q2_0_fast.cpp), with the reference's float steps lane by lane:
// sumi = 0 + d1a*sa, sumi += d1b*sb, sumf += d0*sumi (contraction is off in this file).
//
// A whole 64-weight block of a row is one register: its 16 bytes broadcast to the four 128-bit
// lanes and shifted right by 0, 2, 4 and 6 per lane, then masked, so that qword p holds the codes of
// sub-block h = p % 2 at shift s = p / 2: byte b of qword p is the code of weight 4b + s of
// sub-block h. The activations are laid out once per call to match (part 2, q2_0_interleave), with each int32
// lane's negated quant sum -T (part 1), so that a lane's (c - 1)·q sum is one instruction; the
// eight rows' sixteen lanes each are then summed per (row, sub-block) by a tree of permutes and
// adds (exact integers, any order), and the two sub-blocks' scales are pre-broadcast (part 0).
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

void q2_0_prepare_avx512(const BlockQ8_0* x, size_t cols, size_t ncols, Prepared& p) {
    const size_t n = cols / QK8_0 * ncols;  // Q8_0 blocks of all columns
    p.layout({n * sizeof(float), n * sizeof(int32_t), n * QK8_0});
    float* d = p.part<float>(0);
    int32_t* negt = p.part<int32_t>(1);
    int8_t* y = p.part<int8_t>(2);
    for (size_t i = 0; i < n; ++i) {
        d[i] = f16_to_f32(x[i].d);
        int32_t t = 0;
        for (size_t j = 0; j < QK8_0; ++j) t += x[i].qs[j];
        negt[i] = -t;
    }
    // Dword 4q + s of a Q2_0-sized block: byte b is the quant of weight 4(4(q % 2) + b) + s of
    // sub-block q / 2, the weight whose code sits at shift 2s in byte b of the rows' dword q.
    for (size_t bi = 0; bi < n / 2; ++bi)
        for (size_t q = 0; q < 4; ++q)
            for (size_t s = 0; s < 4; ++s)
                for (size_t b = 0; b < 4; ++b)
                    y[bi * 64 + 4 * (4 * q + s) + b] = x[bi * 2 + q / 2].qs[4 * (4 * (q % 2) + b) + s];
}

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
    const size_t nb = cols / QK2_0;
    static thread_local std::vector<float> sumf;
    if (sumf.size() < 16 * ncols) sumf.resize(16 * ncols);
    const bool vnni = p.isa == Isa::Avx512Vnni;
    const size_t stride = nb * sizeof(BlockQ2_0);
    static thread_local std::vector<uint8_t> tail;
    for (size_t g = r0; g < r1; g += 16) {
        const uint8_t* rows = reinterpret_cast<const uint8_t*>(wb + g * nb);
        if (r1 - g < 16) {  // a short group: its rows, then the last one repeated, in a copy
            tail.resize(16 * stride);
            for (size_t r = 0; r < 16; ++r)
                std::memcpy(tail.data() + r * stride, wb + (g + r < r1 ? g + r : r1 - 1) * nb, stride);
            rows = tail.data();
        }
        if (ncols == 1) (vnni ? vnni::rows16<true> : bw::rows16<true>)(rows, stride, nb, p, 1, sumf.data());
        else (vnni ? vnni::rows16<false> : bw::rows16<false>)(rows, stride, nb, p, ncols, sumf.data());
        for (size_t c = 0; c < ncols; ++c)
            for (size_t r = 0; r < 16 && g + r < r1; ++r) y[c * ldy + g + r] = sumf[16 * c + r];
    }
}

}  // namespace bankml::quant::detail
#endif
