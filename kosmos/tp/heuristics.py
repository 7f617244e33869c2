"""Closed-form rules for the TP+SP fused kernels' crews (in the spirit of the paper's Table B.3).

The paper fitted per-shape rules on MI350 (256 CUs, XGMI mesh). We derive them instead from
four hardware numbers (kosmos/configs/hardware.yaml): SMs, link GB/s, mover GB/s per SM and
builder TFLOP/s per SM, by one balance each:

  gather (AG+GEMM):  movers must deliver gathered rows as fast as builders consume them:
                     c * bw / (2K) = (S - c) * rate / (2NK)   ->  c = S * rate / (bw * N + rate)
  reduce (GEMM+RS):  reducers must pull partial rows as fast as builders produce them:
                     c * bw / (2N) = (S - c) * rate / (2NK)   ->  c = S * rate / (bw * K + rate)
  bulk (AG || NN, RS || NT): the collective and the independent GEMM should end together:
                     bytes / (c * bw) = flops / ((S - c) * rate)

and then: never more movers than saturate the link, at least one per peer, at most S - 1 (every
mover runs beside at least one builder), rounded to whole movers per peer. Movers turn into
builders when their work is done (one-way switching), so a crew slightly too large costs little.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

import yaml

KINDS = ("ag_tn", "tn_rs", "ag_nn", "bulk_ag_nn", "bulk_rs_nt")


@dataclass(frozen=True)
class Hardware:
    sms: int
    link_GBps: float
    mover_GBps_per_sm: float
    builder_TFLOPs_per_sm: float

    @property
    def link_saturating_movers(self) -> int:
        return max(1, math.ceil(self.link_GBps / self.mover_GBps_per_sm))


@functools.lru_cache(maxsize=None)
def hardware_table() -> dict[str, Hardware]:
    text = resources.files("kosmos.configs").joinpath("hardware.yaml").read_text()
    return {name: Hardware(**vals) for name, vals in yaml.safe_load(text).items()}


def hardware(gpu_name: str | None = None, sms: int | None = None) -> Hardware:
    """The table entry whose name matches the GPU (else 'default'), with the actual SM count."""
    table = hardware_table()
    hw = next((v for k, v in table.items() if gpu_name and k in gpu_name), table["default"])
    return hw if sms is None else Hardware(sms, hw.link_GBps, hw.mover_GBps_per_sm, hw.builder_TFLOPs_per_sm)


@dataclass(frozen=True)
class Crew:
    movers: int           # CTAs that start as movers (or reducers)
    movers_per_peer: int
    builders: int         # CTAs that start as builders
    grid: int             # movers + builders = the SM cap


def _fit(world: int, want: float, hw: Hardware, grid: int) -> Crew:
    peers = world - 1
    if peers == 0:
        return Crew(0, 0, grid, grid)
    c = min(want, hw.link_saturating_movers)
    per_peer = max(1, math.ceil(c / peers))
    movers = min(per_peer * peers, grid - 1)
    per_peer = max(1, movers // peers)
    movers = min(per_peer * peers, grid - 1)
    return Crew(movers, per_peer, grid - movers, grid)


def crew_for(kind: str, world: int, m: int, n: int, k: int, hw: Hardware, sm_cap: int | None = None) -> Crew:
    """Movers and builders for one fused op. m = rows per rank; (n, k) as the kernel's GEMM names them.

    ag_tn / ag_nn: the gathered width is n (output columns), the contraction k.
    tn_rs: the partial output width is n, the local contraction k.
    bulk_ag_nn: moves m*k (the X shard) beside a dgrad of 2*(P*m)*n*k flops.
    bulk_rs_nt: moves the dX chunk (m x n per peer) beside a wgrad of 2*(P*m)*n*k flops.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if sm_cap is not None and sm_cap < 1:  # not `sm_cap or hw.sms`: 0 would mean the whole GPU
        raise ValueError(f"sm_cap must be at least 1 (None: every SM), got {sm_cap!r}")
    grid = hw.sms if sm_cap is None else min(sm_cap, hw.sms)
    if grid < 2 and world > 1:
        raise ValueError(f"a fused kernel needs at least 2 SMs (one mover beside one builder), cap {sm_cap}")
    rate = hw.builder_TFLOPs_per_sm * 1e12
    bw = hw.mover_GBps_per_sm * 1e9
    S = grid
    if kind in ("ag_tn", "ag_nn"):
        want = S * rate / (bw * n + rate)
    elif kind == "tn_rs":
        want = S * rate / (bw * k + rate)
    else:
        bytes_moved = (world - 1) * m * (k if kind == "bulk_ag_nn" else n) * 2
        flops = 2 * world * m * n * k
        want = S * bytes_moved * rate / (flops * bw + bytes_moved * rate)
    return _fit(world, want, hw, grid)
