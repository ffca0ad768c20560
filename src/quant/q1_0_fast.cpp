// The AVX2 Q1_0 x Q8_0 kernels. Same bits as vec_dot_q1_0_ref because each step is the same
// operation on the same values: the eight int32 lanes are exact sums of the same four +-q bytes
// (psignb negation wraps -128 to -128 like the reference's int8 negation), converted exactly to
// f32; then the same mul, fma(d1, s, ab), fma(d0, ab, acc) per lane and the same horizontal order.
// Only the bookkeeping differs: Q8_0 scales are converted to f32 once per call, and for several
// columns four rows' sign bits are decoded once into sign bytes reused by every column. Where the
// CPU has AVX-VNNI, the lane sums come from one vpdpbusd instead (see dot4_vnni for the identity).
#pragma GCC optimize("fp-contract=off")
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/f16.h"
#include "core/kernels.h"
#include "quant/avx2.h"
#include "quant/kernels_impl.h"


namespace bankml::quant::detail {

// q1_0_prepare's per-block work with AVX2: the lane sums from maddubs(1, q) then madd(., 1) (exact
// int sums of the same four bytes), the -128 test from one byte compare; with `rec`, the tiles'
// records' quants and MAGIC_BITS - T lanes (kernels_impl.h).
BANKML_AVX2 static void prepare_blocks_avx2(const BlockQ8_0* x, size_t n, size_t nbx, float* d, int32_t* negt,
                                            uint8_t* has_m128, uint8_t* rec) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1), m128 = _mm256_set1_epi8(-128);
    const __m256i magic = _mm256_set1_epi32(Q1_MAGIC_BITS);
    for (size_t i = 0; i < n; ++i) {
        d[i] = _cvtsh_ss(x[i].d);
        if (!negt) continue;
        const __m256i q = _mm256_loadu_si256((const __m256i*)x[i].qs);
        const __m256i nt = _mm256_sub_epi32(_mm256_setzero_si256(),
                                            _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16));
        _mm256_storeu_si256((__m256i*)(negt + i * 8), nt);
        if (rec) {
            uint8_t* r = rec + i / 4 * Q1_TILE_REC + i % 4 * 64;
            _mm256_store_si256((__m256i*)r, q);
            _mm256_store_si256((__m256i*)(r + 32), _mm256_add_epi32(magic, nt));
        }
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(q, m128))) has_m128[i / nbx] = 1;
    }
}

// Parts: 0 the f32 of every Q8_0 scale (all columns); with VNNI or at avx2, 1 each sub-block's eight
// negated lane sums -T of its quants and 2 per column whether it holds a -128 quant (then a loop
// with psignb runs it: the identity below does not reproduce the -(-128) wrap). At avx512vnni with
// several columns, for the tiles of q1_0_avx512.cpp, and at avx2 for its identity loops
// (dot4_ident, rows_ident): 3 the records of kernels_impl.h (per column and weight block: the
// four sub-blocks' quants, MAGIC_BITS - T lanes, scales and scales times -MAGIC), and 4 per column
// whether its scales are all finite. The values do not depend on the CPU; the AVX2 loop computes
// them where the CPU has AVX2.
static bool q1_0_tiles(const Prepared& p) { return (p.isa == Isa::Avx512Vnni && p.ncols > 1) || p.isa == Isa::Avx2; }
static bool q1_0_sums(const Prepared& p) { return p.isa == Isa::AvxVnni || p.isa == Isa::Avx512Vnni || q1_0_tiles(p); }
// And 5, at avx2 with several columns, the exact blocks' records (exact_record).
static bool q1_0_exact(const Prepared& p) { return p.isa == Isa::Avx2 && p.ncols > 1; }

