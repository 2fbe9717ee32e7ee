""".ci/unpack-wheels.py, the way a GPU machine without a package index gets the test pins:
split wheels are joined, every wheel is extracted, and a wheel's programs land in SITE/bin,
executable (actionlint and zizmor are such programs; test_workflows needs them on PATH)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import zipfile

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / ".ci" / "unpack-wheels.py"


def _wheel(path: pathlib.Path, files: dict[str, bytes], executable=()) -> pathlib.Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, body in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o755 if name in executable else 0o644) << 16
            archive.writestr(info, body)
    return path


def _unpack(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=True)


def test_wheels_are_joined_extracted_and_their_programs_made_runnable(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels / "tool-1.0-py3-none-any.whl", {
        "tool/__init__.py": b"VALUE = 7\n",
        "tool-1.0.data/scripts/native-tool": b"#!/bin/sh\necho native ok\n",
        "tool-1.0.data/scripts/py-tool": b"#!python\nprint('python ok')\n",
    })
    big = _wheel(tmp_path / "big-2.0-py3-none-any.whl", {"big/__init__.py": b"SIZE = 3\n" + b"#" * 5000})
    data = big.read_bytes()
    (wheels / (big.name + ".part.aa")).write_bytes(data[:2000])
    (wheels / (big.name + ".part.ab")).write_bytes(data[2000:])

    site = tmp_path / "site"
    _unpack(str(site), str(wheels))

    env = {**os.environ, "PYTHONPATH": _unpack("--path", str(site)).stdout.strip()}
    imported = subprocess.run([sys.executable, "-c", "import tool, big; print(tool.VALUE, big.SIZE)"],
                              capture_output=True, text=True, env=env, check=True)
    assert imported.stdout.split() == ["7", "3"]

    env["PATH"] = f"{site / 'bin'}{os.pathsep}{env['PATH']}"
    for program, expected in (("native-tool", "native ok"), ("py-tool", "python ok")):
        assert os.access(site / "bin" / program, os.X_OK)
        ran = subprocess.run([program], capture_output=True, text=True, env=env, check=True)
        assert ran.stdout.strip() == expected


def test_files_a_wheel_marks_executable_stay_executable(tmp_path):
    """triton's wheel records ptxas as 0o755; zipfile's extractall would drop the bit, and
    every launch would then fail with PermissionError. Other files stay plain."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels / "compiler-1.0-py3-none-any.whl", {
        "compiler/__init__.py": b"",
        "compiler/bin/ptxas": b"#!/bin/sh\necho ptxas ok\n",
    }, executable={"compiler/bin/ptxas"})
    site = tmp_path / "site"
    _unpack(str(site), str(wheels))
    ptxas = site / "compiler" / "bin" / "ptxas"
    assert os.access(ptxas, os.X_OK)
    assert subprocess.run([str(ptxas)], capture_output=True, text=True, check=True).stdout == "ptxas ok\n"
    assert not os.access(site / "compiler" / "__init__.py", os.X_OK)
