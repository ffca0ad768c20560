// The on-card oracle of the forward pass's op kernels (gpu/op_kernels.h): each kernel runs alone on
// the card, on random and on adversarial data, and every output word is compared bit for bit with
// bankml's CPU op (model/ops.*, quant/, the C library's expf). A card that differs in one bit of
// one kernel is refused whole: the forward pass on the card runs only after verify_ops passed.
//
// What each kernel is given (docs/modules/ops.md):
//   rms_norm        squares summed in double that round often (wide exponent spreads, a huge first
//                   value then small ones, squares near the running sum's last place, subnormal
//                   squares, zeros, equal values), with and without the residual add
//   sum_squares     the norm's data (and rows of exact ties), every bit of the double sum
//   prep_act        zero blocks, ties of x·id, subnormal and huge values, ties of the f16 rounding
//   q2_0_mat_vec    random weights and scales against the CPU quantizer's Q8_0, and the largest
//                   integer sums (codes all 0 or all 3, quants 127 or -128)
//   f16_mat_vec     random rows, and rows of f16 values over the whole exponent range
//   head_norm_rope  positions 0, 1, 1000, 40000 (the rope table of ops::Rope(D, 1e6)), the queries
//                   and the key and value words of the cache
//   attention       1 to 300 (full: 512 and 4096) positions: random, equal scores, scores that rise late
//                   and fall, large scores
//   swiglu          gates up to ±200 (v_expf's overflow branches), subnormal gates
//   expf            millions of floats over every exponent, the special values and the boundaries
//                   (exhaustive: every one of the 2^32)
//   f16_round       every f16 value and every tie between two, the range's ends, random floats
//   div_sqrt        quotients and roots next to the midpoint between two floats, exact ones, zero
//                   numerators, infinite divisors, random normal floats
//   embed_*         Q1_0, Q2_0 and F16 token_embd rows with random, subnormal and special f16
//                   values (±0, the largest, ±infinity, NaN), every code, every f16; tokens pushed
//                   and read from the state buffer, and one past the rows (nothing written)
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpu/compute.h"
#include "gpu/kernels.h"
#include "gpu/op_kernels.h"

namespace bankml::model {

struct VerifyOpsOptions {
    // The model's shapes (n up to 12288, products up to 12288×4096, 4096 cached positions); false:
    // small shapes of the same kinds (tests, and the check before a model runs on the card).
    bool full = false;
    // With full: expf on every one of the 2^32 floats (bankml gpu --verify --full).
    bool exhaustive = false;
    // Tests: alters a kernel's first output (named by the kernel) before the comparison, to prove
    // the check fails closed.
    std::function<void(const std::string& kernel, std::vector<uint32_t>& words)> corrupt;
    // Tests: only the kernel of this name ("" for all).
    std::string only;
    // Receives every kernel and shape run, in order (the failing one last, bit_exact false).
    std::vector<gpu::kernels::Check>* checks = nullptr;
    // Measuring (bankml bench gpu): each dispatch whose outputs passed (bit-exact, or flagged in the
    // guarded build) is recorded time_repeat times in a sequence (each after a barrier, as in the
    // forward pass's token, outputs in device memory), the sequence submitted for time_warm_ms (a
    // card idles at a low clock while the oracle's CPU side runs), then time_reps times timed; the
    // card time of one dispatch (the sequence's over time_repeat) goes into its Check.
    int time_reps = 0;
    size_t time_repeat = 32;
    double time_warm_ms = 100;
    // Which checks to time (by kernel and shape, as their Check names them); all when empty.
    std::function<bool(const std::string& kernel, const std::string& shape)> time_if;
};

// Runs every op kernel (built with `build`) on the card; one line per kernel and shape
// ("rms_norm 1×4096 (spread exponents): 4096 of 4096 values bit-exact, 0.12 ms"). Throws
// bankml::Error (exit code 2) naming the kernel, the shape, the first differing output and both
// values, or the limit the card lacks (shaderFloat64, invocations, workgroup memory).
std::vector<std::string> verify_ops(gpu::Gpu& gpu, const gpu::ops::Build& build, const VerifyOpsOptions& opt = {});

// The workgroup memory a module declares, in bytes (its Workgroup variables' arrays).
size_t workgroup_bytes(const std::vector<uint32_t>& spirv);

// Every op kernel's module for both Fma paths, plain, soft and guarded, by file name ("rms_norm.spv",
// "rms_norm_fma.spv", "rms_norm_soft.spv", "rms_norm_guarded_fma.spv"), then the variants that use a
// card's features: "q2_0_mat_vec_int_dot.spv" and the norms with subgroup arithmetic ("rms_norm_subgroup.spv").
std::vector<std::pair<std::string, std::vector<uint32_t>>> op_modules();

// Rows that test a norm's bits (verify_ops runs them through the card's norms, the CPU's tests
// through its own paths): the kinds, and a kind's n values x from seed with the residual `add`
// that a kind starting with "residual" adds first (zeros otherwise).
std::vector<std::string> norm_test_kinds();
void norm_test_row(uint64_t seed, const std::string& kind, size_t n, std::vector<float>& x, std::vector<float>& add);

}  // namespace bankml::model
