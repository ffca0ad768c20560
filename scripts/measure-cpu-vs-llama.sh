#!/usr/bin/env bash
# The CPU's side-by-side measurements against llama.cpp on one machine: scripts/bench-vs-llama.sh
# (alternating rounds, same file, same threads) for each model and thread count, the memory floor
# (bankml bench memory), and the AVX2-only kernels (BANKML_KERNELS=avx2) for the Q2_0 model.
#
#   scripts/measure-cpu-vs-llama.sh LLAMA_BIN_DIR [OUT_DIR] [THREADS...]
#
# THREADS default: 2. Models (MODELS, default 1.7b:q1_0 1.7b:q2_0 8b:q1_0) are written once to
# $MODEL_DIR (default /tmp/bankml-models) by bankml synth --seed 7. ROUNDS as in bench-vs-llama.sh.
# Every run's output is in OUT_DIR (default /tmp/bankml-cpu-vs-llama); the tables in summary.txt.
set -u
[ $# -ge 1 ] || { echo "usage: $0 LLAMA_BIN_DIR [OUT_DIR] [THREADS...]" >&2; exit 2; }
llama=$1
out=${2:-/tmp/bankml-cpu-vs-llama}
shift $(($# >= 2 ? 2 : 1))
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(2)
here=$(cd "$(dirname "$0")" && pwd)
bin=${BANKML:-$here/../bankml}
dir=${MODEL_DIR:-/tmp/bankml-models}
mkdir -p "$out" "$dir"

model() {  # shape:type -> path (written once)
    local f="$dir/${1%%:*}-${1##*:}.gguf"
    [ -f "$f" ] || "$bin" synth --shape "${1%%:*}" --type "${1##*:}" --seed 7 -o "$f" >/dev/null || return 1
    echo "$f"
}

"$bin" bench memory >"$out/memory.txt" 2>&1
{ echo "== memory floor"; cat "$out/memory.txt"; } >>"$out/summary.txt"
for mt in ${MODELS:-1.7b:q1_0 1.7b:q2_0 8b:q1_0}; do
    f=$(model "$mt") || { echo "synth $mt failed" >&2; exit 1; }
    for t in "${threads[@]}"; do
        name="${mt/:/-}-t$t"
        "$here/bench-vs-llama.sh" "$llama" "$f" "$t" tg32 pp64 >"$out/$name.txt" 2>&1
        { echo "== $mt, $t threads"; cat "$out/$name.txt"; } >>"$out/summary.txt"
        if [ "${mt##*:}" = q2_0 ]; then
            BANKML_KERNELS=avx2 "$here/bench-vs-llama.sh" "$llama" "$f" "$t" tg32 pp64 >"$out/$name-avx2.txt" 2>&1
            { echo "== $mt, $t threads, BANKML_KERNELS=avx2"; cat "$out/$name-avx2.txt"; } >>"$out/summary.txt"
        fi
    done
done
cat "$out/summary.txt"
