#!/bin/sh
# What bounds the AVX2 prompt loop on this CPU: instruction throughputs and four loop forms per
# row and weight block (128 weights), all with their data in L1, in core cycles.
#
#   scripts/avx2-loop-floor.sh [CXX]
#
# The loops are standalone copies of the steps, not bankml's kernels (src/quant/q1_0_fast.cpp):
#   magic   bankml's exact loop over four rows and one column: per row and block four vpmaddubsw
#           of the paired a-bytes and quants, two int16 adds, two vpmaddwd by the scales' pairs,
#           two int32 adds, f + -MAGIC*u, fma(d0, ab, acc);
#   bytes   the same loads and four vpmaddubsw with int16 adds only (the byte products alone:
#           128 of them need four vpmaddubsw whatever else the loop does);
#   tables  a table-lookup form (as T-MAC): per column, lane and sub-block a 16-entry table of the
#           four quants' signed sums (low and high bytes), looked up by 32 rows' 4-bit weight
#           groups with vpshufb, unpacked to int16 pairs, vpmaddwd by the scales' pairs, then the
#           magic loop's add and fma per row and lane;
#   ggml    ggml's AVX2 vec_dot_q1_0_q8_0 steps per sub-block of 32 (one row, one column): bits to
#           bytes (broadcast, pshufb, and, cmpeq), sign (xor, sub), vpmaddubsw, vpmaddwd, cvt, fma.
# The clock comes from a chain of dependent register adds (one a cycle). The lanes start at the
# bits of 1.5*2^23*u less a small C, as bankml's do, so no float step meets a subnormal (which costs
# a microcode assist on some cores).
set -eu
CXX=${1:-${CXX:-g++}}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/floor.cpp" <<'EOF'
#include <immintrin.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using Clock = std::chrono::steady_clock;
template <typename F> static double ns_per(long n, F f) {
    double best = 1e30;
    for (int t = 0; t < 5; ++t) {
        const auto t0 = Clock::now();
        f(n);
        const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(n);
        if (ns < best) best = ns;
    }
    return best;
}

#define X8(op) op "%%ymm8,%%ymm9,%%ymm0\n\t" op "%%ymm8,%%ymm9,%%ymm1\n\t" op "%%ymm8,%%ymm9,%%ymm2\n\t" op \
    "%%ymm8,%%ymm9,%%ymm3\n\t" op "%%ymm8,%%ymm9,%%ymm4\n\t" op "%%ymm8,%%ymm9,%%ymm5\n\t" op               \
    "%%ymm8,%%ymm9,%%ymm6\n\t" op "%%ymm8,%%ymm9,%%ymm7\n\t"
#define X4PAIR(a, b) a "%%ymm8,%%ymm9,%%ymm0\n\t" b "%%ymm8,%%ymm9,%%ymm1\n\t" a "%%ymm8,%%ymm9,%%ymm2\n\t" b \
    "%%ymm8,%%ymm9,%%ymm3\n\t" a "%%ymm8,%%ymm9,%%ymm4\n\t" b "%%ymm8,%%ymm9,%%ymm5\n\t" a                 \
    "%%ymm8,%%ymm9,%%ymm6\n\t" b "%%ymm8,%%ymm9,%%ymm7\n\t"
#define CLOBBER "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7"
alignas(64) static char line[256];

static const size_t NB = 16, REC = 192;  // blocks a row; one column's record per block

static inline __m256i pair_terms(const uint8_t* a, const uint8_t* q, __m256i m) {
    const __m256i lo = _mm256_maddubs_epi16(_mm256_load_si256((const __m256i*)a), _mm256_load_si256((const __m256i*)q));
    const __m256i hi = _mm256_maddubs_epi16(_mm256_load_si256((const __m256i*)(a + 32)), _mm256_load_si256((const __m256i*)(q + 32)));
    return _mm256_madd_epi16(_mm256_add_epi16(lo, hi), m);
}

