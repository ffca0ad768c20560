#!/usr/bin/env bash
# Side by side with llama.cpp on one machine: llama-bench and `bankml bench` on the same file, the
# same threads and the same tests, in alternating rounds (llama.cpp first in odd rounds, bankml
# first in even ones), so that both see the same machine state. Prints the CPU, both rows of every
# test (mean ± deviation over the rounds, and each round's rate), and bankml / llama.cpp.
#
#   scripts/bench-vs-llama.sh LLAMA_BIN_DIR MODEL [THREADS] [TESTS...]
#
# LLAMA_BIN_DIR: llama.cpp's build/bin (llama-bench and its shared libraries). THREADS: one count
# (default 2). TESTS: tgN (N tokens generated one at a time) and ppN (a prompt of N tokens),
# default tg32 pp64. Environment: ROUNDS (default 3), BANKML (default ./bankml beside scripts/),
# LLAMA_ARGS / BANKML_ARGS (extra arguments for each side, e.g. LLAMA_ARGS="-ngl 0").
# Exit status: 0 when every run succeeded, 1 when one failed (its output is shown), 2 on bad usage.
set -u

usage() {
    echo "usage: $0 LLAMA_BIN_DIR MODEL [THREADS] [tgN|ppN ...]" >&2
    exit 2
}
[ $# -ge 2 ] || usage
LLAMA_DIR=$1
MODEL=$2
shift 2
THREADS=2
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
    THREADS=$1
    shift
fi
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(tg32 pp64)
ROUNDS=${ROUNDS:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
BANKML=${BANKML:-$HERE/../bankml}
LLAMA_BENCH=$LLAMA_DIR/llama-bench

[ -x "$LLAMA_BENCH" ] || { echo "$LLAMA_BENCH: not an executable" >&2; exit 2; }
[ -x "$BANKML" ] || { echo "$BANKML: not an executable (set BANKML)" >&2; exit 2; }
[ -r "$MODEL" ] || { echo "$MODEL: cannot read" >&2; exit 2; }
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS=$ROUNDS: wants a positive integer" >&2; exit 2; }
for t in "${TESTS[@]}"; do
    [[ $t =~ ^(tg|pp)[1-9][0-9]*$ ]] || { echo "test '$t': wants tgN or ppN" >&2; exit 2; }
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The rate (t/s) of the one test in a llama-bench-style CSV (header line, then one row), by
# column name: both tools print llama-bench's CSV fields.
csv_rate() {
    awk '
    function split_csv(line, out,   n, i, c, f, q) {
        n = 0; f = ""; q = 0
        for (i = 1; i <= length(line); i++) {
            c = substr(line, i, 1)
            if (q) {
                if (c == "\"") {
                    if (substr(line, i + 1, 1) == "\"") { f = f "\""; i++ } else q = 0
                } else f = f c
            } else if (c == "\"") q = 1
            else if (c == ",") { out[++n] = f; f = "" }
            else f = f c
        }
        out[++n] = f
        return n
    }
    NR == 1 { n = split_csv($0, h); for (i = 1; i <= n; i++) col[h[i]] = i; next }
    { split_csv($0, v); rate = v[col["avg_ts"]] }
    END { if (rate == "") exit 1; print rate }' "$1"
}

# run NAME TEST ROUND: one run of one tool, rate appended to $TMP/NAME.TEST.
run() {
    local name=$1 test=$2 round=$3 p=0 n=0 out=$TMP/out.csv err=$TMP/err.txt
    case $test in
        tg*) n=${test#tg} ;;
        pp*) p=${test#pp} ;;
    esac
    if [ "$name" = llama ]; then
        # shellcheck disable=SC2086
        LD_LIBRARY_PATH="$LLAMA_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" \
            -p "$p" -n "$n" -r 1 -o csv ${LLAMA_ARGS:-} >"$out" 2>"$err"
    else
        # shellcheck disable=SC2086
        "$BANKML" bench -m "$MODEL" -t "$THREADS" -p "$p" -n "$n" -r 1 -o csv --gpu off ${BANKML_ARGS:-} >"$out" 2>"$err"
    fi
    local rc=$? rate
    if [ $rc -ne 0 ] || ! rate=$(csv_rate "$out"); then
        echo "$name $test round $round failed (exit $rc):" >&2
        cat "$out" "$err" >&2
        exit 1
    fi
    echo "$rate" >>"$TMP/$name.$test"
    printf '  round %d %-6s %-7s %10.2f t/s\n' "$round" "$test" "$name" "$rate" >&2
}

cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null)
flags=$(awk -F': ' '/^flags/ { print $2; exit }' /proc/cpuinfo 2>/dev/null |
    tr ' ' '\n' | grep -E '^(avx|avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx512vbmi|avx_vnni|avx512_bf16|avx512_fp16)$' |
    tr '\n' ' ')
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}"
echo "cpu flags: ${flags:-none of avx2/avx512}"
echo "bankml: $("$BANKML" version 2>/dev/null | awk '/^kernels:/ { sub(/^kernels: /, ""); print }')"
echo "llama.cpp: $LLAMA_BENCH"
echo "model: $MODEL ($(stat -c %s "$MODEL") bytes), threads $THREADS, $ROUNDS alternating rounds of -r 1 each"
# Other processes share the cores: the load average says how much (both tools see the same).
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
echo

for ((r = 1; r <= ROUNDS; r++)); do
    for t in "${TESTS[@]}"; do
        if [ $((r % 2)) -eq 1 ]; then run llama "$t" "$r"; run bankml "$t" "$r"
        else run bankml "$t" "$r"; run llama "$t" "$r"; fi
    done
done

# mean ± sample deviation, and the rounds' rates, of one file of rates.
stats() { awk '{ x[NR] = $1; s += $1 } END { m = s / NR; for (i = 1; i <= NR; i++) v += (x[i] - m) ^ 2;
    d = NR > 1 ? sqrt(v / (NR - 1)) : 0; r = ""; for (i = 1; i <= NR; i++) r = r (i > 1 ? ", " : "") sprintf("%.2f", x[i]);
    printf "%.2f ± %.2f|%s|%.6f", m, d, r, m }' "$1"; }

echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
echo "| test | llama.cpp t/s | bankml t/s | bankml / llama.cpp | llama.cpp rounds | bankml rounds |"
echo "| --- | --- | --- | --- | --- | --- |"
for t in "${TESTS[@]}"; do
    IFS='|' read -r lm lr lmean <<<"$(stats "$TMP/llama.$t")"
    IFS='|' read -r bm br bmean <<<"$(stats "$TMP/bankml.$t")"
    ratio=$(awk -v a="$bmean" -v b="$lmean" 'BEGIN { printf "%.2fx", a / b }')
    # Each round's ratio too: the spread of the rate of one tool against the other.
    rr=$(paste "$TMP/bankml.$t" "$TMP/llama.$t" | awk '{ r = $1 / $2; if (NR == 1 || r < lo) lo = r; if (NR == 1 || r > hi) hi = r }
        END { printf "%.2f-%.2fx", lo, hi }')
    echo "| $t | $lm | $bm | $ratio (rounds $rr) | $lr | $br |"
done
