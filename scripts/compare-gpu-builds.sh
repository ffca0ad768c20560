#!/bin/sh
# Two bankml builds side by side on one card, in one run: `bankml bench gpu` (the Q1_0 kernels'
# card times, registers and code size) and an 8B Q1_0 decode (`bankml bench`, tokens/s), each
# build in turn, ROUNDS times, so drift hits both alike. The outputs go to OUT (default
# ./compare-gpu-builds), one file per build and round; compare the rows of the same kernel.
#   scripts/compare-gpu-builds.sh OLD_BANKML NEW_BANKML [ROUNDS]
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 OLD_BANKML NEW_BANKML [ROUNDS]" >&2
    exit 2
fi
old=$1 new=$2 rounds=${3:-3}
out=${OUT:-./compare-gpu-builds}
mkdir -p "$out"
for b in "$old" "$new"; do
    [ -x "$b" ] || { echo "$0: $b: not an executable" >&2; exit 1; }
done
i=1
while [ "$i" -le "$rounds" ]; do
    for tag in old new; do
        if [ "$tag" = old ]; then b=$old; else b=$new; fi
        echo "round $i: $tag ($b)"
        "$b" bench gpu > "$out/bench-gpu-$tag-$i.txt" 2>&1
        "$b" bench --shape 8b --type q1_0 -p 0 -n 64 -r 3 --gpu on > "$out/decode-8b-$tag-$i.txt" 2>&1
    done
    i=$((i + 1))
done
echo "written to $out"