__attribute__((noinline)) static void magic(const uint8_t* a, const float* d0, const uint8_t* rec, float* out) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (size_t ib = 0; ib < NB; ++ib) {
        const uint8_t* e = rec + ib * REC;
        int32_t mp[2];
        std::memcpy(mp, e + 32, 8);
        const __m256i m01 = _mm256_set1_epi32(mp[0]), m23 = _mm256_set1_epi32(mp[1]);
        const __m256 nmu = _mm256_broadcast_ss((const float*)(e + 56));
#pragma GCC unroll 4
        for (size_t j = 0; j < 4; ++j) {
            const uint8_t* r = a + j * NB * 128 + ib * 128;
            const __m256i s = _mm256_add_epi32(_mm256_load_si256((const __m256i*)e),
                                               _mm256_add_epi32(pair_terms(r, e + 64, m01), pair_terms(r + 64, e + 128, m23)));
            const __m256 ab = _mm256_add_ps(_mm256_castsi256_ps(s), nmu);
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d0[j * NB + ib]), ab, acc[j]);
        }
    }
    for (size_t j = 0; j < 4; ++j) _mm256_storeu_ps(out + 8 * j, acc[j]);
}

__attribute__((noinline)) static void bytes(const uint8_t* a, const uint8_t* rec, float* out) {
    __m256i acc[4] = {};
    for (size_t ib = 0; ib < NB; ++ib) {
        const uint8_t* e = rec + ib * REC + 64;
#pragma GCC unroll 4
        for (size_t j = 0; j < 4; ++j) {
            const uint8_t* r = a + j * NB * 128 + ib * 128;
            __m256i x[4];
#pragma GCC unroll 4
            for (size_t v = 0; v < 4; ++v)
                x[v] = _mm256_maddubs_epi16(_mm256_load_si256((const __m256i*)(r + 32 * v)), _mm256_load_si256((const __m256i*)(e + 32 * v)));
            acc[j] = _mm256_add_epi16(acc[j], _mm256_add_epi16(_mm256_add_epi16(x[0], x[1]), _mm256_add_epi16(x[2], x[3])));
        }
    }
    for (size_t j = 0; j < 4; ++j) _mm256_storeu_si256((__m256i*)(out + 8 * j), acc[j]);
}

// Per block: idx[32 (sub-block, lane)][32 rows] 4-bit groups (1 KB), tabs[32][low, high][32] (2 KB),
// blk: the two scale pairs, eight lanes' start (the bits of MAGIC*u less C), -, -MAGIC*u.
__attribute__((noinline)) static void tables(const uint8_t* idx, const uint8_t* tabs, const int32_t* blk, const float* d0, float* out) {
    for (int j = 0; j < 8; ++j) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (size_t ib = 0; ib < NB; ++ib) {
            const uint8_t *I = idx + ib * 1024, *T = tabs + ib * 2048;
            const int32_t* B = blk + ib * 16;
            __m256i s[4];
#pragma GCC unroll 2
            for (int p = 0; p < 2; ++p) {
                __m256i v[2][2];
#pragma GCC unroll 2
                for (int h = 0; h < 2; ++h) {
                    const int g = (2 * p + h) * 8 + j;
                    const __m256i i = _mm256_load_si256((const __m256i*)(I + g * 32));
                    const __m256i lo = _mm256_shuffle_epi8(_mm256_load_si256((const __m256i*)(T + g * 64)), i);
                    const __m256i hi = _mm256_shuffle_epi8(_mm256_load_si256((const __m256i*)(T + g * 64 + 32)), i);
                    v[h][0] = _mm256_unpacklo_epi8(lo, hi), v[h][1] = _mm256_unpackhi_epi8(lo, hi);
                }
                const __m256i m = _mm256_set1_epi32(B[p]);
                const __m256i t[4] = {_mm256_madd_epi16(_mm256_unpacklo_epi16(v[0][0], v[1][0]), m),
                                      _mm256_madd_epi16(_mm256_unpackhi_epi16(v[0][0], v[1][0]), m),
                                      _mm256_madd_epi16(_mm256_unpacklo_epi16(v[0][1], v[1][1]), m),
                                      _mm256_madd_epi16(_mm256_unpackhi_epi16(v[0][1], v[1][1]), m)};
#pragma GCC unroll 4
                for (int r = 0; r < 4; ++r) s[r] = p == 0 ? t[r] : _mm256_add_epi32(s[r], t[r]);
            }
            const __m256i c = _mm256_set1_epi32(B[2 + j]);
            const __m256 nmu = _mm256_broadcast_ss((const float*)(B + 11));
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r) {
                const __m256 ab = _mm256_add_ps(_mm256_castsi256_ps(_mm256_add_epi32(s[r], c)), nmu);
                acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(d0 + ib * 32 % 64 + r * 8), ab, acc[r]);
            }
        }
        for (int r = 0; r < 4; ++r) _mm256_storeu_ps(out + r * 8, acc[r]);
    }
}

