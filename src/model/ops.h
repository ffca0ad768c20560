// The non-product operations of the qwen3 forward pass, each in ggml's CPU arithmetic order so that
// bankml's logits carry llama.cpp's bits: RMS norm (squares summed in double, scaled in float, then
// the norm weight), the NEOX rotary embedding with ggml's rope cache, the gated SiLU with ggml's
// 8-lane exp approximation, and flash attention over an f16 (or f32) cache with the online softmax.
// Each has a scalar reference written with explicit std::fma where ggml's compiled code fuses, and
// (where it matters for speed) an AVX2 path that gives the same bits, chosen at run time.
#pragma once
#include <cstddef>
#include <cstdint>

namespace bankml::model::ops {

// True when the AVX2/FMA/F16C paths run: the CPU has them and BANKML_KERNELS is not "scalar".
bool fast_paths();
// Tests switch the fast paths off and on to compare them with the reference; returns the old value.
bool set_fast_paths(bool on);

// y[i] = (x[i] * scale) * w[i], scale = 1 / sqrtf((float)(sum of (double)(x*x) / n) + eps).
void rms_norm_mul(const float* x, const float* w, float* y, size_t n, float eps);

// The rotary embedding in NEOX layout (pairs i and i + n_dims/2), as ggml's rope cache computes it:
// theta starts at the position and is multiplied by powf(base, -2/n_dims) once per pair.
class Rope {
public:
    Rope(int n_dims, float base);
    int n_dims() const { return n_dims_; }
    // cs[2i] = cosf(theta_i), cs[2i+1] = sinf(theta_i) for one position: n_dims floats.
    void cache(int64_t pos, float* cs) const;
    // Rotates one head of n_dims values in place with a cache from cache().
    void apply(float* head, const float* cs) const;

private:
    int n_dims_;
    float theta_scale_;
};

// One lane of ggml's AVX2 ggml_v_expf / ggml_v_silu (exact emulation, lane by lane).
float v_expf(float x);
float v_silu(float x);
// y[i] = silu(gate[i]) * up[i]: ggml_vec_swiglu_f32 (8-lane blocks, then a scalar expf tail).
void swiglu(const float* gate, const float* up, float* y, size_t n);

// The dot product of two f16 rows in ggml_vec_dot_f16's AVX2 order (four 8-lane accumulators over
// steps of 32, reduced (0+2, 1+3), 0+1, then the horizontal sum; a leftover tail in double).
float dot_f16(const uint16_t* x, const uint16_t* y, size_t n);
// f16 rounding of each element (round to nearest even), as F16C's vcvtps2ph and ggml do.
void round_f16(const float* x, uint16_t* y, size_t n);

// Flash attention of one query head over n_kv cached positions (rows of d values, consecutive):
// ggml_compute_forward_flash_attn_ext_f16_one_chunk. With an f16 cache, q is rounded to f16, each
// score is dot_f16 * scale, the online softmax uses expf, and V is accumulated in f16
// (y = f16(fma(v, w, y)), rescaled by f16(y * ms) when the maximum moves); out = V * (1/S).
// scratch holds 2*d uint16_t (f16 cache) or 2*d floats (f32 cache).
void attend_f16(const float* q, const uint16_t* k, const uint16_t* v, size_t n_kv, size_t d, float scale,
                float* out, void* scratch);
void attend_f32(const float* q, const float* k, const float* v, size_t n_kv, size_t d, float scale,
                float* out, void* scratch);
// The bytes of scratch attend_* needs for head dimension d.
inline size_t attend_scratch_bytes(size_t d) { return 2 * d * sizeof(float); }

// The f32 dot in ggml_vec_dot_f32's AVX2 order (the f32 cache's scores).
float dot_f32(const float* x, const float* y, size_t n);

}  // namespace bankml::model::ops