// When the reference's float steps in a weight block are exact, they can be integer steps. Per lane
// j the reference makes ab = d1_0·s_0, then ab = fma(d1_k, s_k, ab) for k = 1..3 (s_k: the lane's
// exact integer sum of four ±q of sub-block k, d1_k: that sub-block's f16 scale). Write each d1_k
// as n_k·2^E_k (n_k an integer of at most 11 bits with the sign, E_k its exponent less 10; -24 for
// a subnormal) and u = 2^min E_k over the nonzero n_k: every term d1_k·s_k is then the integer
// M_k·s_k (M_k = n_k·2^(E_k - Emin)) times u, and so is every partial sum. If
// Σ_k |M_k|·Σ_lane |q| <= 2^24 for every lane, each partial sum is an integer multiple of u of at
// most 2^24 units, a float exactly: the reference's mul and fma never round, and its ab is u times
// the int32 S = Σ_k M_k·s_k. With a = 2 where a weight's bit is set and 0 where clear,
// madd(maddubs(a, q_k), M_k pairs) = M_k·2·(sum of the set q) per lane and s_k = 2·(that sum) - T_k,
// so S = -C + Σ_k madd(...) with C = Σ_k M_k·T_k per lane; |M_k| <= 32767 keeps M_k an int16, and
// the int32 partial sums stay far inside int32's range. cvt(S)·u is then the reference's ab to the
// bit (a zero may differ in sign, which cannot reach the output: see dot4_ident). A block with an
// infinite or NaN scale never qualifies. Four Q8_0 blocks x and their lanes' -T (part 1) in, one
// record (Q1_EXACT_REC) out.
//
// The loop halves the multiplies by pairing sub-blocks: madd multiplies each int16 by its own
// factor, so one madd by the pairs (M_0, M_1) takes sub-block 0's lane sum from a lane's low int16
// and sub-block 1's from its high one. The quants are stored paired at 64: vector v of the four
// holds, in the four bytes of lane j, bytes 4j + 2h and 4j + 2h + 1 of sub-block 2p, then the same
// two of sub-block 2p + 1 (p = v / 2, h = v % 2), and rows_avx2 pairs each row's a-bytes alike, so
// maddubs of vectors 0 and 1 added (each int16 at most 4·2·127, no saturation) gives in lane j
// 2·(sub-block 0's set sum) low and 2·(sub-block 1's) high, and madd by (M_0, M_1) their terms.
BANKML_AVX2 static void exact_record(const BlockQ8_0* x, const int32_t* negt, uint8_t* out) {
    std::memset(out, 0, Q1_EXACT_REC);
    int64_t n[4];
    int e[4], emin = 0;
    bool any = false;
    for (size_t k = 0; k < 4; ++k) {
        const uint32_t h = x[k].d, exp = h >> 10 & 31, mant = h & 1023;
        if (exp == 31) return;
        n[k] = exp ? int64_t(mant | 1024) : int64_t(mant);
        if (h & 0x8000) n[k] = -n[k];
        e[k] = exp ? int(exp) - 25 : -24;
        if (n[k] != 0 && (!any || e[k] < emin)) emin = e[k], any = true;
    }
    int64_t m[4];
    for (size_t k = 0; k < 4; ++k) {
        m[k] = n[k] * (int64_t(1) << (n[k] ? e[k] - emin : 0));
        if (m[k] > 32767 || m[k] < -32767) return;
    }
    // Per lane: the bound Σ_k |M_k|·L_k (L: the four quants' magnitudes' sum, |-128| = 128) and
    // -C = Σ_k M_k·(-T_k), in int32: each term is at most 32767·512 < 2^24 in magnitude.
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i q[4], bound = _mm256_setzero_si256(), negc = _mm256_setzero_si256();
    for (size_t k = 0; k < 4; ++k) {
        q[k] = _mm256_loadu_si256((const __m256i*)x[k].qs);
        const __m256i lk = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q[k]), ones8), ones16);
        bound = _mm256_add_epi32(bound, _mm256_mullo_epi32(_mm256_set1_epi32(int32_t(m[k] < 0 ? -m[k] : m[k])), lk));
        negc = _mm256_add_epi32(negc, _mm256_mullo_epi32(_mm256_set1_epi32(int32_t(m[k])),
                                                         _mm256_loadu_si256((const __m256i*)(negt + k * 8))));
    }
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(bound, _mm256_set1_epi32(1 << 24)))) return;
    const uint8_t magic = _mm256_movemask_epi8(_mm256_cmpgt_epi32(bound, _mm256_set1_epi32((1 << 22) - 1))) == 0;
    _mm256_storeu_si256((__m256i*)out, negc);
    for (size_t pr = 0; pr < 2; ++pr) {
        const uint32_t pair = uint32_t(uint16_t(int16_t(m[2 * pr]))) | uint32_t(uint16_t(int16_t(m[2 * pr + 1]))) << 16;
        std::memcpy(out + 32 + 4 * pr, &pair, 4);
    }
    for (size_t pr = 0; pr < 2; ++pr) {  // vector 2pr + h: in lane j, bytes 4j + 2h, +1 of sub-block 2pr, then of 2pr + 1
        const __m256i lo = q[2 * pr], hi = q[2 * pr + 1];
        _mm256_storeu_si256((__m256i*)(out + 64 + 64 * pr), _mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA));
        _mm256_storeu_si256((__m256i*)(out + 96 + 64 * pr), _mm256_blend_epi16(_mm256_srli_epi32(lo, 16), hi, 0xAA));
    }
    const float u = std::ldexp(1.0f, emin), nmu = -Q1_MAGIC * u;
    std::memcpy(out + 48, &u, 4);
    out[52] = 1;
    out[53] = magic;
    std::memcpy(out + 56, &nmu, 4);
}

