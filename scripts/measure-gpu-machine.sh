#!/usr/bin/env bash
# The GPU machine's measurements, in one run: the card verified, the GPU forward pass's logits
# against the CPU's byte for byte on synthetic 1.7B and 8B models, and the decode speed of both
# backends side by side (bankml bench --gpu on|off; llama.cpp too where a build is given).
#
#   scripts/measure-gpu-machine.sh [OUT_DIR] [PARTS]
#
# PARTS: a comma list of basics (discovery, the kernel bench), verify, check, speed, profile,
# share (per-shape calibration: what it decides for each 1.7B and 8B Q1_0 shape, and decode with
# the whole token on the card, with the per-shape share, and on the CPU alone, in one run each;
# the rests of BANKML_GPU_LIMIT=0.5 beside them), norm (8B Q1_0's norms as one rms_norm_q8
# dispatch against rms_norm then prep_act, BANKML_GPU_SPLIT_NORM=1: logits against the CPU's,
# decode rates alternating twice, each step alone), ops (bankml bench gpu --reps 20: every op
# kernel's card time on the 8B shapes, best and median, after the dispatch and Q1_0 tables)
# (default: all of them). LLAMA_BENCH, when
# set, is a llama-bench binary run on the same files. Models are written to $MODELS (default
# /tmp/bankml-models) once.
set -u
out=${1:-/tmp/bankml-measure}
parts=${2:-basics,verify,check,speed,profile,share,norm,ops}
models=${MODELS:-/tmp/bankml-models}
mkdir -p "$out" "$models"
bin=${BANKML:-./bankml}
has() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }
log() { echo "== $*" | tee -a "$out/summary.txt"; }

model() {  # shape type -> path (written once)
  local f="$models/$1-$2.gguf"
  [ -f "$f" ] || "$bin" synth --shape "$1" --type "$2" --seed 7 -o "$f" >/dev/null || return 1
  echo "$f"
}

if has basics; then
  log "discovery and the kernel bench"
  { "$bin" version; "$bin" gpu; "$bin" bench gpu; } >"$out/basics.txt" 2>&1
  grep -E "copy|round trip|share" "$out/basics.txt" | tee -a "$out/summary.txt"
fi

if has verify; then
  log "gpu --verify"
  "$bin" gpu --verify >"$out/verify.txt" 2>&1; echo "exit $?" >>"$out/verify.txt"
  tail -3 "$out/verify.txt" | tee -a "$out/summary.txt"
fi

if has check; then
  for mt in 1.7b:q1_0 8b:q1_0 1.7b:q2_0 8b:q2_0 1.7b:f16; do
    m=$(model "${mt%%:*}" "${mt##*:}") || { log "synth $mt failed"; continue; }
    toks=17,300,5,999,42,42,42,7
    BANKML_GPU=off "$bin" run -m "$m" --tokens $toks -n 64 --logits "$out/cpu.f32" >"$out/cpu-ids.txt" 2>/dev/null
    "$bin" run -m "$m" --tokens $toks -n 64 --logits "$out/gpu.f32" --json >"$out/gpu.json" 2>"$out/gpu-err.txt"
    if cmp -s "$out/cpu.f32" "$out/gpu.f32"; then r="logits byte-identical"; else r="LOGITS DIFFER"; fi
    log "check $mt: $r ($(stat -c %s "$out/gpu.f32") bytes; $(head -1 "$out/gpu-err.txt"))"
    rm -f "$out/cpu.f32" "$out/gpu.f32"
  done
fi

if has speed; then
  for mt in 8b:q1_0 1.7b:q1_0 1.7b:q2_0 8b:q2_0; do
    m=$(model "${mt%%:*}" "${mt##*:}") || continue
    log "bench $mt"
    "$bin" bench -m "$m" -p 0 -n 128 -r 2 --gpu on 2>&1 | tail -3 | tee -a "$out/summary.txt"
    "$bin" bench -m "$m" -p 0 -n 32 -r 1 --gpu off 2>&1 | tail -1 | tee -a "$out/summary.txt"
    if [ -n "${LLAMA_BENCH:-}" ]; then
      "$LLAMA_BENCH" -m "$m" -ngl 99 -p 0 -n 128 -r 2 2>&1 | tail -3 | tee -a "$out/summary.txt"
    fi
  done
