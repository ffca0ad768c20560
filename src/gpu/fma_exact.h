// A correctly rounded fma(a, b, c) from plain f32 multiplies and adds, the same operation sequence
// that shader::fma_exact writes into shaders. Drivers may or may not fuse GLSL's Fma (RADV on a
// Vega 3 does not), so the Q1_0 kernels use it wherever the card has not proven its Fma; this C++
// twin is what the tests prove the sequence on, against std::fma, before any card runs it.
//
// Preconditions (the kernels meet them: a is an f16 weight scale, b and c are normal f32 sums):
//   a has at most 12 significant bits; neither a·b's partial products nor the final result
//   overflow; a·b_hi and a·b_lo are not below 2^-149·2^k where they would lose bits (that is, the
//   partial products are exact: no underflow). Subnormal c and subnormal results are exact.
//
// The sequence:
//   b_hi = b with its low 12 mantissa bits cleared, b_lo = b - b_hi      (both exact, <= 12 bits)
//   p1 = a·b_hi, p2 = a·b_lo                                               (exact: <= 24 bits each)
//   (uh, ul) = Fast2Sum(p1, p2)         uh = RN(a·b), ul = a·b - uh       (Dekker, exact: |p1| > |p2|
//                                       as b_lo < 2^-11·b_hi, or p1 = 0)
//   (th, tl) = TwoSum(c, uh)            th + tl = c + uh                  (exact)
//   v = RO(tl + ul)                     round to odd, from RN and TwoSum's error
//   result = RN(th + v)                 Boldo & Melquiond 2008: one rounding of a·b + c
//   a zero result is replaced by RN(RN(a·b) + c), which gives a zero its IEEE sign (only
//   fma(x, y, -0) needs it; callers whose c is never -0, like the kernels' accumulators that
//   start at +0, pass signed_zero = false and save four operations)
#pragma once
#include <cstdint>
#include <cstring>

namespace bankml::gpu {

namespace fma_detail {
// Each operation is stored through a volatile so no compiler contracts or reassociates it.
inline float add(float x, float y) { volatile float r = x + y; return r; }
inline float sub(float x, float y) { volatile float r = x - y; return r; }
inline float mul(float x, float y) { volatile float r = x * y; return r; }
inline uint32_t bits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
inline float from_bits(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }
}  // namespace fma_detail

// Knuth's TwoSum: s = RN(a + b) and the exact error e, a + b = s + e, in six plain operations.
inline void two_sum_ref(float a, float b, float& s, float& e) {
    using namespace fma_detail;
    s = add(a, b);
    float bb = sub(s, a);
    float aa = sub(s, bb);
    e = add(sub(a, aa), sub(b, bb));
}

// Dekker's Fast2Sum: s = RN(a + b) and the exact error, when a = 0 or |a| >= |b|.
inline void fast_two_sum_ref(float a, float b, float& s, float& e) {
    using namespace fma_detail;
    s = add(a, b);
    e = sub(b, sub(s, a));
}

inline float fma_exact_ref(float a, float b, float c, bool signed_zero = true) {
    using namespace fma_detail;
    float b_hi = from_bits(bits(b) & 0xFFFFF000u);
    float b_lo = sub(b, b_hi);
    float p1 = mul(a, b_hi), p2 = mul(a, b_lo);
    float uh, ul, th, tl, s, e;
    fast_two_sum_ref(p1, p2, uh, ul);
    two_sum_ref(c, uh, th, tl);
    two_sum_ref(tl, ul, s, e);
    // Round to odd: an inexact sum whose nearest value has an even last bit moves one step toward
    // the exact value (to the odd neighbour); an odd or exact one stays.
    uint32_t sb = bits(s), eb = bits(e);
    bool inexact = e != 0.0f, even = (sb & 1u) == 0u, toward_larger = ((sb ^ eb) >> 31) == 0u;
    uint32_t vb = (inexact && even) ? (toward_larger ? sb + 1u : sb - 1u) : sb;
    float r = add(th, from_bits(vb));
    // A zero result takes its sign from plain a·b + c (exact here: the sum is exactly zero), as
    // the sequence above would turn fma(-0, 1, -0) into +0.
    return signed_zero && r == 0.0f ? add(mul(a, b), c) : r;
}

}  // namespace bankml::gpu
