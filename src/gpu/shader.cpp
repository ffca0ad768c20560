#include "gpu/shader.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace bankml::gpu::shader {

using namespace spirv;

namespace {
thread_local Shader* g_cur = nullptr;

uint32_t op(uint16_t code, uint32_t ty, const std::vector<uint32_t>& args) { return mod().op(code, ty, args); }
uint32_t ext(uint32_t ty, uint32_t inst, const std::vector<uint32_t>& args) { return mod().ext(ty, inst, args); }
constexpr bool is_float(K k) { return k == K::f32 || k == K::f64; }
constexpr bool is_signed(K k) { return k == K::i32; }
}  // namespace

// Soft f32 (Shader::soft_f32): each f32 operation in double, rounded to f32 by integers where the
// result is subnormal, so a card that flushes f32 subnormals still gives IEEE's (the CPU's) bits.
static F32 soft_add(F32 a, F32 b);
static F32 soft_mul(F32 a, F32 b);
static Bool soft_cmp(uint16_t fop, F32 a, F32 b);
static bool soft() { return cur().soft_f32; }
static bool guarded() { return cur().guard_f32 && cur().unguarded == 0; }

Shader& cur() {
    if (!g_cur) throw Error("shader: no shader is being written on this thread");
    return *g_cur;
}
Module& mod() { return cur().m; }

uint32_t type(K k) {
    Module& m = mod();
    switch (k) {
        case K::u32: return m.t_u32();
        case K::i32: return m.t_i32();
        case K::f32: return m.t_f32();
        case K::f64: return m.t_f64();
        case K::b: return m.t_bool();
        case K::u2: return m.t_vec(m.t_u32(), 2);
        case K::u4: return m.t_vec(m.t_u32(), 4);
        case K::f4: return m.t_vec(m.t_f32(), 4);
    }
    return 0;
}

Shader::Shader(uint32_t local_x, bool uses_f64, Fma f, uint32_t modes) : fma(f), prev_(g_cur) {
    g_cur = this;
    soft_f32 = (modes & SOFT_F32) != 0;
    guard_f32 = !soft_f32 && (modes & GUARD_F32) != 0;
    flush_f32 = !soft_f32 && (modes & FLUSH_F32) != 0;
    nudge = (modes & NUDGE_ESTIMATES) != 0;
    uses_f64 = uses_f64 || soft_f32;
    modes &= ~uint32_t(SOFT_F32 | GUARD_F32 | FLUSH_F32 | NUDGE_ESTIMATES);
    has_f64 = uses_f64;
    if (uses_f64) m.capability(CapabilityFloat64);
    m.entry_point(local_x);
    if (!uses_f64) modes &= DENORM32 | SIGNED_ZERO32;
    if (modes) m.extension("SPV_KHR_float_controls");
    const struct { uint32_t bit, cap, mode, width; } table[] = {
        {DENORM32, CapabilityDenormPreserve, ExecutionModeDenormPreserve, 32},
        {DENORM64, CapabilityDenormPreserve, ExecutionModeDenormPreserve, 64},
        {SIGNED_ZERO32, CapabilitySignedZeroInfNanPreserve, ExecutionModeSignedZeroInfNanPreserve, 32},
        {SIGNED_ZERO64, CapabilitySignedZeroInfNanPreserve, ExecutionModeSignedZeroInfNanPreserve, 64},
    };
    for (const auto& t : table)
        if (modes & t.bit) {
            m.capability(t.cap);
            m.execution_mode(t.mode, {t.width});
        }
    m.begin_main();
    if (guard_f32) {
        guard_flag = m.local_var(m.t_u32());
        m.store(guard_flag, m.c_u32(0));
    }
}
Shader::~Shader() { g_cur = prev_; }

std::vector<uint32_t> Shader::finish() {
    if (guard_f32) {
        Arr<K::u32> flag = buffer<K::u32>(next_binding, false, "subnormal_flag");
        U32 raised(m.load(m.t_u32(), guard_flag));
        if_(raised != 0u, [&] {
            flag.set(u32c(0), u32c(1));
            for (uint32_t i = 0; i < 32; ++i)
                if (sites_used >> i & 1u) if_((raised & (1u << i)) != 0u, [&] { flag.set(u32c(1 + i), u32c(1)); });
        });
    }
    m.end_main();
    return m.words();
}

U32 u32c(uint32_t v) { return U32(mod().c_u32(v)); }
I32 i32c(int32_t v) { return I32(mod().c_i32(v)); }
F32 f32c(float v) { return F32(mod().c_f32(v)); }
F64 f64c(double v) { return F64(mod().c_f64(v)); }
Bool boolc(bool v) { return Bool(mod().c_bool(v)); }
Bool spec_bool(uint32_t spec_id, bool default_value) { return Bool(mod().spec_bool(spec_id, default_value)); }
U32 spec_u32(uint32_t spec_id, uint32_t default_value) { return U32(mod().spec_u32(spec_id, default_value)); }

