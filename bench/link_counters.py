"""The bytes a call moves over this rank's GPU links, measured: NVLink's data counters (`nvidia-smi
nvlink -gt d`: the payload KiB each link has sent and received since the driver loaded; protocol
overhead not counted), read before and after a few calls. The bench's computed bytes say what the
movers should move; these say what crossed the links (a scale read once a row instead of once a
block, say, shows here and nowhere else). None where nothing can be read: no NVLink (one GPU, a
PCIe card, ranks sharing a GPU), no nvidia-smi (AMD).
"""
from __future__ import annotations

import re
import shutil
import subprocess

_DATA = re.compile(r"Data (Tx|Rx):\s*(\d+)\s*KiB")


def link_kib(pci_bus_id: str) -> tuple[int, int] | None:
    """(sent, received) KiB summed over the GPU's NVLinks, or None (see the module)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "nvlink", "-gt", "d", "-i", pci_bus_id], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = _DATA.findall(out)
    if not found:
        return None
    return (sum(int(v) for d, v in found if d == "Tx"), sum(int(v) for d, v in found if d == "Rx"))


def measure_link_bytes(world, fn, calls: int = 5) -> dict | None:
    """Collective. Bytes per call of fn(i) over this rank's links, {"tx": .., "rx": ..} as the mean
    over ranks, or None unless every rank could read its counters. The counters count everything
    on the links, so nothing else may run meanwhile (the ranks run only fn between two barriers);
    their KiB grain is well under a call's megabytes."""
    import cupy

    if world.size == 1 or world.oversubscribed:
        return None
    bus = cupy.cuda.Device().pci_bus_id
    cupy.cuda.Device().synchronize()
    world.barrier()
    before = link_kib(bus)
    world.barrier()  # every rank has read its counters before any call moves a byte
    for i in range(calls):
        fn(i)
    cupy.cuda.Device().synchronize()
    world.barrier()
    after = link_kib(bus)
    mine = None if before is None or after is None else ((after[0] - before[0]) * 1024 / calls,
                                                         (after[1] - before[1]) * 1024 / calls)
    every = world.comm.allgather(mine)
    if any(v is None for v in every):
        return None
    return {"tx": sum(v[0] for v in every) / len(every), "rx": sum(v[1] for v in every) / len(every)}
