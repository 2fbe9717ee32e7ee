"""bench/harness/training.py: the shared config builder, the norm-module factory and the child-process runner."""
import sys

import pytest
import torch

from bench.harness import training


def test_norm_class_wraps_a_function_with_qwen3rmsnorm_s_constructor():
    cls = training.norm_class("ScaledRMSNorm", lambda x, w, eps: x * w + eps)
    module = cls(4, eps=0.5)
    assert type(module).__name__ == "ScaledRMSNorm" and module.variance_epsilon == 0.5
    assert torch.equal(module.weight, torch.ones(4)) and isinstance(module.weight, torch.nn.Parameter)
    assert torch.equal(module(torch.zeros(2, 4)), torch.full((2, 4), 0.5))
    with pytest.raises(ValueError, match="RMSNorm"):
        training.norm_class("Scaled", lambda x, w, eps: x)


def test_build_config():
    tiny = training.build_config({"size": "tiny", "num_hidden_layers": 2, "vocab_size": 512})
    assert tiny.num_hidden_layers == 2 and tiny.vocab_size == 512 and tiny.use_cache is False
    big = training.build_config({"size": "8B", "num_hidden_layers": 36})
    assert (big.hidden_size, big.num_hidden_layers, big._attn_implementation) == (4096, 36, "sdpa")


def test_a_child_that_writes_nothing_is_an_error_record(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/true")  # exits at once, writes no record
    record = training.run_contender_process("step", "eager", "HF eager", tmp_path / "eager.json", timeout=30)
    assert record["status"] == "error" and "wrote no result" in record["reason"] and record["wall_s"] >= 0
    monkeypatch.setattr(sys, "executable", "/bin/sleep")  # "sleep -m ..." fails at once too; a timeout instead:
    record = training.run_contender_process("step", "eager", "HF eager", tmp_path / "x.json", timeout=0.001)
    assert record["status"] == "error"


def test_child_records_say_ok_skipped_or_error(tmp_path):
    import json

    logged = []
    out = tmp_path / "r.json"

    def skipped():
        raise training.ContenderSkipped("not here")

    def failing():
        raise RuntimeError("boom")

    for measure, status in ((lambda: {"median_ms": 1.0}, "ok"), (skipped, "skipped"), (failing, "error")):
        training.write_child_record("eager", "HF eager", measure, out, logged.append)
        record = json.loads(out.read_text())
        assert record["status"] == status and record["contender"] == "eager" and record["label"] == "HF eager"
    assert "boom" in record["reason"] and "RuntimeError" in record["traceback"]
    assert logged == ["skipped: not here", "FAILED: RuntimeError('boom')"]