void guard(Bool c) {
    if (!guarded()) return;
    Module& m = mod();
    uint32_t f = cur().guard_flag;
    U32 was(m.load(m.t_u32(), f));
    m.store(f, (was | select(c, u32c(cur().site_bit), u32c(0))).id);
}
// Names are only added (at most 32), so a reference handed out stays valid.
static std::mutex g_sites_mutex;
static std::vector<std::string>& site_names() {
    static std::vector<std::string> names = [] { std::vector<std::string> v{"an unnamed part"}; v.reserve(32); return v; }();
    return names;
}
const std::vector<std::string>& guard_site_names() { return site_names(); }
// The site's index, the name added where new (past 31 names, all share the last word).
static size_t site_index(const char* name) {
    auto& names = site_names();
    size_t i = std::find(names.begin(), names.end(), name) - names.begin();
    if (i == names.size() && names.size() < 32) names.push_back(name);
    return i;
}
void declare_guard_sites(std::initializer_list<const char*> names) {
    std::lock_guard<std::mutex> lock(g_sites_mutex);
    for (const char* n : names) site_index(n);
}
GuardSite::GuardSite(const char* name) : prev(cur().site_bit) {
    std::lock_guard<std::mutex> lock(g_sites_mutex);
    size_t i = site_index(name);
    cur().site_bit = 1u << std::min<size_t>(i, 31);
    cur().sites_used |= cur().site_bit;
}
GuardSite::~GuardSite() { cur().site_bit = prev; }
PlainF32::PlainF32() : soft(cur().soft_f32), guard(cur().guard_f32) { cur().soft_f32 = cur().guard_f32 = false; }
PlainF32::~PlainF32() { cur().soft_f32 = soft, cur().guard_f32 = guard; }
void clock_stamps(uint32_t binding) {
    Module& m = mod();
    m.capability(5055);  // ShaderClockKHR
    m.extension("SPV_KHR_shader_clock");
    Arr<K::u32> a = buffer<K::u32>(binding, false, "clock_stamps");
    cur().clock_buf = a.var, cur().clock_storage = a.storage;
}
void stamp(uint32_t slot) {
    if (!cur().clock_buf) return;
    Module& m = mod();
    U32 now = lo(UVec2(op(5056, type(K::u2), {m.c_u32(3)})));  // OpReadClockKHR, Subgroup scope
    Arr<K::u32> a;
    a.var = cur().clock_buf, a.storage = cur().clock_storage;
    if_(local_id() == 0u && group_id() == 0u, [&] { a.set(u32c(slot), now); });
}
Unguarded::Unguarded() { ++cur().unguarded; }
Unguarded::~Unguarded() { --cur().unguarded; }

// guard_f32's tests, on the bits alone (a card that flushes subnormals may compare them as zero).
static Bool exp_zero(F32 x) { return (bits(x) & 0x7f800000u) == 0u; }  // zero or subnormal
static Bool nonzero(F32 x) { return (bits(x) & 0x7fffffffu) != 0u; }
static Bool nan(F32 x) { return (bits(x) & 0x7fffffffu) > 0x7f800000u; }
// What the guard flags where a value enters: a subnormal, or a NaN (x86 and a card may differ in a
// NaN's sign and payload, so a NaN is left to the exact build, which gives x86's).
static Bool subnormal(F32 x) { return exp_zero(x) && nonzero(x); }
static Bool odd_value(F32 x) { return subnormal(x) || nan(x); }
F32 guard_load(F32 v) {
    if (guarded()) guard(odd_value(v));
    return v;
}
// FLUSH_F32: a subnormal becomes the zero of its sign, a NaN one canonical NaN (as NVIDIA's cards
// give them).
static F32 ftz(F32 x) {
    if (!cur().flush_f32) return x;
    U32 b(op(OpBitcast, type(K::u32), {x.id}));
    U32 z = b & 0x80000000u;
    return F32(op(OpBitcast, type(K::f32), {select(nan(x), u32c(0x7fffffffu), select(exp_zero(x), z, b)).id}));
}
// Below twice the smallest normal and not zero: what a correction step next to it may have met.
static Bool near_subnormal(F32 x) { return (bits(x) & 0x7f800000u) <= 0x00800000u && nonzero(x); }

template <K k> V<k> operator+(V<k> a, V<k> b) {
    if constexpr (k == K::f32) {
        if (soft()) return soft_add(a, b);
        F32 r = ftz(F32(op(OpFAdd, type(k), {a.id, b.id})));
        // A zero or subnormal sum of inputs that are not both zero and not opposite: its exact
        // value is a subnormal.
        if (guarded()) guard((exp_zero(r) && (nonzero(a) || nonzero(b)) && bits(a) != (bits(b) ^ 0x80000000u)) || nan(r));
        return r;
    }
    return V<k>(op(is_float(k) ? OpFAdd : OpIAdd, type(k), {a.id, b.id}));
}
template <K k> V<k> operator-(V<k> a, V<k> b) {
    if constexpr (k == K::f32) {
        if (soft()) return soft_add(a, -b);
        F32 r = ftz(F32(op(OpFSub, type(k), {a.id, b.id})));
        if (guarded()) guard((exp_zero(r) && (nonzero(a) || nonzero(b)) && bits(a) != bits(b)) || nan(r));
        return r;
    }
    return V<k>(op(is_float(k) ? OpFSub : OpISub, type(k), {a.id, b.id}));
}
template <K k> V<k> operator*(V<k> a, V<k> b) {
    if constexpr (k == K::f32) {
        if (soft()) return soft_mul(a, b);
        F32 r = ftz(F32(op(OpFMul, type(k), {a.id, b.id})));
        if (guarded()) guard((exp_zero(r) && nonzero(a) && nonzero(b)) || nan(r));
        return r;
    }
    return V<k>(op(is_float(k) ? OpFMul : OpIMul, type(k), {a.id, b.id}));
}
template <K k> V<k> operator-(V<k> a) {
    if constexpr (k == K::f32)
        if (soft()) return F32(op(OpBitcast, type(K::f32), {op(OpBitwiseXor, type(K::u32), {op(OpBitcast, type(K::u32), {a.id}), mod().c_u32(0x80000000u)})}));
    return V<k>(op(is_float(k) ? OpFNegate : OpSNegate, type(k), {a.id}));
}
U32 operator/(U32 a, U32 b) { return U32(op(OpUDiv, type(K::u32), {a.id, b.id})); }
U32 operator%(U32 a, U32 b) { return U32(op(OpUMod, type(K::u32), {a.id, b.id})); }
U32 operator&(U32 a, U32 b) { return U32(op(OpBitwiseAnd, type(K::u32), {a.id, b.id})); }
U32 operator|(U32 a, U32 b) { return U32(op(OpBitwiseOr, type(K::u32), {a.id, b.id})); }
U32 operator^(U32 a, U32 b) { return U32(op(OpBitwiseXor, type(K::u32), {a.id, b.id})); }
U32 operator~(U32 a) { return U32(op(OpNot, type(K::u32), {a.id})); }
U32 operator<<(U32 a, U32 b) { return U32(op(OpShiftLeftLogical, type(K::u32), {a.id, b.id})); }
U32 operator>>(U32 a, U32 b) { return U32(op(OpShiftRightLogical, type(K::u32), {a.id, b.id})); }
I32 operator>>(I32 a, U32 b) { return I32(op(OpShiftRightArithmetic, type(K::i32), {a.id, b.id})); }

