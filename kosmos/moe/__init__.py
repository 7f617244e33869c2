"""The MoE layer (issues 12/13): configuration, the float64 reference, device routing, the layer."""
from .combine import MoECombine
from .config import MoEConfig, load_models
from .dispatch import MoEDispatch
from .backward import BackwardGrads, MoEBackward, RouterBackward
from .forward import MoEForward, SharedMLP
from .layer import MoEContext, MoEGradients, MoELayer, MoEParams, expert_tensors
from .route import DeviceRouting, route

__all__ = ["BackwardGrads", "DeviceRouting", "MoEBackward", "MoECombine", "MoEConfig", "MoEContext", "MoEDispatch",
           "MoEForward", "MoEGradients", "MoELayer", "MoEParams", "RouterBackward", "SharedMLP", "expert_tensors",
           "load_models", "route"]
