"""bench/exp_host.py: host time per call, the quick run on CPU and the timer's arithmetic."""
import time

from bench import exp_host
from bench.harness import record


def test_host_and_wall_time_of_a_known_cost():
    synced = []
    out = exp_host.host_and_wall_us(lambda: time.sleep(0.002), calls=5, repeats=3,
                                    sync=lambda: synced.append(time.sleep(0.01)))
    assert 2000 <= out["host_us"] < 3500 and out["wall_us"] >= out["host_us"] + 1500  # sync: 10 ms over 5 calls
    assert out["host_range_us"][0] <= out["host_us"] <= out["host_range_us"][1]
    assert len(synced) == 1 + 3  # after warm-up, after each loop


def test_quick_run(tmp_path):
    import argparse

    payload = exp_host.run(argparse.Namespace(quick=True, out=tmp_path))
    (entry,) = payload["results"]["shapes"]
    assert entry["label"] == "k_norm" and {"hf", "torch_rms_norm", "triton"} <= set(entry["fwd_bwd"])
    for timing in [*entry["fwd_bwd"].values(), *entry["ours"].values()]:
        assert 0 < timing["host_us"] <= timing["wall_us"]
    assert set(entry["ours"]) - {"planned_launch"} == {"forward", "forward_usual", "backward_direct", "forward_arguments",
                                                   "one_launch", "autograd_mul"}
    assert record.save  # the record goes through run_all like every experiment