template <K k> static Bool cmp(uint16_t fop, uint16_t uop, uint16_t sop, V<k> a, V<k> b) {
    if constexpr (k == K::f32)
        if (soft()) return soft_cmp(fop, a, b);
    return Bool(op(is_float(k) ? fop : is_signed(k) ? sop : uop, type(K::b), {a.id, b.id}));
}
template <K k> Bool operator<(V<k> a, V<k> b) { return cmp(OpFOrdLessThan, OpULessThan, OpSLessThan, a, b); }
template <K k> Bool operator<=(V<k> a, V<k> b) { return cmp(OpFOrdLessThanEqual, OpULessThanEqual, OpSLessThanEqual, a, b); }
template <K k> Bool operator>(V<k> a, V<k> b) { return cmp(OpFOrdGreaterThan, OpUGreaterThan, OpSGreaterThan, a, b); }
template <K k> Bool operator>=(V<k> a, V<k> b) { return cmp(OpFOrdGreaterThanEqual, OpUGreaterThanEqual, OpSGreaterThanEqual, a, b); }
template <K k> Bool operator==(V<k> a, V<k> b) { return cmp(OpFOrdEqual, OpIEqual, OpIEqual, a, b); }
template <K k> Bool operator!=(V<k> a, V<k> b) { return cmp(OpFUnordNotEqual, OpINotEqual, OpINotEqual, a, b); }
Bool operator&&(Bool a, Bool b) { return Bool(op(OpLogicalAnd, type(K::b), {a.id, b.id})); }
Bool operator||(Bool a, Bool b) { return Bool(op(OpLogicalOr, type(K::b), {a.id, b.id})); }
Bool operator!(Bool a) { return Bool(op(OpLogicalNot, type(K::b), {a.id})); }
Bool ordered_ne(F32 a, F32 b) { return cmp(OpFOrdNotEqual, OpINotEqual, OpINotEqual, a, b); }

template <K k> V<k> select(Bool c, V<k> a, V<k> b) { return V<k>(op(OpSelect, type(k), {c.id, a.id, b.id})); }

#define BANKML_SHADER_ARITH(k)                                                                     \
    template V<k> operator+(V<k>, V<k>);                                                           \
    template V<k> operator-(V<k>, V<k>);                                                           \
    template V<k> operator*(V<k>, V<k>);                                                           \
    template V<k> operator-(V<k>);
#define BANKML_SHADER_CMP(k)                                                                       \
    template Bool operator<(V<k>, V<k>);                                                           \
    template Bool operator<=(V<k>, V<k>);                                                          \
    template Bool operator>(V<k>, V<k>);                                                           \
    template Bool operator>=(V<k>, V<k>);                                                          \
    template Bool operator==(V<k>, V<k>);                                                          \
    template Bool operator!=(V<k>, V<k>);                                                          \
    template V<k> select(Bool, V<k>, V<k>);
BANKML_SHADER_ARITH(K::u32)
BANKML_SHADER_ARITH(K::i32)
BANKML_SHADER_ARITH(K::f32)
BANKML_SHADER_ARITH(K::f64)
BANKML_SHADER_CMP(K::u32)
BANKML_SHADER_CMP(K::i32)
BANKML_SHADER_CMP(K::f32)
BANKML_SHADER_CMP(K::f64)
template Bool select(Bool, Bool, Bool);
// SPIR-V 1.3 selects vectors by a vector of conditions: one select per word instead.
template <> UVec2 select(Bool c, UVec2 a, UVec2 b) { return uvec2(select(c, lo(a), lo(b)), select(c, hi(a), hi(b))); }
#undef BANKML_SHADER_ARITH
#undef BANKML_SHADER_CMP

