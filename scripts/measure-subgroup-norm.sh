#!/bin/sh
# The norms' workgroup sum with the card's subgroup arithmetic against the workgroup tree
# (BANKML_GPU_NO_SUBGROUPS=1), side by side on one card in one run, ROUNDS times alternating so
# drift hits both alike: the output norm's shader-clock phases over a decode (BANKML_GPU_CLOCK=1;
# the sum is stamp 2 minus stamp 1) and an 8B Q1_0 decode's tokens/s (`bankml bench`). The outputs
# go to OUT (default ./measure-subgroup-norm), one file per variant and round.
#   scripts/measure-subgroup-norm.sh BANKML MODEL.gguf [ROUNDS]
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 BANKML MODEL.gguf [ROUNDS]" >&2
    exit 2
fi
bin=$1 model=$2 rounds=${3:-3}
out=${OUT:-./measure-subgroup-norm}
[ -x "$bin" ] || { echo "$0: $bin: not an executable" >&2; exit 1; }
[ -r "$model" ] || { echo "$0: $model: not readable" >&2; exit 1; }
mkdir -p "$out"
"$bin" gpu --verify > "$out/verify.txt" 2>&1 || true
grep "subgroups:" "$out/verify.txt" || true
i=1
while [ "$i" -le "$rounds" ]; do
    for tag in subgroup tree; do
        if [ "$tag" = tree ]; then no=1; else no=0; fi
        echo "round $i: $tag"
        BANKML_GPU_NO_SUBGROUPS=$no BANKML_GPU_CLOCK=1 "$bin" run -m "$model" --tokens 1,2,3,4 -n 128 \
            > "$out/clock-$tag-$i.txt" 2>&1
        BANKML_GPU_NO_SUBGROUPS=$no "$bin" bench --shape 8b --type q1_0 -p 0 -n 64 -r 3 --gpu on \
            > "$out/decode-8b-$tag-$i.txt" 2>&1
    done
    i=$((i + 1))
done
echo "written to $out"