// Per column of [c0, c1) which exact loop its blocks allow (part 6); a column takes the magic one
// only where every block does, and then each block's lanes become the bits of MAGIC·u less C
// (MAGIC·u = -(the record's -MAGIC·u), a normal f32 for every u a record holds: 2^-24 <= u <= 2^5).
static void exact_columns(uint8_t* rec, size_t nb, size_t c0, size_t c1, uint8_t* kind) {
    for (size_t c = c0; c < c1; ++c) {
        uint8_t* col = rec + c * nb * Q1_EXACT_REC;
        uint8_t ok = 1, magic = 1;
        for (size_t ib = 0; ib < nb; ++ib) ok &= col[ib * Q1_EXACT_REC + 52], magic &= col[ib * Q1_EXACT_REC + 53];
        kind[c] = !ok ? Q1_EXACT_NONE : magic ? Q1_EXACT_MAGIC : Q1_EXACT_CVT;
        if (kind[c] == Q1_EXACT_MAGIC)
            for (size_t ib = 0; ib < nb; ++ib) {
                int32_t magic_u;
                std::memcpy(&magic_u, col + ib * Q1_EXACT_REC + 56, 4);
                magic_u &= 0x7fffffff;
                for (size_t lane = 0; lane < 8; ++lane) {
                    int32_t v;
                    std::memcpy(&v, col + ib * Q1_EXACT_REC + 4 * lane, 4);
                    v += magic_u;
                    std::memcpy(col + ib * Q1_EXACT_REC + 4 * lane, &v, 4);
                }
            }
    }
}

void q1_0_layout(size_t cols, size_t ncols, Isa isa, Prepared& p) {
    p.isa = isa, p.cols = cols, p.ncols = ncols;
    const size_t n = cols / QK8_0 * ncols;
    const bool tiles = q1_0_tiles(p), sums = q1_0_sums(p);
    p.layout({n * sizeof(float), sums ? n * 8 * sizeof(int32_t) : 0, ncols, tiles ? n / 4 * Q1_TILE_REC : 0,
              tiles ? ncols : 0, q1_0_exact(p) ? n / 4 * Q1_EXACT_REC : 0, q1_0_exact(p) ? ncols : 0});
}

// Columns [c0, c1): their blocks from c0 · nbx on (a weight block is four Q8_0 blocks of one
// column, so the records start on a record).
void q1_0_prepare(const BlockQ8_0* x0, Prepared& p, size_t c0, size_t c1) {
    if (c0 >= c1) return;
    const size_t nbx = p.cols / QK8_0, first = c0 * nbx, n = (c1 - c0) * nbx;
    const bool tiles = q1_0_tiles(p), sums = q1_0_sums(p);
    const BlockQ8_0* x = x0 + first;
    float* d = p.part<float>(0) + first;
    int32_t* negt = sums ? p.part<int32_t>(1) + first * 8 : nullptr;
    uint8_t* has_m128 = p.part<uint8_t>(2) + c0;
    uint8_t* rec = tiles ? p.part<uint8_t>(3) + first / 4 * Q1_TILE_REC : nullptr;
    std::memset(has_m128, 0, c1 - c0);
    if (isa_supported(Isa::Avx2)) {
        prepare_blocks_avx2(x, n, nbx, d, negt, has_m128, rec);
    } else {
        for (size_t i = 0; i < n; ++i) d[i] = f16_to_f32(x[i].d);
        if (sums)
            for (size_t i = 0; i < n; ++i) {
                for (size_t lane = 0; lane < 8; ++lane) {
                    int32_t t = 0;
                    for (size_t e = lane * 4; e < lane * 4 + 4; ++e) {
                        t += x[i].qs[e];
                        if (x[i].qs[e] == -128) has_m128[i / nbx] = 1;
                    }
                    negt[i * 8 + lane] = -t;
                    if (rec) {
                        const int32_t v = Q1_MAGIC_BITS - t;
                        std::memcpy(rec + i / 4 * Q1_TILE_REC + i % 4 * 64 + 32 + lane * 4, &v, 4);
                    }
                }
                if (rec) std::memcpy(rec + i / 4 * Q1_TILE_REC + i % 4 * 64, x[i].qs, QK8_0);
            }
    }
    if (!tiles) return;
    uint8_t* finite = p.part<uint8_t>(4) + c0;
    std::memset(finite, 1, c1 - c0);
    for (size_t i = 0; i < n; ++i) {
        const float ndm = d[i] * -Q1_MAGIC;
        std::memcpy(rec + i / 4 * Q1_TILE_REC + 256 + i % 4 * 4, &d[i], 4);
        std::memcpy(rec + i / 4 * Q1_TILE_REC + 272 + i % 4 * 4, &ndm, 4);
        if (!std::isfinite(d[i])) finite[i / nbx] = 0;
    }
    if (q1_0_exact(p)) {
        for (size_t i = 0; i < n; i += 4)
            exact_record(x + i, negt + i * 8, p.part<uint8_t>(5) + (first + i) / 4 * Q1_EXACT_REC);
        exact_columns(p.part<uint8_t>(5), nbx / 4, c0, c1, p.part<uint8_t>(6));
    }
}

