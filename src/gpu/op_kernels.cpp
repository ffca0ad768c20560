#include "gpu/op_kernels.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>

#include "core/error.h"
#include "gpu/compute.h"
#include "gpu/kernels.h"

namespace bankml::gpu::ops {

using namespace shader;
namespace kn = kernels;

namespace {

constexpr float NEG_INF = -__builtin_inff();

// Values a workgroup holds at once for its norm's sum (larger rows go through in chunks).
constexpr uint32_t NORM_LOCAL = NORM_INVOCATIONS, NORM_CHUNK = 4096, NORM_CAP = 512;
static_assert(NORM_Q8_SPAN % 32 == 0 && NORM_Q8_SPAN <= NORM_LOCAL);
static_assert([] {
    for (uint32_t r : NORM_ROWS_COMPILED_IN)
        if (r % NORM_LOCAL || r > NORM_CHUNK) return false;
    return true;
}(), "a row compiled in is whole values an invocation, in one chunk");


// ---------------------------------------------------------------- the ordered double sum

// The sum s0 + sq[0] + sq[1] + ... + sq[len-1] of float squares, added into a double one by one in
// index order as ggml adds them, by a workgroup of L invocations holding K values each (len <=
// L·K): the bits of the sequential chain without its latency.
//
// While the running sum s stays in one binade [B, 2B), s is a multiple of the binade's last place
// and adding a square t gives exactly s + rd(t), rd(t) = RN(B + t) - B: t rounded to that place,
// whatever s is, unless t lies exactly halfway (then the even sum wins, which depends on s). The
// binade of every partial sum is decided conservatively from bounds of the running sums (an
// approximate prefix sum, widened by 2^-30: its error and the chain's drift are below 2^-36 for
// any row this size). The "candidates" are the additions whose binade is not certain (the sum may
// enter a new one) and the ties; between two candidates every rd(t) and every partial sum of them
// is a multiple of the binade's last place below its top, so each stretch sums exactly in any
// order: a segmented scan gives each candidate the stretch before it, and one invocation walks
// the candidates alone (s += stretch; s += t, which rounds where the CPU's chain rounds). Rows
// whose squares span a wide range (most of them below the sum's last place: a few large
// activations among many small ones) thus walk about one candidate per binade the sum passes.
// More than CAP candidates (rows built to tie everywhere) fall back to the plain walk.
struct ChainScratch {
    Arr<K::f64> scan, tail, list_s;
    Arr<K::u32> flag, count;
    Arr<K::f32> list_t;
    Arr<K::f64> out;
};

ChainScratch chain_scratch(uint32_t L, uint32_t cap) {
    return {workgroup<K::f64>(L), workgroup<K::f64>(L), workgroup<K::f64>(cap),
            workgroup<K::u32>(L), workgroup<K::u32>(L), workgroup<K::f32>(cap), workgroup<K::f64>(2)};
}

// Every invocation calls it (it has barriers); sq holds the squares; returns the chain's sum, the
// same value in every invocation.
F64 chain_sum(const Arr<K::f32>& sq, U32 len, F64 s0, U32 t, uint32_t L, uint32_t Kn, uint32_t cap, const ChainScratch& c) {
    const double lo_f = 1.0 - 0x1p-30, hi_f = 1.0 + 0x1p-30;
    U32 first = t * Kn;
    // A: the run's approximate sum.
    auto part = var(f64c(0.0));
    for (uint32_t k = 0; k < Kn; ++k) {
        U32 j = first + k;
        part = part.get() + select(j < len, f64(sq[select(j < len, j, u32c(0))]), f64c(0.0));
    }
    // B: inclusive scan of the runs' sums (approximate prefixes).
    c.scan.set(t, part.get());
    barrier();
    for (uint32_t d = 1; d < L; d *= 2) {
        F64 mine = c.scan[t];
        F64 other = select(t >= u32c(d), c.scan[select(t >= u32c(d), t - d, u32c(0))], f64c(0.0));
        barrier();
        c.scan.set(t, mine + other);
        barrier();
    }
    stamp(2);
    F64 before = s0 + (c.scan[t] - part.get());
    // C: candidates, the stretch after this run's last candidate (or the whole run), the count.
    // Where the running sum stays in one binade [B, 2B) (both bounds agree), adding t gives
    // s + rd(t), rd(t) = RN(B + t) - B (t rounded to the binade's last place, which s is a multiple
    // of), unless t lies exactly halfway between two multiples: the tie goes to the even sum, which
    // depends on s, so a tie is a candidate; so is every addition that may cross a binade.
    auto exp_b = [](F64 v) { return (hi(bits(v)) >> 20) & 0x7ffu; };
    std::vector<Bool> cand(Kn);
    std::vector<F64> rd(Kn);
    auto a = var(before);
    auto run = var(f64c(0.0));
    auto n = var(u32c(0));
    for (uint32_t k = 0; k < Kn; ++k) {
        U32 j = first + k;
        Bool in = j < len;
        F32 tf = sq[select(in, j, u32c(0))];
        F64 td = select(in, f64(tf), f64c(0.0));
        F64 prev = a.get();
        F64 next = prev + td;
        a = next;
        U32 eub = exp_b(next * f64c(hi_f));
        U32 elb = exp_b(prev * f64c(lo_f));
        // B = 2^(eub - 1023) and half its last place, from bits (the sum of squares of floats is
        // at least 2^-149: eub - 53 stays a normal exponent).
        F64 B = f64_bits(uvec2(u32c(0), eub << 20));
        F64 half_ulp = f64_bits(uvec2(u32c(0), (eub - 53u) << 20));
        rd[k] = (B + td) - B;
        F64 off = td - rd[k];  // exact: both within one last place
        Bool tie = off == half_ulp || off == -half_ulp;
        cand[k] = in && td != f64c(0.0) && (elb != eub || tie);
        n = n.get() + select(cand[k], u32c(1), u32c(0));
        run = select(cand[k], f64c(0.0), run.get() + rd[k]);
    }
    stamp(3);
    // D: exclusive segmented scan of the runs' tails (a run with a candidate starts a segment) and
    // exclusive scan of the counts.
    Bool has = n.get() != 0u;
    c.tail.set(t, run.get());
    c.flag.set(t, select(has, u32c(1), u32c(0)));
    c.count.set(t, n.get());
    barrier();
    for (uint32_t d = 1; d < L; d *= 2) {
        U32 src = select(t >= u32c(d), t - d, u32c(0));
        Bool ok = t >= u32c(d);
        F64 mt = c.tail[t], ot = c.tail[src];
        U32 mf = c.flag[t], of = c.flag[src];
        U32 mc = c.count[t], oc = c.count[src];
        barrier();
        // (other, then mine): mine alone where mine starts a segment.
        c.tail.set(t, select(ok && mf == 0u, ot + mt, mt));
        c.flag.set(t, select(ok, mf | of, mf));
        c.count.set(t, select(ok, mc + oc, mc));
        barrier();
    }
    // Inclusive values; the exclusive ones are the previous invocation's.
    U32 prevt = select(t > 0u, t - 1u, u32c(0));
    F64 carry = select(t > 0u, c.tail[prevt], f64c(0.0));
    U32 off0 = select(t > 0u, c.count[prevt], u32c(0));
    U32 total = c.count[u32c(L - 1)];
    F64 final_tail = c.tail[u32c(L - 1)];
    barrier();
    stamp(4);
    // E: the candidates in order, each with the stretch before it.
    if_(has && total <= u32c(cap), [&] {
        auto r = var(carry);
        auto off = var(off0);
        for (uint32_t k = 0; k < Kn; ++k) {
            U32 j = first + k;
            F32 tf = sq[select(j < len, j, u32c(0))];
            if_else(cand[k], [&] {
                c.list_s.set(off.get(), r.get());
                c.list_t.set(off.get(), tf);
                off = off.get() + 1u;
                r = f64c(0.0);
            }, [&] { r = r.get() + rd[k]; });
        }
    });
    barrier();
    stamp(5);
    // F: the walk.
    if_(t == 0u, [&] {
        auto sum = var(s0);
        if_else(total <= u32c(cap), [&] {
            for_(u32c(0), total, [&](U32 i) {
                sum = sum.get() + c.list_s[i];
                sum = sum.get() + f64(c.list_t[i]);
            });
            sum = sum.get() + final_tail;
        }, [&] {
            for_(u32c(0), len, [&](U32 i) { sum = sum.get() + f64(sq[i]); });
        });
        c.out.set(u32c(0), sum.get());
    });
    barrier();
    stamp(6);
    return c.out[u32c(0)];
}

// The sum of one double per invocation over a workgroup of L (a power of two), in no particular
// order, into every invocation, in c.tail (which chain_sum writes only after its barriers). With
// the card's subgroup arithmetic (Shader::subgroup): each subgroup's sum, its first invocation's
// copy into c.tail[subgroup id], one barrier, then every invocation adds the partials in index
// order (the same bits in all, however the card orders a subgroup's sum or sizes its subgroups).
// Else a tree, one barrier a level.
F64 workgroup_sum(F64 part, U32 t, uint32_t L, const ChainScratch& c) {
    if (cur().subgroup) {
        F64 s = subgroup_add(part);
        if_(subgroup_local_id() == 0u, [&] { c.tail.set(subgroup_id(), s); });
        barrier();
        auto sum = var(c.tail[u32c(0)]);
        for_(u32c(1), num_subgroups(), [&](U32 i) { sum = sum.get() + c.tail[i]; });
        return sum.get();
    }
    c.tail.set(t, part);
    barrier();
    for (uint32_t d = L / 2; d >= 1; d /= 2) {
        if_(t < u32c(d), [&] { c.tail.set(t, c.tail[t] + c.tail[t + d]); });
        barrier();
    }
    return c.tail[u32c(0)];
}

// The CPU's mean (float)(sum / len) of the ordered double sum of the squares sq[0, len) (len <=
// L·Kn <= 2^12), given each invocation's sum of its own squares in any order (part). A norm keeps
// only that float, and the float depends on the sum's last bits only where sum / len lies near a
// float's rounding boundary. Any order of adding m nonnegative doubles lands within (m - 1)·2^-53
// of their exact sum, relatively: the ordered chain and the workgroup's sum a alike, so the chain's
// sum lies in [a·(1 - 2^-37), a·(1 + 2^-37)] (2·4095·2^-53 < 2^-39). The rounding to double, then
// to float, is monotone: where both ends give the same float, the chain gives it too. Elsewhere
// (and for a sum that is not finite) chain_sum makes the ordered sum itself. The decision is the
// same in every invocation (they read the same a), so the chain's barriers stay in uniform
// control flow.
F32 ordered_mean(const Arr<K::f32>& sq, U32 len, F64 part, U32 t, uint32_t L, uint32_t Kn, uint32_t cap, const ChainScratch& c) {
    static_assert(NORM_CHUNK <= 4096, "the bound 2^-37 holds for sums of at most 4096 squares");
    F64 a = workgroup_sum(part, t, L, c);
    stamp(2);
    F32 below = mean_f32(a * f64c(1.0 - 0x1p-37), len), above = mean_f32(a * f64c(1.0 + 0x1p-37), len);
    Bool finite_a = (hi(bits(a)) & 0x7ff00000u) != 0x7ff00000u;
    auto mean = var(below);
    Bool fast = finite_a && bits(below) == bits(above);
    if_(!fast, [&] { mean = mean_f32(chain_sum(sq, len, f64c(0.0), t, L, Kn, cap, c), len); });
    if_(fast, [&] {
        for (uint32_t k = 3; k <= 6; ++k) stamp(k);  // the chain's phases (stamps 3-6), none of them taken
    });
    return mean.get();
}

// ---------------------------------------------------------------- Q8_0 pieces

// A block's scale d = amax/127 rounded to f16 (the value the products use) and its multiplier
// id = 127/amax (0 for a block of zeros), as quantize_row_q8_0 makes them.
F32 q8_scale(F32 amax) { return f16_value(f16_bits(div_exact(amax, f32c(127.0f)))); }
F32 q8_multiplier(F32 amax) { return select(amax != f32c(0.0f), div_exact(f32c(127.0f), amax), f32c(0.0f)); }
// x·id rounded half even, then the AVX2 conversion and saturating packs: NaN and values past int32
// (an infinite id, from a subnormal amax) convert to INT32_MIN, then -128.
I32 q8_quant(F32 x, F32 id) {
    F32 r = round_even(x * id);
    F32 c = select(r >= f32c(0x1p31f) || is_nan(r), f32c(-128.0f),
                   select(r > f32c(127.0f), f32c(127.0f), select(r < f32c(-128.0f), f32c(-128.0f), r)));
    return i32(c);
}

// Where prep_act's outputs go: the Q1_0 lane-product table, the Q8_0 quants (four to a word, in
// order from the low byte, the words laid out as q8_word lays them), each block's scale (f32 bits)
// and quant sum (i32) side by side, the f16 pairs.
struct ActOut {
    Arr<K::f32> table;
    Arr<K::u32> q8;
    Arr<K::u32> d8;
    Arr<K::u32> h16;
};

// Where the word of quants 4w..4w+3 goes, of an activation of nb blocks of 64 (q8_word).
U32 q8_at(U32 w, U32 nb) { return ((((w >> 2u) & 3u) * nb + (w >> 4u)) << 2u) + (w & 3u); }
U32 q8_blocks(U32 n) { return (n + 63u) >> 6u; }

// The sum of a word's four signed bytes.
I32 byte_sum(U32 w) { return dot4_i8(w, u32c(0x01010101u)); }

// Which of prep_act's outputs the pipeline writes (SPEC_ACT_OUTPUTS; 0, the default, is all).
struct ActWrites {
    Bool table, q8, f16;
};
ActWrites act_writes() {
    U32 spec = spec_u32(SPEC_ACT_OUTPUTS, 0);
    U32 m = select(spec != 0u, spec, u32c(ACT_ALL));
    return {(m & u32c(ACT_TABLE)) != 0u, (m & u32c(ACT_Q8)) != 0u, (m & u32c(ACT_F16)) != 0u};
}

// prep_act's outputs for `lanes` lanes (four values of a 32-value block each, at most max_lanes)
// whose values a workgroup holds in ys[0, 4·lanes): the activation's lanes from first_lane on (a
// multiple of 8, so blocks are whole), of an activation of nb blocks of 64 (q8_at). One invocation
// per block makes its amax (over the block's values in index order), scale and multiplier (into
// sd, sid: a workgroup's blocks, at most L); each invocation then quantizes whole lanes, keeping
// their quants packed four to a word in workgroup memory; then one invocation per block adds its
// quants (the sum beside the scale), and the table's 16 entries a lane go out in index order
// across the invocations, so that a warp's stores are contiguous. Only the outputs the pipeline
// writes (act_writes) are made. Every invocation calls it.
void quantize_lanes(Arr<K::f32>& ys, U32 lanes, U32 first_lane, U32 nb, U32 t, uint32_t L, uint32_t max_lanes, const ActOut& o,
                    Arr<K::f32>& sd, Arr<K::f32>& sid) {
    const ActWrites writes = act_writes();
    const uint32_t rounds = (max_lanes + L - 1) / L;
    auto qs = workgroup<K::u32>(max_lanes);
    if_(t < lanes >> 3u, [&] {
        auto amax = var(f32c(0.0f));
        for (uint32_t j = 0; j < 32; ++j) {
            F32 a = fabs(ys[t * 32u + j]);
            amax = select(a > amax.get(), a, amax.get());
        }
        sd.set(t, q8_scale(amax.get()));
        sid.set(t, q8_multiplier(amax.get()));
    });
    barrier();
    std::vector<U32> packed(rounds);
    std::vector<Bool> in(rounds);
    std::vector<U32> lls(rounds);
    for (uint32_t r = 0; r < rounds; ++r) {
        U32 ll = t + r * L;
        in[r] = ll < lanes;
        lls[r] = ll;
        // Past the lanes, lane 0 again (computed, not stored).
        U32 lc = select(in[r], ll, u32c(0)), lane = first_lane + lc;
        F32 id = sid[lc >> 3u];
        std::vector<F32> v(4);
        std::vector<I32> q(4);
        for (uint32_t k = 0; k < 4; ++k) {
            v[k] = ys[lc * 4u + k];
            q[k] = q8_quant(v[k], id);
        }
        packed[r] = (as_u32(q[0]) & 0xffu) | ((as_u32(q[1]) & 0xffu) << 8u) | ((as_u32(q[2]) & 0xffu) << 16u) | (as_u32(q[3]) << 24u);
        if_(in[r] && writes.q8, [&] { o.q8.set(q8_at(lane, nb), packed[r]); });
        if_(in[r] && writes.f16, [&] {
            o.h16.set(lane * 2u, f16_bits(v[0]) | (f16_bits(v[1]) << 16u));
            o.h16.set(lane * 2u + 1u, f16_bits(v[2]) | (f16_bits(v[3]) << 16u));
        });
    }
    for (uint32_t r = 0; r < rounds; ++r) if_(in[r], [&] { qs.set(lls[r], packed[r]); });
    barrier();
    if_(t < lanes >> 3u && writes.q8, [&] {
        I32 sum = byte_sum(qs[t * 8u]);
        for (uint32_t k = 1; k < 8; ++k) sum = sum + byte_sum(qs[t * 8u + k]);
        U32 at = ((first_lane >> 3u) + t) * 2u;
        o.d8.set(at, bits(sd[t]));
        o.d8.set(at + 1u, as_u32(sum));
    });
    for_(t, select(writes.table, lanes * 16u, u32c(0)), u32c(L), [&](U32 e) {
        U32 ll = e >> 4u, nib = e & 15u;
        U32 p = qs[ll];
        auto sum = var(i32c(0));
        for (uint32_t k = 0; k < 4; ++k) {
            I32 qk = as_i32(p << u32c(24 - 8 * k)) >> u32c(24);
            I32 neg = select(qk == i32c(-128), qk, -qk);
            sum = sum.get() + select(((nib >> k) & 1u) == 1u, qk, neg);
        }
        o.table.set(first_lane * 16u + e, sd[ll >> 3u] * f32(sum.get()));
    });
}

// ---------------------------------------------------------------- rms_norm

// The double sum of value(i)·value(i), i < n, in index order, by a workgroup of NORM_LOCAL
// (every invocation calls it). Each invocation's NORM_KN values of a chunk are loaded before any
// is used, so their latencies overlap instead of adding up: load(i) reads what value i needs (no
// side effects; unguarded, for every lane, past n at index 0), value(i, loaded) makes the value
// from it where i < n (guarded, and may store).
constexpr uint32_t NORM_KN = NORM_CHUNK / NORM_LOCAL;
using Loads = std::vector<F32>;
// One chunk's squares (values base + t + k·NORM_LOCAL) into sx; returns this invocation's sum of
// them (in no particular order).
F64 chunk_squares(U32 base, U32 n, U32 t, Arr<K::f32>& sx, const std::function<Loads(U32)>& load,
                  const std::function<F32(U32, const Loads&)>& value) {
    std::vector<Loads> v(NORM_KN);
    std::vector<Bool> in(NORM_KN);
    std::vector<U32> at(NORM_KN);
    // A row compiled in: in[k] is a constant once specialised, so the pipeline keeps only the
    // row's own loads and values, with no branch around each.
    U32 compiled_in = spec_u32(SPEC_NORM_VALUES, 0);
    for (uint32_t k = 0; k < NORM_KN; ++k) {
        at[k] = base + t + k * NORM_LOCAL;
        in[k] = select(compiled_in != 0u, u32c(k) < compiled_in, at[k] < n);
        Unguarded ug;
        v[k] = load(select(in[k], at[k], u32c(0)));
    }
    auto part = var(f64c(0.0));
    for (uint32_t k = 0; k < NORM_KN; ++k)
        if_(in[k], [&] {
            F32 x = value(at[k], v[k]);
            F32 q = x * x;
            sx.set(t + k * NORM_LOCAL, q);
            part = part.get() + f64(q);
        });
    barrier();
    stamp(1);
    return part.get();
}

// The row's length: the one compiled in (SPEC_NORM_VALUES: a constant once specialised, so the
// pipeline keeps only the code for rows of one chunk), else the pushed one.
U32 norm_row(U32 pushed) {
    U32 compiled_in = spec_u32(SPEC_NORM_VALUES, 0);
    return select(compiled_in != 0u, compiled_in * u32c(NORM_LOCAL), pushed);
}

// The ordered sum itself, chunk by chunk, in the workgroup arrays sx and cs.
F64 sum_of_squares(U32 n, U32 t, Arr<K::f32>& sx, const ChainScratch& cs, const std::function<Loads(U32)>& load,
                   const std::function<F32(U32, const Loads&)>& value) {
    auto sum = var(f64c(0.0));
    for_(u32c(0), n, u32c(NORM_CHUNK), [&](U32 base) {
        chunk_squares(base, n, t, sx, load, value);
        U32 len = select(n - base < u32c(NORM_CHUNK), n - base, u32c(NORM_CHUNK));
        sum = chain_sum(sx, len, sum.get(), t, NORM_LOCAL, NORM_KN, NORM_CAP, cs);
    });
    return sum.get();
}

// The CPU's mean (float)(sum / n) of the squares of value(i), i < n, summed in index order: for a
// row of one chunk through ordered_mean (the chain only where the float depends on it), for longer
// rows chunk by chunk through the chain.
F32 norm_mean(U32 n, U32 t, const std::function<Loads(U32)>& load, const std::function<F32(U32, const Loads&)>& value) {
    auto sx = workgroup<K::f32>(NORM_CHUNK);
    ChainScratch cs = chain_scratch(NORM_LOCAL, NORM_CAP);
    auto mean = var(f32c(0.0f));
    if_else(n <= u32c(NORM_CHUNK), [&] {
        F64 part = chunk_squares(u32c(0), n, t, sx, load, value);
        mean = ordered_mean(sx, n, part, t, NORM_LOCAL, NORM_KN, NORM_CAP, cs);
    }, [&] { mean = mean_f32(sum_of_squares(n, t, sx, cs, load, value), n); });
    return mean.get();
}

// The ordered sum alone, its two words (for the oracle: a norm's output hides most of its sum's
// last bits).
std::vector<uint32_t> sum_squares(const Build& b) {
    Shader s(NORM_LOCAL, true, b.fma, b.float_modes);
    auto x = buffer<K::f32>(0, true, "x");
    auto out = buffer<K::u32>(1, false, "sum");
    push_constants(1);
    U32 n = norm_row(push(0)), t = local_id();
    auto sx = workgroup<K::f32>(NORM_CHUNK);
    ChainScratch cs = chain_scratch(NORM_LOCAL, NORM_CAP);
    F64 sum = sum_of_squares(n, t, sx, cs, [&](U32 at) { return Loads{x[at]}; }, [&](U32, const Loads& l) { return guard_load(l[0]); });
    if_(t == 0u, [&] {
        UVec2 w = bits(sum);
        out.set(u32c(0), lo(w));
        out.set(u32c(1), hi(w));
    });
    return s.finish();
}

// The norm's scale 1/sqrt(mean + eps) of x, after the residual add (add + x, as the CPU adds them)
// where residual is 1; every invocation calls it. The added value is stored back into x where
// in_place (rms_norm), and each value of the row, added or not, is handed to keep(i, value) where
// keep is given (rms_norm_q8).
F32 norm_scale(Arr<K::f32>& x, Arr<K::f32>& add, U32 n, U32 residual, F32 eps, U32 t, bool in_place,
               const std::function<void(U32, F32)>& keep = {}) {
    // (residual is the same for the whole dispatch: add is read only where it is 1.)
    std::optional<GuardSite> site(std::in_place, "rms_norm sum");
    F32 mean = norm_mean(
        n, t, [&](U32 at) { return Loads{x[at], add[at]}; },
        [&](U32 at, const Loads& l) {
            auto v = var(guard_load(l[0]));
            if_(residual != 0u, [&] {
                F32 r = guard_load(l[1]) + v.get();
                if (in_place) x.set(at, r);
                v = r;
            });
            if (keep) keep(at, v.get());
            return v.get();
        });
    // Every invocation makes the scale from the same mean: the same bits, and no barrier.
    site.emplace("rms_norm scale");
    F32 scale = div_exact(f32c(1.0f), sqrt_exact(mean + eps));
    stamp(7);
    return scale;
}

// y(i) = (x(i)·scale)·w(i) for every i < n, handed to out(i, y); a chunk's loads issued together.
// Each invocation reads back only the x it stored in norm_scale.
void norm_out(Arr<K::f32>& x, Arr<K::f32>& w, U32 w_off, U32 n, F32 scale, U32 t, const std::function<void(U32, F32)>& out) {
    GuardSite site("rms_norm out");
    for_(u32c(0), n, u32c(NORM_CHUNK), [&](U32 base) {
        std::vector<F32> xv(NORM_KN), wv(NORM_KN);
        std::vector<Bool> in(NORM_KN);
        std::vector<U32> at(NORM_KN);
        for (uint32_t k = 0; k < NORM_KN; ++k) {
            at[k] = base + t + k * NORM_LOCAL;
            in[k] = at[k] < n;
            U32 i = select(in[k], at[k], u32c(0));
            Unguarded ug;
            xv[k] = x[i], wv[k] = w[w_off + i];
        }
        for (uint32_t k = 0; k < NORM_KN; ++k)
            if_(in[k], [&] { out(at[k], (guard_load(xv[k]) * scale) * guard_load(wv[k])); });
    });
}

std::vector<uint32_t> rms_norm(const Build& b) {
    Shader s(NORM_LOCAL, true, b.fma, b.float_modes);
    s.subgroup = b.subgroup;
    auto x = buffer<K::f32>(0, false, "x");
    auto add = buffer<K::f32>(1, true, "add");
    auto w = buffer<K::f32>(2, true, "w");
    auto y = buffer<K::f32>(3, false, "y");
    if (b.clock) clock_stamps(4);
    push_constants(4);
    U32 w_off = push(1), residual = push(3);
    U32 n = norm_row(push(0));
    F32 eps = f32_bits(push(2));
    U32 t = local_id();
    stamp(0);
    F32 scale = norm_scale(x, add, n, residual, eps, t, true);
    norm_out(x, w, w_off, n, scale, t, [&](U32 i, F32 v) { y.set(i, v); });
    stamp(8);
    return s.finish();
}

// rms_norm whose output goes straight into prep_act's outputs, in NORM_Q8_SPAN values a workgroup.
// Every workgroup makes the whole row's scale (the same code on the same data: the same bits in
// each), then normalizes and quantizes its own span alone. x is only read: the first workgroup
// writes the row after the residual add (or x itself, where there is none) into x_out, so that no
// workgroup reads what another writes; the forward pass alternates two residual buffers.
std::vector<uint32_t> rms_norm_q8(const Build& b) {
    Shader s(NORM_LOCAL, true, b.fma, b.float_modes);
    s.subgroup = b.subgroup;
    auto x = buffer<K::f32>(0, true, "x");
    auto add = buffer<K::f32>(1, true, "add");
    auto w = buffer<K::f32>(2, true, "w");
    auto x_out = buffer<K::f32>(3, false, "x_out");
    ActOut act{buffer<K::f32>(4, false, "lane_products"), buffer<K::u32>(5, false, "q8"), buffer<K::u32>(6, false, "d8"),
               buffer<K::u32>(7, false, "f16")};
    if (b.clock) clock_stamps(8);
    push_constants(4);
    U32 w_off = push(1), residual = push(3);
    U32 n = norm_row(push(0));
    F32 eps = f32_bits(push(2));
    U32 t = local_id(), g = group_id();
    U32 first = g * u32c(NORM_Q8_SPAN);
    U32 len = select(n - first < u32c(NORM_Q8_SPAN), n - first, u32c(NORM_Q8_SPAN));
    stamp(0);
    // The span's values after the residual add, then its outputs y(i) = (x(i)·scale)·w(i); each
    // invocation's weight is loaded first, so that its wait overlaps the sum's.
    F32 wt;
    {
        Unguarded ug;  // guarded where used
        wt = w[w_off + first + select(t < len, t, u32c(0))];
    }
    auto ys = workgroup<K::f32>(NORM_Q8_SPAN);
    F32 scale = norm_scale(x, add, n, residual, eps, t, false, [&](U32 at, F32 v) {
        if_(g == 0u, [&] { x_out.set(at, v); });
        if_(at - first < u32c(NORM_Q8_SPAN), [&] { ys.set(at - first, v); });  // (at < first wraps past the span)
    });
    {
        GuardSite site("rms_norm out");
        if_(t < len, [&] { ys.set(t, (ys[t] * scale) * guard_load(wt)); });
    }
    barrier();
    GuardSite site("rms_norm quantization");
    auto sd = workgroup<K::f32>(NORM_Q8_SPAN / 32), sid = workgroup<K::f32>(NORM_Q8_SPAN / 32);
    quantize_lanes(ys, len >> 2u, first >> 2u, q8_blocks(n), t, NORM_LOCAL, NORM_Q8_SPAN / 4, act, sd, sid);
    stamp(8);
    return s.finish();
}

// ---------------------------------------------------------------- swiglu

// One lane of ggml_v_expf (AVX2), operation by operation.
F32 v_expf(F32 x) {
    F32 r = f32c(0x1.8p23f);
    F32 z = fma_f32(x, f32c(0x1.715476p+0f), r);
    F32 n = z - r;
    F32 b = fma_f32(-n, f32c(0x1.7f7d1cp-20f), fma_f32(-n, f32c(0x1.62e4p-1f), x));
    U32 e = bits(z) << 23u;
    Bool c = fabs(n) > f32c(126.0f);
    // k = 2^n where the plain branch is the result (|n| <= 126: a normal float); 1 elsewhere, so
    // guarded f32 sees only values the result depends on.
    F32 k = f32_bits(select(c, u32c(0x3f800000u), e + u32c(0x3f800000u)));
    F32 u = b * b;
    F32 j = fma_f32(fma_f32(fma_f32(f32c(0x1.0e4020p-7f), b, f32c(0x1.573e2ep-5f)), u,
                            fma_f32(f32c(0x1.555e66p-3f), b, f32c(0x1.fffdb6p-2f))),
                    u, f32c(0x1.ffffecp-1f) * b);
    F32 plain = fma_f32(k, j, k);
    F32 big;
    {
        // The scaled branches (|x| past 87): computed for every x, so unguarded; guarded f32
        // flags every x that takes them.
        Unguarded ug;
        U32 g = select(n <= f32c(0.0f), u32c(0x82000000u), u32c(0));
        F32 s1 = f32_bits(g + 0x7f000000u);
        F32 s2 = f32_bits(e - g);
        big = select(fabs(n) > f32c(192.0f), s1 * s1, fma_f32(s2, j, s2) * s1);
    }
    guard(c);
    return select(c, big, plain);
}

// silu(g)·u as ggml_vec_swiglu_f32's 8-lane loop: g / (1 + v_expf(0 - g)), then ·u. Guarded f32
// need not watch v_expf: a value of it that a flushing card could change is below 2^-126 (or is
// the scaled branch's result for |g| past 87, inf or below 2^-126 too), and 1 + e is then 1 or e
// either way.
F32 swiglu_one(F32 g, F32 u) {
    F32 e;
    {
        Unguarded ug;
        e = v_expf(f32c(0.0f) - g);
    }
    return div_exact(g, f32c(1.0f) + e) * u;
}

// ---------------------------------------------------------------- swiglu_q1_0_q8

// The gate and up products of a Q1_0 layer with SwiGLU's output going straight into prep_act's
// outputs (no dispatch between them, no gate|up vector in memory). The packed matrix holds the
// gate and up rows in turns of 32 (gate rows 32b.., then up rows 32b..: stack_gate_up), and each
// invocation computes two rows (q1_0_mat_vec8x2's body), so workgroup b holds the gate and up sums
// of outputs 32b..32b+31: h = silu(g)·u (ops::swiglu's bits), one Q8_0 block, quantized as
// prep_act quantizes it.
std::vector<uint32_t> swiglu_q1_0_q8(const Build& b) {
    Shader s(kn::KERNEL_INVOCATIONS, true, b.fma, b.float_modes);
    std::optional<kn::Q1_0Rows> r;
    {
        PlainF32 plain;  // the products' nonzero values are multiples of 2^-48, never subnormal
        r = kn::q1_0_rows8(b.fma == Fma::native ? kn::FmaPath::native : kn::FmaPath::exact, 2, SWIGLU_Q1_0_AHEAD);
    }
    ActOut act{buffer<K::f32>(4, false, "lane_products"), buffer<K::u32>(5, false, "q8"), buffer<K::u32>(6, false, "d8"),
               buffer<K::u32>(7, false, "f16")};
    U32 t = local_id(), g = group_id();
    U32 n_ff = r->rows >> 1u;
    auto ys = workgroup<K::f32>(32);
    {
        GuardSite site("swiglu");
        if_(t < 32u, [&] {  // lane 0: rows 64b + t (gate) and 64b + 32 + t (up)
            F32 gate, up;
            {
                PlainF32 plain;
                gate = r->sum(0, t), up = r->sum(1, t);
            }
            ys.set(t, swiglu_one(gate, up));
        });
    }
    barrier();
    GuardSite site("swiglu quantization");
    auto sd = workgroup<K::f32>(1), sid = workgroup<K::f32>(1);
    // (Workgroups past n_ff/32 hold padding rows only.)
    quantize_lanes(ys, select(g * 32u < n_ff, u32c(8), u32c(0)), g * 8u, q8_blocks(n_ff), t, kn::KERNEL_INVOCATIONS, 8, act, sd, sid);
    return s.finish();
}

// ---------------------------------------------------------------- prep_act

// Q8_0 quantization as the CPU's quantize_row_q8_0 (amax, d = amax/127 to f16, id = 127/amax,
// round half even of x·id), then the Q1_0 table (kernels.h, binding 3) and the f16 rounding.
std::vector<uint32_t> prep_act(const Build& b) {
    Shader s(128, true, b.fma, b.float_modes);
    auto x = buffer<K::f32>(0, true, "x");
    auto table = buffer<K::f32>(1, false, "lane_products");
    auto q8 = buffer<K::u32>(2, false, "q8");
    auto d8 = buffer<K::u32>(3, false, "d8");
    auto h16 = buffer<K::u32>(4, false, "f16");
    push_constants(3);
    U32 n = push(0), x_off = push(1), gated = push(2);
    U32 t = local_id(), blk = group_id();
    auto sx = workgroup<K::f32>(32);
    auto sq = workgroup<K::i32>(32);
    auto sd = workgroup<K::f32>(2);  // d1, id
    // gated: x is SwiGLU(gate, up) of a gate|up pair of n each, computed here (ops::swiglu's bits).
    if_(t < 32u, [&] {
        U32 i = x_off + blk * 32u + t;
        if_else(gated != 0u, [&] { sx.set(t, swiglu_one(x[i], x[n + i])); }, [&] { sx.set(t, x[i]); });
    });
    barrier();
    // Thread 0 the scale d (to f16 and back), thread 1 the multiplier id = 127/amax.
    if_(t < 2u, [&] {
        auto amax = var(f32c(0.0f));
        for_(u32c(0), u32c(32), [&](U32 j) {
            F32 a = fabs(sx[j]);
            amax = select(a > amax.get(), a, amax.get());
        });
        F32 m = amax.get();
        if_else(t == 0u, [&] { sd.set(u32c(0), q8_scale(m)); }, [&] { sd.set(u32c(1), q8_multiplier(m)); });
    });
    barrier();
    F32 d1 = sd[u32c(0)], id = sd[u32c(1)];
    if_(t < 32u, [&] { sq.set(t, q8_quant(sx[t], id)); });
    const ActWrites writes = act_writes();
    if_(t < 16u && writes.f16, [&] {
        U32 lo16 = f16_bits(sx[t * 2u]), hi16 = f16_bits(sx[t * 2u + 1u]);
        h16.set(blk * 16u + t, lo16 | (hi16 << 16u));
    });
    barrier();
    if_(t < 8u && writes.q8, [&] {
        U32 w = u32c(0);
        for (uint32_t k = 0; k < 4; ++k) w = w | ((as_u32(sq[t * 4u + u32c(k)]) & 0xffu) << u32c(8 * k));
        q8.set(q8_at(blk * 8u + t, q8_blocks(n)), w);
    });
    if_(t == 0u && writes.q8, [&] {
        auto sum = var(i32c(0));
        for_(u32c(0), u32c(32), [&](U32 j) { sum = sum.get() + sq[j]; });
        d8.set(blk * 2u, bits(d1));
        d8.set(blk * 2u + 1u, as_u32(sum.get()));
    });
    // Lane l (quants 4l..4l+3), pattern nib: + where the bit is set, the i8 negation otherwise.
    U32 l = t >> 4u, nib = t & 15u;
    auto sum = var(i32c(0));
    for (uint32_t k = 0; k < 4; ++k) {
        I32 q = sq[l * 4u + k];
        I32 neg = select(q == i32c(-128), q, -q);
        sum = sum.get() + select(((nib >> k) & 1u) == 1u, q, neg);
    }
    if_(writes.table, [&] { table.set((blk * 8u + l) * 16u + nib, d1 * f32(sum.get())); });
    return s.finish();
}

// ---------------------------------------------------------------- q2_0_mat_vec

// ggml_vec_dot_q2_0_q8_0: per block sumi = (0 + d1a·sa) + d1b·sb, then sumf += d0·sumi in block
// order. The per-block products are independent: `lanes` invocations per row compute them (lane l
// blocks l, l + lanes, ...), each row's products of a chunk of blocks go into workgroup memory,
// and invocation r of the workgroup adds row slot r's in block order, so that the workgroup's
// serial sums run side by side in one subgroup.
//
// A block's integer sums: code word m (pack_q2_0) holds at bits 8g + 2j the code c of value
// 16m + 4j + g, whose quant is byte g of the block's word 4m + j (quants four to a word, in order;
// the block's words 4m.. are one 16-byte load, and a row's lanes, a block each, load those of
// consecutive blocks from one contiguous run: q8_word's layout). The code stands for c - 1, so a
// Q8_0 block's sum is sum(c·q) - sum(q), the quant sum its quantizer wrote beside its scale. The
// word masked in place holds 4^j·c in byte g (w & 0x03030303, w & 0x0c0c0c0c, w & 0x30303030;
// j = 3 shifted down two bits first to stay below 128, so it is 16·c as j = 2's is), and the
// packed 8-bit dot product sums four bytes at once: three sums of exact multiples of 1, 4 and 16,
// shifted back exactly. Integer sums are exact in any order.
//
// The float steps run as plain f32 in every build (PlainF32), since none of their values can be
// subnormal: d1 is an f16 scale widened (0 or at least 2^-24) and |si| < 2^13, so d1·si is exact
// and sumi, a sum of two multiples of 2^-24, is 0 or at least 2^-24; d0·sumi is then 0 or at least
// 2^-48 in magnitude, a multiple of 2^-71 once rounded, and so is every partial sum of the row (a
// sum of multiples of 2^-71 is one, and rounding it to 24 bits keeps it one). Only a NaN (an inf
// or NaN scale) could differ from x86's, and a NaN reaches the row's sum, which the caller checks
// once (guard_load).
constexpr uint32_t Q2_CHUNK = 64;  // blocks of a row whose products a workgroup holds at once
constexpr uint32_t Q2_AHEAD = 2;   // blocks an invocation loads before the first of them is used
constexpr uint32_t Q2_SUM_AHEAD = 4;  // products the serial sum loads at a time

struct Q2Weights {
    Arr<K::u32> scales;  // f16 pairs
    Arr<K::u4> codes;    // one block's 16 bytes
    Arr<K::u4> q8;       // 16 quants
    Arr<K::u4> d8;       // a block's two Q8_0 blocks' scales and quant sums
};

// The sums of rows[p] (p < rows.size(), this invocation's rows, lane `lane` of `lanes`) for the
// invocations t < slots (row slot t's sums, slots at most max_slots); every invocation calls it.
std::vector<F32> q2_0_sums(const Q2Weights& w, const std::vector<U32>& rows, U32 blocks, U32 t, U32 lane, U32 slot,
                           U32 lanes, U32 slots, uint32_t max_slots) {
    PlainF32 plain;
    const size_t P = rows.size();
    std::vector<Arr<K::f32>> prod;                         // (block of the chunk, row slot)
    std::vector<Var<K::f32>> sumf;
    for (size_t p = 0; p < P; ++p) prod.push_back(workgroup<K::f32>(Q2_CHUNK * max_slots)), sumf.push_back(var(f32c(0.0f)));
    for_(u32c(0), blocks, u32c(Q2_CHUNK), [&](U32 cb) {
        U32 end = select(blocks - cb < u32c(Q2_CHUNK), blocks, cb + Q2_CHUNK);
        for_(cb + lane, end, lanes * u32c(Q2_AHEAD), [&](U32 b0) {
            std::vector<U32> blk(Q2_AHEAD);
            std::vector<std::vector<U32>> sw(Q2_AHEAD, std::vector<U32>(P));
            std::vector<std::vector<UVec4>> cw(Q2_AHEAD, std::vector<UVec4>(P));
            for (uint32_t a = 0; a < Q2_AHEAD; ++a) {  // past the chunk, b0's block again (not stored)
                blk[a] = b0 + u32c(a) * lanes;
                U32 bc = select(blk[a] < end, blk[a], b0);
                for (size_t p = 0; p < P; ++p) {
                    U32 wb = rows[p] * blocks + bc;
                    cw[a][p] = w.codes[wb];
                    sw[a][p] = w.scales[wb >> 1u] >> ((wb & 1u) << 4u);
                }
            }
            for (uint32_t a = 0; a < Q2_AHEAD; ++a) {
                if_(blk[a] < end, [&] {
                    std::vector<UVec4> x(4);
                    for (uint32_t m = 0; m < 4; ++m) x[m] = w.q8[u32c(m) * blocks + blk[a]];  // q8_word's layout
                    UVec4 ds = w.d8[blk[a]];
                    F32 d1[2] = {f32_bits(comp(ds, 0)), f32_bits(comp(ds, 2))};
                    I32 qsum[2] = {as_i32(comp(ds, 1)), as_i32(comp(ds, 3))};
                    for (size_t p = 0; p < P; ++p) {
                        auto sumi = var(f32c(0.0f));
                        for (uint32_t k = 0; k < 2; ++k) {
                            std::optional<I32> s1, s4, s16;  // sums of 1·c·q, 4·c·q, 16·c·q
                            auto add = [](std::optional<I32>& acc, I32 v) { acc = acc ? *acc + v : v; };
                            for (uint32_t m = 2 * k; m < 2 * k + 2; ++m) {
                                U32 word = comp(cw[a][p], m);
                                add(s1, dot4_i8(word & 0x03030303u, comp(x[m], 0)));
                                add(s4, dot4_i8(word & 0x0c0c0c0cu, comp(x[m], 1)));
                                add(s16, dot4_i8(word & 0x30303030u, comp(x[m], 2)));
                                add(s16, dot4_i8((word >> 2u) & 0x30303030u, comp(x[m], 3)));
                            }
                            I32 si = ((*s1 + (*s4 >> u32c(2))) + (*s16 >> u32c(4))) - qsum[k];
                            sumi = sumi.get() + d1[k] * f32(si);
                        }
                        prod[p].set((blk[a] - cb) * slots + slot, f16_value(sw[a][p]) * sumi.get());
                    }
                });
            }
        });
        barrier();
        // A sum starts at +0 and never becomes -0 (x + y is -0 only when both are), so adding +0
        // leaves it as it is: the products past the chunk's end, loaded with the others, count as +0.
        if_(t < slots, [&] {
            for_(u32c(0), end - cb, u32c(Q2_SUM_AHEAD), [&](U32 i) {
                for (size_t p = 0; p < P; ++p) {
                    std::vector<F32> v(Q2_SUM_AHEAD);
                    for (uint32_t k = 0; k < Q2_SUM_AHEAD; ++k) v[k] = prod[p][(i + k) * slots + t];
                    F32 s = sumf[p].get();
                    for (uint32_t k = 0; k < Q2_SUM_AHEAD; ++k) s = s + (k == 0 ? v[k] : select(i + k < end - cb, v[k], f32c(0.0f)));
                    sumf[p] = s;
                }
            });
        });
        barrier();
    });
    std::vector<F32> out;
    for (size_t p = 0; p < P; ++p) out.push_back(sumf[p].get());
    return out;
}

Q2Weights q2_weights() {
    return {buffer<K::u32>(0, true, "scales"), buffer<K::u4>(1, true, "codes"), buffer<K::u4>(2, true, "q8"), buffer<K::u4>(3, true, "d8")};
}

std::vector<uint32_t> q2_0_mat_vec(const Build& b) {
    Shader s(kn::KERNEL_INVOCATIONS, false, b.fma, b.float_modes);
    s.int_dot = b.int_dot;
    Q2Weights w = q2_weights();
    auto out = buffer<K::f32>(4, false, "out");
    push_constants(2);
    U32 rows = push(0), blocks = push(1);
    U32 t = local_id();
    U32 compiled_in = spec_u32(SPEC_Q2_0_LANES, 0);
    U32 lanes = select(compiled_in != 0u, compiled_in, u32c(Q2_0_LANES)), per = u32c(256) / lanes;
    U32 slot = t / lanes, lane = t % lanes;
    U32 first_row = group_id() * per;
    U32 row_raw = first_row + slot;
    U32 row = select(row_raw < rows, row_raw, u32c(0));
    F32 sum = q2_0_sums(w, {row}, blocks, t, lane, slot, lanes, per, 256 / Q2_0_WIDE_LANES)[0];
    if_(t < per && first_row + t < rows, [&] { out.set(first_row + t, guard_load(sum)); });
    return s.finish();
}

// ---------------------------------------------------------------- swiglu_q2_0_q8

// A Q2_0 layer's gate and up products with SwiGLU's output going straight into prep_act's outputs,
// as swiglu_q1_0_q8 does for Q1_0: the matrix stacked by stack_gate_up (gate rows 32g.., then up
// rows 32g..), workgroup g's invocations 8 lanes each of a gate row and its up row (one activation
// load serves both), so that it holds the sums of outputs 32g..32g+31: h = silu(g)·u, one Q8_0
// block, quantized as prep_act quantizes it.
std::vector<uint32_t> swiglu_q2_0_q8(const Build& b) {
    Shader s(SWIGLU_Q2_0_LOCAL, true, b.fma, b.float_modes);
    s.int_dot = b.int_dot;
    Q2Weights w = q2_weights();
    ActOut act{buffer<K::f32>(4, false, "lane_products"), buffer<K::u32>(5, false, "q8_out"), buffer<K::u32>(6, false, "d8_out"),
               buffer<K::u32>(7, false, "f16")};
    push_constants(2);
    U32 n_ff = push(0) >> 1u, blocks = push(1);
    U32 t = local_id(), g = group_id();
    U32 slot = t / SWIGLU_Q2_0_LANES, lane = t % SWIGLU_Q2_0_LANES;
    auto ys = workgroup<K::f32>(32);
    std::vector<F32> gu = q2_0_sums(w, {g * 64u + slot, g * 64u + 32u + slot}, blocks, t, lane, slot, u32c(SWIGLU_Q2_0_LANES), u32c(32), 32);
    {
        GuardSite site("swiglu");
        if_(t < 32u, [&] { ys.set(t, swiglu_one(guard_load(gu[0]), guard_load(gu[1]))); });
    }
    barrier();
    GuardSite site("swiglu quantization");
    auto sd = workgroup<K::f32>(1), sid = workgroup<K::f32>(1);
    quantize_lanes(ys, u32c(8), g * 8u, q8_blocks(n_ff), t, SWIGLU_Q2_0_LOCAL, 8, act, sd, sid);
    return s.finish();
}

// ---------------------------------------------------------------- f16_mat_vec

// ggml_vec_dot_f16 (AVX2): accumulator (j, l) takes elements i + 8j + l of every step of 32 with
// an fma; then sum0 += sum2, sum1 += sum3, sum0 += sum1 per lane, and (l0+l4 + l1+l5) +
// (l2+l6 + l3+l7). Invocation `lane` of a row is accumulator (lane/8, lane%8).
std::vector<uint32_t> f16_mat_vec(const Build& b) {
    Shader s(256, b.fma == Fma::exact, b.fma, b.float_modes);
    auto w = buffer<K::u32>(0, true, "w");
    auto x = buffer<K::u32>(1, true, "x");
    auto out = buffer<K::f32>(2, false, "out");
    push_constants(2);
    U32 rows = push(0), n = push(1);
    U32 t = local_id();
    U32 slot = t >> 5u, lane = t & 31u;
    U32 row_raw = group_id() * 8u + slot;
    Bool live = row_raw < rows;
    U32 row = select(live, row_raw, u32c(0));
    U32 half = lane & 1u;
    auto acc = var(f32c(0.0f));
    U32 row_words = row * (n >> 1u);
    for_(u32c(0), n, u32c(32), [&](U32 i) {
        U32 e = i + lane;
        U32 ww = w[row_words + (e >> 1u)], xw = x[e >> 1u];
        F32 wv = select(half == 0u, unpack_half_lo(ww), unpack_half_hi(ww));
        F32 xv = select(half == 0u, unpack_half_lo(xw), unpack_half_hi(xw));
        acc = fma_f32(wv, xv, acc.get());
    });
    auto a = workgroup<K::f32>(256);
    a.set(t, acc.get());
    barrier();
    if_(live && lane == 0u, [&] {
        U32 base = slot * 32u;
        auto at = [&](uint32_t j, uint32_t l) { return a[base + u32c(8 * j + l)]; };
        std::vector<F32> s0(8);
        for (uint32_t l = 0; l < 8; ++l) s0[l] = (at(0, l) + at(2, l)) + (at(1, l) + at(3, l));
        F32 t0 = s0[0] + s0[4], t1 = s0[1] + s0[5], t2 = s0[2] + s0[6], t3 = s0[3] + s0[7];
        out.set(row_raw, (t0 + t1) + (t2 + t3));
    });
    return s.finish();
}

// ---------------------------------------------------------------- head_norm_rope

constexpr uint32_t HEAD_LOCAL = 64, HEAD_MAX = 256;
// Positions whose values attention loads at once before adding them in order (H200: runs of 4
// walked faster than runs of 8 or 16; docs/PERFORMANCE.md).
constexpr uint32_t ATT_WALK = 4;

// The head size: the one compiled in (SPEC_HEAD_DIM), else the pushed one.
U32 head_dim(U32 pushed) {
    U32 compiled_in = spec_u32(SPEC_HEAD_DIM, 0);
    return select(compiled_in != 0u, compiled_in, pushed);
}

// One head's RMS norm (its D squares summed in double in order), then the NEOX rotation with the
// position's table: x0' = fma(x0, c, -(x1·s)), x1' = fma(x0, s, x1·c). Query heads go to q; key
// heads are rounded to f16 into the cache, with their value heads beside them.
std::vector<uint32_t> head_norm_rope(const Build& b) {
    Shader s(HEAD_LOCAL, true, b.fma, b.float_modes);
    s.subgroup = b.subgroup;
    auto qkv = buffer<K::f32>(0, true, "qkv");
    auto w = buffer<K::f32>(1, true, "w");
    auto state = buffer<K::u32>(2, true, "state");
    auto qo = buffer<K::f32>(3, false, "q");
    auto kc = buffer<K::u32>(4, false, "k_cache");
    auto vc = buffer<K::u32>(5, false, "v_cache");
    push_constants(8);
    U32 NH = push(1), NKV = push(2), qn = push(3), kn = push(4), layer = push(5), n_ctx = push(6);
    U32 D = head_dim(push(0));
    F32 eps = f32_bits(push(7));
    U32 t = local_id(), g = group_id();
    Bool is_q = g < NH;
    U32 kh = g - NH;
    U32 src = select(is_q, g * D, NH * D + kh * D);
    U32 w_off = select(is_q, qn, kn);
    auto xs = workgroup<K::f32>(HEAD_MAX);
    auto sq = workgroup<K::f32>(HEAD_MAX);
    // The norm's weights and the rope table, loaded beside the head (one wait for all three)
    // rather than each after the step before it.
    auto ws = workgroup<K::f32>(HEAD_MAX);
    auto rt = workgroup<K::u32>(HEAD_MAX);
    ChainScratch cs = chain_scratch(HEAD_LOCAL, HEAD_MAX);
    U32 pos = state[u32c(STATE_POS)];
    auto part = var(f64c(0.0));
    for_(t, D, u32c(HEAD_LOCAL), [&](U32 i) {
        F32 v = qkv[src + i];
        ws.set(i, w[w_off + i]);
        rt.set(i, state[u32c(STATE_ROPE) + i]);
        F32 q = v * v;
        xs.set(i, v);
        sq.set(i, q);
        part = part.get() + f64(q);
    });
    barrier();
    F32 scale = div_exact(f32c(1.0f), sqrt_exact(ordered_mean(sq, D, part.get(), t, HEAD_LOCAL, HEAD_MAX / HEAD_LOCAL, HEAD_MAX, cs) + eps));
    U32 half = D >> 1u;
    auto ys = workgroup<K::f32>(HEAD_MAX);
    for_(t, D, u32c(HEAD_LOCAL), [&](U32 i) { ys.set(i, (xs[i] * scale) * ws[i]); });
    barrier();
    for_(t, half, u32c(HEAD_LOCAL), [&](U32 i) {
        F32 c = f32_bits(rt[i * 2u]), sn = f32_bits(rt[i * 2u + 1u]);
        F32 x0 = ys[i], x1 = ys[i + half];
        F32 r0 = fma_f32(x0, c, -(x1 * sn));
        F32 r1 = fma_f32(x0, sn, x1 * c);
        if_else(is_q, [&] {
            qo.set(g * D + i, r0);
            qo.set(g * D + i + half, r1);
        }, [&] {
            xs.set(i, r0);
            xs.set(i + half, r1);
        });
    });
    barrier();
    if_(!is_q, [&] {
        U32 base = layer + (kh * n_ctx + pos) * half;
        U32 vsrc = NH * D + NKV * D + kh * D;
        for_(t, half, u32c(HEAD_LOCAL), [&](U32 p) {
            kc.set(base + p, f16_bits(xs[p * 2u]) | (f16_bits(xs[p * 2u + 1u]) << 16u));
            vc.set(base + p, f16_bits(qkv[vsrc + p * 2u]) | (f16_bits(qkv[vsrc + p * 2u + 1u]) << 16u));
        });
    });
    return s.finish();
}

// ---------------------------------------------------------------- attention

constexpr uint32_t ATT_LOCAL = 128;
// The walk's chunk: the value rows a workgroup holds at once (words: two f16 a word), and the most
// positions that makes (head size 32).
constexpr uint32_t ATT_CHUNK_WORDS = 4096, ATT_CHUNK_MAX = ATT_CHUNK_WORDS / 16;
constexpr uint32_t ATT_ELEMS = HEAD_MAX / ATT_LOCAL;  // output elements an invocation walks

// Guarded f32 in attention. The softmax weights below 2^-126 (expf of differences past -87) are
// where a flushing card differs, and there the CPU's results follow from signs alone: with
// w < 2^-90 and |v| <= 65504 (an f16), f16(fma(v, w, y)) is y for a nonzero y (the product is below
// half of y's last place) and a zero otherwise (the product's sign, or IEEE's sum of two zeros
// where the product is zero); f16(y·w) is the zero of y's sign. So expf gives those weights as
// 2^-126 (tiny_floor) and these two steps take the rule for any weight below 2^-90.
Bool below_2m90(F32 w) { return (bits(w) & 0x7f800000u) < u32c(37u << 23); }
Bool finite(F32 x) { return (bits(x) & 0x7f800000u) != 0x7f800000u; }
F32 signed_zero(U32 sign) { return f32_bits(sign & 0x80000000u); }

// y = f16(y·ms), the running sum rescaled where the maximum moved.
F32 att_rescale(F32 y, F32 ms, bool guarded) {
    if (!guarded) return f16_round(y * ms);
    F32 r;
    {
        Unguarded ug;  // ms >= 2^-90 here: y·ms is 0 or above 2^-114
        r = f16_round(y * ms);
    }
    return select(below_2m90(ms) && finite(y), signed_zero(bits(y)), r);
}

// y = f16(fma(v, vs, y)), a value added with its weight.
F32 att_add(F32 v, F32 vs, F32 y, bool guarded) {
    if (!guarded) return f16_round(fma_f32(v, vs, y));
    F32 r;
    {
        Unguarded ug;  // vs >= 2^-90 here: the product is 0 or above 2^-114, and so is the sum
        r = f16_round(fma_f32(v, vs, y));
    }
    Bool tiny = below_2m90(vs) && finite(v) && finite(y);
    guard(!tiny && (bits(r) & 0x7fffffffu) > 0x7f800000u);  // a NaN: x86's bits are the exact build's
    Bool y_zero = (bits(y) & 0x7fffffffu) == 0u;
    Bool product_zero = (bits(v) & 0x7fffffffu) == 0u || (bits(vs) & 0x7fffffffu) == 0u;
    F32 zero = select(product_zero, signed_zero(bits(v) & bits(y)), signed_zero(bits(v)));
    return select(tiny, select(y_zero, zero, y), r);
}

// ops::attend_f16 for one query head: q rounded to f16; each score is dot_f16(k, q)·scale + 0;
// the online softmax's running maximum is a prefix maximum, so each position's expf is known in
// parallel: a new maximum gives ms = expf(M_old - s), vs = 1, any other vs = expf(s - M), ms = 1.
// Then each of the D output elements walks the positions in order, y = f16(y·ms) (an identity
// where ms = 1) and y = f16(fma(v, vs, y)); S = fma(S, ms, vs) walks them once; out = y·(1/S).
// q8: the output goes straight into prep_act's outputs (bindings 5-8) instead of out (5).
std::vector<uint32_t> attention_kernel(const Build& b, bool q8) {
    Shader s(ATT_LOCAL, true, b.fma, b.float_modes);
    const bool guarded = has_guard(b);
    auto q = buffer<K::f32>(0, true, "q");
    auto kc = buffer<K::u4>(1, true, "k_cache");  // 16 bytes a load: eight f16 of a key row
    auto vc = buffer<K::u32>(2, true, "v_cache");
    auto state = buffer<K::u32>(3, true, "state");
    auto scratch = buffer<K::f32>(4, false, "scratch");
    std::optional<Arr<K::f32>> out;
    std::optional<ActOut> act;
    if (q8) act = ActOut{buffer<K::f32>(5, false, "lane_products"), buffer<K::u32>(6, false, "q8"), buffer<K::u32>(7, false, "d8"),
                         buffer<K::u32>(8, false, "f16")};
    else out = buffer<K::f32>(5, false, "out");
    if (b.clock && q8) clock_stamps(9);
    push_constants(6);
    U32 NH = push(1), group = push(2), layer = push(3), n_ctx = push(4);
    U32 D = head_dim(push(0));
    // The outputs an invocation walks (at most ATT_ELEMS): a constant where D is compiled in, so
    // the pipeline drops the walks a head of D does not have.
    U32 elems = (D + u32c(ATT_LOCAL - 1)) / u32c(ATT_LOCAL);
    F32 scale = f32_bits(push(5));
    U32 t = local_id(), hq = group_id();
    U32 kvh = hq / group;
    U32 n_kv = state[u32c(STATE_NKV)];
    U32 half = D >> 1u;
    U32 head = layer + kvh * n_ctx * half;  // word of (kvh, position 0)
    U32 sc_at = hq * n_ctx, ms_at = (NH + hq) * n_ctx, vs_at = (NH * 2u + hq) * n_ctx;
    auto qs = workgroup<K::f32>(HEAD_MAX);
    std::optional<GuardSite> site(std::in_place, "attention q");
    stamp(16);
    for_(t, D, u32c(ATT_LOCAL), [&](U32 i) { qs.set(i, f16_round(q[hq * D + i])); });
    barrier();
    stamp(17);
    // Scores.
    site.emplace("attention scores");
    // q and the keys are f16 values, so every product, partial sum and score is a multiple of
    // 2^-48 (or 2^-48·scale): none is subnormal, and flushing changes nothing. Only a NaN (from
    // an infinite key or query) is left to the exact build, whose NaN is x86's.
    for_(t, n_kv, u32c(ATT_LOCAL), [&](U32 ic) {
        std::optional<Unguarded> ug(std::in_place);
        U32 row = head + ic * half;
        std::vector<Var<K::f32>> acc;
        for (int j = 0; j < 32; ++j) acc.push_back(var(f32c(0.0f)));
        for_(u32c(0), D, u32c(32), [&](U32 i) {
            // Each invocation reads a row of its own: four 16-byte loads a step instead of
            // sixteen of 4 bytes, a quarter of the requests (the rows and the layer start on
            // multiples of four words).
            std::vector<UVec4> kv;
            for (uint32_t j = 0; j < 4; ++j) kv.push_back(kc[((row + (i >> 1u)) >> 2u) + u32c(j)]);
            for (uint32_t e = 0; e < 32; e += 2) {
                U32 kw = comp(kv[e / 8], (e / 2) % 4);
                acc[e] = fma_f32(unpack_half_lo(kw), qs[i + u32c(e)], acc[e].get());
                acc[e + 1] = fma_f32(unpack_half_hi(kw), qs[i + u32c(e + 1)], acc[e + 1].get());
            }
        });
        std::vector<F32> a(8);
        for (uint32_t l = 0; l < 8; ++l) a[l] = (acc[l].get() + acc[16 + l].get()) + (acc[8 + l].get() + acc[24 + l].get());
        F32 sum = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
        F32 score = (sum * scale) + f32c(0.0f);
        ug.reset();
        guard((bits(score) & 0x7fffffffu) > 0x7f800000u);
        scratch.set(sc_at + ic, score);
    });
    barrier();
    stamp(18);
    // Prefix maxima: each invocation a contiguous run of positions.
    site.emplace("attention maxima");
    U32 per = (n_kv + u32c(ATT_LOCAL - 1)) / u32c(ATT_LOCAL);
    U32 lo = select(t * per < n_kv, t * per, n_kv);
    U32 hi = select(lo + per < n_kv, lo + per, n_kv);
    auto mx = workgroup<K::f32>(ATT_LOCAL);
    auto m = var(f32c(NEG_INF));
    for_(lo, hi, [&](U32 i) {
        F32 v = scratch[sc_at + i];
        m = select(v > m.get(), v, m.get());
    });
    mx.set(t, m.get());
    barrier();
    // Inclusive scan of the runs' maxima; a run starts from the maximum of the runs before it.
    for (uint32_t d = 1; d < ATT_LOCAL; d *= 2) {
        F32 mine = mx[t];
        F32 other = select(t >= u32c(d), mx[select(t >= u32c(d), t - d, u32c(0))], f32c(NEG_INF));
        barrier();
        mx.set(t, select(other > mine, other, mine));
        barrier();
    }
    stamp(19);
    auto M = var(select(t > 0u, mx[select(t > 0u, t - 1u, u32c(0))], f32c(NEG_INF)));
    site.emplace("attention expf");
    for_(lo, hi, [&](U32 i) {
        F32 sv = scratch[sc_at + i];
        F32 Mo = M.get();
        Bool up = sv > Mo;
        F32 e = guard_load(expf_libm(select(up, Mo - sv, sv - Mo), expf_fused(), /*tiny_floor=*/true));
        scratch.set(ms_at + i, select(up, e, f32c(1.0f)));
        scratch.set(vs_at + i, select(up, f32c(1.0f), e));
        M = select(up, sv, Mo);
    });
    barrier();
    stamp(20);
    // Each output element walks the positions in order; beside it, the same walk of the softmax's
    // sum S = fma(S, ms, vs) (every invocation makes the same S, so none waits for another's). The
    // values come through workgroup memory a chunk of positions at a time: the whole workgroup
    // loads the next chunk's rows (contiguous in the cache), with their ms and vs, while it walks
    // this one, so the walk waits on the cache only for the first chunk.
    auto ys = workgroup<K::f32>(HEAD_MAX);
    site.emplace("attention walk");
    auto vsh = workgroup<K::u32>(ATT_CHUNK_WORDS);
    auto msh = workgroup<K::f32>(ATT_CHUNK_MAX), wsh = workgroup<K::f32>(ATT_CHUNK_MAX);
    U32 chunk = u32c(ATT_CHUNK_WORDS) / half;  // positions a chunk holds
    U32 kv_words = n_kv * half;
    constexpr uint32_t WORDS = ATT_CHUNK_WORDS / ATT_LOCAL, POS = ATT_CHUNK_MAX / ATT_LOCAL;
    std::vector<Var<K::u32>> vr;
    std::vector<Var<K::f32>> mr, wr;
    for (uint32_t k = 0; k < WORDS; ++k) vr.push_back(var(u32c(0)));
    for (uint32_t k = 0; k < POS; ++k) mr.push_back(var(f32c(0.0f))), wr.push_back(var(f32c(0.0f)));
    // A chunk's loads into registers (past n_kv: position 0's, never used).
    auto load = [&](U32 c0) {
        Unguarded ug;  // guarded where used, in the walk
        for (uint32_t k = 0; k < WORDS; ++k) {
            U32 j = c0 * half + t + u32c(k * ATT_LOCAL);
            vr[k] = vc[head + select(j < kv_words, j, u32c(0))];
        }
        for (uint32_t k = 0; k < POS; ++k) {
            U32 p = c0 + t + u32c(k * ATT_LOCAL);
            U32 at = select(p < n_kv, p, u32c(0));
            mr[k] = scratch[ms_at + at], wr[k] = scratch[vs_at + at];
        }
    };
    std::vector<Var<K::f32>> y, S;
    for (uint32_t e = 0; e < ATT_ELEMS; ++e) y.push_back(var(f32c(0.0f)));
    S.push_back(var(f32c(0.0f)));
    load(u32c(0));
    for_(u32c(0), n_kv, chunk, [&](U32 c0) {
        barrier();  // the last chunk's walk is done with the workgroup arrays
        for (uint32_t k = 0; k < WORDS; ++k) vsh.set(t + u32c(k * ATT_LOCAL), vr[k].get());
        for (uint32_t k = 0; k < POS; ++k) {
            msh.set(t + u32c(k * ATT_LOCAL), mr[k].get());
            wsh.set(t + u32c(k * ATT_LOCAL), wr[k].get());
        }
        barrier();
        load(c0 + chunk);
        U32 n = select(n_kv - c0 < chunk, n_kv - c0, chunk);
        for (uint32_t e = 0; e < ATT_ELEMS; ++e) {
            U32 d = t + u32c(e * ATT_LOCAL);
            U32 word = d >> 1u;
            Bool low = (d & 1u) == 0u;
            if_(u32c(e) < elems && d < D, [&] {
                // ATT_WALK positions at a time, their values read before the walk (past n: the
                // chunk's first position, skipped).
                for_(u32c(0), n, u32c(ATT_WALK), [&](U32 p0) {
                    std::vector<U32> vw(ATT_WALK);
                    std::vector<F32> ms(ATT_WALK), vs(ATT_WALK);
                    std::vector<Bool> in(ATT_WALK);
                    for (uint32_t k = 0; k < ATT_WALK; ++k) {
                        U32 p = p0 + k;
                        in[k] = p < n;
                        U32 at = select(in[k], p, u32c(0));
                        vw[k] = vsh[at * half + word], ms[k] = msh[at], vs[k] = wsh[at];
                    }
                    // S needs no guard: ms and vs were guarded where made (never subnormal there:
                    // expf's tiny floor), S >= 1 from the first position on, and a floored weight
                    // below 2^-126 leaves S's bits as the CPU's smaller one.
                    auto add_to_sum = [&](F32 m, F32 w) {
                        Unguarded ug;
                        S[0] = fma_f32(S[0].get(), m, w);
                    };
                    // Most positions neither move the maximum (ms = 1: no rescale) nor weigh below
                    // 2^-90 (the guard's sign rule): a plain add, unguarded, since its one guarded
                    // outcome, a NaN, stays NaN to the end of the walk and is flagged there.
                    std::vector<F32> v(ATT_WALK);
                    std::vector<Bool> plain(ATT_WALK);
                    for (uint32_t k = 0; k < ATT_WALK; ++k) {
                        v[k] = select(low, unpack_half_lo(vw[k]), unpack_half_hi(vw[k]));
                        plain[k] = bits(ms[k]) == 0x3f800000u && !below_2m90(vs[k]);
                    }
                    Bool whole = boolc(true);
                    for (uint32_t k = 0; k < ATT_WALK; ++k) whole = whole && (plain[k] || !in[k]);
                    // A whole run of plain positions (the common case) goes without a branch each.
                    // Positions past n (the chunk's last run) add -0·0 to y and 1·S + 0 to S: y
                    // and S unchanged to the bit, zeros' signs included (y is already an f16).
                    // The run's roundings by f16_round_normal (three float operations on the
                    // chain from one position to the next), and where a sum left f16's normal
                    // range (and is not zero) the run again from its start with f16_round.
                    if_else(whole, [&] {
                        Unguarded ug;
                        const F32 y0 = y[e].get();
                        std::vector<F32> vk(ATT_WALK), wk(ATT_WALK);
                        F32 cur = y0;
                        Bool odd = boolc(false);
                        for (uint32_t k = 0; k < ATT_WALK; ++k) {
                            vk[k] = select(in[k], v[k], f32c(-0.0f)), wk[k] = select(in[k], vs[k], f32c(0.0f));
                            F32 r = fma_f32(vk[k], wk[k], cur);
                            odd = odd || !f16_normal(r);
                            cur = f16_round_normal(r);
                            if (e == 0) add_to_sum(select(in[k], ms[k], f32c(1.0f)), wk[k]);
                        }
                        y[e] = cur;
                        if_(odd, [&] {
                            F32 again = y0;
                            for (uint32_t k = 0; k < ATT_WALK; ++k) again = f16_round(fma_f32(vk[k], wk[k], again));
                            y[e] = again;
                        });
                    }, [&] {
                        for (uint32_t k = 0; k < ATT_WALK; ++k)
                            if_(in[k], [&] {
                                F32 m = ms[k], w = vs[k];
                                if_else(plain[k], [&] {
                                    Unguarded ug;
                                    y[e] = f16_round(fma_f32(v[k], w, y[e].get()));
                                    if (e == 0) add_to_sum(m, w);
                                }, [&] {
                                    if_(bits(m) != 0x3f800000u, [&] { y[e] = att_rescale(y[e].get(), m, guarded); });
                                    y[e] = att_add(v[k], w, y[e].get(), guarded);
                                    if (e == 0) add_to_sum(m, w);
                                });
                            });
                    });
                });
            });
        }
    });
    {
        for (uint32_t e = 0; e < ATT_ELEMS; ++e) guard(is_nan(y[e].get()));  // the plain adds' NaN
        GuardSite out_site("attention out");
        F32 Sv = S[0].get();
        F32 inv = select(Sv == f32c(0.0f), f32c(0.0f), div_exact(f32c(1.0f), Sv));
        for (uint32_t e = 0; e < ATT_ELEMS; ++e) {
            U32 d = t + u32c(e * ATT_LOCAL);
            if_(u32c(e) < elems && d < D, [&] {
                if (q8) ys.set(d, y[e].get() * inv);
                else out->set(hq * D + d, y[e].get() * inv);
            });
        }
    }
    if (!q8) return s.finish();
    barrier();
    stamp(21);
    site.emplace("attention quantization");
    auto sd = workgroup<K::f32>(HEAD_MAX / 32), sid = workgroup<K::f32>(HEAD_MAX / 32);
    quantize_lanes(ys, D >> 2u, hq * (D >> 2u), q8_blocks(NH * D), t, ATT_LOCAL, HEAD_MAX / 4, *act, sd, sid);
    stamp(22);
    return s.finish();
}
std::vector<uint32_t> attention(const Build& b) { return attention_kernel(b, false); }
std::vector<uint32_t> attention_q8(const Build& b) { return attention_kernel(b, true); }

// ggml_vec_swiglu_f32: silu(g)·u with silu(x) = x / (1 + v_expf(0 - x)) (n is a multiple of 8,
// so the C library's expf tail never runs).
std::vector<uint32_t> swiglu(const Build& b) {
    Shader s(256, true, b.fma, b.float_modes);
    auto gu = buffer<K::f32>(0, true, "gate_up");
    auto h = buffer<K::f32>(1, false, "out");
    push_constants(1);
    U32 n = push(0);
    U32 i = global_id();
    if_(i < n, [&] {
        h.set(i, swiglu_one(gu[i], gu[n + i]));
    });
    return s.finish();
}

// ---------------------------------------------------------------- probes

// A probe kernel over a list of f32 words: x (0), out (1), push: the words' count; body(x, out, i,
// count) for invocation i, 256 a workgroup.
template <class Body>
std::vector<uint32_t> probe_kernel(const Build& b, Body body) {
    Shader s(256, true, b.fma, b.float_modes);
    auto x = buffer<K::u32>(0, true, "x");
    auto out = buffer<K::u32>(1, false, "out");
    push_constants(1);
    body(x, out, global_id(), push(0));
    return s.finish();
}

std::vector<uint32_t> expf_probe(const Build& b) {
    return probe_kernel(b, [](Arr<K::u32>& x, Arr<K::u32>& out, U32 i, U32 n) {
        if_(i < n, [&] { out.set(i, bits(expf_libm(f32_bits(x[i]), expf_fused()))); });
    });
}

// The toolkit's f16_round over a list of floats (attention's walk rounds to f16 with it).
std::vector<uint32_t> f16_round_probe(const Build& b) {
    return probe_kernel(b, [](Arr<K::u32>& x, Arr<K::u32>& out, U32 i, U32 n) {
        if_(i < n, [&] { out.set(i, bits(f16_round(f32_bits(x[i])))); });
    });
}

// The toolkit's div_exact and sqrt_exact over pairs of floats (the norms' scales and the Q8_0
// scales are made with them): word 2i of out is x[2i] / x[2i+1], word 2i+1 the square root of
// x[2i+1].
std::vector<uint32_t> div_sqrt_probe(const Build& b) {
    return probe_kernel(b, [](Arr<K::u32>& x, Arr<K::u32>& out, U32 i, U32 n) {
        if_(i * 2u + 1u < n, [&] {
            F32 a = guard_load(f32_bits(x[i * 2u])), d = guard_load(f32_bits(x[i * 2u + 1u]));
            out.set(i * 2u, bits(div_exact(a, d)));
            out.set(i * 2u + 1u, bits(sqrt_exact(d)));
        });
    });
}

// ---------------------------------------------------------------- embeddings

// The token's row of token_embd as f32 words, each value the bits of the CPU's dequantization
// (quant's to_float), made from integers alone: no float arithmetic, so no card's handling of
// subnormals or NaN can move a bit. The matrix is in its product kernel's layout (so a model whose
// output matrix is token_embd keeps one copy on the card): a (0) and b (1) as the forward pass
// packs them, state (2), out (3); push: n, rows, token, from_state. One invocation per value.
// value(a, b, rows, token, n, i): the f32 bits of value i of row `token`.
template <class Value>
std::vector<uint32_t> embed_kernel(const Build& bd, Value value) {
    Shader s(256, false, bd.fma, bd.float_modes);
    auto a = buffer<K::u32>(0, true, "a");
    auto b = buffer<K::u32>(1, true, "b");
    auto state = buffer<K::u32>(2, true, "state");
    auto out = buffer<K::u32>(3, false, "out");
    push_constants(4);
    U32 n = push(0), rows = push(1);
    // The forward pass's token is in the state buffer (written per token); verify's is pushed.
    U32 token = select(push(3) == 1u, state[u32c(STATE_TOKEN)], push(2));
    U32 i = global_id();
    if_(i < n && token < rows, [&] { out.set(i, value(a, b, rows, token, n, i)); });
    return s.finish();
}
using Words = Arr<K::u32>;

// Q1_0 as kernels::pack_q1_0 lays it out: block j of chunk c (four blocks) of row r has its f16
// scale in half j%2 of word (c·R + r)·2 + j/2 of a, and value k (0..127) of the block, sub-block
// s = k/32, lane l = k%32/4, is bit 16·(j%2) + 4s + k%4 of word ((c·8 + l)·R + r)·2 + j/2 of b
// (R: the rows padded to whole workgroups). Bit set: d, clear: -d (the sign flipped, as x86
// negates).
std::vector<uint32_t> embed_q1_0(const Build& b) {
    return embed_kernel(b, [](const Words& scales, const Words& bits, U32 rows, U32 token, U32, U32 i) {
        U32 R = (rows + uint32_t(kernels::PACK_ROWS - 1)) & ~uint32_t(kernels::PACK_ROWS - 1);
        U32 blk = i >> 7u, k = i & 127u, c = blk >> 2u, j = blk & 3u;
        U32 half = (j & 1u) << 4u;
        U32 d = f16_widen_bits(scales[((c * R + token) << 1u) + (j >> 1u)] >> half);
        U32 lane = (k >> 2u) & 7u;
        U32 word = bits[((((c << 3u) + lane) * R + token) << 1u) + (j >> 1u)];
        U32 bit = (word >> (half + ((k >> 5u) << 2u) + (k & 3u))) & 1u;
        return select(bit == 1u, d, d ^ 0x80000000u);
    });
}

// Q2_0 as pack_q2_0 lays it out: block `blk` (row-major) has its f16 scale in half blk % 2 of word
// blk / 2 of a and its codes in words 4·blk.. of b, value j (0..63) in word 4·blk + j/16 at bits
// 8g + 2i where j % 16 = 4i + g.
// Code q gives float(q - 1)·d, whose bits follow from d's: 0·d is the zero of d's sign (x86's
// default NaN, 0xffc00000, for an infinite d), -1·d is d with its sign flipped, 2·d is d with its
// exponent one higher (d is an f16's value: no overflow, never subnormal), and a NaN d comes back
// as itself (already quiet).
std::vector<uint32_t> embed_q2_0(const Build& b) {
    return embed_kernel(b, [](const Words& scales, const Words& codes, U32, U32 token, U32 n, U32 i) {
        U32 blk = token * (n >> 6u) + (i >> 6u), j = i & 63u;
        U32 d = f16_widen_bits(scales[blk >> 1u] >> ((blk & 1u) << 4u));
        U32 q = (codes[(blk << 2u) + (j >> 4u)] >> (((j & 3u) << 3u) + (((j >> 2u) & 3u) << 1u))) & 3u;
        U32 mag = d & 0x7fffffffu;
        Bool inf = mag == 0x7f800000u;
        U32 zero = select(inf, u32c(0xffc00000u), d & 0x80000000u);
        U32 twice = select(mag == 0u || inf, d, d + 0x800000u);
        U32 r = select(q == 0u, d ^ 0x80000000u, select(q == 1u, zero, select(q == 2u, d, twice)));
        return select(mag > 0x7f800000u, d, r);
    });
}

// F16: the GGUF's rows, two values a word of a (b is not read); n is even.
std::vector<uint32_t> embed_f16(const Build& b) {
    return embed_kernel(b, [](const Words& values, const Words&, U32, U32 token, U32 n, U32 i) {
        U32 at = token * n + i;
        return f16_widen_bits(values[at >> 1u] >> ((at & 1u) << 4u));
    });
}

}  // namespace

Build build_for(const Gpu& card, bool native_fma) {
    Build b;
    b.fma = native_fma ? Fma::native : Fma::exact;
    b.expf_fused = host_expf_fused();
    b.int_dot = card.has_int_dot();
    b.subgroup = card.subgroup_arithmetic() && card.has_f64();
    const Gpu::FloatControls& fc = card.float_controls();
    // Without DenormPreserve for 32 bits a card may flush f32 subnormals (NVIDIA's does): then
    // every f32 operation goes through double (soft f32).
    b.float_modes = uint32_t(fc.denorm32 ? DENORM32 : SOFT_F32) | (fc.denorm64 ? uint32_t(DENORM64) : 0u) |
                    (fc.signed_zero32 ? uint32_t(SIGNED_ZERO32) : 0u) | (fc.signed_zero64 ? uint32_t(SIGNED_ZERO64) : 0u);
    return b;
}

std::vector<SpecValue> spec_values(const Build& b) { return {{SPEC_EXPF_FUSED, b.expf_fused ? 1u : 0u}}; }
std::vector<SpecValue> spec_values(const Build& b, const std::vector<SpecValue>& shape) {
    std::vector<SpecValue> v = spec_values(b);
    v.insert(v.end(), shape.begin(), shape.end());
    return v;
}
std::string spec_suffix(const std::vector<SpecValue>& shape) {
    std::string s;
    for (const SpecValue& v : shape) s += "/" + std::to_string(v.id) + "=" + std::to_string(v.value);
    return s;
}
std::vector<SpecValue> q2_0_spec(uint32_t lanes) {
    if (lanes == Q2_0_LANES) return {};
    if (lanes != Q2_0_WIDE_LANES) throw Error("q2_0_spec: " + std::to_string(lanes) + " lanes a row (16 or 32)");
    return {{SPEC_Q2_0_LANES, lanes}};
}

std::vector<SpecValue> act_spec(uint32_t outputs, std::vector<SpecValue> shape) {
    if (outputs == 0 || outputs > ACT_ALL) throw Error("act_spec: outputs " + std::to_string(outputs) + " (a mask of 1, 2, 4)");
    if (outputs != ACT_ALL) shape.push_back({SPEC_ACT_OUTPUTS, outputs});
    return shape;
}

std::vector<SpecValue> head_spec(uint32_t D) {
    for (uint32_t d : HEAD_DIMS_COMPILED_IN)
        if (D == d) return {{SPEC_HEAD_DIM, D}};
    return {};
}
std::vector<SpecValue> norm_spec(uint32_t n) {
    for (uint32_t r : NORM_ROWS_COMPILED_IN)
        if (n == r) return {{SPEC_NORM_VALUES, n / NORM_INVOCATIONS}};
    return {};
}

Build guarded(const Build& exact) {
    Build b = exact;
    if (b.float_modes & SOFT_F32) b.float_modes = (b.float_modes & ~uint32_t(SOFT_F32)) | GUARD_F32;
    return b;
}

std::vector<uint8_t> stack_gate_up(const uint8_t* gate, const uint8_t* up, size_t n_ff, size_t row_bytes) {
    if (n_ff % 32) throw Error("stack_gate_up: " + std::to_string(n_ff) + " rows is not a multiple of 32");
    std::vector<uint8_t> out(2 * n_ff * row_bytes);
    uint8_t* o = out.data();
    for (size_t b = 0; b < n_ff; b += 32)
        for (const uint8_t* m : {gate, up}) {
            std::memcpy(o, m + b * row_bytes, 32 * row_bytes);
            o += 32 * row_bytes;
        }
    return out;
}

const std::vector<OpKernel>& op_kernels() {
    // Every guard site of the op kernels, in a fixed order (shader::declare_guard_sites).
    static const bool sites = [] {
        declare_guard_sites({"rms_norm sum", "rms_norm scale", "rms_norm out", "rms_norm quantization", "swiglu",
                             "swiglu quantization", "attention q", "attention scores", "attention maxima", "attention expf",
                             "attention walk", "attention out", "attention quantization"});
        return true;
    }();
    (void)sites;
    static const std::vector<OpKernel> table = {
        {"rms_norm", 4, 4, NORM_LOCAL, rms_norm, true},
        {"rms_norm_q8", 8, 4, NORM_LOCAL, rms_norm_q8, true},
        {"sum_squares", 2, 1, NORM_LOCAL, sum_squares},
        {"prep_act", 5, 3, 128, prep_act},
        {"swiglu_q1_0_q8", 8, 2, kn::KERNEL_INVOCATIONS, swiglu_q1_0_q8},
        {"q2_0_mat_vec", 5, 2, 256, q2_0_mat_vec},
        {"swiglu_q2_0_q8", 8, 2, SWIGLU_Q2_0_LOCAL, swiglu_q2_0_q8},
        {"f16_mat_vec", 3, 2, 256, f16_mat_vec},
        {"head_norm_rope", 6, 8, HEAD_LOCAL, head_norm_rope},
        {"attention", 6, 6, ATT_LOCAL, attention},
        {"attention_q8", 9, 6, ATT_LOCAL, attention_q8, true},
        {"swiglu", 2, 1, 256, swiglu},
        {"expf", 2, 1, 256, expf_probe},
        {"f16_round", 2, 1, 256, f16_round_probe},
        {"div_sqrt", 2, 1, 256, div_sqrt_probe},
        {"embed_q1_0", 4, 4, 256, embed_q1_0},
        {"embed_q2_0", 4, 4, 256, embed_q2_0},
        {"embed_f16", 4, 4, 256, embed_f16},
    };
    return table;
}

const OpKernel& op_kernel(const std::string& name) {
    for (const OpKernel& k : op_kernels())
        if (name == k.name) return k;
    throw Error("op_kernel: no kernel named " + name);
}

size_t table_floats(size_t n) {
    const size_t chunk = kernels::MAT_VEC_CHUNK * kernels::Q1_0_BLOCK;
    return (n + chunk - 1) / chunk * chunk / 32 * 8 * 16;
}

PackedQ2_0 pack_q2_0(const uint8_t* w, size_t rows, size_t n) {
    if (n % quant::QK2_0) throw Error("pack_q2_0: row length " + std::to_string(n) + " is not a multiple of 64");
    const size_t nb = n / quant::QK2_0;
    PackedQ2_0 p;
    p.scales.assign((rows * nb + 1) / 2, 0);
    p.codes.assign(rows * nb * 4, 0);
    for (size_t b = 0; b < rows * nb; ++b) {
        const uint8_t* blk = w + b * sizeof(quant::BlockQ2_0);
        p.scales[b / 2] |= uint32_t(blk[0] | blk[1] << 8) << (16 * (b % 2));
        for (size_t v = 0; v < 64; ++v) {
            const uint32_t code = (blk[2 + v / 4] >> (2 * (v % 4))) & 3u;
            const size_t m = v / 16, j = (v % 16) / 4, g = v % 4;
            p.codes[b * 4 + m] |= code << (8 * g + 2 * j);
        }
    }
    return p;
}

namespace {
double fma_or_not(double a, double b, double c, bool fused) {
    if (fused) return std::fma(a, b, c);
    volatile double p = a * b;
    volatile double r = p + c;
    return r;
}
uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
}  // namespace

float expf_libm_ref(float x, bool fused) {
    const double InvLn2N = 0x1.71547652b82fep+0 * 32, SHIFT = 0x1.8p+52;
    const double C0 = 0x1.c6af84b912394p-5 / (32.0 * 32 * 32), C1 = 0x1.ebfce50fac4f3p-3 / (32.0 * 32),
                 C2 = 0x1.62e42ff0c52d6p-1 / 32;
    const uint32_t xb = fbits(x), abstop = (xb >> 20) & 0x7ff;
    if (abstop >= 0x42b) {
        if (xb == 0xff800000u) return 0.0f;
        if (abstop >= 0x7f8) return x + x;
        if (x > 0x1.62e42ep6f) return __builtin_inff();
        if (x < -0x1.9fe368p6f) return 0.0f;
    }
    const double xd = x;
    double kd = fma_or_not(InvLn2N, xd, SHIFT, fused);
    uint64_t ki;
    std::memcpy(&ki, &kd, 8);
    kd -= SHIFT;
    double r = fused ? std::fma(InvLn2N, xd, -kd) : fma_or_not(InvLn2N, xd, -kd, false);
    uint64_t tb = EXP2F_TABLE[ki % 32] + (ki << 47);
    double sc;
    std::memcpy(&sc, &tb, 8);
    double z = fma_or_not(C0, r, C1, fused), r2 = r * r;
    double y = fma_or_not(C2, r, 1.0, fused);
    y = fma_or_not(z, r2, y, fused);
    y = y * sc;
    return float(y);
}

bool host_expf_fused() {
    // The inputs where the two sequences differ (measured over every float).
    for (uint32_t b : {0x4202422fu}) {
        float x;
        std::memcpy(&x, &b, 4);
        volatile float in = x;
        float lib = expf(in);
        if (fbits(lib) == fbits(expf_libm_ref(x, true)) && fbits(lib) != fbits(expf_libm_ref(x, false))) return true;
        if (fbits(lib) == fbits(expf_libm_ref(x, false))) return false;
    }
    return true;
}

}  // namespace bankml::gpu::ops