F64 f64(F32 x) {
    F64 hw(op(OpFConvert, type(K::f64), {x.id}));
    if (!soft()) return hw;
    // A subnormal (or zero) float is its mantissa times 2^-149, exactly, whatever the card does
    // with subnormal inputs; doubles are never subnormal here.
    U32 b = bits(x), mag = b & 0x7fffffffu;
    F64 m = F64(op(OpConvertUToF, type(K::f64), {mag.id})) * f64c(0x1p-149);
    F64 sm = select((b >> 31u) == 1u, F64(op(OpFNegate, type(K::f64), {m.id})), m);
    return select(mag < 0x00800000u, sm, hw);
}
F32 f32(F64 x) {
    F32 hw = ftz(F32(op(OpFConvert, type(K::f32), {x.id})));
    if (guarded()) guard((exp_zero(hw) && x != f64c(0.0)) || nan(hw));
    if (!soft()) return hw;
    // Below the smallest normal float: the subnormal's mantissa is |x|·2^149 rounded to nearest
    // even (exact scaling; 2^23 becomes the smallest normal by itself), the sign put back.
    UVec2 xb = bits(x);
    U32 sign = hi(xb) & 0x80000000u;
    F64 a = f64_bits(uvec2(lo(xb), hi(xb) & 0x7fffffffu));
    Bool small = a < f64c(0x1p-126);
    F64 q = a * f64c(0x1p149);
    F64 r = round_even(q);
    U32 m(op(OpConvertFToU, type(K::u32), {r.id}));
    return select(small, f32_bits(sign | m), hw);
}
F32 f32(I32 x) { return F32(op(OpConvertSToF, type(K::f32), {x.id})); }
I32 i32(F32 x) { return I32(op(OpConvertFToS, type(K::i32), {x.id})); }
U32 bits(F32 x) { return U32(op(OpBitcast, type(K::u32), {x.id})); }
F32 f32_bits(U32 x) {
    F32 r(op(OpBitcast, type(K::f32), {x.id}));
    if (guarded()) guard(odd_value(r));
    return ftz(r);
}
I32 as_i32(U32 x) { return I32(op(OpBitcast, type(K::i32), {x.id})); }
U32 as_u32(I32 x) { return U32(op(OpBitcast, type(K::u32), {x.id})); }
UVec2 bits(F64 x) { return UVec2(op(OpBitcast, type(K::u2), {x.id})); }
F64 f64_bits(UVec2 x) { return F64(op(OpBitcast, type(K::f64), {x.id})); }
U32 lo(UVec2 v) { return U32(op(OpCompositeExtract, type(K::u32), {v.id, 0})); }
U32 hi(UVec2 v) { return U32(op(OpCompositeExtract, type(K::u32), {v.id, 1})); }
U32 bit_field(U32 x, uint32_t offset, uint32_t count) {
    return U32(op(OpBitFieldUExtract, type(K::u32), {x.id, mod().c_u32(offset), mod().c_u32(count)}));
}
I32 dot4_i8(U32 a, U32 b) {
    Module& m = mod();
    if (cur().int_dot) {
        m.extension("SPV_KHR_integer_dot_product");
        m.capability(CapabilityDotProductKHR);
        m.capability(CapabilityDotProductInput4x8BitPackedKHR);
        return I32(op(OpSDotKHR, type(K::i32), {a.id, b.id, PackedVectorFormat4x8Bit}));
    }
    // Each byte sign-extended (shifted to the top, then arithmetically down), multiplied, summed.
    auto byte = [](U32 w, uint32_t k) { return as_i32(w << u32c(24 - 8 * k)) >> u32c(24); };
    I32 s = byte(a, 0) * byte(b, 0);
    for (uint32_t k = 1; k < 4; ++k) s = s + byte(a, k) * byte(b, k);
    return s;
}
UVec2 uvec2(U32 l, U32 h) { return UVec2(op(OpCompositeConstruct, type(K::u2), {l.id, h.id})); }
U32 comp(UVec2 v, uint32_t i) { return U32(op(OpCompositeExtract, type(K::u32), {v.id, i})); }
U32 comp(UVec4 v, uint32_t i) { return U32(op(OpCompositeExtract, type(K::u32), {v.id, i})); }
F32 comp(Vec4 v, uint32_t i) { return F32(op(OpCompositeExtract, type(K::f32), {v.id, i})); }
static F32 unpack_half(U32 w, uint32_t which) {
    uint32_t f2 = mod().t_vec(mod().t_f32(), 2);
    uint32_t pair = ext(f2, GlslUnpackHalf2x16, {w.id});
    return F32(op(OpCompositeExtract, type(K::f32), {pair, which}));
}
F32 unpack_half_lo(U32 w) { return unpack_half(w, 0); }
F32 unpack_half_hi(U32 w) { return unpack_half(w, 1); }
F32 fabs(F32 x) {
    if (soft()) return f32_bits(bits(x) & 0x7fffffffu);
    return F32(ext(type(K::f32), GlslFAbs, {x.id}));
}
F32 fmax(F32 a, F32 b) {
    if (soft()) return select(is_nan(a) || b > a, b, a);
    return F32(ext(type(K::f32), GlslFMax, {a.id, b.id}));
}
// Rounded to an integer, ties to even, by the adds' own rounding: below 2^p (p + 1 bits of
// mantissa) |x| + 2^p has its last place at 1, so (|x| + 2^p) - 2^p is |x| rounded to nearest
// even (the subtraction exact); from 2^p on, x is an integer (or not finite) already. The sign is
// put back from x (-0.3 gives -0). Not GLSL's RoundEven: lavapipe's rounds some ties toward zero
// (1.5 to 1), and the oracle would refuse a card whose did.
F64 round_even(F64 x) {
    UVec2 xb = bits(x);
    F64 a = f64_bits(uvec2(lo(xb), hi(xb) & 0x7fffffffu));
    F64 r = (a + f64c(0x1p52)) - f64c(0x1p52);
    UVec2 m = bits(select(a < f64c(0x1p52), r, a));
    return f64_bits(uvec2(lo(m), hi(m) | (hi(xb) & 0x80000000u)));
}
F32 round_even(F32 x) {
    if (soft()) return f32(round_even(f64(x)));
    F32 a = fabs(x);
    F32 r = [&] {
        Unguarded ug;  // (never subnormal: the sum is at least 2^23, the difference an integer)
        return (a + f32c(0x1p23f)) - f32c(0x1p23f);
    }();
    F32 m = select(a < f32c(0x1p23f), r, a);
    return f32_bits(bits(m) | (bits(x) & 0x80000000u));
}
Bool is_nan(F32 x) {
    if (soft()) return (bits(x) & 0x7fffffffu) > 0x7f800000u;
    return Bool(op(OpIsNan, type(K::b), {x.id}));
}

static F32 soft_mul(F32 a, F32 b) { return f32(f64(a) * f64(b)); }  // the double product is exact
static Bool soft_cmp(uint16_t fop, F32 a, F32 b) {
    return Bool(op(fop, type(K::b), {f64(a).id, f64(b).id}));
}

template <K k> V<k> Var<k>::get() const { return V<k>(mod().load(type(k), ptr)); }
template <K k> void Var<k>::set(V<k> v) const { mod().store(ptr, v.id); }
template <K k> Var<k> var(V<k> init) {
    Var<k> v{mod().local_var(type(k))};
    v.set(init);
    return v;
}

