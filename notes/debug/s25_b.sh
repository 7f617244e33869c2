#!/usr/bin/env bash
# For session 25 (<= 9.5 min), after s25_a's baseline: the two MoE backward patches, each applied
# to a copy of hipsrc (KOSMOS_HIPSRC) and benched in its own process against the device path of its
# run: notes/patches/rx_after_wgrad2.patch (RX after wgrad2; predicted Qwen3-30B -0.1 to -0.2 ms)
# and notes/patches/router_one_pass.patch (d w for a token's k pairs in one pass over dY: the
# device path's router kernel runs it too, so compare absolute times as well as ratios).
#   KOSMOS_COMMIT=<sha> bash notes/debug/s25_b.sh
source notes/debug/call_env.sh s25_b
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
B="--backward --models Qwen3-30B-A3B,DeepSeek-V3 --rows 2048 --iters 15 --warmup 3 --out $RUNS --tag s25"
run "bench bwd main" timeout 120 python3 bench/moe.py $B
for p in rx_after_wgrad2 router_one_pass; do
  tree=/tmp/tree_$p
  rm -rf "$tree" && mkdir -p "$tree/notes/debug" && cp -r hipsrc "$tree/" && cp notes/debug/phases.py "$tree/notes/debug/"
  if (cd "$tree" && patch -p1 < "$OLDPWD/notes/patches/$p.patch" >> "$LOG" 2>&1); then
    run "bench bwd $p" env KOSMOS_HIPSRC="$tree/hipsrc" timeout 150 python3 bench/moe.py $B
  else
    echo "patch $p does not apply" >> "$LOG"
  fi
done
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
grep -E "^=====|rows/exp|fused backward|unheld|Error|patch|H100|H200" "$LOG" | cut -c1-240 | tail -40
printf '%s\n' "${summary[@]}"