// Byte e: -1 where bit e of the sub-block's 32 sign bits is clear (weight -d), +1 where set.
BANKML_AVX2 static inline __m256i signs(const uint8_t* bits4) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    uint32_t b;
    std::memcpy(&b, bits4, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(b)), shuf);
    const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), _mm256_setzero_si256());
    return _mm256_or_si256(clear, _mm256_set1_epi8(1));
}

// Eight exact lane sums of the sub-block's +-q: lane j sums bytes 4j..4j+3. psignb negates where
// the sign byte is -1, and -(-128) wraps to -128 as in the reference.
BANKML_AVX2 static inline __m256 lane_sums(const int8_t* qs, __m256i sg) {
    const __m256i sq = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)qs), sg);
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), sq);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
}

BANKML_AVX2 static inline float hsum(__m256 acc) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));  // a_i + a_{i+4}
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));                                               // (0+4)+(2+6), (1+5)+(3+7)
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// One row, one column: decode each sub-block's bits as it goes (decode-shaped products).
BANKML_AVX2 static float dot_row(size_t nb, const BlockQ1_0* w, const BlockQ8_0* x, const float* xd) {
    __m256 acc = _mm256_setzero_ps();
    for (size_t ib = 0; ib < nb; ++ib) {
        const __m256 d0 = _mm256_set1_ps(_cvtsh_ss(w[ib].d));
        const BlockQ8_0* xb = x + ib * 4;
        const float* db = xd + ib * 4;
        __m256 ab = _mm256_mul_ps(_mm256_set1_ps(db[0]), lane_sums(xb[0].qs, signs(w[ib].qs)));
        ab = _mm256_fmadd_ps(_mm256_set1_ps(db[1]), lane_sums(xb[1].qs, signs(w[ib].qs + 4)), ab);
        ab = _mm256_fmadd_ps(_mm256_set1_ps(db[2]), lane_sums(xb[2].qs, signs(w[ib].qs + 8)), ab);
        ab = _mm256_fmadd_ps(_mm256_set1_ps(db[3]), lane_sums(xb[3].qs, signs(w[ib].qs + 12)), ab);
        acc = _mm256_fmadd_ps(d0, ab, acc);
    }
    return hsum(acc);
}

// Four rows whose masks and scales were decoded once (masks: row j's at masks + j * nb * 128),
// against one column: each quant load serves four rows; each row keeps its own ab and acc, so every
// output has exactly the arithmetic of dot_row.
BANKML_AVX2 static void dot4_decoded(size_t nb, const uint8_t* masks, const float* d0s, const BlockQ8_0* x,
                                const float* xd, float* out) {
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const size_t mstride = nb * 128;
    for (size_t ib = 0; ib < nb; ++ib) {
        __m256 ab[4];
#pragma GCC unroll 4
        for (size_t k = 0; k < 4; ++k) {
            const __m256i q = _mm256_loadu_si256((const __m256i*)x[ib * 4 + k].qs);
            const __m256 d1 = _mm256_set1_ps(xd[ib * 4 + k]);
#pragma GCC unroll 4
            for (size_t j = 0; j < 4; ++j) {
                const __m256i m = _mm256_loadu_si256((const __m256i*)(masks + j * mstride + ib * 128 + k * 32));
                const __m256i s16 = _mm256_maddubs_epi16(ones8, _mm256_sign_epi8(q, m));
                const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, ones16));
                ab[j] = k == 0 ? _mm256_mul_ps(d1, s) : _mm256_fmadd_ps(d1, s, ab[j]);
            }
        }
#pragma GCC unroll 4
        for (size_t j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d0s[j * nb + ib]), ab[j], acc[j]);
    }
    for (size_t j = 0; j < 4; ++j) out[j] = hsum(acc[j]);
}