template <K k> V<k> Arr<k>::operator[](U32 i) const {
    Module& m = mod();
    uint32_t p = buffer ? m.op(OpAccessChain, m.t_ptr(storage, type(k)), {var, m.c_u32(0), i.id})
                        : m.op(OpAccessChain, m.t_ptr(storage, type(k)), {var, i.id});
    V<k> v(m.load(type(k), p));
    // What a kernel reads from its buffers enters guarded; workgroup values were made by guarded
    // operations.
    if constexpr (k == K::f32)
        if (buffer) {
            if (guarded()) guard(odd_value(v));
            return ftz(v);
        }
    return v;
}
template <K k> void Arr<k>::set(U32 i, V<k> v) const {
    Module& m = mod();
    uint32_t p = buffer ? m.op(OpAccessChain, m.t_ptr(storage, type(k)), {var, m.c_u32(0), i.id})
                        : m.op(OpAccessChain, m.t_ptr(storage, type(k)), {var, i.id});
    m.store(p, v.id);
}
template <K k> Arr<k> buffer(uint32_t binding, bool read_only, const std::string& name) {
    cur().next_binding = std::max(cur().next_binding, binding + 1);
    uint32_t stride = k == K::f4 || k == K::u4 ? 16 : k == K::f64 || k == K::u2 ? 8 : 4;
    return Arr<k>{mod().storage_buffer(type(k), binding, read_only, name, stride), StorageStorageBuffer, true};
}
template <K k> Arr<k> workgroup(uint32_t len) {
    return Arr<k>{mod().workgroup_array(type(k), len), StorageWorkgroup, false};
}
#define BANKML_SHADER_STORE(k)                                                                     \
    template struct Var<k>;                                                                        \
    template Var<k> var(V<k>);                                                                     \
    template struct Arr<k>;                                                                        \
    template Arr<k> buffer(uint32_t, bool, const std::string&);                                    \
    template Arr<k> workgroup(uint32_t);
BANKML_SHADER_STORE(K::u32)
BANKML_SHADER_STORE(K::i32)
BANKML_SHADER_STORE(K::f32)
BANKML_SHADER_STORE(K::f64)
BANKML_SHADER_STORE(K::u2)
BANKML_SHADER_STORE(K::u4)
BANKML_SHADER_STORE(K::f4)
template struct Var<K::b>;
template Var<K::b> var(V<K::b>);
#undef BANKML_SHADER_STORE

void push_constants(uint32_t count) { cur().push_var = mod().push_constants(count); }
U32 push(uint32_t i) {
    Module& m = mod();
    uint32_t pv = cur().push_var;
    if (!pv) throw Error("shader: push() before push_constants()");
    return U32(m.load(m.t_u32(), m.op(OpAccessChain, m.t_ptr(StoragePushConstant, m.t_u32()), {pv, m.c_u32(i)})));
}
// Each builtin is one Input variable per module, declared on first use.
static U32 builtin(uint32_t Shader::*slot, uint32_t which) {
    Shader& s = cur();
    if (!(s.*slot)) s.*slot = s.m.builtin_u32x3(which);
    return U32(s.m.builtin_x(s.*slot));
}
U32 local_id() { return builtin(&Shader::local_var, BuiltInLocalInvocationId); }
U32 group_id() { return builtin(&Shader::group_var, BuiltInWorkgroupId); }
U32 global_id() { return builtin(&Shader::global_var, BuiltInGlobalInvocationId); }
static U32 subgroup_builtin(uint32_t Shader::*slot, uint32_t which) {
    Shader& s = cur();
    s.m.capability(CapabilityGroupNonUniform);
    if (!(s.*slot)) s.*slot = s.m.builtin_u32(which);
    return U32(s.m.load(s.m.t_u32(), s.*slot));
}
U32 subgroup_id() { return subgroup_builtin(&Shader::subgroup_id_var, BuiltInSubgroupId); }
U32 num_subgroups() { return subgroup_builtin(&Shader::num_subgroups_var, BuiltInNumSubgroups); }
U32 subgroup_local_id() { return subgroup_builtin(&Shader::subgroup_local_var, BuiltInSubgroupLocalInvocationId); }
U32 subgroup_size() { return subgroup_builtin(&Shader::subgroup_size_var, BuiltInSubgroupSize); }
F64 subgroup_add(F64 x) {
    Module& m = mod();
    m.capability(CapabilityGroupNonUniform);
    m.capability(CapabilityGroupNonUniformArithmetic);
    return F64(op(OpGroupNonUniformFAdd, type(K::f64), {m.c_u32(ScopeSubgroup), GroupOperationReduce, x.id}));
}

void barrier() { mod().barrier(); }

void if_(Bool c, const std::function<void()>& then_body) { mod().if_then(c.id, then_body); }
void if_else(Bool c, const std::function<void()>& then_body, const std::function<void()>& else_body) {
    Module& m = mod();
    uint32_t t = m.id(), e = m.id(), merge = m.id();
    m.emit(OpSelectionMerge, {merge, SelectionControlNone});
    m.emit(OpBranchConditional, {c.id, t, e});
    m.emit(OpLabel, {t});
    then_body();
    m.emit(OpBranch, {merge});
    m.emit(OpLabel, {e});
    else_body();
    m.emit(OpBranch, {merge});
    m.emit(OpLabel, {merge});
}
void for_(U32 begin, U32 end, U32 step, const std::function<void(U32)>& body) {
    auto i = var(begin);
    mod().loop([&] { return (i.get() < end).id; }, [&] { body(i.get()); }, [&] { i = i.get() + step; });
}

// ---------------------------------------------------------------- exact building blocks

template <K k> static std::pair<V<k>, V<k>> two_sum_of(V<k> a, V<k> b) {
    V<k> s = a + b;
    V<k> bb = s - a;
    V<k> aa = s - bb;
    return {s, (a - aa) + (b - bb)};
}
std::pair<F32, F32> two_sum(F32 a, F32 b) { return two_sum_of(a, b); }
std::pair<F64, F64> two_sum(F64 a, F64 b) { return two_sum_of(a, b); }

