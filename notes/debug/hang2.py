"""The same interleaving as hang.py, on whatever path="fused" runs (no device-state dump)."""
import os, time
import numpy as np, cupy
from kosmos.world import World
from kosmos.dtypes import bfloat16
from kosmos.moe import MoEConfig, MoELayer, MoEParams
world = World()
cfg = MoEConfig(experts=8, top_k=2, hidden=512, intermediate=256, name="big")
ref = MoELayer(world, cfg, max_tokens=5000, path="device")
layer = MoELayer(world, cfg, max_tokens=5000, path="fused")
params = MoEParams.random(cfg, world, 17)
for it in range(int(os.environ.get("ITERS", "100"))):
    t = 4999 - (it % 7) * 300
    x = cupy.asarray(np.random.default_rng(it).standard_normal((t, 512), np.float32).astype(bfloat16))
    want, _ = ref.forward(x, params, check=True)
    y, ctx = layer.forward(x, params)
    ev = cupy.cuda.Event(); ev.record(); t0 = time.time()
    while not ev.done:
        if time.time() - t0 > 6:
            print(f"HANG at iteration {it}", flush=True); os._exit(3)
        time.sleep(0.005)
    assert (y.view(np.uint16) == want.view(np.uint16)).all(), it
print("no hang, bitwise the device path in every iteration", flush=True)
os._exit(0)
