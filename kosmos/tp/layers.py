"""Column- and row-parallel linear layers (TP+SP) on the fused ops, forward and backward.

A training loop without PyTorch holds CuPy arrays and calls `forward` then `backward`; the
layers pick the fused kernel for each step, so the loop never names them:

    layer                      forward                    backward
    ColumnParallelLinear       AG+TN                      bulk AG || NN (dgrad), bulk RS || NT (wgrad)
    RowParallelLinear          TN+RS                      AG+NN (dgrad, keeps dY gathered), NT GEMM (wgrad)

Shapes, for P ranks and m tokens per rank (sequence parallel: activations between blocks are
sharded by token):
    ColumnParallelLinear(in K, out N): x[m, K] -> y[P*m, N/P]; weight shard [N/P, K]
    RowParallelLinear(in K, out N):    x[P*m, K/P] -> y[m, N]; weight shard [N, K/P]

precision="mxfp8" (inputs, weights and gradients stay bf16 at the layer's boundary): every GEMM
operand is quantized to MXFP8 from its bf16 source along that GEMM's contracting axis, both
orientations of a tensor from the same source (kosmos.mx.quantize_both), as the MXFP8 training
recipe asks; the all-gathers move MXFP8 (33/64 of the bf16 bytes), the reduce-scatters bf16:
    Column  fwd  AG+TN(x rows, W rows)    bwd  bulk AG(x cols) || NN(dY rows, W cols), RS || NT(dY cols, X_full)
    Row     fwd  TN+RS(x rows, W rows)    bwd  AG+NN(+NT)(dY rows and dY cols gathered, W cols, x cols)
"""
from __future__ import annotations

from typing import Any

from .. import gemm, mx
from ..arrays import as_cupy
from ..dtypes import bfloat16, random_bf16
from ..world import World
from .ops import (PRECISIONS, AllGatherMatmul, AllGatherMatmulNNNT, BulkAllGatherMatmul, BulkReduceScatterMatmul,
                  MatmulReduceScatter)


def _shard(total: int, world: World, what: str) -> int:
    if total % world.size:
        raise ValueError(f"{what} = {total} does not divide among {world.size} ranks")
    return total // world.size


def _weight_shard(world: World, shape: tuple[int, int], in_features: int, weight: Any, seed: int) -> Any:
    """This rank's weight shard: `weight` checked to be `shape`, or (None) random bf16 of that shape,
    scale in_features^-1/2, seeded by seed and the rank."""
    if weight is None:
        weight = random_bf16(shape, seed * 1000 + world.rank, in_features ** -0.5)
    weight = as_cupy(weight, "weight")
    if tuple(weight.shape) != shape:
        raise ValueError(f"weight shard must be {shape}, got {tuple(weight.shape)}")
    return weight


class _Linear:
    """Inputs, gradients and weights may be any GPU array (CuPy, CAI or DLPack); results are CuPy arrays.
    The layer keeps a plan per op and token count; close() (collective) frees them."""

    def __init__(self, world: World, weight: Any, precision: str, **op_options: Any):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.world = world
        self.weight = weight
        self.precision = precision
        self.op_options = op_options
        self._plans: dict[tuple, Any] = {}
        self._saved: Any = None

    def _plan(self, cls: type, m: int, n: int, k: int, **kw: Any) -> Any:
        self.world.check()  # after a failure, stale plans are the same on every rank only once clear_failure ran
        # A device timeout invalidates every plan built before it: free those (collectively, same order
        # everywhere) and build anew, as kosmos.collectives does for its cached plans.
        for stale in [key for key, plan in self._plans.items() if plan.stale]:
            self._plans.pop(stale).close()
        key = (cls, m, n, k, tuple(sorted(kw.items())))
        if key not in self._plans:
            self._plans[key] = cls(self.world, m, n, k, **self.op_options, **kw)
        return self._plans[key]

    def close(self) -> None:
        """Collective: free the layer's plans (one per op and token count it has run); a later call
        builds new ones."""
        while self._plans:
            self._plans.popitem()[1].close()  # popitem: last built first, the same order on every rank

    @property
    def _mx(self) -> bool:
        return self.precision == "mxfp8"

    def _gather_precision(self) -> dict[str, str]:
        return {"precision": "mxfp8"} if self._mx else {}


