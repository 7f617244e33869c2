#!/usr/bin/env bash
# A short device call (~2.5 min with the machine's start): the stream-K counters' reset (plain
# GEMM and bulk RS || NT), the grouped GEMM's 192 tile (tests, then the one bench shape it
# changes), the MoE fused kernels' crews (movers 0, 16, 1, all). In priority order: a call cut
# short by the device budget still returns the first parts. KOSMOS_COMMIT=<sha> bash notes/debug/check_call.sh
source notes/debug/call_env.sh check
T="-q -p no:cacheprovider --timeout=60 --timeout-method=thread -rfE --color=no"
run "stream-K tests" timeout 60 python3 -m mpi4py -m pytest tests/gpu/test_gemm.py tests/gpu/test_tp.py -k "stream" $T
run "grouped tests" timeout 60 python3 -m pytest tests/gpu/test_grouped.py $T
run "bench grouped qwen30b 256" timeout 40 python3 bench/grouped_gemm.py --models Qwen3-30B --rows 256 --out "$RUNS"
run "moe fused tests np1" timeout 90 python3 -m mpi4py -m pytest tests/gpu/test_moe_forward.py tests/gpu/test_moe_backward_fused.py $T
cp $RUNS/*.json "$OUT"/ 2>/dev/null
grep -E "^(FAILED|ERROR) |passed|failed|Qwen3-30B" "$LOG" | head -20
printf '%s\n' "${summary[@]}"
