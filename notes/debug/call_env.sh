# Sourced first by the device-call scripts here (`source notes/debug/call_env.sh NAME`): the
# environment, $OUT (the device tool's, or /tmp/kosmos_NAME), $LOG = $OUT/NAME.log, $RUNS (bench
# JSON + PNG; only the JSON is copied to $OUT, whose file count is limited), $MPIRUN (oversubscribed
# ranks on one GPU: correctness only) and bench/suite_lib.sh's run helpers.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10
export KOSMOS_COMMIT=${KOSMOS_COMMIT:-unknown}
OUT=${OUT:-/tmp/kosmos_$1}; mkdir -p "$OUT"; LOG=$OUT/$1.log
RUNS=/tmp/kosmos_$1_runs; mkdir -p "$RUNS"
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none -x KOSMOS_COMMIT -x PYTHONPATH -x PYTHONUNBUFFERED -x KOSMOS_WAIT_BUDGET_S"
source bench/suite_lib.sh

# The ping-pong tiles on this tree unless it has them (a branch or main with them): `patch`, default
# notes/patches/pingpong.patch (the flag version; pingpong128.patch: the landed form); exits the
# call if the patch does not apply.   apply_pingpong [patch]
apply_pingpong() {
  local patch=${1:-notes/patches/pingpong.patch}
  grep -q PingPongTile hipsrc/kosmos/gemm/config.h || git apply "$patch" >> "$LOG" 2>&1 \
    || { echo "$patch does not apply" | tee -a "$LOG"; exit 1; }
}

# An A/B of a patch against main in one run: main's hipsrc copied to /tmp/tree_main (tree B, for
# --tree-b), `patch` applied to this copy (tree A), then both trees' kernels compiled into the
# cache at once (the files named, in both trees; others compile when first loaded). Exits if the patch does not apply.
#   patch_over_main notes/patches/NAME.patch grouped.hip moe_fused_forward.hip ...
patch_over_main() {
  local patch=$1; shift
  nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
  rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
  git apply "$patch" >> "$LOG" 2>&1 || { echo "patch does not apply" | tee -a "$LOG"; exit 1; }
  warm_both_trees "$@"
}

# The same A/B the other way round: the change is in this tree (A); tree B is its hipsrc with
# `patch` reversed, at /tmp/tree_main. Exits if the patch does not reverse-apply.
#   patch_under_tree notes/debug/NAME.patch moe_fused_forward.hip ...
patch_under_tree() {
  local patch=$1; shift
  nvidia-smi --query-gpu=name --format=csv,noheader >> "$LOG"
  rm -rf /tmp/tree_main && mkdir -p /tmp/tree_main && cp -r hipsrc /tmp/tree_main/
  (cd /tmp/tree_main && git apply -R "$OLDPWD/$patch") >> "$LOG" 2>&1 \
    || { echo "patch does not reverse-apply" | tee -a "$LOG"; exit 1; }
  warm_both_trees "$@"
}

# The files named compiled into the cache from this tree (A) and /tmp/tree_main (B) at once.
warm_both_trees() {
  KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 200 python3 -m kosmos.runtime.warm --jobs $# "$@" > "$OUT/warm_b.log" 2>&1 &
  local warm_b=$!
  run "warm A" timeout 200 python3 -m kosmos.runtime.warm --jobs $# "$@"
  wait $warm_b
  cat "$OUT/warm_b.log" >> "$LOG"
}

# The MXFP8 kperm A/Bs of session 30 (s30_a.sh, s30_f.sh): `patch` over main (patch_over_main),
# test_mx with it, the kperm kernel alone (kperm_ab.py) and bench/gemm.py's mxfp8 quick set, each
# A/B against main's tree; the log's summary lines last (`tail` of them).
#   kperm_patch_ab notes/patches/NAME.patch TAG TAIL
kperm_patch_ab() {
  local patch=$1 tag=$2 tail_lines=$3
  local T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
  patch_over_main "$patch" mx.hip gemm.hip transpose.hip
  run "mx tests np1" timeout 150 python3 -m pytest tests/gpu/test_mx.py $T
  run "kperm A/B" timeout 90 python3 notes/debug/kperm_ab.py --tree-b /tmp/tree_main/hipsrc
  run "gemm mx A/B" timeout 240 python3 bench/gemm.py --quick --precision mxfp8 --caps 132 --reps 15 --tree-b /tmp/tree_main/hipsrc --out $RUNS --tag "$tag"
  cp "$RUNS"/*.json "$OUT"/ 2>/dev/null
  grep -E "^=====|compiled|^(FAILED|ERROR) |passed|failed|B/A|Error|patch|mxfp8/bf16" "$LOG" | cut -c1-260 | tail -"$tail_lines"
  printf '%s\n' "${summary[@]}"
}

# notes/debug/phases.py's fused MoE phase trace for each "MODEL ROWS" case (movers 0).
#   phase_traces "Qwen3-30B-A3B 256" "DeepSeek-V3 256" ...
phase_traces() {
  local c
  for c in "$@"; do
    set -- $c
    run "phases $1 $2" timeout 150 python3 notes/debug/phases.py --model "$1" --rows "$2" --movers 0
  done
}

# The fused forward's phase traces at the router's real E (phases.py --ranks 8: every expert of an
# EP-8 layout on the one GPU), Qwen3-30B and DeepSeek-V3 at 256 rows an expert, on this tree (A)
# and, given "AB", on /tmp/tree_main (B) after each.   real_e_traces [AB]
real_e_traces() {
  local m args="--rows 256 --movers 0 --ranks 8 --forward-only"
  for m in Qwen3-30B-A3B DeepSeek-V3; do
    run "phases A $m 256 ranks 8" timeout 60 python3 notes/debug/phases.py --model $m $args
    [[ "${1:-}" == AB ]] && run "phases B $m 256 ranks 8" env KOSMOS_HIPSRC=/tmp/tree_main/hipsrc timeout 60 \
      python3 notes/debug/phases.py --model $m $args
  done
}