// The identity loops of the avx2 level (no VNNI): with a = 2 where a weight's bit is set and 0
// where clear, madd(maddubs(a, q), 1) = 2 * sum(set q) per lane (|pair| <= 512, no saturation), and
// adding the record's MAGIC_BITS - T lanes gives the bits of the f32 MAGIC + s, s = sum(+-q)
// exactly (kernels_impl.h): no psignb and no int-to-float conversion, and the addition may run on
// any vector port. Then per lane, as in the AVX-512 VNNI tiles (q1_0_avx512.inc's tile_rows):
//   k = 0:  ab = fma(d1, f, -(d1 * MAGIC)) = d1 * s, which is exact, so the reference's d1 * s up to
//           the sign of a zero, which cannot reach the output (acc starts at +0 and is never -0);
//   k > 0:  ab = fma(d1, f - MAGIC, ab), f - MAGIC = s exactly: the reference's step;
// then acc = fma(d0, ab, acc) and hsum. Valid for columns without a -128 quant (the identity gives
// +128 where the reference wraps to -128) and with finite scales (d1 * MAGIC must be finite); the
// caller runs the others through dot4_decoded / dot_row. Four rows whose a-bytes were made once
// (twos: row j's at twos + j * nb * 128) against one column's records (Q1_TILE_REC per block).
BANKML_AVX2 static void dot4_ident(size_t nb, const uint8_t* twos, const float* d0s, const uint8_t* rec, float* out) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256 magic = _mm256_set1_ps(Q1_MAGIC);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const size_t mstride = nb * 128;
    for (size_t ib = 0; ib < nb; ++ib) {
        const uint8_t* r = rec + ib * Q1_TILE_REC;
        __m256 ab[4];
#pragma GCC unroll 4
        for (size_t k = 0; k < 4; ++k) {
            const __m256i q = _mm256_load_si256((const __m256i*)(r + 64 * k));
            const __m256i t0 = _mm256_load_si256((const __m256i*)(r + 64 * k + 32));
            const __m256 d1 = _mm256_broadcast_ss((const float*)(r + 256 + 4 * k));
#pragma GCC unroll 4
            for (size_t j = 0; j < 4; ++j) {
                const __m256i a = _mm256_loadu_si256((const __m256i*)(twos + j * mstride + ib * 128 + k * 32));
                const __m256i s2 = _mm256_madd_epi16(_mm256_maddubs_epi16(a, q), ones16);
                const __m256 f = _mm256_castsi256_ps(_mm256_add_epi32(s2, t0));
                ab[j] = k == 0 ? _mm256_fmadd_ps(d1, f, _mm256_broadcast_ss((const float*)(r + 272)))
                               : _mm256_fmadd_ps(d1, _mm256_sub_ps(f, magic), ab[j]);
            }
        }
#pragma GCC unroll 4
        for (size_t j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d0s[j * nb + ib]), ab[j], acc[j]);
    }
    for (size_t j = 0; j < 4; ++j) out[j] = hsum(acc[j]);
}

// Paired vectors v, v + 1 (exact_record) of one row's a-bytes against a column's paired quants:
// per lane, 2·(the set quants' sum) of sub-block 2p low and of 2p + 1 high, times (M_2p, M_2p+1).
BANKML_AVX2 static inline __m256i exact_pair(const uint8_t* a, const uint8_t* q, __m256i m) {
    const __m256i lo = _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i*)a), _mm256_load_si256((const __m256i*)q));
    const __m256i hi =
        _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i*)(a + 32)), _mm256_load_si256((const __m256i*)(q + 32)));
    return _mm256_madd_epi16(_mm256_add_epi16(lo, hi), m);
}

// dot4_ident for a column whose every block qualifies (exact_record: its records at `exact`,
// Q1_EXACT_REC per block): each ab from the block's integer steps (four maddubs, two adds of int16
// and two madd a row and block, over the rows' paired a-bytes `paired`), then the same
// acc = fma(d0, ab, acc) and hsum. Only for the columns dot4_ident takes (no -128 quant, where
// 2·sum - T is not the reference's wrapped sum); a column with any other block runs dot4_ident
// whole. Not inlined: inside rows_avx2 its accumulators went to memory.
//
// With Magic (every block's bound under 2^22, the lanes the bits of MAGIC·u less C: exact_columns),
// the int32 sum is already the bits of the f32 (MAGIC + S)·u (the binade [2^23·u, 2^24·u) steps by
// u), and f + -MAGIC·u = S·u exactly (one rounding of a representable value; a zero is +0, whose
// sign cannot reach the output, as in dot4_ident): one add in place of the conversion and the
// multiply, and off the multiply ports that the byte products and the fma share.
//
// `n` neighbouring columns of that loop in one call (their records nb·Q1_EXACT_REC bytes apart,
// their four outputs `ldo` floats apart): one call and loop set-up for a run of columns.
template <bool Magic>
BANKML_AVX2 __attribute__((noinline)) static void dot4_exact(size_t nb, const uint8_t* paired, const float* d0s,
                                                             const uint8_t* exact, size_t n, float* out, size_t ldo) {
    const size_t mstride = nb * 128;
    for (size_t c = 0; c < n; ++c, exact += nb * Q1_EXACT_REC, out += ldo) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (size_t ib = 0; ib < nb; ++ib) {
            const uint8_t* e = exact + ib * Q1_EXACT_REC;
            int32_t mp[2];
            std::memcpy(mp, e + 32, 8);
            const __m256i m01 = _mm256_set1_epi32(mp[0]), m23 = _mm256_set1_epi32(mp[1]);
            const __m256 u_or_nmu = _mm256_broadcast_ss((const float*)(e + (Magic ? 56 : 48)));
#pragma GCC unroll 4
            for (size_t j = 0; j < 4; ++j) {
                const uint8_t* a = paired + j * mstride + ib * 128;
                const __m256i s = _mm256_add_epi32(_mm256_load_si256((const __m256i*)e),
                                                   _mm256_add_epi32(exact_pair(a, e + 64, m01), exact_pair(a + 64, e + 128, m23)));
                const __m256 ab = Magic ? _mm256_add_ps(_mm256_castsi256_ps(s), u_or_nmu)
                                        : _mm256_mul_ps(_mm256_cvtepi32_ps(s), u_or_nmu);
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d0s[j * nb + ib]), ab, acc[j]);
            }
        }
