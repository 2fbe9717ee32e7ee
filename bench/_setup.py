"""Import-time setup shared by the GPU experiments. Import it before anything that imports triton.

* ``snippets/`` goes on ``sys.path``: the snippet modules import each other as
  top-level modules (``from rmsnorm_triton import ...``), as they do when run alone.
* Without a CUDA GPU, Triton kernels run under the interpreter; ``TRITON_INTERPRET``
  must be set before the first ``import triton`` (the ``--quick`` CPU smoke runs).
"""
from __future__ import annotations

import os
import sys

import torch

from bench.common import ROOT

SNIPPETS = ROOT / "snippets"
if str(SNIPPETS) not in sys.path:
    sys.path.insert(0, str(SNIPPETS))

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available() and "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"  # too late once triton is imported: then kernels need a GPU

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
