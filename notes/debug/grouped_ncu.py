"""Profile target for ncu: the MoE expert GEMMs (grouped GEMM1 with SwiGLU, then GEMM2) of EP-8
shares at few rows per expert, where bench/moe.py has "experts" at 0.60-0.69 of "dense" (s38_f:
Qwen3-30B 256 0.104 vs 0.062 ms; DeepSeek-V3 256 1.46 vs 1.01 ms), then cuBLAS's dense GEMMs of
equal FLOPs. At 256 rows an expert's weights are read for 256 rows only (256 FLOP per weight byte,
below the H100's ~295 ridge), so the grouped GEMMs should run near HBM speed: is DRAM throughput
or DRAM bytes (weights read more than once) the gap?

    ncu --clock-control none --profile-from-start off --section LaunchStats --section SpeedOfLight \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv --page details \
        python3 notes/debug/grouped_ncu.py [Model:rows,...] > r.csv
    python3 notes/debug/grouped_ncu.py --summary r.csv
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "notes" / "debug")]

DEFAULT = "DeepSeek-V3:256,Qwen3-30B-A3B:256,Qwen3-30B-A3B:2048"
WANT = ("Grid Size", "Duration", "Compute (SM) Throughput", "DRAM Throughput", "L2 Cache Throughput",
        "dram__bytes_read.sum", "dram__bytes_write.sum")


def main() -> None:
    import cupy

    from kosmos import grouped_matmul
    from kosmos.dtypes import random_bf16
    from moe import share

    calls = []
    for case in (sys.argv[1] if len(sys.argv) > 1 else DEFAULT).split(","):
        name, rows = case.split(":")
        cfg, rows = share(name), int(rows)
        e, h, i = cfg.experts, cfg.hidden, cfg.intermediate
        x = random_bf16((e * rows, h), 1)
        w1, w2 = random_bf16((e, 2 * i, h), 2), random_bf16((e, h, i), 3)
        counts = cupy.full((e,), rows, dtype=cupy.int32)
        gate_up = cupy.empty((e * rows, 2 * i), x.dtype)
        dw1, dw2 = w1[0], w2[0]  # dense: one weight of each shape, all rows as one GEMM
        dh, dy = cupy.empty((e * rows, 2 * i), x.dtype), cupy.empty((e * rows, h), x.dtype)
        a = random_bf16((e * rows, i), 4)

        def ours(x=x, w1=w1, w2=w2, counts=counts, gate_up=gate_up):
            act = grouped_matmul(x, w1, counts, "TN", epilogue="swiglu", gate_up=gate_up)
            grouped_matmul(act, w2, counts, "TN")

        def dense(x=x, dw1=dw1, dw2=dw2, dh=dh, a=a, dy=dy):
            cupy.matmul(x, dw1.T, out=dh)
            cupy.matmul(a, dw2.T, out=dy)

        for f in (ours, dense, ours, dense):
            f()
        weights = (w1.nbytes + w2.nbytes) / 1e9
        calls.append((f"{name} {rows} rows/expert, E {e}, weights {weights:.3f} GB", ours, dense))
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.start()
    for _, ours, dense in calls:
        ours()
        dense()
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.stop()
    print("profiled, in order (ours GEMM1, GEMM2, then cuBLAS's two):\n  " + "\n  ".join(n for n, _, _ in calls))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:
        from cublas_ncu import summary

        summary(sys.argv[2], WANT)
    else:
        main()
