"""bench/exp_tuning.py, the tuning sweep of 篇2 §七, as a --quick CPU run.

The sweep passes each candidate to the shipped wrappers as ``config=``: it
patches nothing in rmsnorm_triton, and its candidates are candidate_configs'.
"""
import argparse

import rmsnorm_triton
from bench import exp_tuning
from unmeasured import coverage_paused


def test_quick_sweep_passes_configs_and_patches_nothing(monkeypatch):
    calls = {"forward": [], "backward": []}

    def spy(direction, wrapper):
        def call(*args, config=None, **kwargs):
            calls[direction].append(config)
            return wrapper(*args, config=config, **kwargs)
        return call

    # exp_tuning calls the wrappers by the names it imported; spy there
    monkeypatch.setattr(exp_tuning, "rms_norm_forward", spy("forward", rmsnorm_triton.rms_norm_forward))
    monkeypatch.setattr(exp_tuning, "rms_norm_backward", spy("backward", rmsnorm_triton.rms_norm_backward))
    before = dict(vars(rmsnorm_triton))
    with coverage_paused():  # the kernels it times are measured by their own tests
        data = exp_tuning.run(argparse.Namespace(quick=True))
    after = vars(rmsnorm_triton)  # (the interpreter may add triton names to a kernel's module)
    assert [name for name, value in before.items() if after.get(name) is not value] == []

    # each timing calls its function several times (warm-up, samples): compare the runs of calls
    calls = {d: [c for i, c in enumerate(cs) if i == 0 or c != cs[i - 1]] for d, cs in calls.items()}
    expected = {"forward": [], "backward": []}
    for (_, rows, width), entry in zip(exp_tuning.QUICK_WIDTHS, data["results"]):
        fwd = [c for c in rmsnorm_triton.candidate_configs(width, "forward")
               if c.block_rows <= 2 and c.num_warps == 4]
        bwd = [c for c in rmsnorm_triton.candidate_configs(width, "backward")
               if c.block_rows <= 2 and c.num_warps == 4 and c.programs_per_sm == 2]
        expected["forward"] += [None, *fwd]  # the saved rstd and the heuristic's time, the sweep
        expected["backward"] += [None, *bwd]
        assert [(e["block_rows"], e["num_warps"]) for e in entry["fwd"]] == [(c.block_rows, c.num_warps) for c in fwd]
        assert [(e["block_rows"], e["num_warps"], e["programs_per_sm"]) for e in entry["bwd"]] == [
            (c.block_rows, c.num_warps, c.programs_per_sm) for c in bwd]
        shipped = rmsnorm_triton.forward_config(width), rmsnorm_triton.backward_config(width)
        assert entry["heuristic"] == {"block_rows": shipped[0].block_rows, "block_cols": shipped[0].block_cols,
                                      "num_warps": shipped[0].num_warps}
        assert entry["heuristic_bwd"] == {"block_rows": shipped[1].block_rows, "block_cols": shipped[1].block_cols,
                                          "num_warps": shipped[1].num_warps,
                                          "programs_per_sm": shipped[1].programs_per_sm}
        assert entry["autotune_fwd_pick"] is None  # the autotuner times on a GPU
    assert calls == expected
