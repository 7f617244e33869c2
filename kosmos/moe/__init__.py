"""The MoE layer (issue 12/13): configuration, the float64 reference, and (to come) the megakernels."""
from .config import MoEConfig, load_models

__all__ = ["MoEConfig", "load_models"]
