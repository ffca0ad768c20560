// The forward pass's operations on the card, each giving exactly the bits of bankml's CPU op
// (model/ops.*, quant/): the token's embedding row dequantized from Q1_0, Q2_0 or F16, RMS norm
// with its double sum in index order, Q8_0 quantization of an activation with the Q1_0 table of
// lane products, the Q2_0 and F16 products, the per-head norm with NEOX rope and the f16 store
// into the cache, attention over the f16 cache with the C library's expf, and SwiGLU with ggml's
// 8-lane exp. The Q1_0 products are kernels.h's.
//
// gpu/ knows no model: a kernel sees buffers, offsets and sizes. Every kernel is one entry of
// op_kernels() {name, bindings, push constants, local size, builder}; what the builder takes
// (the Fma path, the host's expf variant) is in Build.
//
// Buffers hold 32-bit words. f16 values sit two to a word (element 2i in the low half). The
// per-token state buffer: word 0 the position, word 1 the number of cached positions after this
// token, word 2 the token, words 4.. the rope table for the position (cos, sin pairs as
// ops::Rope::cache gives).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/compute.h"
#include "gpu/shader.h"

namespace bankml::gpu::ops {

inline constexpr uint32_t STATE_POS = 0, STATE_NKV = 1, STATE_TOKEN = 2, STATE_ROPE = 4;

// The values each workgroup of rms_norm_q8 normalizes and quantizes (four Q8_0 blocks): every
// workgroup makes the whole row's sum first, so the dispatch takes as long as one norm however many
// workgroups it has, and a span this small keeps the quantization after it to a few steps while
// an 8B row (4096) needs only 32 workgroups, fewer than a large card's multiprocessors.
inline constexpr uint32_t NORM_Q8_SPAN = 128;
inline constexpr uint32_t norm_q8_groups(uint32_t n) { return (n + NORM_Q8_SPAN - 1) / NORM_Q8_SPAN; }

// What a kernel's code depends on besides its shape: the f32 Fma path the card proved, and
// whether the host's expf fuses its multiply-adds (glibc's FMA build). expf_fused does not change
// a module: it is the value of the specialisation constant SPEC_EXPF_FUSED (spec_values), which
// every pipeline of an op kernel is made with.
// float_modes: the float controls the modules ask for (shader::FloatModes), all the card offers:
// a card that flushes subnormals unless asked (NVIDIA's) gives the CPU's bits only with them.
struct Build {
    shader::Fma fma = shader::Fma::exact;
    bool expf_fused = true;
    uint32_t float_modes = 0;
    bool clock = false;  // measuring: kernels with `stamps` take a clock-stamps buffer (shader::stamp)
    bool int_dot = false;  // the card's packed 8-bit dot product (the Q2_0 kernels' block sums)
    // The card's subgroup arithmetic (the norms' unordered workgroup sums reduce each subgroup
    // first, then add one partial a subgroup; else a tree in workgroup memory).
    bool subgroup = false;
};

// The op kernels' specialisation constants (shader::spec_bool's ids): whether expf_libm takes
// the fused sequence (attention, attention_q8, expf). Modules hold both; the pipeline picks.
inline constexpr uint32_t SPEC_EXPF_FUSED = 0;
inline shader::Bool expf_fused() { return shader::spec_bool(SPEC_EXPF_FUSED, true); }
// The specialisation values every op kernel's pipeline takes (Gpu::pipeline's `spec`; a module
// without one of the ids ignores it).
std::vector<SpecValue> spec_values(const Build& b);
// The norms' row length compiled in (rms_norm, rms_norm_q8, sum_squares): where SPEC_NORM_VALUES
// is k > 0, every row the pipeline takes is NORM_INVOCATIONS·k values long (the pushed n is not
// read), and each invocation's k values are loaded and made without a check or a branch each
// (where 0, the default, any row: each value checked against n). The forward pass
// specialises the rows of NORM_ROWS_COMPILED_IN, and the oracle checks each of them.
inline constexpr uint32_t SPEC_NORM_VALUES = 1;
inline constexpr uint32_t NORM_INVOCATIONS = 256;
inline constexpr uint32_t NORM_ROWS_COMPILED_IN[] = {256, 2048, 2560, 4096};
// {SPEC_NORM_VALUES, n / NORM_INVOCATIONS} for a row of NORM_ROWS_COMPILED_IN, else none.
std::vector<SpecValue> norm_spec(uint32_t n);
// The head size compiled in (head_norm_rope, attention, attention_q8): where SPEC_HEAD_DIM is
// nonzero it is D (the pushed D is not read), so that the loops over a head's values
// have constant bounds and an attention invocation keeps only the outputs a head gives it (where
// 0, the default, D from the push constant). The forward pass specialises the head sizes of
// HEAD_DIMS_COMPILED_IN (every qwen3 model's), and the oracle checks them with that pipeline.
inline constexpr uint32_t SPEC_HEAD_DIM = 2;
inline constexpr uint32_t HEAD_DIMS_COMPILED_IN[] = {128};
// {SPEC_HEAD_DIM, D} for a head size of HEAD_DIMS_COMPILED_IN, else none.
std::vector<SpecValue> head_spec(uint32_t D);
// q2_0_mat_vec's lanes a row compiled in: where SPEC_Q2_0_LANES is nonzero, 16 or 32 lanes a row
// (where 0, the default, Q2_0_LANES). A matrix of at most Q2_0_WIDE_ROWS rows (every layer's)
// takes 32, the most invocations to hide its loads' latency; a wider one (an output matrix) 16:
// its workgroups are many anyway, and twice the rows a workgroup share the serial sums' subgroup
// (docs/PERFORMANCE.md). The oracle checks every shape with both pipelines.
inline constexpr uint32_t SPEC_Q2_0_LANES = 3;
inline constexpr uint32_t Q2_0_WIDE_ROWS = 65536, Q2_0_WIDE_LANES = 16;
// {SPEC_Q2_0_LANES, lanes} where lanes is not the default, else none.
std::vector<SpecValue> q2_0_spec(uint32_t lanes);
// The outputs a kernel that prepares a product's input writes (prep_act, rms_norm_q8,
// attention_q8, swiglu_q1_0_q8, swiglu_q2_0_q8): where SPEC_ACT_OUTPUTS is nonzero, a mask of
// ACT_TABLE (the Q1_0 lane-product table), ACT_Q8 (the quants, the scales and quant sums) and
// ACT_F16 (the f16 pairs); where 0, the default, all three. The forward pass asks for those its
// model's products read; the oracle checks each single output's pipeline and that it leaves the
// others unwritten.
inline constexpr uint32_t SPEC_ACT_OUTPUTS = 4;
inline constexpr uint32_t ACT_TABLE = 1, ACT_Q8 = 2, ACT_F16 = 4, ACT_ALL = 7;
// A shape's specialisation values (norm_spec, head_spec; none by default) with
// {SPEC_ACT_OUTPUTS, outputs} after them unless outputs is ACT_ALL.
std::vector<SpecValue> act_spec(uint32_t outputs, std::vector<SpecValue> shape = {});
// A pipeline's specialisation values: the build's, then a shape's (norm_spec, head_spec); and the
// shape's as a suffix for a pipeline's name in a cache ("/1=8", "" for none).
std::vector<SpecValue> spec_values(const Build& b, const std::vector<SpecValue>& shape);
std::string spec_suffix(const std::vector<SpecValue>& shape);

// The build a card may use: native Fma where it proved it, the host's expf variant, the float
// controls wherever the card offers them, and its packed dot product and subgroup arithmetic.
Build build_for(const Gpu& card, bool native_fma);

struct OpKernel {
    const char* name;
    uint32_t bindings, push_words, local_size;
    std::vector<uint32_t> (*build)(const Build&);
    bool stamps = false;  // with Build::clock: one more binding, after its own, for clock stamps
};

// The activation's Q8_0 quants as every kernel that quantizes an activation writes them (prep_act's
// output "quants"): four to a word, in order from the low byte, and each 64-value block's four
// words of 16 quants apart: word group g (quants 16g..16g+15) of every block together, block after
// block, then group g + 1's. The word of quants 4w..4w+3 of an activation of n values is at
// q8_word(w, n); the buffer holds q8_words(n). The Q2_0 products' lanes take a block each, so
// that a subgroup's load of one word group is one contiguous run of memory instead of one 16-byte
// piece of every 64 bytes.
inline size_t q8_blocks(size_t n) { return (n + 63) / 64; }
inline size_t q8_words(size_t n) { return q8_blocks(n) * 16; }
inline size_t q8_word(size_t w, size_t n) { return ((w / 4 % 4) * q8_blocks(n) + w / 16) * 4 + w % 4; }

// rms_norm: x (binding 0, rw), add (1), norm weights (2), y (3); push: n, w_off, eps bits,
// residual (1: x = add + x first, stored back). One workgroup: y = (x·scale)·w with
// scale = 1/sqrtf(mean + eps), mean = (float)(sum of (double)(x·x) in index order / n).
// rms_norm_q8: x (0, read only), add (1), norm weights (2), x_out (3: the first workgroup writes
// add + x there where residual is 1, x where it is 0), then prep_act's outputs of y: table (4),
// quants (5), scales and quant sums (6), f16 pairs (7); push as rms_norm. norm_q8_groups(n)
// workgroups, n a multiple of 32: y and its quantization are rms_norm's and prep_act's bits.
// prep_act: x (0), Q1_0 lane-product table (1), Q8_0 quants (2, q8_word's layout), per Q8_0 block its
// scale widened (f32 bits) and the sum of its quants (i32) (3), f16 pairs (4); push: n, x_off,
// gated (1: x is gate|up, n each, and the values are SwiGLU(gate, up) as swiglu computes them).
// One workgroup per 32 values.
// swiglu_q1_0_q8: a Q1_0 layer's gate and up products, then SwiGLU's output into prep_act's outputs:
// Q1_0 scales (0), bits (1), unused (2), the input's lane-product table (3) (bindings 0-3 as
// q1_0_mat_vec8), then table (4), quants (5), scales and sums (6), f16 pairs (7) of the output;
// push: rows (2·n_ff), blocks. The matrix packed from stack_gate_up's rows; swiglu_q1_0_groups(n_ff)
// workgroups, n_ff a multiple of 32.
// q2_0_mat_vec: weights as pack_q2_0 lays them out (0: scales, 1: codes), the activation's Q8_0
// quants (2, q8_word's layout) and scales and quant sums (3, prep_act's), out (4); push: rows, blocks.
// q2_0_groups(rows, lanes) workgroups of 256 / lanes rows, `lanes` invocations a row (q2_0_lanes).
// swiglu_q2_0_q8: swiglu_q1_0_q8 for a Q2_0 layer: weights as pack_q2_0 lays out the matrix
// stack_gate_up stacks (0, 1), the input's quants (2) and scales and sums (3), then prep_act's
// outputs: table (4), quants (5), scales and sums (6), f16 pairs (7); push: rows (2·n_ff), blocks.
// swiglu_q1_0_groups(n_ff) workgroups, n_ff a multiple of 32.
// f16_mat_vec: weights (0, f16 pairs), activation (1, f16 pairs), out (2); push: rows, n.
// head_norm_rope: qkv (0), norm weights (1), state (2), q out (3), k cache (4), v cache (5);
// push: D, NH, NKV, q_norm off, k_norm off, cache layer offset (words), n_ctx, eps bits.
// One workgroup per head (NH query heads, then NKV key heads with their values).
// attention: q (0), k cache (1), v cache (2), state (3), scratch (4: 3·NH·n_ctx), out (5);
// push: D, NH, group, cache layer offset, n_ctx, scale bits. One workgroup per query head. D a
// multiple of 32 up to 256 and the layer offset a multiple of 4 words (keys are read 16 bytes at
// a time).
// attention_q8: attention whose output goes straight into prep_act's outputs: bindings 0-4 as
// attention, then table (5), quants (6), scales and sums (7), f16 pairs (8); push as attention.
// sum_squares (oracle only): x (0), out (1: the double's low and high words); push: n. The
// rms_norm's ordered double sum alone, every bit of it.
// swiglu: gate|up (0), out (1); push: n. expf_probe and
// f16_round_probe: x (0, f32 bits), out (1); push: count. div_sqrt: x (0: pairs a, b), out (1:
// a / b, then the root of b); push: count (words, even).
// embed_q1_0, embed_q2_0, embed_f16: token_embd as its product kernel takes it (0 and 1: Q1_0 as
// kernels::pack_q1_0 packs it, Q2_0 as pack_q2_0, F16 the GGUF's rows in 0 and 1 unread), state
// (2), out (3: n f32); push: n, rows, token, from_state (1: the token is the state's word
// STATE_TOKEN, else the pushed one). The token's row dequantized as quant's to_float makes it,
// bit for bit; a token past the rows writes nothing. One invocation per value, 256 a workgroup.
// Chunks of weights and tables swiglu_q1_0_q8 loads at a time: one, as q1_0_mat_vec8x2 (1, 2 and 4
// measured alike on the H200, 8 slower; docs/PERFORMANCE.md).
inline constexpr uint32_t SWIGLU_Q1_0_AHEAD = 1;
inline uint32_t swiglu_q1_0_groups(size_t n_ff) { return uint32_t((n_ff + 31) / 32); }
// The gate and up matrices' rows (row_bytes each, n_ff rows each) in swiglu_q1_0_q8's order: for
// each b, gate rows 32b..32b+31, then up rows 32b..32b+31.
std::vector<uint8_t> stack_gate_up(const uint8_t* gate, const uint8_t* up, size_t n_ff, size_t row_bytes);
// q2_0_mat_vec's invocations a row: Q2_0_LANES by default (256 / lanes rows a workgroup).
inline constexpr uint32_t Q2_0_LANES = 32;
// swiglu_q2_0_q8's invocations a gate|up row pair, and its workgroup: 32 pairs (one Q8_0 block of
// SwiGLU's output).
inline constexpr uint32_t SWIGLU_Q2_0_LANES = 8;
inline constexpr uint32_t SWIGLU_Q2_0_LOCAL = 32 * SWIGLU_Q2_0_LANES;
inline uint32_t q2_0_groups(size_t rows, uint32_t lanes = Q2_0_LANES) {
    const uint32_t per = 256 / lanes;
    return uint32_t((rows + per - 1) / per);
}
// The lanes a row of a matrix's q2_0_mat_vec (SPEC_Q2_0_LANES).
inline uint32_t q2_0_lanes(size_t rows) { return rows > Q2_0_WIDE_ROWS ? Q2_0_WIDE_LANES : Q2_0_LANES; }
const std::vector<OpKernel>& op_kernels();
// The kernels whose code changes with Build::int_dot (the Q2_0 products' block sums).
inline constexpr const char* INT_DOT_KERNELS[] = {"q2_0_mat_vec", "swiglu_q2_0_q8"};
// The kernels whose code changes with Build::subgroup (the norms' workgroup sums).
inline constexpr const char* SUBGROUP_KERNELS[] = {"rms_norm", "rms_norm_q8", "head_norm_rope"};
const OpKernel& op_kernel(const std::string& name);

// A card without DenormPreserve for f32 gets two builds of every kernel: the exact one (SOFT_F32,
// every f32 operation through double) and the fast one this returns (GUARD_F32: plain f32, and a
// flag, in one more storage buffer after the kernel's bindings, raised wherever a subnormal might
// have been flushed). A run whose flag is down gave the exact bits; one whose flag is up is run
// again with the exact build. A card that keeps subnormals needs no guard: `exact` itself.
Build guarded(const Build& exact);
inline bool has_guard(const Build& b) { return (b.float_modes & shader::GUARD_F32) != 0; }
// The storage buffers a kernel of this build binds (the guard's flag last).
inline uint32_t bindings(const OpKernel& k, const Build& b) { return k.bindings + (k.stamps && b.clock ? 1 : 0) + (has_guard(b) ? 1 : 0); }

// The Q1_0 lane-product table's floats for an activation of n values (padded to whole chunks of
// the Q1_0 kernels, zero past n: kernels.h, binding 3).
size_t table_floats(size_t n);

// Q2_0 weights for q2_0_mat_vec and embed_q2_0: rows × n/64 blocks, (row, block) row-major as in
// the GGUF, each block's scale and codes apart. Word m of a block's four holds its values
// 16m..16m+15, value 16m + 4j + g's code at bits 8g + 2j (the GGUF has it at bits 8j + 2g): then a
// mask of the word shifted by 2j puts four codes in the bytes of the activation's word of quants
// 16m + 4j.. (q2_0_mat_vec).
struct PackedQ2_0 {
    std::vector<uint32_t> scales;  // two f16 a word, block b in half b % 2 of word b / 2
    std::vector<uint32_t> codes;   // four words per block
};
PackedQ2_0 pack_q2_0(const uint8_t* w, size_t rows, size_t n);

// Whether the host's expf is glibc's FMA build: the C library's result on the inputs where the
// fused and the unfused sequences differ.
bool host_expf_fused();
// The C++ twin of shader::expf_libm (every operation as the kernel does it), for tests.
float expf_libm_ref(float x, bool fused);

}  // namespace bankml::gpu::ops
