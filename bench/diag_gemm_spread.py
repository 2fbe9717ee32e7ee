"""How steady is the bf16 GEMM rate that the pages use as a ceiling? A diagnostic, not an experiment.

    python -m bench.diag_gemm_spread --out DIR      # on a GPU: DIR/gemm-spread.json, a table on stdout

Each shape is timed ``REPEATS`` times by ``fullsize_job.gemm_rate_tflops``, as the full-size job times its ceiling
(random bf16 operands, 3 warm-ups, the mean of 10 products between two CUDA events), so the spread is that of the
measured GEMM rate the roofline's roof and the full-size caption give. Shapes: the 8192^3 product those use, and the
lm_head GEMMs of the fused loss at the step's 16,384 tokens and Qwen3's vocabulary (the logits, d_hidden and
d_weight products of one 1,024-token chunk at H = 4096).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics

import torch

from bench.harness.fullsize_job import gemm_rate_tflops

REPEATS = 12
# (label, m, n, k): an (m x k) @ (k x n) product
SHAPES = [("8192^3", 8192, 8192, 8192),
          ("logits chunk 1024 x 151936, k=4096", 1024, 151936, 4096),
          ("d_hidden chunk 1024 x 4096, k=151936", 1024, 4096, 151936),
          ("d_weight 151936 x 4096, k=1024", 151936, 4096, 1024)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    rows = []
    for label, m, n, k in SHAPES:
        rates = [gemm_rate_tflops(m, n, k) for _ in range(REPEATS)]
        rows.append({"shape": label, "m": m, "n": n, "k": k, "tflops": rates,
                     "min": min(rates), "median": statistics.median(rates), "max": max(rates)})
        print(f"{label:40s} min {min(rates):6.1f}  median {statistics.median(rates):6.1f}  max {max(rates):6.1f}")
    record = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "repeats": REPEATS, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gemm-spread.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
