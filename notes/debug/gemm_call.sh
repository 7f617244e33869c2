set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 KOSMOS_WAIT_BUDGET_S=10
T="-q -p no:cacheprovider --timeout=150 --timeout-method=thread -rfE --color=no"
timeout 300 python3 -m pytest tests/gpu/test_gemm.py tests/gpu/test_grouped.py tests/gpu/test_tp_mx.py tests/gpu/test_interop.py $T 2>&1 | tail -5
mkdir -p /tmp/r; timeout 400 python3 bench/gemm.py --set both --reps 20 --caps 132 --out /tmp/r --tag skauto > /tmp/r/bench.log 2>&1; echo "bench rc=$?"
cp /tmp/r/*.json /tmp/r/bench.log $OUT/; tail -14 /tmp/r/bench.log | cut -c1-200