#pragma GCC unroll 4
        for (size_t j = 0; j < 4; ++j) out[j] = hsum(acc[j]);
    }
}

// The identity loop for one column (decode), R rows at a time (each quant load serves them all),
// the bits expanded as they are read: a = min(byte & bit, 1) is 1 where set and 0 where clear, so
// madd(maddubs(a, q), 2) = 2 * sum(set q); the rest is dot4_ident's, lane for lane.
template <int R>
BANKML_AVX2 static void rows_ident(size_t nb, const BlockQ1_0* const* w, const uint8_t* rec, float* out) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i ones8 = _mm256_set1_epi8(1), twos16 = _mm256_set1_epi16(2);
    const __m256 magic = _mm256_set1_ps(Q1_MAGIC);
    __m256 acc[R];
    for (int j = 0; j < R; ++j) acc[j] = _mm256_setzero_ps();
    for (size_t ib = 0; ib < nb; ++ib) {
        const uint8_t* r = rec + ib * Q1_TILE_REC;
        __m256 ab[R];
#pragma GCC unroll 4
        for (size_t k = 0; k < 4; ++k) {
            const __m256i q = _mm256_load_si256((const __m256i*)(r + 64 * k));
            const __m256i t0 = _mm256_load_si256((const __m256i*)(r + 64 * k + 32));
            const __m256 d1 = _mm256_broadcast_ss((const float*)(r + 256 + 4 * k));
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) {
                uint32_t b;
                std::memcpy(&b, w[j][ib].qs + 4 * k, 4);
                const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(int(b)), shuf), bit);
                const __m256i s2 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_min_epu8(v, ones8), q), twos16);
                const __m256 f = _mm256_castsi256_ps(_mm256_add_epi32(s2, t0));
                ab[j] = k == 0 ? _mm256_fmadd_ps(d1, f, _mm256_broadcast_ss((const float*)(r + 272)))
                               : _mm256_fmadd_ps(d1, _mm256_sub_ps(f, magic), ab[j]);
            }
        }
#pragma GCC unroll 4
        for (int j = 0; j < R; ++j) acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(w[j][ib].d)), ab[j], acc[j]);
    }
    for (int j = 0; j < R; ++j) out[j] = hsum(acc[j]);
}

// AVX-VNNI, four rows against one column. With a = 2 where a weight's bit is set and 0 where
// clear, vpdpbusd(-T, a, q) = 2 * sum(set q) - sum(all q) = sum(+-q) exactly, lane by lane (the
// same four bytes per lane); every float step is dot4_decoded's. Valid for columns without a
// -128 quant (the reference's -(-128) wraps to -128; this identity would give +128).
__attribute__((target("avx2,fma,f16c,avxvnni"))) static void dot4_vnni(size_t nb, const uint8_t* twos,
                                                                        const float* d0s, const BlockQ8_0* x,
                                                                        const int32_t* negt, const float* xd,
                                                                        float* out) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const size_t mstride = nb * 128;
    for (size_t ib = 0; ib < nb; ++ib) {
        __m256 ab[4];
#pragma GCC unroll 4
        for (size_t k = 0; k < 4; ++k) {
            const __m256i q = _mm256_loadu_si256((const __m256i*)x[ib * 4 + k].qs);
            const __m256i nt = _mm256_loadu_si256((const __m256i*)(negt + (ib * 4 + k) * 8));
            const __m256 d1 = _mm256_set1_ps(xd[ib * 4 + k]);
#pragma GCC unroll 4
            for (size_t j = 0; j < 4; ++j) {
                const __m256i a = _mm256_loadu_si256((const __m256i*)(twos + j * mstride + ib * 128 + k * 32));
                const __m256 s = _mm256_cvtepi32_ps(_mm256_dpbusd_avx_epi32(nt, a, q));
                ab[j] = k == 0 ? _mm256_mul_ps(d1, s) : _mm256_fmadd_ps(d1, s, ab[j]);
            }
        }
#pragma GCC unroll 4
        for (size_t j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d0s[j * nb + ib]), ab[j], acc[j]);
    }
    for (size_t j = 0; j < 4; ++j) out[j] = hsum(acc[j]);
}

