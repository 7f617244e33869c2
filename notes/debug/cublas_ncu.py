"""Profile target for ncu: cuBLAS (cupy.matmul) and kosmos.matmul on the bench shapes where we
trail cuBLAS (issue 11's gaps), one call each inside cupy.cuda.profiler.start/stop after a
warm-up, so `ncu --profile-from-start off` sees cuBLAS's kernel(s), then ours, shape by shape:
which kernel, tile, cluster and grid cuBLAS picks where it beats us, and both kernels' SOL.

    ncu --clock-control none --profile-from-start off --section LaunchStats --section SpeedOfLight \
        --csv --page details python3 notes/debug/cublas_ncu.py [names] > r.csv
    python3 notes/debug/cublas_ncu.py --summary r.csv
"""
import csv
import importlib.util
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DEFAULT = "dsv3-gemm2-2048,gptoss-gemm1-2048,qwen3-30b-gemm2-2048,smallM-1000,smallM-256,smallM-256-NN,square-8192"
WANT = ("Grid Size", "Cluster Size", "Block Size", "Registers Per Thread", "Dynamic Shared Memory Per Block",
        "Duration", "Compute (SM) Throughput", "DRAM Throughput", "Memory Throughput", "L2 Cache Throughput")


def summary(path: str, want: tuple = WANT) -> None:
    text = Path(path).read_text()
    text = text[text.index('"ID"'):] if '"ID"' in text else text  # ncu's own lines before the CSV
    rows = list(csv.DictReader(io.StringIO(text)))
    kernels: dict[str, dict] = {}
    for r in rows:
        k = kernels.setdefault(r["ID"], {"name": r["Kernel Name"]})
        if r["Metric Name"] in want:
            k[r["Metric Name"]] = f'{r["Metric Value"]} {r["Metric Unit"]}'.strip()
    for i, k in kernels.items():
        print(f"[{i}] {k.pop('name')[:200]}")
        print("     " + "; ".join(f"{m}: {k[m]}" for m in want if m in k))


def main() -> None:
    import cupy

    from kosmos import gemm
    from kosmos.dtypes import bfloat16, random_bf16

    spec = importlib.util.spec_from_file_location("bench_gemm", ROOT / "bench" / "gemm.py")
    bench_gemm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_gemm)
    shapes = {s.name: s for s in bench_gemm.other_shapes()}
    names = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    calls = []
    for n in names.split(","):
        s = shapes[n]
        a_shape, b_shape, out_shape = s.operand_shapes()
        a, b = random_bf16(a_shape, 1), random_bf16(b_shape, 2)
        out, ref = cupy.empty(out_shape, dtype=bfloat16), cupy.empty(out_shape, dtype=bfloat16)
        cublas = bench_gemm.cublas_fn(s.layout, a, b, ref)
        ours = lambda a=a, b=b, s=s, out=out: gemm.matmul(a, b, s.layout, out=out)  # noqa: E731
        for f in (cublas, ours, cublas, ours):
            f()
        calls.append((n, s.layout, cublas, ours))
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.start()
    for _, _, cublas, ours in calls:
        cublas()
        ours()
    cupy.cuda.Device().synchronize()
    cupy.cuda.profiler.stop()
    print("profiled, in order (cuBLAS then ours each):", ", ".join(f"{n} {lay}" for n, lay, _, _ in calls))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:
        summary(sys.argv[2])
    else:
        main()
