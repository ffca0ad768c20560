#!/usr/bin/env bash
# The Q1_0 product kernels of another revision against this tree's, in one process: a harness
# built in a temporary directory links this tree's objects (run `make` first) with REV's
# src/quant/q1_0_fast.cpp compiled into a namespace of its own, and runs the two alternately on
# one thread (q1_0_prepare then q1_0_rows_fast over all rows), REPS times per shape. It prints the
# best time of each (the least disturbed on a shared machine), their ratio, and whether both gave
# the same bits.
#
#   scripts/ab-q1_0-kernels.sh REV [LEVEL] [ROWSxCOLS:NCOLS ...]
#
# LEVEL: avx2 (default), avxvnni, avx512 or avx512vnni (the CPU must have it). Shapes default to
# the 1.7B model's products with 1 and 64 columns. Environment: REPS (default 100 for one column,
# 20 for more); SCALES=narrow for activation scales within a factor of two of each other (as a
# model's activations mostly are: then the avx2 level's exact blocks take every column) instead of
# spread over 0.01..1. REV's file must fit this tree's headers (src/quant/kernels_impl.h).
# Exit status: 0 when both gave the same bits everywhere, 1 when not or a build failed, 2 on bad usage.
set -u
[ $# -ge 1 ] || { echo "usage: $0 REV [avx2|avxvnni|avx512|avx512vnni] [ROWSxCOLS:NCOLS ...]" >&2; exit 2; }
REV=$1
shift
LEVEL=avx2
if [ $# -gt 0 ] && [[ $1 =~ ^(avx2|avxvnni|avx512|avx512vnni)$ ]]; then
    LEVEL=$1
    shift
fi
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=(2048x2048:1 6144x2048:1 2048x6144:1 2048x2048:64 6144x2048:64 2048x6144:64)
for s in "${SHAPES[@]}"; do
    [[ $s =~ ^[1-9][0-9]*x[1-9][0-9]*:[1-9][0-9]*$ ]] || { echo "shape '$s': wants ROWSxCOLS:NCOLS" >&2; exit 2; }
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
[ -f build/src/quant/q1_0_fast.o ] || { echo "build/src/quant/q1_0_fast.o: missing (run make)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

git show "$REV:src/quant/q1_0_fast.cpp" > "$TMP/old.cpp" || { echo "$REV: no src/quant/q1_0_fast.cpp" >&2; exit 1; }
python3 - "$TMP/old.cpp" <<'EOF' || exit 1
import sys
p = sys.argv[1]
s = open(p).read()
s = s.replace('namespace bankml::quant::detail {', 'namespace bankml::quant::detail { namespace old {', 1)
i = s.rindex('}  // namespace bankml::quant::detail')
open(p, 'w').write(s[:i] + '}\n' + s[i:])
EOF
cat > "$TMP/ab.cpp" <<'EOF'
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/f16.h"
#include "core/kernels.h"
#include "quant/kernels_impl.h"
using namespace bankml;
using namespace bankml::quant;
namespace bankml::quant::detail::old {
void q1_0_layout(size_t cols, size_t ncols, Isa isa, Prepared& p);
void q1_0_prepare(const BlockQ8_0* x, Prepared& p, size_t c0, size_t c1);
void q1_0_rows_fast(const void* w, size_t cols, size_t r0, size_t r1, const void* x, const Prepared& p, size_t ncols,
                    float* y, size_t ldy);
}  // namespace bankml::quant::detail::old
int main(int argc, char** argv) {
    const std::string level = argv[1];
    const Isa isa = level == "avx512vnni" ? Isa::Avx512Vnni : level == "avx512" ? Isa::Avx512
                    : level == "avxvnni" ? Isa::AvxVnni : Isa::Avx2;
    if (!isa_supported(isa)) return std::printf("%s: not on this CPU\n", level.c_str()), 1;
    const size_t rows = std::atoi(argv[2]), cols = std::atoi(argv[3]), ncols = std::atoi(argv[4]);
    const int reps = std::atoi(argv[5]);
    if (cols % 128) return std::printf("cols %zu: not a multiple of 128\n", cols), 1;
    std::mt19937 g(1);
    std::vector<BlockQ1_0> w(rows * cols / 128);
    for (auto& b : w) {
        b.d = f32_to_f16(0.01f * float(g() % 100 + 1));
        for (auto& q : b.qs) q = uint8_t(g());
    }
    std::vector<BlockQ8_0> x(ncols * cols / 32);
    const char* scales = std::getenv("SCALES");
    const bool narrow = scales && std::string(scales) == "narrow";
    for (auto& b : x) {
        b.d = f32_to_f16(narrow ? 0.5f + 0.005f * float(g() % 100) : 0.01f * float(g() % 100 + 1));
        for (auto& q : b.qs) q = int8_t(int(g() % 255) - 127);
    }
    std::vector<float> y0(rows * ncols), y1(rows * ncols);
    detail::Prepared p0, p1;
    double best[2] = {1e300, 1e300};
    for (int r = 0; r < reps; ++r)
        for (int v = 0; v < 2; ++v) {
            const auto t0 = std::chrono::steady_clock::now();
            if (v == 0) {
                detail::old::q1_0_layout(cols, ncols, isa, p0);
                detail::old::q1_0_prepare(x.data(), p0, 0, ncols);
                detail::old::q1_0_rows_fast(w.data(), cols, 0, rows, x.data(), p0, ncols, y0.data(), rows);
            } else {
                detail::q1_0_prepare(x.data(), cols, ncols, p1, isa);
                detail::q1_0_rows_fast(w.data(), cols, 0, rows, x.data(), p1, ncols, y1.data(), rows);
            }
            best[v] = std::min(best[v], std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
    const bool same = std::memcmp(y0.data(), y1.data(), y0.size() * 4) == 0;
    std::printf("%-6s %5zux%-5zu %3zu cols   REV %10.1f us   this tree %10.1f us   this tree %.3fx   same bits %s\n",
                level.c_str(), rows, cols, ncols, best[0], best[1], best[0] / best[1], same ? "yes" : "NO");
    return same ? 0 : 1;
}
EOF
CXXF="-std=c++20 -ffp-contract=off -O2 -Isrc -pthread"
OBJS=$(find build/src -name '*.o' ! -path build/src/quant/q1_0_fast.o)
${CXX:-g++} $CXXF -c "$TMP/old.cpp" -o "$TMP/old.o" && ${CXX:-g++} $CXXF -c "$TMP/ab.cpp" -o "$TMP/ab.o" &&
    ${CXX:-g++} -o "$TMP/ab" "$TMP/ab.o" "$TMP/old.o" build/src/quant/q1_0_fast.o $OBJS -static-libstdc++ -static-libgcc -pthread -ldl ||
    { echo "the harness did not build" >&2; exit 1; }
echo "REV = $REV ($(git rev-parse --short "$REV")), this tree = $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src/quant || echo ' + changes'), $(date -u '+%F %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
rc=0
for s in "${SHAPES[@]}"; do
    rc_=0
    r=${s%%x*} rest=${s#*x}
    c=${rest%%:*} n=${rest#*:}
    reps=${REPS:-$([ "$n" = 1 ] && echo 100 || echo 20)}
    "$TMP/ab" "$LEVEL" "$r" "$c" "$n" "$reps" || rc_=1
    [ $rc_ = 0 ] || rc=1
done
exit $rc
