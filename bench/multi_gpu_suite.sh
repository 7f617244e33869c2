#!/usr/bin/env bash
# The multi-GPU run (one rank per GPU, never oversubscribed): topology, the GPU tests
# at 2, 4, ... ranks, the collectives against NCCL, the fused kernels against NCCL + cuBLAS and
# unfused, the ablations, and the crew-rule refit followed by a re-run of the fused kernels.
#   bash bench/multi_gpu_suite.sh [tests] [bench] [mxfp8] [moe] [ablate] [refit]   # default: all, in that order
#   KOSMOS_GPUS=4 bash bench/multi_gpu_suite.sh tests
#   KOSMOS_TEST_NPS="2 8" bash bench/multi_gpu_suite.sh tests     # the tests part at those world sizes only
# The parts fit the device tool's 10-minute calls one or two at a time (tests at every world size may
# not: split them with KOSMOS_TEST_NPS). Every call first warms the kernel cache (kept on a warm
# machine: later calls find it full). Logs and JSON/PNG under $OUT (default /tmp/kosmos_out); a
# summary table last. refit needs bench's collectives_w<N>.json in $OUT (or KOSMOS_COLLECTIVES_JSON).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kosmos_out}; mkdir -p "$OUT"
LOG=$OUT/multi_gpu.log
parts=${*:-tests bench mxfp8 moe ablate refit}
GPUS=${KOSMOS_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
if (( GPUS < 2 )); then
  echo "multi_gpu_suite: $GPUS GPU(s) visible; this suite needs 2 or more (use bench/device_suite.sh)" >&2
  exit 2
fi
MPIRUN="mpirun --allow-run-as-root --bind-to none"
source bench/suite_lib.sh
{ nvidia-smi; nvidia-smi topo -m; } >> "$LOG" 2>&1
# (every module, a core each; a compile error fails here. The CPU CI compile-checks every target.)
run "warm the kernel cache" timeout 400 python3 -m kosmos.runtime.warm
if [[ $parts == *tests* ]]; then
  nps=(); for n in 2 4 8 16; do (( n <= GPUS )) && nps+=("$n"); done
  (( GPUS != ${nps[-1]} )) && nps+=("$GPUS")
  [[ -n ${KOSMOS_TEST_NPS:-} ]] && read -ra nps <<< "$KOSMOS_TEST_NPS"
  for n in "${nps[@]}"; do gpu_tests "$n" 300; done
  run "demo np=$GPUS" timeout 120 $MPIRUN -np "$GPUS" python3 -m kosmos.demo
fi
if [[ $parts == *bench* ]]; then
  run "bench/collectives np=$GPUS" timeout 300 $MPIRUN -np "$GPUS" python3 bench/collectives.py --out "$OUT"
  run "bench/tp np=$GPUS" timeout 500 $MPIRUN -np "$GPUS" python3 bench/tp.py --out "$OUT"
fi
if [[ $parts == *mxfp8* ]]; then  # the MXFP8 kernels: 33/64 of the bf16 bytes through the gathers
  run "bench/tp --precision mxfp8 --quick np=$GPUS" timeout 500 $MPIRUN -np "$GPUS" \
    python3 bench/tp.py --precision mxfp8 --quick --link-bytes --out "$OUT"
  run "mlp_block mxfp8 np=$GPUS" timeout 120 $MPIRUN -np "$GPUS" python3 -m mpi4py launch/examples/mlp_block.py \
    --precision mxfp8 --tokens 1024 --hidden 2048 --ffn 5632
fi
if [[ $parts == *moe* ]] && (( GPUS > 8 )); then
  summary+=("moe skipped: bench/moe.py runs 1 to 8 ranks (shares of an EP-8 layout), $GPUS GPUs here")
fi
if [[ $parts == *moe* ]] && (( GPUS <= 8 )); then  # the MoE layer expert-parallel over the GPUs (8: the whole model)
  run "bench/moe --quick np=$GPUS" timeout 500 $MPIRUN -np "$GPUS" python3 bench/moe.py --quick --out "$OUT"
  run "bench/moe --quick --backward np=$GPUS" timeout 500 $MPIRUN -np "$GPUS" python3 bench/moe.py --quick --backward --out "$OUT"
  run "moe_train np=$GPUS" timeout 200 $MPIRUN -np "$GPUS" python3 -m mpi4py launch/examples/moe_train.py --steps 60 \
    --experts $(( 8 % GPUS ? 4 * GPUS : 8 ))  # experts must divide over the ranks
fi
if [[ $parts == *ablate* ]]; then
  run "bench/tp --ablate --quick np=$GPUS" timeout 500 $MPIRUN -np "$GPUS" python3 bench/tp.py --ablate --quick --out "$OUT"
fi
if [[ $parts == *refit* ]]; then
  coll=${KOSMOS_COLLECTIVES_JSON:-$OUT/collectives_w$GPUS.json}
  gemm_json=$(ls bench/results/gemm_*_v3full.json | tail -1)
  if run "refit" python3 -m kosmos.tp.refit --collectives "$coll" --gemm "$gemm_json" --write; then
    cp kosmos/configs/hardware.yaml "$OUT/hardware_refit.yaml"
    mkdir -p "$OUT/refit" && run "bench/tp --quick after refit" timeout 400 $MPIRUN -np "$GPUS" \
      python3 bench/tp.py --quick --out "$OUT/refit"
  fi
fi
echo; grep -B1 -A7 -E '^kernel +shapes' "$LOG" | tail -40
echo; grep -E '^(FAILED|ERROR) ' "$LOG" | sort | uniq | head -20
echo; printf '%s\n' "${summary[@]}"
