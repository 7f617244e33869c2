"""Kernel runtime: source loading, compile options, persistent launches, device status."""
from .launch import PersistentLaunch, max_resident_blocks, sm_count
from .module import current_target, load_module
from .source import compile_options, hipsrc_dir, kernel_files, nvidia_arch, tree_digest
from .status import DeviceStatus, kernel_and_site_names, kernel_id

__all__ = [
    "PersistentLaunch", "max_resident_blocks", "sm_count", "current_target", "load_module",
    "compile_options", "hipsrc_dir", "kernel_files", "nvidia_arch", "tree_digest",
    "DeviceStatus", "kernel_and_site_names", "kernel_id",
]
