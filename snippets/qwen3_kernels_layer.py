# SPDX-License-Identifier: Apache-2.0
"""This site's RMSNorm as a layer for transformers' own kernel switch (use_kernels).

From transformers 5.25, ``from_pretrained`` kernelizes the model by default: every
module whose class carries a hub kernel name gets that kernel's forward, and
Qwen3RMSNorm's name, "RMSNorm", maps to the Hub's LigerRMSNorm on CUDA, for
training and inference. The same switch can select another layer instead: a
class with a forward and nothing else (no __init__, no state of its own), which
runs on HF's module and reads its ``weight`` and ``variance_epsilon``.

``TritonRMSNorm`` is that layer, calling this site's Triton RMSNorm.
``write_local_repository(path)`` writes a local `kernels` repository exposing it
(a metadata file and an import of this module: no copy of the code), for
``KernelConfig({"RMSNorm": f"{path}:TritonRMSNorm"}, use_local_kernel=True)``.
Apply it with ``model.set_use_kernels(True, kernel_config=...)`` after
``model.train()`` (the demo): KernelConfig maps only the mode the model is in
when it is applied, so applied in eval mode, ``train()`` falls back to HF's own
forward. (In transformers 5.25, ``from_pretrained(kernel_config=...)`` with a
local path fails with an AttributeError, and KernelConfig takes no CPU device.)
Only the norm fits this mechanism: the fused residual add, QK-norm + RoPE,
SwiGLU and the loss change their callers' forward, which apply_qwen3_fusion does.
"""
import json
import pathlib

# --8<-- [start:layer_imports]
import torch

from rmsnorm_triton import rms_norm
# --8<-- [end:layer_imports]


# --8<-- [start:layer]
class TritonRMSNorm(torch.nn.Module):
    """Qwen3RMSNorm.forward with this site's Triton kernels (HF's cast order)."""

    can_torch_compile = True  # plain Triton kernels in an autograd.Function
    has_backward = True

    def forward(self, hidden_states):
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)
# --8<-- [end:layer]


# --8<-- [start:repository]
def write_local_repository(path) -> pathlib.Path:
    """Write a local `kernels` repository whose layers are this module's; return it.

    One build variant, ``torch-universal`` (pure Python, any device Triton runs on):
    its metadata, and a package whose ``layers`` imports TritonRMSNorm from here.
    """
    variant = pathlib.Path(path) / "build" / "torch-universal"
    package = variant / "qwen3_fusion_layers"
    package.mkdir(parents=True, exist_ok=True)
    metadata = {"name": "qwen3-fusion-layers", "id": "qwen3_fusion_layers",
                "version": 1, "license": "Apache-2.0", "python-depends": [],
                "backend": {"type": "universal"}}
    (variant / "metadata.json").write_text(json.dumps(metadata, indent=1) + "\n")
    (package / "__init__.py").write_text("from . import layers  # noqa: F401\n")
    (package / "layers.py").write_text(
        f"from {TritonRMSNorm.__module__} import TritonRMSNorm  # noqa: F401\n")
    return pathlib.Path(path)
# --8<-- [end:repository]