F32 fma_exact(F32 a, F32 b, F32 c, bool signed_zero) {
    // b = b_hi + b_lo, each of at most 12 bits, so a·b_hi and a·b_lo are exact; Fast2Sum of them
    // (|p1| > |p2| or p1 = 0) gives RN(a·b) and its error.
    F32 b_hi = f32_bits(bits(b) & 0xFFFFF000u);
    F32 b_lo = b - b_hi;
    F32 p1 = a * b_hi, p2 = a * b_lo;
    F32 uh = p1 + p2;
    F32 ul = p2 - (uh - p1);
    auto [th, tl] = two_sum(c, uh);
    auto [s, e] = two_sum(tl, ul);
    // v = tl + ul rounded to odd: an inexact s whose last bit is even steps toward the exact sum.
    U32 sb = bits(s), eb = bits(e);
    Bool inexact = ordered_ne(e, f32c(0.0f));
    Bool even = (sb & 1u) == 0u;
    Bool larger = ((sb ^ eb) >> 31u) == 0u;  // same sign: away from zero
    U32 stepped = select(larger, sb + 1u, sb - 1u);
    U32 vb = select(inexact && even, stepped, sb);
    F32 r = th + f32_bits(vb);
    if (!signed_zero) return r;
    return select(r == f32c(0.0f), a * b + c, r);
}

// s rounded to odd, given s = RN(x) and the exact error e = x - s: an inexact s whose last bit is
// even moves one step toward x (to its odd neighbour).
static F64 round_odd(F64 s, F64 e) {
    UVec2 sb = bits(s);
    U32 l = lo(sb), h = hi(sb);
    Bool inexact = e != f64c(0.0) && !(e != e);
    Bool even = (l & 1u) == 0u;
    Bool larger = ((h ^ hi(bits(e))) >> 31) == 0u;  // same sign: away from zero
    // The low word is even, so +1 never carries; -1 borrows only from a zero low word.
    U32 up = l + 1u;
    U32 dn = l - 1u;
    U32 hdn = select(l == 0u, h - 1u, h);
    UVec2 stepped = select(larger, uvec2(up, h), uvec2(dn, hdn));
    return f64_bits(select(inexact && even, stepped, sb));
}

// The double sum of two floats may need more than 53 bits: rounded to odd, then to f32, it is
// rounded once (53 >= 24 + 2).
static F32 soft_add(F32 a, F32 b) {
    auto [s, e] = two_sum(f64(a), f64(b));
    return f32(select(e == e, round_odd(s, e), s));
}

F32 fma_f32(F32 a, F32 b, F32 c) {
    // A card that flushes subnormals flushes them in its Fma too: soft f32 takes the exact path.
    if (cur().fma == Fma::native && !soft()) {
        F32 r = ftz(F32(ext(type(K::f32), GlslFma, {a.id, b.id, c.id})));
        if (guarded()) {
            // A subnormal result; or a product below twice the smallest normal (exponents summing
            // below 129) in a result below 2^-100: the one place a flushed product could move the
            // rounding (past 2^-100 the result's half ulp is more than four such products, and c,
            // the only other term, is exact).
            U32 ea = (bits(a) >> 23) & 0xffu, eb = (bits(b) >> 23) & 0xffu;
            Bool tiny = exp_zero(r) && ((nonzero(a) && nonzero(b)) || nonzero(c));
            if (cur().has_f64) {
                // A zero from an exact cancellation (a·b = -c, as f16 products in a dot often
                // cancel) is every card's zero: a·b is exact in double, so the double sum is zero
                // exactly there. (Subnormal inputs are flagged where they were made.)
                Bool cancels = f64(a) * f64(b) + f64(c) == f64c(0.0) && !subnormal(a) && !subnormal(b) && !subnormal(c);
                tiny = tiny && !cancels;
            }
            guard(tiny || (nonzero(a) && nonzero(b) && ea + eb < u32c(129) && (bits(r) & 0x7f800000u) < u32c(27u << 23)) || nan(r));
        }
        return r;
    }
    F64 p = f64(a) * f64(b);  // exact: 48 bits
    auto [s, e] = two_sum(p, f64(c));
    // Infinities and NaN: the plain sum says what IEEE's fma says.
    Bool finite = e == e;
    return f32(select(finite, round_odd(s, e), s));
}

// Veltkamp's split: x = hi + lo, each with at most 26 significant bits.
static std::pair<F64, F64> split(F64 x) {
    F64 t = f64c(134217729.0) * x;  // 2^27 + 1
    F64 h = t - (t - x);
    return {h, x - h};
}

F64 fma_f64(F64 a, F64 b, F64 c) {
    // Dekker's exact product: a·b = ph + pl.
    F64 ph = a * b;
    auto [ah, al] = split(a);
    auto [bh, bl] = split(b);
    F64 pl = ((ah * bh - ph) + ah * bl + al * bh) + al * bl;
    auto [th, tl] = two_sum(c, ph);
    auto [s, e] = two_sum(tl, pl);
    F64 r = th + round_odd(s, e);
    // Exact zero: the sign of the plain expression.
    return select(r == f64c(0.0), ph + c, r);
}

// The float next to y (y >= 0) in the direction up (+1) or down (-1), by its bits.
static F32 step(F32 y, uint32_t up) { return f32_bits(up ? bits(y) + 1u : bits(y) - 1u); }

// The correctly rounded f32 q of a positive real whose comparisons with any double m come from
// `below(m)` (the real is below m) and `above(m)` (above m), starting from an estimate y0 within
// one f32 step: y0's neighbour is taken where the real lies past the midpoint toward it, and an
// exact midpoint goes to the even neighbour. Both midpoints are tested at once, without a branch:
// the two tests are independent, and the step up, when taken, is the answer (the real then lies
// at or above the midpoint that a test from the upper neighbour downward would use).
// y >= 0 as a double, infinity as 2^128 (the step above the largest float), so midpoints next to
// infinity are the overflow threshold.
static F64 value(F32 y) { return select(bits(y) == 0x7f800000u, f64c(0x1p128), f64(y)); }

