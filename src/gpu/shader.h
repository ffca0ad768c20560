// The kernel toolkit: typed values over the SPIR-V assembler, so a kernel reads like the shader it
// is. A Shader owns one spirv::Module and makes it current while it lives; U32, I32, F32, F64,
// Bool, UVec2 and Vec4 values are ids in that module whose operators pick the opcode (every float add,
// subtract and multiply stays NoContraction, so no driver fuses what the CPU keeps apart). Buffers
// and workgroup arrays index like arrays, Var is a function variable, and if_/for_ write structured
// control flow.
//
// The float operators are the IEEE operations Vulkan rounds correctly (add, subtract, multiply,
// conversions). Division, square root and fused multiply-add are not among them on every card, so
// there is no operator/ for floats: the exact functions construct the CPU's correctly rounded results
// from plain operations (div_exact, sqrt_exact, fma_f32, fma_f64) and f16 rounding from integers
// (f16_bits), each with a C++ twin in shader_ref.h that the tests prove against the C library.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "gpu/spirv.h"

namespace bankml::gpu::shader {

enum class K { u32, i32, f32, f64, b, u2, u4, f4 };

template <K k>
struct V {
    uint32_t id = 0;
    V() = default;
    explicit V(uint32_t i) : id(i) {}
};
using U32 = V<K::u32>;
using I32 = V<K::i32>;
using F32 = V<K::f32>;
using F64 = V<K::f64>;
using Bool = V<K::b>;
using UVec2 = V<K::u2>;
using UVec4 = V<K::u4>;  // four u32: one 16-byte load of words that are not floats (f16 pairs)
using Vec4 = V<K::f4>;  // four f32: one 16-byte load from a buffer

class Shader;
// The shader being written on this thread.
Shader& cur();
spirv::Module& mod();
uint32_t type(K k);

// How a kernel gets f32 fused multiply-adds: native where the card proved its Fma correctly rounded
// (kernels::probe_native_fma), else through double with round-to-odd (exact on every card with
// correctly rounded double adds and multiplies).
enum class Fma { exact, native };
// SOFT_F32 asks for Shader::soft_f32 and GUARD_F32 for Shader::guard_f32 (two answers for a card
// without DENORM32: exact always, or fast with a flag that says when to run the exact one).
// FLUSH_F32 (tests): plain f32 results and loads flushed to zero where subnormal, as a card without
// DenormPreserve may do, so that a card that keeps subnormals shows what the guard must catch.
// NUDGE_ESTIMATES (tests): div_exact, sqrt_exact and mean_f32 start from a neighbour of their
// estimate, so that the correction's every step runs (a card's estimate is seldom off).
enum FloatModes : uint32_t {
    DENORM32 = 1, DENORM64 = 2, SIGNED_ZERO32 = 4, SIGNED_ZERO64 = 8, SOFT_F32 = 16, GUARD_F32 = 32, FLUSH_F32 = 64,
    NUDGE_ESTIMATES = 128
};

class Shader {
public:
    // A compute module with local size (local_x, 1, 1); uses_f64 adds the Float64 capability.
    // modes: the float-controls execution modes to declare (FloatModes bits), each only where the
    // card offers it (Gpu::float_controls): subnormals preserved, and signed zeros, infinities and
    // NaN preserved (no x + 0 folded to x), for 32-bit floats and, with uses_f64, 64-bit ones.
    Shader(uint32_t local_x, bool uses_f64, Fma fma = Fma::exact, uint32_t modes = 0);
    ~Shader();
    Shader(const Shader&) = delete;
    Shader& operator=(const Shader&) = delete;

