"""Where an experiment runs (a CUDA GPU, or ``--quick`` small sizes anywhere) and how its inputs rotate past L2."""
from __future__ import annotations

import os
from typing import NamedTuple

import torch


def gpu_available() -> bool:
    """True when kernels run compiled on a CUDA GPU: False on a CPU and under TRITON_INTERPRET=1."""
    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"


class Mode(NamedTuple):
    quick: bool  # --quick: the smoke-test sizes
    on_gpu: bool
    setup: object  # quick_setup or gpu_setup
    device: str
    dtype: torch.dtype  # bf16 on the GPU, fp32 on the CPU; experiments with a fixed dtype ignore it


def gpu_or_quick(args, name: str, quick_setup, gpu_setup) -> Mode:
    """Where and at which sizes experiment ``name`` runs: the GPU sizes need a GPU, ``--quick``
    (``args.quick``) runs the small ones on whatever is there. Every experiment decides it here."""
    quick = bool(getattr(args, "quick", False))
    on_gpu = gpu_available()
    if not (quick or on_gpu):
        raise RuntimeError(f"{name} needs a CUDA GPU; use --quick for the CPU smoke test")
    device, dtype = ("cuda", torch.bfloat16) if on_gpu else ("cpu", torch.float32)
    return Mode(quick, on_gpu, quick_setup if quick else gpu_setup, device, dtype)


# Stand-in L2 size without a GPU (--quick on CPU): small, so the rotating-input rule still
# yields its minimum of input sets; no CPU number is ever published.
CPU_L2_BYTES = 4 * 2**20


def l2_cache_bytes(device) -> int:
    """The GPU's L2 size as the driver reports it; CPU_L2_BYTES on a CPU."""
    if torch.device(device).type != "cuda":
        return CPU_L2_BYTES
    return torch.cuda.get_device_properties(device).L2_cache_size


def rotating_input_sets(bytes_per_call: int, device, low: int = 2, high: int = 8) -> int:
    """How many input sets a timed cycle rotates through so that it touches >= 4x L2
    (no call finds its inputs left in L2 by the previous one); at least ``low``, at most ``high``."""
    return min(high, max(low, -(-4 * l2_cache_bytes(device) // bytes_per_call)))