class ColumnParallelLinear(_Linear):
    """y = allgather(x) @ W^T with W split by output rows. weight: this rank's [N/P, K] shard."""

    def __init__(self, world: World, in_features: int, out_features: int, weight: Any = None, seed: int = 0,
                 precision: str = "bf16", **op_options: Any):
        n_local = _shard(out_features, world, "out_features")
        weight = _weight_shard(world, (n_local, in_features), in_features, weight, seed)
        super().__init__(world, weight, precision, **op_options)
        self.in_features, self.out_features, self.n_local = in_features, out_features, n_local

    def forward(self, x: Any) -> Any:
        """x: this rank's tokens [m, K] -> y: every token's local output columns [P*m, N/P]."""
        x = as_cupy(x, "x")
        m = x.shape[0]
        op = self._plan(AllGatherMatmul, m, self.n_local, self.in_features, layout="TN", **self._gather_precision())
        if not self._mx:
            self._saved = x
            return op(x, self.weight)
        (x_rows, x_cols), (w_rows, w_cols) = mx.quantize_both(x), mx.quantize_both(self.weight)
        self._saved = (x_cols, w_cols)  # the backward's: X gathered for the wgrad, W^T for the dgrad
        return op(x_rows, w_rows)

    def backward(self, dy: Any) -> tuple[Any, Any]:
        """dy [P*m, N/P] -> (dx [m, K] for this rank's tokens, dW [N/P, K])."""
        x = self._saved
        if x is None:
            raise RuntimeError("backward before forward")
        dy = as_cupy(dy, "dy")
        k, n = self.in_features, self.n_local
        gather = self._plan(BulkAllGatherMatmul, x[0].shape[0] if self._mx else x.shape[0], n, k,
                            **self._gather_precision())
        if self._mx:
            (x_cols, w_cols), (dy_rows, dy_cols) = x, mx.quantize_both(dy)
            x_full, dx_partial = gather(x_cols, dy_rows, w_cols)
            dy = dy_cols
        else:
            x_full, dx_partial = gather(x, dy, self.weight)
        dx, dw = self._plan(BulkReduceScatterMatmul, gather.m, n, k)(dx_partial, dy, x_full)
        self._saved = None
        return dx, dw


class RowParallelLinear(_Linear):
    """y = reduce_scatter(x @ W^T) with W split by input columns. weight: this rank's [N, K/P] shard."""

    def __init__(self, world: World, in_features: int, out_features: int, weight: Any = None, seed: int = 0,
                 precision: str = "bf16", **op_options: Any):
        k_local = _shard(in_features, world, "in_features")
        weight = _weight_shard(world, (out_features, k_local), in_features, weight, seed)
        super().__init__(world, weight, precision, **op_options)
        self.in_features, self.out_features, self.k_local = in_features, out_features, k_local

    def forward(self, x: Any) -> Any:
        """x: every token's local input columns [P*m, K/P] -> y: this rank's tokens [m, N]."""
        x = as_cupy(x, "x")
        m = _shard(x.shape[0], self.world, "tokens")
        op = self._plan(MatmulReduceScatter, m, self.out_features, self.k_local)
        if not self._mx:
            self._saved = x
            return op(x, self.weight)
        (x_rows, x_cols), (w_rows, w_cols) = mx.quantize_both(x), mx.quantize_both(self.weight)
        self._saved = (x_cols, w_cols)
        return op(x_rows, w_rows)

    def backward(self, dy: Any) -> tuple[Any, Any]:
        """dy [m, N] (this rank's tokens) -> (dx [P*m, K/P], dW [N, K/P])."""
        x = self._saved
        if x is None:
            raise RuntimeError("backward before forward")
        dy = as_cupy(dy, "dy")
        m = dy.shape[0]
        import cupy

        if self._mx:  # one launch: both copies of dY gathered, the dgrad and the wgrad (over tokens)
            (x_cols, w_cols), (dy_rows, dy_cols) = x, mx.quantize_both(dy)
            dx, dw = self._plan(AllGatherMatmulNNNT, m, self.out_features, self.k_local)(dy_rows, dy_cols, w_cols, x_cols)
        else:
            op = self._plan(AllGatherMatmul, m, self.out_features, self.k_local, layout="NN")
            dy_full = cupy.empty(op.gathered_shape, bfloat16)
            dx = op(dy, self.weight, gathered=dy_full)
            dw = gemm.matmul(dy_full, x, "NT")  # dW[N, K/P] = dY_full^T @ x
        self._saved = None
        return dx, dw


__all__ = ["ColumnParallelLinear", "RowParallelLinear", "bfloat16"]
