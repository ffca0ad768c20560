// The AVX-512 Q1_0 x Q8_0 kernels (levels avx512 and avx512vnni). Same bits as vec_dot_q1_0_ref
// for the reasons q1_0_fast.cpp gives for the AVX2 loops: per row, eight int32 lanes holding the
// exact sums of the same four +-q bytes, then the same float steps in the same order; a 512-bit
// register carries two rows side by side (q1_0_avx512.inc). The loops are compiled twice, without
// and with AVX-512 VNNI, each under its own target (no VNNI instruction can reach the first copy).
#pragma GCC optimize("fp-contract=off")
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* idiom).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "quant/kernels_impl.h"

namespace bankml::quant::detail {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
namespace {

// q1_0_fast.cpp's hsum: (0+4)+(2+6), (1+5)+(3+7), then the two.
inline float hsum8(__m256 acc) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
inline __m256 high256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
// Row A's f16 scale in the low eight lanes, row B's in the high eight.
inline __m512 pair_scales(uint16_t a, uint16_t b) {
    const __m256 lo = _mm256_set1_ps(_cvtsh_ss(a)), hi = _mm256_set1_ps(_cvtsh_ss(b));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

namespace bw {
#define Q1_VNNI 0
#include "quant/q1_0_avx512.inc"
#undef Q1_VNNI
}  // namespace bw

}  // namespace
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace {
namespace vnni {
#define Q1_VNNI 1
#include "quant/q1_0_avx512.inc"
#undef Q1_VNNI
}  // namespace vnni
}  // namespace
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
namespace {

// Several columns at avx512 (no VNNI): the clear-bit masks and scales of 2P rows gathered once,
// then every column over them; a short last group repeats its last row.
template <int P>
void batch(const BlockQ1_0* wb, size_t nb, size_t r0, size_t r1, const BlockQ8_0* xb, size_t nbx, const float* xd,
           size_t ncols, float* y, size_t ldy) {
    static thread_local AlignedScratch clear_mem, d0v_mem;
    uint64_t* const clear = clear_mem.get<uint64_t>(P * nb * 4);
    float* const d0v = d0v_mem.get<float>(P * nb * 16);
    for (size_t g = r0; g < r1; g += 2 * P) {
        for (int j = 0; j < P; ++j) {
            const BlockQ1_0* ra = wb + (g + 2 * j < r1 ? g + 2 * j : r1 - 1) * nb;
            const BlockQ1_0* rb = wb + (g + 2 * j + 1 < r1 ? g + 2 * j + 1 : r1 - 1) * nb;
            for (size_t ib = 0; ib < nb; ++ib) {
                _mm512_storeu_ps(d0v + (j * nb + ib) * 16, pair_scales(ra[ib].d, rb[ib].d));
                for (size_t k = 0; k < 4; ++k) {
                    uint32_t ba, bb;
                    std::memcpy(&ba, ra[ib].qs + 4 * k, 4);
                    std::memcpy(&bb, rb[ib].qs + 4 * k, 4);
                    clear[(j * nb + ib) * 4 + k] = ~(uint64_t(ba) | uint64_t(bb) << 32);
                }
            }
        }
        for (size_t c = 0; c < ncols; ++c) {
            float out[2 * P];
            bw::decoded_rows<P>(nb, clear, d0v, xb + c * nbx, xd + c * nbx, out);
            for (size_t j = 0; j < 2 * P && g + j < r1; ++j) y[c * ldy + g + j] = out[j];
        }
    }
}

// Several columns at avx512vnni: spans of groups of four rows (two pairs), each group's bits and
// scales gathered once, then the columns without a -128 quant and with finite scales in tiles of
// four (vnni::tile_rows), the others one at a time through the non-VNNI loop; a short last group
// repeats its last row. With more than two tiles of columns (a prompt), a span is up to
// SPAN_GROUPS groups and the tiles run over TILE_BLOCKS blocks of the rows at a time, a tile of
// columns over every group of the span before the next tile: the tile's records of those blocks
// (20 KiB) are then read from the L1 cache by all the span's groups, where tiles over whole rows
// read every column's records (320 bytes a block: 2 MiB for 64 columns of 12,288) again for each
// group, from L2 or beyond. Each group and tile carries its accumulators from one range of blocks
// to the next in memory, unchanged. With fewer columns (decode batches), whose records stay in L2,
// a span is one group over whole rows. Either way the first tile's calls prefetch the next span's
// rows, spread over their blocks, so that its gathering, which has no arithmetic beside it, finds
// them in the cache.
constexpr size_t SPAN_GROUPS = 8, TILE_BLOCKS = 16;

void tiles_vnni(const BlockQ1_0* wb, size_t nb, size_t r0, size_t r1, const BlockQ8_0* xb, size_t nbx,
                const Prepared& p, size_t ncols, float* y, size_t ldy) {
    const float* xd = p.part<float>(0);
    const uint8_t* has_m128 = p.part<uint8_t>(2);
    const uint8_t* rec = p.part<uint8_t>(3);
    const uint8_t* finite = p.part<uint8_t>(4);
    constexpr int P = 2, C = 4;
    struct Scratch {
        AlignedScratch bits;               // per group, pair, block and sub-block: both rows' 32 bits
        AlignedScratch d0s;                // per group, pair and block: both rows' scales
        AlignedScratch carry;              // per group and tile: the accumulators between ranges
        std::vector<size_t> tiled, other;  // the columns the tiles take, and the others
        std::vector<const uint8_t*> xr;    // per tiled column: its records (Q1_TILE_REC)
    };
    static thread_local Scratch tls;
    Scratch& s = tls;  // once: each use of a thread_local with a constructor goes through a wrapper
    s.tiled.clear(), s.other.clear(), s.xr.clear();
    for (size_t c = 0; c < ncols; ++c) {
        if (has_m128[c] || !finite[c]) {
            s.other.push_back(c);
            continue;
        }
        s.tiled.push_back(c);
        s.xr.push_back(rec + c * nb * Q1_TILE_REC);
    }
    const size_t tiles = (s.tiled.size() + C - 1) / C;
    const bool spans = tiles > 2;
    const size_t span_groups = spans ? SPAN_GROUPS : 1, range = spans ? TILE_BLOCKS : nb;
    const size_t ranges = (nb + range - 1) / range, span_rows = span_groups * 2 * P;
    const size_t gbits = P * nb * 4, gd0s = P * nb * 2, tcarry = P * C * 16;
    uint64_t* const bits_all = s.bits.get<uint64_t>(span_groups * gbits);
    float* const d0s_all = s.d0s.get<float>(span_groups * gd0s);
    float* const carry_all = ranges > 1 ? s.carry.get<float>(span_groups * tiles * tcarry) : nullptr;
    // Word w of two blocks' interleaved bits: block w / 16, sub-block w % 16 / 4, and of its four
    // words row A's two (w % 4 < 2) then row B's; source words 0-31 are row A's, 32-63 row B's.
    alignas(64) uint16_t bw[32], sw[32] = {0, 32, 9, 41};  // sw: A's scale, B's, then the next block's
    for (int w = 0; w < 32; ++w) bw[w] = uint16_t((w % 4 < 2 ? 0 : 32) + 9 * (w / 16) + 1 + 2 * (w % 16 / 4) + w % 2);
    const __m512i pair_bits = _mm512_load_si512(bw), pair_scales2 = _mm512_load_si512(sw);
    // Row j of the group starting at row g (a short last group repeats its last row).
    auto row = [&](size_t g, size_t j) { return wb + (g + j < r1 ? g + j : r1 - 1) * nb; };
    for (size_t s0 = r0; s0 < r1; s0 += span_rows) {
        const size_t groups = std::min(span_groups, (r1 - s0 + 2 * P - 1) / (2 * P));
        // The next span's rows (contiguous), a slice for each of the first tile's calls.
        const size_t next0 = std::min(r1, s0 + span_rows), next1 = std::min(r1, s0 + 2 * span_rows);
        const char* pf = (const char*)(wb + next0 * nb);
        const size_t pf_bytes = (next1 - next0) * nb * sizeof(BlockQ1_0), calls = ranges * groups;
        // Per group, pair and block: the two rows' sign bits interleaved four bytes at a time (one
        // 64-bit word per sub-block, row A's bits low) and their two scales. Two blocks at a time
        // from one load per row: a block is nine 16-bit words (the scale, then the bits), so one
        // word permutation of the two rows' 36 bytes gives both blocks' interleaved bits, and
        // another their four scales.
        for (size_t gi = 0; gi < groups; ++gi) {
            uint64_t* const bits = bits_all + gi * gbits;
            float* const d0s = d0s_all + gi * gd0s;
            for (int j = 0; j < P; ++j) {
                const BlockQ1_0 *ra = row(s0 + gi * 2 * P, 2 * j), *rb = row(s0 + gi * 2 * P, 2 * j + 1);
                size_t ib = 0;
                for (; ib + 2 <= nb; ib += 2) {
                    __m512i a, b;
                    if (ib + 4 <= nb) {  // 64 bytes from block ib stay inside the row
                        a = _mm512_loadu_si512(ra + ib), b = _mm512_loadu_si512(rb + ib);
                    } else {
                        a = _mm512_maskz_loadu_epi8(0xfffffffffull, ra + ib), b = _mm512_maskz_loadu_epi8(0xfffffffffull, rb + ib);
                    }
                    _mm512_storeu_si512(bits + (j * nb + ib) * 4, _mm512_permutex2var_epi16(a, pair_bits, b));
                    const __m512i d = _mm512_permutex2var_epi16(a, pair_scales2, b);
                    _mm_storeu_ps(d0s + (j * nb + ib) * 2, _mm_cvtph_ps(_mm512_castsi512_si128(d)));
                }
                for (; ib < nb; ++ib) {
                    const __m128i a = _mm_loadu_si128((const __m128i*)ra[ib].qs);
                    const __m128i b = _mm_loadu_si128((const __m128i*)rb[ib].qs);
                    _mm_storeu_si128((__m128i*)(bits + (j * nb + ib) * 4), _mm_unpacklo_epi32(a, b));
                    _mm_storeu_si128((__m128i*)(bits + (j * nb + ib) * 4 + 2), _mm_unpackhi_epi32(a, b));
                    d0s[(j * nb + ib) * 2] = _cvtsh_ss(ra[ib].d);
                    d0s[(j * nb + ib) * 2 + 1] = _cvtsh_ss(rb[ib].d);
                }
            }
        }
        float out[C * 2 * P];
        for (size_t ib0 = 0; ib0 < nb; ib0 += range) {
            const size_t ib1 = std::min(nb, ib0 + range);
            for (size_t t = 0; t < tiles; ++t) {
                const size_t n = std::min<size_t>(C, s.tiled.size() - t * C);
                const uint8_t* const* xr = s.xr.data() + t * C;
                for (size_t gi = 0; gi < groups; ++gi) {
                    const uint64_t* bits = bits_all + gi * gbits;
                    const float* d0s = d0s_all + gi * gd0s;
                    float* carry = carry_all ? carry_all + (gi * tiles + t) * tcarry : nullptr;
                    vnni::Ahead ahead;
                    if (t == 0 && pf_bytes) {
                        const size_t call = ib0 / range * groups + gi;
                        const size_t a0 = pf_bytes * call / calls, a1 = pf_bytes * (call + 1) / calls;
                        ahead = {pf + a0, pf + a1, (a1 - a0 + (ib1 - ib0) * 64 - 1) / ((ib1 - ib0) * 64) * 64};
                    }
                    switch (n) {
                        case C: vnni::tile_rows<P, C>(nb, ib0, ib1, bits, d0s, xr, carry, ahead, out); break;
                        case 3: vnni::tile_rows<P, 3>(nb, ib0, ib1, bits, d0s, xr, carry, ahead, out); break;
                        case 2: vnni::tile_rows<P, 2>(nb, ib0, ib1, bits, d0s, xr, carry, ahead, out); break;
                        default: vnni::tile_rows<P, 1>(nb, ib0, ib1, bits, d0s, xr, carry, ahead, out); break;
                    }
                    if (ib1 < nb) continue;
                    const size_t g = s0 + gi * 2 * P;
                    for (size_t c = 0; c < n; ++c)
                        for (size_t j = 0; j < 2 * P && g + j < r1; ++j) y[s.tiled[t * C + c] * ldy + g + j] = out[c * 2 * P + j];
                }
            }
        }
        for (size_t gi = 0; gi < groups && !s.other.empty(); ++gi) {
            const size_t g = s0 + gi * 2 * P;
            const BlockQ1_0* rows[2 * P];
            for (size_t j = 0; j < 2 * P; ++j) rows[j] = row(g, j);
            for (size_t c : s.other) {
                bw::decode_rows<P>(nb, rows, xb + c * nbx, xd + c * nbx, nullptr, out);
                for (size_t j = 0; j < 2 * P && g + j < r1; ++j) y[c * ldy + g + j] = out[j];
            }
        }
    }
}

}  // namespace

void q1_0_rows_avx512(const BlockQ1_0* wb, size_t cols, size_t r0, size_t r1, const BlockQ8_0* xb, const Prepared& p,
                      size_t ncols, float* y, size_t ldy) {
    const size_t nb = cols / QK1_0, nbx = cols / QK8_0;
    const bool vnni = p.isa == Isa::Avx512Vnni;
    const float* xd = p.part<float>(0);
    const int32_t* negt = vnni ? p.part<int32_t>(1) : nullptr;
    const uint8_t* has_m128 = vnni ? p.part<uint8_t>(2) : nullptr;
    if (ncols > 1 && vnni) return tiles_vnni(wb, nb, r0, r1, xb, nbx, p, ncols, y, ldy);
    if (ncols > 1) {
        // Eight rows share each column load while their decoded bits fit in about 16 KiB.
        if (nb <= 16) batch<4>(wb, nb, r0, r1, xb, nbx, xd, ncols, y, ldy);
        else batch<2>(wb, nb, r0, r1, xb, nbx, xd, ncols, y, ldy);
        return;
    }
    // One column: four rows at a time (two registers of two rows), each activation load shared.
    const bool use_vnni = vnni && !has_m128[0];
    for (size_t g = r0; g < r1; g += 4) {
        const BlockQ1_0* rows[4];
        for (size_t j = 0; j < 4; ++j) rows[j] = wb + (g + j < r1 ? g + j : r1 - 1) * nb;
        float out[4];
        if (use_vnni) vnni::decode_rows<2>(nb, rows, xb, xd, negt, out);
        else bw::decode_rows<2>(nb, rows, xb, xd, nullptr, out);
        for (size_t j = 0; j < 4 && g + j < r1; ++j) y[g + j] = out[j];
    }
}

}  // namespace bankml::quant::detail
#pragma GCC pop_options
#endif
