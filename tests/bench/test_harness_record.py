"""bench/harness/record.py's environment block names the host CPU: its model and how many CPUs there are,
since the launch-bound figures (few tokens per step, CUDA graphs) depend on the host as much as on the GPU."""
from __future__ import annotations

import os

from bench.harness import record

X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""
ARM = """processor\t: 0
BogoMIPS\t: 2000.00
CPU implementer\t: 0x41

Model\t\t: NVIDIA Grace  CPU
"""


def test_cpu_model_reads_proc_cpuinfo(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(X86, encoding="utf-8")
    assert record.cpu_model(path) == "Intel(R) Xeon(R) Platinum 8480+"
    path.write_text(ARM, encoding="utf-8")
    assert record.cpu_model(path) == "NVIDIA Grace CPU"  # runs of spaces collapse


def test_cpu_model_falls_back_to_platform(tmp_path, monkeypatch):
    monkeypatch.setattr(record.platform, "processor", lambda: "x86_64")
    assert record.cpu_model(tmp_path / "no-such-file") == "x86_64"
    (tmp_path / "empty").write_text("processor\t: 0\n", encoding="utf-8")
    monkeypatch.setattr(record.platform, "processor", lambda: "")
    assert record.cpu_model(tmp_path / "empty") is None


def test_every_environment_records_the_cpu():
    env = record.environment()
    assert {"cpu", "cpu_count", "cpu_usable"} <= set(env)
    assert env["cpu_count"] == os.cpu_count()
    assert 1 <= env["cpu_usable"] <= env["cpu_count"]
    if record.CPUINFO.exists():  # Linux, where every experiment runs
        assert env["cpu"]


def test_saved_records_carry_the_cpu(tmp_path):
    saved = record.save("unit", {"config": {}, "results": {}}, out_dir=tmp_path)
    import json

    env = json.loads(saved.read_text(encoding="utf-8"))["environment"]
    assert env["cpu"] == record.cpu_model() and env["cpu_count"] == os.cpu_count()
