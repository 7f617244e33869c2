"""The exceptions kosmos raises."""
from __future__ import annotations


class KosmosError(RuntimeError):
    """Base class of every error kosmos raises on purpose."""


class KosmosTimeoutError(KosmosError):
    """A device-side wait gave up: a peer never produced what this rank waited for.

    ``kernel``, ``rank`` and ``site`` name the first wait that gave up on this rank; ``failed_peer``
    is the rank whose own failure stopped it (None: this rank's wait ran out its budget itself).
    """

    def __init__(self, kernel: str, rank: int, site: str, budget_s: float, failed_peer: int | None = None):
        self.kernel, self.rank, self.site, self.budget_s = kernel, rank, site, budget_s
        self.failed_peer = failed_peer
        if failed_peer is None:
            what = (f"kernel {kernel} on rank {rank} gave up waiting at {site} after {budget_s:g} s: a peer is "
                    "absent (never called this op, or raised before launching it), slower than the budget "
                    "(raise it: World(wait_budget_s=...) or KOSMOS_WAIT_BUDGET_S), or called a different op")
        else:
            what = (f"kernel {kernel} on rank {rank} stopped waiting at {site} because rank {failed_peer} "
                    "failed first (its own error names the cause)")
        super().__init__(
            f"{what}. Every rank learns of it; plans built before it refuse to run. "
            "The world's symmetric state is now inconsistent: call World.clear_failure() on every rank "
            "and build new plans, or finalize it and start again."
        )


class KosmosCompileError(KosmosError):
    """A kernel in hipsrc/ failed to compile."""


class KosmosResourceError(KosmosError):
    """A persistent grid cannot be fully resident, or the symmetric heap is full."""