fi

if has profile; then
  m=$(model 8b q1_0)
  log "profile 8b q1_0"
  BANKML_GPU_PROFILE=1 "$bin" run -m "$m" --tokens 1,2,3,4 -n 32 2>&1 | grep -v '^[0-9]' | tee -a "$out/summary.txt"
  log "each step alone in a sequence, and where a token's wall time goes (BANKML_GPU_PROFILE=2)"
  BANKML_GPU_PROFILE=2 "$bin" run -m "$m" --tokens 1,2,3,4 -n 128 2>&1 | grep -v '^[0-9]' | tee -a "$out/summary.txt"
fi

if has share; then
  for mt in 1.7b:q1_0 8b:q1_0; do
    m=$(model "${mt%%:*}" "${mt##*:}") || continue
    j="$out/share-${mt%%:*}.json"
    log "per-shape calibration $mt: bench --gpu on,share,off (tg128, 3 repetitions; the share row's first includes the tuning)"
    "$bin" bench -m "$m" -p 0 -n 128 -r 3 --gpu on,share,off --json >"$j" 2>"$out/share-${mt%%:*}.err"
    grep -E '"backends"|"avg_ts"|"stddev_ts"' "$j" | paste - - - | tee -a "$out/summary.txt"
    # The decisions: one line per shape (rows, cols, on, the medians of both sides in ms).
    tr -d ' \n' <"$j" | grep -o '{"rows":[^}]*}' | tee -a "$out/summary.txt"
    grep "GPU" "$out/share-${mt%%:*}.err" | tee -a "$out/summary.txt"
    log "rests $mt: BANKML_GPU_LIMIT=0.5, whole tokens (tg64): tokens on the card and on the CPU"
    BANKML_GPU_LIMIT=0.5 "$bin" run -m "$m" --tokens 1,2,3,4 -n 64 --json 2>/dev/null |
      grep -oE '"(tokens_on_card|tokens_on_cpu_resting|decode_tokens_per_s)":[0-9.e+-]+' | tee -a "$out/summary.txt"
  done
fi

if has norm; then
  m=$(model 8b q1_0)
  toks=17,300,5,999,42,42,42,7
  BANKML_GPU=off "$bin" run -m "$m" --tokens $toks -n 32 --logits "$out/cpu.f32" >/dev/null 2>&1
  for split in 0 1; do
    BANKML_GPU_SPLIT_NORM=$split "$bin" run -m "$m" --tokens $toks -n 32 --logits "$out/gpu.f32" >/dev/null 2>&1
    if cmp -s "$out/cpu.f32" "$out/gpu.f32"; then r="logits byte-identical"; else r="LOGITS DIFFER"; fi
    log "norm BANKML_GPU_SPLIT_NORM=$split: $r"
    rm -f "$out/gpu.f32"
  done
  rm -f "$out/cpu.f32"
  for round in 1 2; do
    for split in 0 1; do
      log "norm BANKML_GPU_SPLIT_NORM=$split, round $round: bench tg128 on the card"
      BANKML_GPU_SPLIT_NORM=$split "$bin" bench -m "$m" -p 0 -n 128 -r 2 --gpu on 2>&1 | tail -1 | tee -a "$out/summary.txt"
    done
  done
  for split in 0 1; do
    log "norm BANKML_GPU_SPLIT_NORM=$split: each step alone (BANKML_GPU_PROFILE=2)"
    BANKML_GPU_SPLIT_NORM=$split BANKML_GPU_PROFILE=2 "$bin" run -m "$m" --tokens 1,2,3,4 -n 32 2>&1 |
      grep -E "rms_norm|prep_act|total|whole token" | tee -a "$out/summary.txt"
  done
fi

if has ops; then
  log "bench gpu --reps 20: each op kernel's card time (8B shapes)"
  "$bin" bench gpu --reps 20 >"$out/bench-gpu-ops.txt" 2>&1; echo "exit $?" >>"$out/bench-gpu-ops.txt"
  sed -n '/^op kernels: /,/^us: /p' "$out/bench-gpu-ops.txt" | tee -a "$out/summary.txt"
  tail -1 "$out/bench-gpu-ops.txt" | tee -a "$out/summary.txt"
fi