template <class Below, class Above>
static F32 correct(F32 y0, Below below, Above above) {
    if (cur().nudge) {  // tests: the neighbour above the estimate where its bit 1 is set, else below
        Bool movable = bits(y0) != 0u && bits(y0) < 0x7f800000u;
        y0 = select(movable, select((bits(y0) & 2u) != 0u, step(y0, 1), step(y0, 0)), y0);
    }
    F32 up = step(y0, 1), dn = step(y0, 0);
    Bool odd = (bits(y0) & 1u) == 1u;
    // Up: the midpoint between y0 and its upper neighbour (exact in double: 25 bits); past y0's
    // finite range the step is not taken (the values made there are not used).
    F64 mid_up = (f64(y0) + value(up)) * f64c(0.5);
    Bool past = above(mid_up);
    Bool go_up = bits(y0) < 0x7f800000u && (past || (!below(mid_up) && odd));
    // Down: the midpoint between y0 and its lower neighbour, for y0 above zero up to infinity.
    F64 mid_dn = (f64(dn) + value(y0)) * f64c(0.5);
    Bool under = below(mid_dn);
    Bool go_dn = bits(y0) != 0u && bits(y0) <= 0x7f800000u && (under || (!above(mid_dn) && odd));
    return select(go_up, up, select(go_dn, dn, y0));
}

F32 div_exact(F32 a, F32 b) {
    // |a| / |b| with the sign put back; zeros, infinities and NaN take the plain quotient's
    // (IEEE's) result, which the double division gives exactly.
    U32 sign = (bits(a) ^ bits(b)) & 0x80000000u;
    F32 x = f32_bits(bits(a) & 0x7fffffffu), y = f32_bits(bits(b) & 0x7fffffffu);
    F64 xd = f64(x), yd = f64(y);
    // SPIR-V's OpFDiv on doubles: an estimate; the correction below makes it exact.
    F64 qd = F64(op(OpFDiv, type(K::f64), {xd.id, yd.id}));
    F32 q0 = f32(qd);
    Bool special = x == f32c(0.0f) || y == f32c(0.0f) || !(bits(x) < 0x7f800000u) || !(bits(y) < 0x7f800000u);
    // q < m  <=>  x < m·y, exact: m has 25 bits, y 24.
    F32 q, r;
    {
        // The correction steps next to a subnormal quotient are not exact on a card that
        // flushes; guard_f32 flags every quotient that small instead.
        Unguarded u;
        q = correct(q0, [&](F64 m) { return xd < m * yd; }, [&](F64 m) { return xd > m * yd; });
        r = select(special, q0, q);
        r = f32_bits(bits(r) | sign);
    }
    guard((((bits(r) & 0x7f800000u) <= 0x00800000u) && nonzero(x) && bits(y) < 0x7f800000u) || nan(r));
    return r;
}

F32 sqrt_exact(F32 x) {
    F64 xd = f64(x);
    F64 rd = F64(ext(type(K::f64), GlslSqrt, {xd.id}));
    F32 r0 = f32(rd);
    Bool special = !(x > f32c(0.0f)) || !(bits(x) < 0x7f800000u);
    // r < m  <=>  x < m², exact: m has 25 bits (the root of a normal float is never subnormal).
    F32 res;
    {
        Unguarded u;
        F32 r = correct(r0, [&](F64 m) { return xd < m * m; }, [&](F64 m) { return xd > m * m; });
        res = select(special, r0, r);
    }
    guard(nan(res));
    return res;
}

F32 mean_f32(F64 s, U32 n) {
    // q = s / n; the CPU rounds q to double, then to float. f = an estimate's float; the answer is
    // f or a neighbour, decided at the two float midpoints M (25 bits, so M·n is exact): RN_d(q)
    // lies above M when s - M·n > n·ulp_d(M)/2, on M when within it (then ties go to the even
    // float), below otherwise. s - M·n is exact (the two are within a factor of two).
    F64 nd = F64(op(OpConvertUToF, type(K::f64), {n.id}));
    F64 qd = F64(op(OpFDiv, type(K::f64), {s.id, nd.id}));
    F32 f0 = f32(qd);
    // ulp_d(M)/2 · n: M's exponent from its bits.
    auto half_ulp_n = [&](F64 m) {
        U32 e = (hi(bits(m)) >> 20) & 0x7ffu;  // biased exponent of M
        // 2^(e - 1023 - 53): built from bits (e >= 54 for every M here).
        F64 h = f64_bits(uvec2(u32c(0), (e - 53u) << 20));
        return h * nd;
    };
    auto below = [&](F64 m) { return s - m * nd < -half_ulp_n(m); };
    auto above = [&](F64 m) { return s - m * nd > half_ulp_n(m); };
    F32 f;
    {
        Unguarded u;
        f = select(s == f64c(0.0), f32c(0.0f), correct(f0, below, above));
    }
    guard(near_subnormal(f) || (bits(f) == 0u && s != f64c(0.0)) || nan(f));
    return f;
}

U32 f16_bits(F32 x) {
    U32 u = bits(x);
    U32 sign = (u >> 16) & 0x8000u;
    U32 a = u & 0x7fffffffu;
    // NaN: quieted, the payload's top bits kept (F16C); infinity and overflow: infinity.
    U32 nan = sign | 0x7e00u | ((a & 0x7fffffu) >> 13);
    U32 inf = sign | 0x7c00u;
    // Normal f16: rebias, round to nearest even at bit 13.
    U32 normal = sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13);
    // Subnormal f16 (and zero): the mantissa with its implicit bit, shifted right by 126 - e with
    // round to nearest even on the bits shifted out.
    U32 e = a >> 23;
    U32 m = (a & 0x7fffffu) | 0x800000u;
    U32 sh = select(e < 102u, u32c(31), u32c(126) - e);  // >= 25: everything shifted out
    U32 sh_c = select(sh > 24u, u32c(24), sh);
    U32 kept = select(sh > 24u, u32c(0), m >> sh_c);
    U32 rem = select(sh > 24u, m, m & ((u32c(1) << sh_c) - 1u));
    U32 half = select(sh > 24u, u32c(0x1000000u), u32c(1) << (sh_c - 1u));
    Bool up = rem > half || (rem == half && (kept & 1u) == 1u);
    U32 sub = sign | select(up, kept + 1u, kept);
    U32 r = select(a < 0x38800000u, select(a == 0u, sign, sub), normal);
    r = select(a >= 0x477ff000u, inf, r);
    return select(a > 0x7f800000u, nan, r);
}

