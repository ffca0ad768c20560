// The scalar references. Every float operation is written out in ggml's order; std::fma where
// ggml's AVX2 code fuses, separate * and + where it does not (contraction is off in this file).
#pragma GCC optimize("fp-contract=off")
#include <cmath>
#include <cstring>

#include "core/f16.h"
#include "quant/dot.h"

namespace bankml::quant {

float vec_dot_q1_0_ref(size_t n, const BlockQ1_0* w, const BlockQ8_0* x) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t ib = 0; ib < n / QK1_0; ++ib) {
        const float d0 = f16_to_f32(w[ib].d);
        float ab[8];
        for (size_t k = 0; k < 4; ++k) {
            const BlockQ8_0& xb = x[ib * 4 + k];
            const float d1 = f16_to_f32(xb.d);
            for (size_t lane = 0; lane < 8; ++lane) {
                int32_t s = 0;
                for (size_t i = 0; i < 4; ++i) {
                    const size_t e = lane * 4 + i;  // element within the sub-block
                    const bool plus = (w[ib].qs[k * 4 + e / 8] >> (e % 8)) & 1;
                    const int8_t q = xb.qs[e];
                    s += plus ? q : int8_t(-q);  // int8 negation: -(-128) stays -128, as in AVX2
                }
                ab[lane] = k == 0 ? d1 * float(s) : std::fma(d1, float(s), ab[lane]);
            }
        }
        for (size_t lane = 0; lane < 8; ++lane) acc[lane] = std::fma(d0, ab[lane], acc[lane]);
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

float vec_dot_q2_0_ref(size_t n, const BlockQ2_0* w, const BlockQ8_0* x) {
    float sumf = 0.0f;
    for (size_t ib = 0; ib < n / QK2_0; ++ib) {
        const float d0 = f16_to_f32(w[ib].d);
        float sumi = 0.0f;
        for (size_t k = 0; k < 2; ++k) {
            const BlockQ8_0& xb = x[ib * 2 + k];
            const float d1 = f16_to_f32(xb.d);
            int32_t s = 0;
            for (size_t j = 0; j < QK8_0; ++j) {
                const int code = (w[ib].qs[k * 8 + j / 4] >> (2 * (j % 4))) & 3;
                s += (code - 1) * xb.qs[j];
            }
            sumi += d1 * float(s);
        }
        sumf += d0 * sumi;
    }
    return sumf;
}

float vec_dot_f32_ref(size_t n, const float* w, const float* x) {
    const size_t np = n & ~size_t(31);
    float acc[4][8] = {};
    for (size_t i = 0; i < np; i += 32)
        for (size_t j = 0; j < 4; ++j)
            for (size_t l = 0; l < 8; ++l) {
                const size_t k = i + 8 * j + l;
                acc[j][l] = std::fma(w[k], x[k], acc[j][l]);
            }
    float a[8], t[4];
    for (size_t l = 0; l < 8; ++l) a[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    for (size_t l = 0; l < 4; ++l) t[l] = a[l] + a[l + 4];
    float sum = (t[0] + t[1]) + (t[2] + t[3]);
    for (size_t i = np; i < n; ++i) sum = std::fma(w[i], x[i], sum);
    return sum;
}

float vec_dot_f16_ref(size_t n, const uint16_t* w, const uint16_t* x) {
    float sum[4][8] = {};
    const size_t np = n & ~size_t(31);
    for (size_t i = 0; i < np; i += 32)
        for (size_t j = 0; j < 4; ++j)
            for (size_t l = 0; l < 8; ++l)
                sum[j][l] = std::fma(f16_to_f32(w[i + j * 8 + l]), f16_to_f32(x[i + j * 8 + l]), sum[j][l]);
    for (size_t l = 0; l < 8; ++l) {
        sum[0][l] = sum[0][l] + sum[2][l];
        sum[1][l] = sum[1][l] + sum[3][l];
    }
    for (size_t l = 0; l < 8; ++l) sum[0][l] = sum[0][l] + sum[1][l];
    float t0[4];
    for (size_t l = 0; l < 4; ++l) t0[l] = sum[0][l] + sum[0][l + 4];
    double sumf = double((t0[0] + t0[1]) + (t0[2] + t0[3]));
    for (size_t i = np; i < n; ++i) sumf += double(f16_to_f32(w[i]) * f16_to_f32(x[i]));
    return float(sumf);
}

}  // namespace bankml::quant
