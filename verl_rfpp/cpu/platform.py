"""A CPU platform for verl's platform registry (verl 0.9.1 registers only nvidia, npu and rocm
and falls back to nvidia/nccl). Selected with ``VERL_PLATFORM=cpu``; collectives use gloo. Registered
(``register_platform()``) by ``verl_rfpp.cpu.backend``; importing this module registers nothing."""

from __future__ import annotations

from contextlib import contextmanager
from types import ModuleType
from typing import Any, Optional

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


class _NoDevice(ModuleType):
    """Stands in for ``torch.cuda`` where verl calls device-module functions on the CPU."""

    def __init__(self) -> None:
        super().__init__("verl_rfpp_cpu_device")

    def __getattr__(self, name: str) -> Any:
        def nothing(*args: Any, **kwargs: Any) -> Any:
            if name in ("is_available",):
                return False
            if name in ("device_count", "current_device", "memory_allocated", "memory_reserved",
                        "max_memory_allocated", "max_memory_reserved"):
                return 0
            if name == "mem_get_info":
                return (0, 0)
            if name == "get_device_name":
                return "CPU"
            return None

        return nothing


NO_DEVICE = _NoDevice()


class PlatformCPU(PlatformBase):
    """verl on CPU processes only: gloo collectives, no device memory, no profiler."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return NO_DEVICE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: only VERL_PLATFORM=cpu selects it

    def current_device(self) -> str:
        # verl passes get_device_id() to .to()/device= everywhere; an int there means "cuda:N".
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        # verl's resource pools always ask Ray for GPUs; the launcher declares fake ones.
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def register_platform() -> None:
    """Put ``PlatformCPU`` in verl's platform registry as ``cpu`` (``verl_rfpp.cpu.backend`` does, at import)."""
    PlatformRegistry.register(platform="cpu")(PlatformCPU)