    spirv::Module m;
    Fma fma;
    // Every f32 operation through double, subnormal results rounded by integers: for cards that
    // flush f32 subnormals (they offer no DenormPreserve for 32 bits).
    bool soft_f32 = false;
    // Plain f32 arithmetic, and a flag raised wherever a card that flushes subnormals might differ
    // from IEEE: a subnormal loaded or made from bits, or an operation whose exact result lies
    // below the smallest normal (flushed or not). finish() adds a storage buffer at the binding
    // after the kernel's last one and writes 1 into its word 0 when any invocation raised the
    // flag; the kernel's outputs are then not to be used (the soft_f32 build gives them exactly).
    bool guard_f32 = false;
    bool flush_f32 = false;      // FLUSH_F32, for plain f32 (guarded or not)
    bool nudge = false;          // NUDGE_ESTIMATES
    // The card offers shaderIntegerDotProduct: dot4_i8 is one instruction (else integer steps).
    bool int_dot = false;
    // The card offers subgroup arithmetic in compute shaders (Gpu::subgroup_arithmetic): sums over
    // a workgroup may reduce each subgroup with subgroup_add first.
    bool subgroup = false;
    bool has_f64 = false;        // the module declares Float64
    uint32_t guard_flag = 0;     // the function variable (u32) holding the raised sites' bits
    uint32_t site_bit = 1;       // the GuardSite in force (bit 0: none named)
    uint32_t clock_buf = 0, clock_storage = 0;  // clock_stamps' buffer (0: none)
    uint32_t sites_used = 1;     // every site bit this kernel may raise
    uint32_t next_binding = 0;   // one past the highest binding the kernel declared
    int unguarded = 0;           // > 0: values computed and then discarded (see Unguarded)
    uint32_t push_var = 0, local_var = 0, group_var = 0, global_var = 0;  // made on first use
    uint32_t subgroup_id_var = 0, num_subgroups_var = 0, subgroup_local_var = 0, subgroup_size_var = 0;
    // The module's words (closes main).
    std::vector<uint32_t> finish();

private:
    Shader* prev_;
};

// guard_f32: raise the flag where `c` holds (a no-op in other modes).
void guard(V<K::b> c);
// The flag buffer's words: word 0 is 1 when any invocation raised the flag, word 1 + i when one
// raised it inside the GuardSite named guard_site_names()[i] (word 1: outside any, "an unnamed
// part"). Measuring
// tools read the sites; a run's result needs word 0 alone.
constexpr uint32_t GUARD_FLAG_WORDS = 33;
// While one lives, the flags raised are counted as the named part of the kernel ("scores").
struct GuardSite {
    explicit GuardSite(const char* name);
    ~GuardSite();
    uint32_t prev;
};
const std::vector<std::string>& guard_site_names();
// Gives these names their site words first, in this order (a name already known keeps its word):
// a kernel's module then does not depend on which kernels the process built before it.
void declare_guard_sites(std::initializer_list<const char*> names);

// Measuring (VK_KHR_shader_clock): after clock_stamps(binding), stamp(i) has invocation 0 write
// the subgroup clock's low word into word i of that buffer, in workgroup 0 (a no-op in a kernel
// without it; clocks of different multiprocessors are not comparable).
void clock_stamps(uint32_t binding);
void stamp(uint32_t slot);
// guard_f32: the checks a buffer load makes (a subnormal or a NaN raises the flag), for a value
// loaded under Unguarded and kept; returns v.
F32 guard_load(F32 v);
// While one lives, guard_f32 raises no flag: for values a kernel computes and may discard (both
// sides of a select); the kernel guards what it keeps.
struct Unguarded {
    Unguarded();
    ~Unguarded();
};
// While one lives, f32 arithmetic is plain (no soft f32, no guard), whatever the shader's modes: for
// code whose values are never subnormal (a Q1_0 product's), so that every build gives its bits.
struct PlainF32 {
    PlainF32();
    ~PlainF32();
    bool soft, guard;
};

// Constants.
U32 u32c(uint32_t v);
I32 i32c(int32_t v);
F32 f32c(float v);
F64 f64c(double v);
Bool boolc(bool v);
// Specialisation constants (SpecId spec_id): values like any other, fixed when the pipeline is made
// (Gpu::pipeline's SpecValue list; `default_value` where it gives none), so that one module holds
// a kernel's variants and the driver folds each pipeline's branches away. Asking again for one id
// in a shader returns the same value; another type or default is an error.
Bool spec_bool(uint32_t spec_id, bool default_value);
U32 spec_u32(uint32_t spec_id, uint32_t default_value);

// Arithmetic. Integer ops wrap; float ops round to nearest even.
template <K k> V<k> operator+(V<k> a, V<k> b);
template <K k> V<k> operator-(V<k> a, V<k> b);
template <K k> V<k> operator*(V<k> a, V<k> b);
template <K k> V<k> operator-(V<k> a);
U32 operator/(U32 a, U32 b);
U32 operator%(U32 a, U32 b);
U32 operator&(U32 a, U32 b);
U32 operator|(U32 a, U32 b);
U32 operator^(U32 a, U32 b);
U32 operator~(U32 a);
U32 operator<<(U32 a, U32 b);
U32 operator>>(U32 a, U32 b);  // logical
I32 operator>>(I32 a, U32 b);  // arithmetic
inline U32 operator+(U32 a, uint32_t b) { return a + u32c(b); }
inline U32 operator-(U32 a, uint32_t b) { return a - u32c(b); }
inline U32 operator*(U32 a, uint32_t b) { return a * u32c(b); }
inline U32 operator/(U32 a, uint32_t b) { return a / u32c(b); }
inline U32 operator%(U32 a, uint32_t b) { return a % u32c(b); }
inline U32 operator&(U32 a, uint32_t b) { return a & u32c(b); }
inline U32 operator|(U32 a, uint32_t b) { return a | u32c(b); }
inline U32 operator^(U32 a, uint32_t b) { return a ^ u32c(b); }
inline U32 operator<<(U32 a, uint32_t b) { return a << u32c(b); }
inline U32 operator>>(U32 a, uint32_t b) { return a >> u32c(b); }

// Comparisons: unsigned for U32, signed for I32, ordered for floats (false with a NaN).
template <K k> Bool operator<(V<k> a, V<k> b);
template <K k> Bool operator<=(V<k> a, V<k> b);
template <K k> Bool operator>(V<k> a, V<k> b);
template <K k> Bool operator>=(V<k> a, V<k> b);
template <K k> Bool operator==(V<k> a, V<k> b);
template <K k> Bool operator!=(V<k> a, V<k> b);  // unordered for floats: true with a NaN
inline Bool operator<(U32 a, uint32_t b) { return a < u32c(b); }
inline Bool operator<=(U32 a, uint32_t b) { return a <= u32c(b); }
inline Bool operator>(U32 a, uint32_t b) { return a > u32c(b); }
inline Bool operator>=(U32 a, uint32_t b) { return a >= u32c(b); }
inline Bool operator==(U32 a, uint32_t b) { return a == u32c(b); }
inline Bool operator!=(U32 a, uint32_t b) { return a != u32c(b); }
Bool operator&&(Bool a, Bool b);
Bool operator||(Bool a, Bool b);
Bool operator!(Bool a);
// Ordered not-equal for floats (false with a NaN), where operator!= is unordered.
Bool ordered_ne(F32 a, F32 b);

template <K k> V<k> select(Bool c, V<k> a, V<k> b);

// Conversions and reinterpretations.
F64 f64(F32 x);            // exact
F32 f32(F64 x);            // rounded to nearest even
F32 f32(I32 x);            // exact below 2^24
I32 i32(F32 x);            // toward zero (in range only)
U32 bits(F32 x);
F32 f32_bits(U32 x);
I32 as_i32(U32 x);
U32 as_u32(I32 x);
UVec2 bits(F64 x);         // (low word, high word)
F64 f64_bits(UVec2 x);
U32 lo(UVec2 v);
U32 hi(UVec2 v);
UVec2 uvec2(U32 lo, U32 hi);
// Component i of a vector.
U32 comp(UVec2 v, uint32_t i);
U32 comp(UVec4 v, uint32_t i);
F32 comp(Vec4 v, uint32_t i);
F32 unpack_half_lo(U32 two_halves);  // f16 in bits 0..15, widened exactly
F32 unpack_half_hi(U32 two_halves);  // bits 16..31
// count bits of x from bit `offset`, at the bottom of the result.
U32 bit_field(U32 x, uint32_t offset, uint32_t count);
// The sum of the four products of a's and b's bytes, each a signed 8-bit integer (exact).
I32 dot4_i8(U32 a, U32 b);
F32 fabs(F32 x);
F32 fmax(F32 a, F32 b);
// Rounded to an integer, ties to even (x's sign kept), from adds alone (shader.cpp says why).
F32 round_even(F32 x);
F64 round_even(F64 x);
Bool is_nan(F32 x);

// Function variables (placed at the start of main, as SPIR-V requires).
template <K k>
struct Var {
    uint32_t ptr = 0;
    V<k> get() const;
    void set(V<k> v) const;
    operator V<k>() const { return get(); }
    const Var& operator=(V<k> v) const { set(v); return *this; }
};
template <K k> Var<k> var(V<k> init);

// A storage buffer (binding b of set 0) or workgroup array of elements of one type. A buffer's
// element is one load: 4 bytes, 8 for F64 and UVec2, 16 for UVec4 and Vec4.
template <K k>
struct Arr {
    uint32_t var = 0;
    uint32_t storage = 0;
    bool buffer = true;
    V<k> operator[](U32 i) const;
    void set(U32 i, V<k> v) const;
};
template <K k> Arr<k> buffer(uint32_t binding, bool read_only, const std::string& name);
template <K k> Arr<k> workgroup(uint32_t len);

// The push-constant block of `count` u32 members; push(i) loads member i.
void push_constants(uint32_t count);
U32 push(uint32_t i);
// Invocation ids (x component).
U32 local_id();
U32 group_id();
U32 global_id();

// Workgroup execution and memory barrier (in uniform control flow only).
void barrier();

// Subgroups (SPIR-V 1.3's GroupNonUniform; only for a card whose Gpu::subgroup_arithmetic holds,
// which Shader::subgroup says). The subgroup's index in the workgroup, the workgroup's number of
// subgroups, the invocation's index in its subgroup and the subgroup size, each as the card runs
// the dispatch (the size may differ between cards and between builds of one driver).
U32 subgroup_id();
U32 num_subgroups();
U32 subgroup_local_id();
U32 subgroup_size();
// The sum of x over the subgroup's active invocations (OpGroupNonUniformFAdd, Reduce), in the
// card's own order: not a fixed order, so not for sums whose bits must match the CPU's, and an
// invocation's result may in principle differ in its last bits from another's (callers that need
// one value take one invocation's). Declares GroupNonUniform and GroupNonUniformArithmetic.
F64 subgroup_add(F64 x);

// Structured control flow.
void if_(Bool c, const std::function<void()>& then_body);
void if_else(Bool c, const std::function<void()>& then_body, const std::function<void()>& else_body);
// for (i = begin; i < end; i += step) body(i).
void for_(U32 begin, U32 end, U32 step, const std::function<void(U32)>& body);
inline void for_(U32 begin, U32 end, const std::function<void(U32)>& body) { for_(begin, end, u32c(1), body); }

// ---- The exact building blocks: the CPU's roundings from plain operations.

// Knuth's TwoSum: (RN(a + b), the exact error), in f32 or in double.
std::pair<F32, F32> two_sum(F32 a, F32 b);
std::pair<F64, F64> two_sum(F64 a, F64 b);
// fmaf(a, b, c) correctly rounded: native Fma where the shader's Fma is native, else a·b exact in
// double, the sum rounded to odd in double, then rounded to f32 (Boldo & Melquiond: 53 >= 24 + 2).
F32 fma_f32(F32 a, F32 b, F32 c);
// fmaf(a, b, c) correctly rounded from plain f32 operations alone (no double, no Fma): the
// sequence of fma_exact_ref (fma_exact.h), operation for operation, with its preconditions (a has
// at most 12 significant bits, no partial product underflows or overflows). signed_zero = false
// drops the four operations that give fma(x, y, -0) a zero's IEEE sign (for c never -0).
F32 fma_exact(F32 a, F32 b, F32 c, bool signed_zero = true);
// fma(a, b, c) in double, correctly rounded: Dekker's exact product (Veltkamp split), TwoSum,
// round to odd, one rounding (no overflow or underflow in the products).
F64 fma_f64(F64 a, F64 b, F64 c);
// a / b and sqrt(x) in f32, correctly rounded: an estimate through double, then the neighbour
// whose midpoint test, exact in double, says the quotient (root) lies on its side.
F32 div_exact(F32 a, F32 b);
F32 sqrt_exact(F32 x);
// (float)(s / (double)n) for a double s >= 0 and an integer 0 < n < 2^24, with the double
// rounding of the division and then of the cast both as the CPU does them.
F32 mean_f32(F64 s, U32 n);
// The f16 bits (round to nearest even; F16C's NaN and infinity) of an f32, from integers alone.
U32 f16_bits(F32 x);
// An f16 (low 16 bits) widened exactly.
F32 f16_value(U32 h);
// The f32 bits of an f16 (low 16 bits) as the CPU's f16_to_f32 (and F16C) widen it, from integers
// and one exact conversion: subnormals become normal floats, a NaN is quieted with its payload
// kept. No float arithmetic, so no card's subnormal or NaN handling can change a bit.
U32 f16_widen_bits(U32 h);
// f16_value(f16_bits(x)) in a few operations: the f32 rounded to the nearest f16 value.
F32 f16_round(F32 x);
// f16_round in three float operations, for ±0 and for x in f16's normal range, |x| in
// [2^-14, 65520) (f16_normal): Veltkamp's split with 2^13 + 1 keeps x's leading 11 bits, rounded
// to nearest with ties to even, as f16 rounds there (every such float checked against the CPU's
// f16 conversion: tests/test_spirv.cpp). Elsewhere (f16 subnormals, overflow, infinities, NaN) it is not
// f16_round.
F32 f16_round_normal(F32 x);
Bool f16_normal(F32 x);
// expf as the C library computes it (glibc's algorithm, every multiply-add fused where `fused`
// holds). Both sequences are in the module, in two branches on `fused`: a specialisation
// constant (ops::SPEC_EXPF_FUSED) makes it one module whose pipelines the driver folds to one.
// tiny_floor (guard_f32 only): a result below the smallest normal float (x between -103.97 and
// -87.34) comes back as the smallest normal, unflagged: for callers whose results do not depend
// on such a value beyond its being a positive one below 2^-126.
F32 expf_libm(F32 x, Bool fused, bool tiny_floor = false);
// glibc's expf table (e_exp2f_data.c, N = 32): 2^(i/32) as 64-bit patterns, shared with the C++
// twin (ops::expf_libm_ref).
extern const uint64_t EXP2F_TABLE[32];

}  // namespace bankml::gpu::shader
