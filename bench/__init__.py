"""The bench: experiments measure on a GPU into docs/data/, reports render docs/generated/ from it.

* ``bench/exp_<name>.py`` measure (``python -m bench.run_all``), with what they share in bench/harness/;
* bench/report/ turns the JSON into tables, sentences and plots (``python -m bench.render``);
* bench/store.py is where the two meet: the records on disk.

Importing ``bench`` sets up the imports of every module in it, once:

* ``snippets/`` goes on ``sys.path``, so the experiments import the tested snippet
  modules at their top (``import rmsnorm_triton``), as the snippets import each other;
* without a CUDA GPU, Triton kernels run under its interpreter (``--quick`` CPU smoke
  runs). ``TRITON_INTERPRET`` only counts before triton's first import, which is why it
  is chosen here; tests/conftest.py makes the same choice for the test suite.
"""
import os
import pathlib
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "snippets"))  # the one place bench/ reaches snippets/

if "TRITON_INTERPRET" not in os.environ and "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