__attribute__((noinline)) static float ggml(const uint8_t* bits, const float* d0, const int8_t* q, const float* d1) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i mask = _mm256_set1_epi64x(0x8040201008040201LL), zero = _mm256_setzero_si256();
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (size_t ib = 0; ib < NB; ++ib) {
        __m256 ab = _mm256_setzero_ps();
#pragma GCC unroll 4
        for (size_t k = 0; k < 4; ++k) {
            uint32_t b;
            std::memcpy(&b, bits + ib * 16 + 4 * k, 4);
            const __m256i sm = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(int(b)), shuf), mask), zero);
            const __m256i qy = _mm256_loadu_si256((const __m256i*)(q + (ib * 4 + k) * 32));
            const __m256i sy = _mm256_sub_epi8(_mm256_xor_si256(qy, sm), sm);
            const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, sy), ones16));
            ab = _mm256_fmadd_ps(_mm256_set1_ps(d1[ib * 4 + k]), s, ab);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d0[ib]), ab, acc);
    }
    float o[8];
    _mm256_storeu_ps(o, acc);
    return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}

int main() {
    const long n = 20000000;
    const double cycle = ns_per(n, [](long n) {
        for (long i = 0; i < n; ++i)
            asm volatile("mov $1,%%rdx\n\tadd %%rdx,%%rax\n\tadd %%rdx,%%rax\n\tadd %%rdx,%%rax\n\tadd %%rdx,%%rax" ::: "rax", "rdx");
    }) / 4;
    std::printf("clock %.2f GHz (a chain of dependent register adds)\n", 1 / cycle);
    std::printf("cycles per 8 independent instructions (ymm):\n");
    char* p = line;
    std::printf("  loads          %.2f\n", ns_per(n, [p](long n) { for (long i = 0; i < n; ++i) asm volatile(
        "vmovdqu (%0),%%ymm0\n\tvmovdqu 32(%0),%%ymm1\n\tvmovdqu 64(%0),%%ymm2\n\tvmovdqu 96(%0),%%ymm3\n\t"
        "vmovdqu 128(%0),%%ymm4\n\tvmovdqu 160(%0),%%ymm5\n\tvmovdqu 192(%0),%%ymm6\n\tvmovdqu 224(%0),%%ymm7" :: "r"(p) : CLOBBER); }) / cycle);
    std::printf("  vpmaddubsw     %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(X8("vpmaddubsw ") ::: CLOBBER); }) / cycle);
    std::printf("  vpmaddwd       %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(X8("vpmaddwd ") ::: CLOBBER); }) / cycle);
    std::printf("  vfmadd231ps    %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(X8("vfmadd231ps ") ::: CLOBBER); }) / cycle);
    std::printf("  vpaddd         %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(X8("vpaddd ") ::: CLOBBER); }) / cycle);
    std::printf("  vpsadbw        %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(X8("vpsadbw ") ::: CLOBBER); }) / cycle);
    std::printf("  vpshufb        %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(X8("vpshufb ") ::: CLOBBER); }) / cycle);
    std::printf("  vpunpcklbw     %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(X8("vpunpcklbw ") ::: CLOBBER); }) / cycle);
    // Pairs: as fast as one of the two alone where they share their pipes.
    std::printf("  4 vpmaddubsw + 4 vfmadd231ps  %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(
        X4PAIR("vpmaddubsw ", "vfmadd231ps ") ::: CLOBBER); }) / cycle);
    std::printf("  4 vpmaddubsw + 4 vpsadbw      %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(
        X4PAIR("vpmaddubsw ", "vpsadbw ") ::: CLOBBER); }) / cycle);
    std::printf("  4 vpmaddubsw + 4 vpshufb      %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(
        X4PAIR("vpmaddubsw ", "vpshufb ") ::: CLOBBER); }) / cycle);
    std::printf("  4 vpmaddubsw + 4 vpunpcklbw   %.2f\n", ns_per(n, [](long n) { for (long i = 0; i < n; ++i) asm volatile(
        X4PAIR("vpmaddubsw ", "vpunpcklbw ") ::: CLOBBER); }) / cycle);

    auto* a = static_cast<uint8_t*>(std::aligned_alloc(64, 4 * NB * 128));
    auto* rec = static_cast<uint8_t*>(std::aligned_alloc(64, NB * REC));
    auto* q = static_cast<int8_t*>(std::aligned_alloc(64, NB * 128));
    float d0[4 * NB], d1[4 * NB], out[32];
    uint8_t bits[NB * 16];
    for (size_t i = 0; i < 4 * NB * 128; ++i) a[i] = uint8_t((std::rand() & 1) * 2);
    for (size_t i = 0; i < NB * REC; ++i) rec[i] = uint8_t(std::rand() & 0x3f);
    for (size_t ib = 0; ib < NB; ++ib)
        for (size_t lane = 0; lane < 8; ++lane) {
            const int32_t v = 0x4B400000 - (10 << 23) - (std::rand() & 0xfff);
            std::memcpy(rec + ib * REC + 4 * lane, &v, 4);
        }
    for (size_t i = 0; i < NB * 128; ++i) q[i] = int8_t(std::rand());
    for (size_t i = 0; i < NB * 16; ++i) bits[i] = uint8_t(std::rand());
    for (size_t i = 0; i < 4 * NB; ++i) d0[i] = 0.01f, d1[i] = 0.02f;
    for (size_t ib = 0; ib < NB; ++ib) {
        const float u = 1.0f / 1024, nmu = -12582912.0f * u;
        std::memcpy(rec + ib * REC + 48, &u, 4);
        std::memcpy(rec + ib * REC + 56, &nmu, 4);
    }
    const long calls = 200000;
    volatile float sink = 0;
    const double rb = double(4 * NB);
    std::printf("cycles per row and block (128 weights), data in L1:\n");
    std::printf("  magic  %.2f\n", ns_per(calls, [&](long n) { for (long i = 0; i < n; ++i) { magic(a, d0, rec, out); sink = out[i & 31]; } }) / rb / cycle);
    std::printf("  bytes  %.2f\n", ns_per(calls, [&](long n) { for (long i = 0; i < n; ++i) { bytes(a, rec, out); sink = out[i & 31]; } }) / rb / cycle);
    auto* idx = static_cast<uint8_t*>(std::aligned_alloc(64, NB * 1024));
    auto* tabs = static_cast<uint8_t*>(std::aligned_alloc(64, NB * 2048));
    auto* blk = static_cast<int32_t*>(std::aligned_alloc(64, NB * 64));
    for (size_t i = 0; i < NB * 1024; ++i) idx[i] = uint8_t(std::rand() & 15);
    for (size_t i = 0; i < NB * 2048; ++i) tabs[i] = uint8_t(std::rand());
    for (size_t ib = 0; ib < NB; ++ib) {
        for (size_t i = 0; i < 2; ++i) blk[ib * 16 + i] = std::rand() & 0xfff;
        for (size_t i = 2; i < 10; ++i) blk[ib * 16 + i] = 0x4B400000 - (10 << 23) - (std::rand() & 0xfff);
        std::memcpy(blk + ib * 16 + 11, rec + ib * REC + 56, 4);
    }
    std::printf("  tables %.2f\n", ns_per(calls / 4, [&](long n) { for (long i = 0; i < n; ++i) { tables(idx, tabs, blk, d0, out); sink = out[i & 31]; } }) / (32.0 * NB) / cycle);
    std::printf("  ggml   %.2f\n", ns_per(calls, [&](long n) { for (long i = 0; i < n; ++i) sink = ggml(bits, d0, q, d1); }) / double(NB) / cycle);
    (void)sink;
}
EOF
"$CXX" -O2 -std=c++17 -Wall -mavx2 -mfma -o "$dir/floor" "$dir/floor.cpp"
"$dir/floor"
