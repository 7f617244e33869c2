"""MoE layer configuration: the routing rule and the expert shapes, checked once when built."""
from __future__ import annotations

import functools
import math
import numbers
import os
from dataclasses import dataclass, fields

SCORES = ("softmax", "sigmoid")


@dataclass(frozen=True)
class MoEConfig:
    experts: int                   # routed experts E
    top_k: int
    hidden: int                    # H
    intermediate: int              # I per routed expert (SwiGLU: w1 is [2I, H], w2 is [H, I])
    score: str = "softmax"         # softmax | sigmoid
    expert_bias: bool = False      # a per-expert bias added to the scores for the choice only
    groups: int = 0                # group-limited routing: experts in `groups` equal groups (0 = off)
    topk_groups: int = 0           # ... of which the best `topk_groups` (by the sum of their two best) compete
    normalize: bool = True         # the k weights divided by their sum
    scaling: float = 1.0           # routed weights multiplied by it
    shared: int = 0                # shared experts (run as one SwiGLU MLP of width shared_width)
    shared_intermediate: int = 0   # each one's width (0 = intermediate)
    aux_loss_coef: float = 0.0     # load-balancing loss weight (0 = not computed)
    z_loss_coef: float = 0.0       # router z-loss weight (0 = not computed)
    capacity_factor: float = 0.0   # > 0: token dropping (capacity_of); 0 = dropless
    name: str = ""

    def __post_init__(self) -> None:
        def bad(msg: str) -> ValueError:
            return ValueError(f"MoEConfig{' ' + self.name if self.name else ''}: {msg}")

        for f in ("experts", "top_k", "hidden", "intermediate"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise bad(f"{f} must be a positive integer, got {v!r}")
        if self.top_k > self.experts:
            raise bad(f"top_k = {self.top_k} exceeds the {self.experts} experts")
        if self.score not in SCORES:
            raise bad(f"score must be one of {SCORES}, got {self.score!r}")
        if self.groups:
            if self.experts % self.groups:
                raise bad(f"{self.experts} experts do not split into {self.groups} equal groups")
            if not 1 <= self.topk_groups <= self.groups:
                raise bad(f"topk_groups must be in 1..{self.groups}, got {self.topk_groups}")
            if self.top_k > self.topk_groups * (self.experts // self.groups):
                raise bad(f"top_k = {self.top_k} exceeds the experts of {self.topk_groups} groups")
            if self.experts // self.groups < 2 and self.topk_groups < self.groups:
                raise bad("group scores sum each group's two best experts: groups need at least 2 experts")
        elif self.topk_groups:
            raise bad("topk_groups needs groups")
        for f in ("hidden", "intermediate"):
            if getattr(self, f) % 64:
                raise bad(f"{f} = {getattr(self, f)} must be a multiple of 64 (the GEMM builder's tiles)")
        cf = self.capacity_factor
        if isinstance(cf, bool) or not isinstance(cf, numbers.Real) or not 0 <= cf < 2**20:
            raise bad(f"capacity_factor must be a number >= 0 (0: dropless), got {self.capacity_factor!r}")
        if self.shared < 0 or self.shared_intermediate < 0:
            raise bad("shared and shared_intermediate must be >= 0")
        if self.shared and (self.shared_intermediate or self.intermediate) % 64:
            raise bad(f"shared_intermediate = {self.shared_intermediate} must be a multiple of 64 (the GEMM builder's "
                      f"tiles)")

    @property
    def shared_width(self) -> int:
        """The shared MLP's width: the S shared experts are one SwiGLU MLP of width S x their own
        (as DeepSeek's modelling code builds them; the same function, one GEMM pair), weights
        shared_w1 [2 shared_width, H] (gate rows, then up rows) and shared_w2 [H, shared_width];
        0 without shared experts."""
        return self.shared * (self.shared_intermediate or self.intermediate)

    def capacity_of(self, tokens: int) -> int | None:
        """Token dropping (capacity_factor > 0): each rank sends each expert at most
        ceil(capacity_factor * tokens * top_k / experts) of its `tokens` tokens' pairs, those with the
        highest combine weights (the lower pair index t * k + j first among equal weights); the
        others are dropped: they add nothing to the output, and their weights still normalise the
        kept ones'. The aux loss counts the choices before dropping. None: dropless."""
        if not self.capacity_factor:
            return None
        return math.ceil(self.capacity_factor * tokens * self.top_k / self.experts)

    def local_experts(self, world_size: int) -> int:
        """Experts per rank under expert parallelism over `world_size` ranks."""
        if self.experts % world_size:
            raise ValueError(f"{self.experts} experts do not divide over {world_size} ranks")
        return self.experts // world_size


@functools.lru_cache(maxsize=None)
def load_models(path: str | None = None) -> dict[str, MoEConfig]:
    """The named model configurations of kosmos/configs/moe_models.yaml."""
    import yaml

    path = path or os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "moe_models.yaml")
    with open(path) as f:
        doc = yaml.safe_load(f)
    known = {f.name for f in fields(MoEConfig)}
    out = {}
    for name, entry in doc.items():
        extra = set(entry) - known
        if extra:
            raise ValueError(f"{path}: {name} has unknown keys {sorted(extra)}")
        out[name] = MoEConfig(name=name, **entry)
    return out
