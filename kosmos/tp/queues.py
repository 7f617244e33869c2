"""Queue orders of the TP+SP fused kernels (paper Section 3.1.1, Tables A.2 and A.3).

A queue is an atomic head counter on the device plus an order: position -> work item. The
orders are computed here, on the host, once per plan, and uploaded as small int32 tables, so
the device only does `item = order[atomicAdd(head, 1)]` and every ablation is a different table.

Units. The gathered input has P chunks of `m` rows (chunk p = rank p's shard). A *tile row* is
256 gathered rows: the AG movers' unit and readiness grain. GEMM output tiles are tile_m x tile_n;
a tile row holds 256 / tile_m GEMM tile rows. For reduce-scatter, a *band* is a group of tile rows
within one rank's output chunk.

Rules the orders keep: a consumer claims in the order producers produce (so it rarely waits),
and an item only ever waits on items claimed earlier (so nothing deadlocks).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TILE_ROW = 256  # gathered rows per AG readiness unit (the paper's tile row)

AG_ORDERS = ("local_first", "chunk_major", "naive")
RS_ORDERS = ("band_major", "row_major")


@dataclass(frozen=True)
class GatherGrid:
    """How a gathered operand of P chunks of m rows is cut into movers' items and GEMM tiles."""

    world: int
    rank: int
    m: int        # rows per chunk (tokens per rank)
    tile_m: int   # GEMM tile rows
    tiles_n: int  # GEMM tile columns

    @property
    def rows_per_item(self) -> int:
        return TILE_ROW

    @property
    def items_per_chunk(self) -> int:
        return -(-self.m // TILE_ROW)

    @property
    def tiles_m_per_chunk(self) -> int:
        return -(-self.m // self.tile_m)

    def tile_rows_of_item(self, item: int) -> range:
        """GEMM tile rows (within a chunk) whose rows fall in gather item `item` of that chunk."""
        lo = item * TILE_ROW // self.tile_m
        hi = min(self.tiles_m_per_chunk, -(-min((item + 1) * TILE_ROW, self.m) // self.tile_m))
        return range(lo, hi)

    def item_of_tile_row(self, tm_in_chunk: int) -> int:
        """The gather item a GEMM tile row waits for (its last row decides; tile_m divides 256)."""
        last_row = min((tm_in_chunk + 1) * self.tile_m, self.m) - 1
        return last_row // TILE_ROW


GROUP_M = 8  # tile rows that share a column block of B in the builders' raster (L2 reuse)


def grouped(chunk: int, tile_rows: range, tiles_n: int, group: int = GROUP_M) -> list[tuple[int, int, int]]:
    """Tiles of some tile rows in grouped raster: `group` rows at a time, column by column."""
    out = []
    rows = list(tile_rows)
    for i in range(0, len(rows), group):
        out += [(chunk, tm, tn) for tn in range(tiles_n) for tm in rows[i:i + group]]
    return out


def peer_order(world: int, rank: int) -> list[int]:
    """Peers in destination-minor order: rank+1, rank+2, ... so consecutive items hit different peers."""
    return [(rank + q) % world for q in range(1, world)]


def ag_mover_order(g: GatherGrid) -> np.ndarray:
    """Movers' items as (peer, item) pairs: step t pulls item t from every peer in turn."""
    peers = peer_order(g.world, g.rank)
    return np.array([(p, t) for t in range(g.items_per_chunk) for p in peers], np.int32).reshape(-1, 2)


def ag_tile_order(g: GatherGrid, order: str = "local_first") -> np.ndarray:
    """GEMM tiles as (chunk, tile row in chunk, tile column), in builders' claim order.

    local_first (shipped): this rank's chunk first (no wait), then peer tiles in the order the
        movers gather them (item by item, peer-minor).
    chunk_major: local first, then each peer's chunk whole (mismatches the gather order).
    naive: chunk-major in rank order, no local-first.
    """
    if order not in AG_ORDERS:
        raise ValueError(f"AG queue order must be one of {AG_ORDERS}, got {order!r}")

    def chunk_tiles(c: int) -> list[tuple[int, int, int]]:
        return grouped(c, range(g.tiles_m_per_chunk), g.tiles_n)

    if order == "naive":
        out = [t for c in range(g.world) for t in chunk_tiles(c)]
    elif order == "chunk_major":
        out = chunk_tiles(g.rank) + [t for p in peer_order(g.world, g.rank) for t in chunk_tiles(p)]
    else:
        out = chunk_tiles(g.rank)
        for item in range(g.items_per_chunk):  # one gather step: this item of every peer, column-major
            rows = g.tile_rows_of_item(item)
            out += [(p, tm, tn) for tn in range(g.tiles_n) for p in peer_order(g.world, g.rank) for tm in rows]
    return np.array(out, np.int32).reshape(-1, 3)


@dataclass(frozen=True)
class BandGrid:
    """The output of a GEMM+RS: P chunks of m rows each, cut into bands of tile rows."""

    world: int
    rank: int
    m: int
    tile_m: int
    tiles_n: int
    band_tile_rows: int  # GEMM tile rows per band

    @property
    def tiles_m_per_chunk(self) -> int:
        return -(-self.m // self.tile_m)

    @property
    def bands(self) -> int:
        return -(-self.tiles_m_per_chunk // self.band_tile_rows)

    def band_rows(self, band: int) -> tuple[int, int]:
        """[first, last) output rows of `band` within a chunk."""
        lo = band * self.band_tile_rows * self.tile_m
        return lo, min(self.m, lo + self.band_tile_rows * self.tile_m)


def rs_tile_order(g: BandGrid, order: str = "band_major") -> np.ndarray:
    """Builders' tiles as (chunk, tile row in chunk, tile column), in production order.

    band_major (shipped): band b of every rank's chunk before band b+1, so every rank's reducers
        can start after the first step. Chunks in destination-minor order, this rank's own last.
    row_major: each chunk whole before the next.
    """
    if order not in RS_ORDERS:
        raise ValueError(f"RS production order must be one of {RS_ORDERS}, got {order!r}")
    chunks = peer_order(g.world, g.rank) + [g.rank]
    out: list[tuple[int, int, int]] = []
    if order == "band_major":
        for b in range(g.bands):  # one step: band b of every chunk, column-major so B is reused
            rows = range(b * g.band_tile_rows, min((b + 1) * g.band_tile_rows, g.tiles_m_per_chunk))
            out += [(c, tm, tn) for tn in range(g.tiles_n) for c in chunks for tm in rows]
    else:
        for c in chunks:
            out += grouped(c, range(g.tiles_m_per_chunk), g.tiles_n)
    return np.array(out, np.int32).reshape(-1, 3)


def rs_reducer_order(g: BandGrid, cols: int, col_split: int) -> np.ndarray:
    """Reducers' items over this rank's chunk as (band, column slice); band-major.

    col_split slices per band let several reducers share one band; cols is the output width.
    """
    if cols % col_split:
        raise ValueError(f"{cols} columns do not split into {col_split} slices")
    return np.array([(b, s) for b in range(g.bands) for s in range(col_split)], np.int32).reshape(-1, 2)


def tile_index(tiles_m: int, tiles_n: int, group_m: int, tm: int, tn: int) -> int:
    """The builder's queue index of tile (tm, tn): the inverse of tile_of() in gemm/config.h.

    tile_of walks groups of group_m tile rows, column by column within a group.
    """
    g, r = divmod(tm, group_m)
    first = g * group_m
    rows = min(group_m, tiles_m - first)
    return g * group_m * tiles_n + tn * rows + r


def tile_indices(tiles: np.ndarray, tiles_m_per_chunk: int, tiles_m: int, tiles_n: int, group_m: int) -> np.ndarray:
    """(chunk, tile row in chunk, tile column) rows -> int32 builder queue indices."""
    return np.array([tile_index(tiles_m, tiles_n, group_m, int(c) * tiles_m_per_chunk + int(tm), int(tn))
                     for c, tm, tn in tiles], np.int32)
