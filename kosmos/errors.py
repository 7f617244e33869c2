"""The exceptions kosmos raises."""
from __future__ import annotations


class KosmosError(RuntimeError):
    """Base class of every error kosmos raises on purpose."""


class KosmosTimeoutError(KosmosError):
    """A device-side wait exceeded its budget: a peer never produced what this rank waited for.

    ``kernel``, ``rank`` and ``site`` name the first wait that gave up.
    """

    def __init__(self, kernel: str, rank: int, site: str, budget_s: float):
        self.kernel, self.rank, self.site, self.budget_s = kernel, rank, site, budget_s
        super().__init__(
            f"kernel {kernel} on rank {rank} gave up waiting at {site} after {budget_s:g} s; "
            "a peer rank probably failed, was not launched, or called a different op. "
            "The world's symmetric state is now inconsistent: finalize it and start again."
        )


class KosmosCompileError(KosmosError):
    """A kernel in hipsrc/ failed to compile."""


class KosmosResourceError(KosmosError):
    """A persistent grid cannot be fully resident, or the symmetric heap is full."""