F32 f16_value(U32 h) { return unpack_half_lo(h & 0xffffu); }

U32 f16_widen_bits(U32 h) {
    U32 sign = (h & 0x8000u) << 16u;
    U32 e = (h >> 10u) & 0x1fu, m = h & 0x3ffu;
    // Subnormal: m·2^-24, m's float (exact: below 2^10) with 24 taken off its exponent.
    U32 sub = select(m == 0u, u32c(0), bits(f32(as_i32(m))) - (24u << 23));
    U32 special = u32c(0x7f800000u) | (m << 13u) | select(m == 0u, u32c(0), u32c(0x400000u));
    U32 normal = ((e + 112u) << 23u) | (m << 13u);
    return sign | select(e == 0u, sub, select(e == 31u, special, normal));
}

F32 f16_round(F32 x) {
    U32 u = bits(x);
    U32 a = u & 0x7fffffffu, sign = u & 0x80000000u;
    // f16's normal range: the f32 rounded to nearest even at bit 13 (a carry moves into the
    // exponent), in the f32's own encoding.
    U32 normal = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
    // Below 2^-14, the multiples of 2^-24: x + c with c = ±0.75 lies in c's binade, whose last
    // place is 2^-24 and whose units there are even, so the sum rounds as f16 does (ties to even),
    // and subtracting c is exact. A flushed subnormal x gives the same ±0 (it rounds to zero in f16).
    U32 sub;
    {
        Unguarded ug;  // computed for every x, kept only below 2^-14
        F32 c = f32_bits(sign | 0x3f400000u);
        sub = bits((x + c) - c) | sign;
    }
    U32 r = select(a < 0x38800000u, sub, normal);
    r = select(a >= 0x477ff000u, sign | 0x7f800000u, r);
    // NaN: F16C's quieted f16 with its payload's top bits, widened.
    return f32_bits(select(a > 0x7f800000u, sign | 0x7fc00000u | (a & 0x7fe000u), r));
}

F32 f16_round_normal(F32 x) {
    F32 c = x * f32c(8193.0f);  // never subnormal where the result is used: |c| >= 2^-1
    return c - (c - x);
}
Bool f16_normal(F32 x) {
    U32 a = bits(x) & 0x7fffffffu;
    return a == 0u || (a >= 0x38800000u && a < 0x477ff000u);
}

const uint64_t EXP2F_TABLE[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

F32 expf_libm(F32 x, Bool fused, bool tiny_floor) {
    const double InvLn2N = 0x1.71547652b82fep+0 * 32, SHIFT = 0x1.8p+52;
    const double C0 = 0x1.c6af84b912394p-5 / (32.0 * 32 * 32), C1 = 0x1.ebfce50fac4f3p-3 / (32.0 * 32),
                 C2 = 0x1.62e42ff0c52d6p-1 / 32;
    F64 xd = f64(x);
    // Both sequences, each in its own branch on `fused`: a specialisation constant leaves the
    // driver one branch to compile. Out of them: ki (the table index and the exponent's shift)
    // and the polynomial 1 + C2·r + (C0·r + C1)·r², before the scale.
    auto ki_v = var(u32c(0));
    auto poly_v = var(f64c(0.0));
    auto sequence = [&](bool fu) {
        auto fma = [&](F64 a, F64 b, F64 c) { return fu ? fma_f64(a, b, c) : a * b + c; };
        F64 kd = fma(f64c(InvLn2N), xd, f64c(SHIFT));
        ki_v = lo(bits(kd));
        kd = kd - f64c(SHIFT);
        F64 r = fu ? fma_f64(f64c(InvLn2N), xd, -kd) : f64c(InvLn2N) * xd - kd;
        F64 z = fma(f64c(C0), r, f64c(C1));
        F64 r2 = r * r;
        F64 y = fma(f64c(C2), r, f64c(1.0));
        poly_v = fma(z, r2, y);
    };
    if_else(fused, [&] { sequence(true); }, [&] { sequence(false); });
    U32 ki = ki_v.get();
    // t = T[ki % 32] + (ki << 47): the shift lands in the high word only.
    auto table = var(uvec2(u32c(0), u32c(0)));
    U32 idx = ki & 31u;
    for (uint32_t i = 0; i < 32; ++i)
        table = select(idx == i, uvec2(u32c(uint32_t(EXP2F_TABLE[i])), u32c(uint32_t(EXP2F_TABLE[i] >> 32))), table.get());
    UVec2 t = table.get();
    F64 sc = f64_bits(uvec2(lo(t), hi(t) + (ki << 15)));
    F64 y = poly_v.get() * sc;
    F32 main;
    {
        // Computed for every x and discarded below -103.97 (and for the special values): guarded
        // below only where it is the result.
        Unguarded u;
        main = f32(y);
    }
    Bool tiny = ((bits(x) >> 20) & 0x7ffu) < 0x7f8u && !(x < f32c(-0x1.9fe368p6f)) && y < f64c(0x1p-126);
    if (tiny_floor && guarded()) {
        Unguarded u;
        main = select(tiny, f32_bits(u32c(0x00800000u)), main);
    } else {
        guard(tiny);
    }
    // The special cases, by the top 12 bits of x as glibc tests them.
    U32 xb = bits(x);
    U32 abstop = (xb >> 20) & 0x7ffu;
    // x + x for NaN and +inf, from the bits: x86 quiets a NaN and keeps its payload, where Vulkan
    // leaves NaN results to the card (some return one canonical NaN).
    Unguarded u;  // x itself entered guarded
    F32 twice = f32_bits(xb | select((xb & 0x7fffffffu) > 0x7f800000u, u32c(0x00400000u), u32c(0)));
    F32 big = select(xb == 0xff800000u, f32c(0.0f),
                     select(abstop >= 0x7f8u, twice,
                            select(x > f32c(0x1.62e42ep6f), f32c(__builtin_inff()),
                                   select(x < f32c(-0x1.9fe368p6f), f32c(0.0f), main))));
    return select(abstop >= 0x42bu, big, main);
}

}  // namespace bankml::gpu::shader