// AVX-VNNI decode: the same identity as dot4_vnni (a = 2 where set, vpdpbusd(-T, a, q)), with the
// sign bits expanded as they are read. Same float steps as dot_row.
__attribute__((target("avx2,fma,f16c,avxvnni"))) static float dot_row_vnni(size_t nb, const BlockQ1_0* w,
                                                                            const BlockQ8_0* x, const int32_t* negt,
                                                                            const float* xd) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i two = _mm256_set1_epi8(2);
    __m256 acc = _mm256_setzero_ps();
    for (size_t ib = 0; ib < nb; ++ib) {
        __m256 ab;
#pragma GCC unroll 4
        for (size_t k = 0; k < 4; ++k) {
            uint32_t b;
            std::memcpy(&b, w[ib].qs + 4 * k, 4);
            const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(int(b)), shuf), bit);
            const __m256i a = _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), two);
            const __m256i q = _mm256_loadu_si256((const __m256i*)x[ib * 4 + k].qs);
            const __m256i nt = _mm256_loadu_si256((const __m256i*)(negt + (ib * 4 + k) * 8));
            const __m256 s = _mm256_cvtepi32_ps(_mm256_dpbusd_avx_epi32(nt, a, q));
            const __m256 d1 = _mm256_set1_ps(xd[ib * 4 + k]);
            ab = k == 0 ? _mm256_mul_ps(d1, s) : _mm256_fmadd_ps(d1, s, ab);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(w[ib].d)), ab, acc);
    }
    return hsum(acc);
}

