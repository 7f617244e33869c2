#!/usr/bin/env bash
# Session 24's fifth device call (~5 min): the MoE backward's router dx job (RX) after wgrad2
# instead of second (its fp32 stores slowed the side pushes that dgrad2 waits for at Qwen3-30B):
# bench --backward at Qwen3-30B (the case it is for) against the device path, then the fused
# backward's router and shared tests at np 1
# (the old kernel's ratio to it: 1.053-1.060 at Qwen3-30B 2,048 in four H100 runs, s23_d, s24_a/b/d;
# no old-tree run in the same call: device time).
# The change is notes/patches/rx_after_wgrad2.patch (not in main until measured): applied here first.
#   KOSMOS_COMMIT=<sha>+rx_after_wgrad2 bash notes/debug/s24_e.sh
patch -p1 < notes/patches/rx_after_wgrad2.patch || exit 1
source notes/debug/call_env.sh s24_e
nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
T="-q -p no:cacheprovider --timeout=120 --timeout-method=thread -rfE --color=no"
B="--models Qwen3-30B-A3B --rows 2048 --iters 20 --warmup 3 --out $RUNS --tag s24"
run "bench bwd new" timeout 130 python3 bench/moe.py --backward $B
cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
run "bwd tests np1" timeout 120 python3 -m pytest tests/gpu/test_moe_backward_fused.py -k "router or shared" $T
grep -E "^=====|^(FAILED|ERROR) |passed|failed|rows/exp|fused backward|unheld|Error|H100|H200|^  |^backward" "$LOG" | cut -c1-240 | tail -70
printf '%s\n' "${summary[@]}"