BANKML_AVX2 static void rows_avx2(const BlockQ1_0* wb, size_t cols, size_t r0, size_t r1, const BlockQ8_0* xb,
                                  const Prepared& p, size_t ncols, float* y, size_t ldy) {
    const size_t nb = cols / QK1_0, nbx = cols / QK8_0;
    const bool vnni = p.isa == Isa::AvxVnni, ident = p.isa == Isa::Avx2;
    const float* xd = p.part<float>(0);
    const int32_t* negt = vnni ? p.part<int32_t>(1) : nullptr;
    const uint8_t* has_m128 = vnni || ident ? p.part<uint8_t>(2) : nullptr;
    const uint8_t* rec = ident ? p.part<uint8_t>(3) : nullptr;
    const uint8_t* finite = ident ? p.part<uint8_t>(4) : nullptr;
    const uint8_t* exact = q1_0_exact(p) ? p.part<uint8_t>(5) : nullptr;
    const uint8_t* exact_kind = exact ? p.part<uint8_t>(6) : nullptr;
    // Whether column c runs the VNNI or identity loop (else the psignb loop).
    auto twos_loop = [&](size_t c) { return (vnni && !has_m128[c]) || (ident && !has_m128[c] && finite[c]); };
    if (ncols == 1) {
        if (vnni && twos_loop(0))
            for (size_t r = r0; r < r1; ++r) y[r] = dot_row_vnni(nb, wb + r * nb, xb, negt, xd);
        else if (twos_loop(0)) {
            constexpr int R = 2;
            size_t r = r0;
            for (; r + R <= r1; r += R) {
                const BlockQ1_0* rows[R];
                for (int j = 0; j < R; ++j) rows[j] = wb + (r + j) * nb;
                rows_ident<R>(nb, rows, rec, y + r);
            }
            for (; r < r1; ++r) {
                const BlockQ1_0* row = wb + r * nb;
                rows_ident<1>(nb, &row, rec, y + r);
            }
        }
        else
            for (size_t r = r0; r < r1; ++r) y[r] = dot_row(nb, wb + r * nb, xb, xd);
        return;
    }
    // Several columns: decode four rows' sign bits once (32 sign bytes per 32 weights, the a-bytes
    // 2/0 for the VNNI and identity loops, and the same paired for the exact blocks) and run every
    // column over them; a short last group repeats its last row.
    // Each column's loop, chosen once a call; neighbouring columns of an exact loop run in one call.
    enum class Loop : uint8_t { vnni, magic, cvt, ident, decoded };
    static thread_local AlignedScratch loop_mem;
    Loop* const loop_of = loop_mem.get<Loop>(ncols);
    bool any_twos = false, any_signs = false, any_exact = false;
    for (size_t c = 0; c < ncols; ++c) {
        const uint8_t kind = exact ? exact_kind[c] : uint8_t(Q1_EXACT_NONE);
        loop_of[c] = !twos_loop(c)                 ? Loop::decoded
                     : vnni                        ? Loop::vnni
                     : kind == Q1_EXACT_MAGIC      ? Loop::magic
                     : kind != Q1_EXACT_NONE       ? Loop::cvt
                                                   : Loop::ident;
        if (loop_of[c] == Loop::magic || loop_of[c] == Loop::cvt) any_exact = true;
        else (loop_of[c] == Loop::decoded ? any_signs : any_twos) = true;
    }
    static thread_local AlignedScratch masks_mem, twos_mem, paired_mem, d0s_mem;
    uint8_t* const masks = any_signs ? masks_mem.get<uint8_t>(4 * nb * 128) : nullptr;
    uint8_t* const twos = any_twos ? twos_mem.get<uint8_t>(4 * nb * 128) : nullptr;
    uint8_t* const paired = any_exact ? paired_mem.get<uint8_t>(4 * nb * 128) : nullptr;
    float* const d0s = d0s_mem.get<float>(4 * nb);
    const __m256i one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
    // exact_record's pairing straight from the bits: byte 4j + b of vector (p, h) is 2 where weight
    // 4j + 2h + b % 2 of sub-block 2p + b / 2 is set, that is bit 4(j % 2) + 2h + b % 2 of the
    // sub-block's byte j / 2, found in the eight bytes of sub-blocks 2p, 2p + 1 at (b / 2)·4 + j / 2.
    alignas(32) uint8_t pair_idx[32], pair_bit[2][32];
    for (size_t pos = 0; pos < 32; ++pos) {
        const size_t j = pos / 4, b = pos % 4;
        pair_idx[pos] = uint8_t(b / 2 * 4 + j / 2);
        for (size_t h = 0; h < 2; ++h) pair_bit[h][pos] = uint8_t(1u << (4 * (j % 2) + 2 * h + b % 2));
    }
    const __m256i pidx = _mm256_load_si256((const __m256i*)pair_idx);
    const __m256i pbit[2] = {_mm256_load_si256((const __m256i*)pair_bit[0]), _mm256_load_si256((const __m256i*)pair_bit[1])};
    for (size_t g = r0; g < r1; g += 4) {
        for (size_t j = 0; j < 4; ++j) {
            const BlockQ1_0* row = wb + (g + j < r1 ? g + j : r1 - 1) * nb;
            for (size_t ib = 0; ib < nb; ++ib) {
                d0s[j * nb + ib] = _cvtsh_ss(row[ib].d);
                if (any_signs || any_twos)
                    for (size_t k = 0; k < 4; ++k) {
                        const size_t at = j * nb * 128 + ib * 128 + k * 32;
                        const __m256i sg = signs(row[ib].qs + 4 * k);
                        if (any_signs) _mm256_storeu_si256((__m256i*)(masks + at), sg);
                        if (any_twos) _mm256_storeu_si256((__m256i*)(twos + at), _mm256_add_epi8(sg, one));  // +1 -> 2, -1 -> 0
                    }
                if (any_exact)
                    for (size_t pr = 0; pr < 2; ++pr) {
                        int64_t b8;
                        std::memcpy(&b8, row[ib].qs + 8 * pr, 8);
                        const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x(b8), pidx);
                        uint8_t* at = paired + j * nb * 128 + ib * 128 + pr * 64;
                        for (size_t h = 0; h < 2; ++h)
                            _mm256_storeu_si256((__m256i*)(at + 32 * h),
                                                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, pbit[h]), pbit[h]), two));
                    }
            }
        }
        const bool whole = g + 4 <= r1;
        for (size_t c = 0, end; c < ncols; c = end) {
            float tail[4];
            float* out = whole ? y + c * ldy + g : tail;  // a whole group's outputs straight to y
            const Loop loop = loop_of[c];
            end = c + 1;
            if (whole && (loop == Loop::magic || loop == Loop::cvt))
                while (end < ncols && loop_of[end] == loop) ++end;
            switch (loop) {
                case Loop::vnni: dot4_vnni(nb, twos, d0s, xb + c * nbx, negt + c * nbx * 8, xd + c * nbx, out); break;
                case Loop::magic: dot4_exact<true>(nb, paired, d0s, exact + c * nb * Q1_EXACT_REC, end - c, out, ldy); break;
                case Loop::cvt: dot4_exact<false>(nb, paired, d0s, exact + c * nb * Q1_EXACT_REC, end - c, out, ldy); break;
                case Loop::ident: dot4_ident(nb, twos, d0s, rec + c * nb * Q1_TILE_REC, out); break;
                case Loop::decoded: dot4_decoded(nb, masks, d0s, xb + c * nbx, xd + c * nbx, out); break;
            }
            if (!whole)
                for (size_t j = 0; g + j < r1; ++j) y[c * ldy + g + j] = tail[j];
        }
    }
}

void q1_0_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                    float* y, size_t ldy) {
    const auto* wb = static_cast<const BlockQ1_0*>(w);
    const auto* xb = static_cast<const BlockQ8_0*>(x);
    if (p.isa >= Isa::Avx512) return q1_0_rows_avx512(wb, cols, r0, r1, xb, p, ncols, y, ldy);
    rows_avx2(wb, cols, r0, r1, xb, p, ncols, y, ldy);
}

}  // namespace bankml::quant::detail
#endif
