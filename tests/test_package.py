"""The wheel the site serves (docs/hooks/package_wheel.py): what it holds, and that it works where a
reader installs it. The install test makes a fresh virtual environment, installs the wheel there with
pip (no index, no snippets/ on any path; torch, triton and transformers come from this test
environment through a .pth file), and runs snippets/package_use.py, the file the pages show for it."""
import importlib.util
import io
import os
import pathlib
import subprocess
import sys
import sysconfig
import venv
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SNIPPETS = ROOT / "snippets"
_spec = importlib.util.spec_from_file_location("package_wheel", ROOT / "docs" / "hooks" / "package_wheel.py")
package_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(package_wheel)

# What apply_qwen3_fusion and its kernels layer import, written out (a file dropped from the
# closure, or one added to it, fails here).
EXPECTED = ["linear_cross_entropy", "qk_norm_rope", "qwen3_configs", "qwen3_fused_add_patch",
            "qwen3_fusion_patch", "qwen3_kernels_layer", "qwen3_mirrored_code", "rmsnorm_config",
            "rmsnorm_fused_add", "rmsnorm_triton", "swiglu"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("wheel") / package_wheel.WHEEL_NAME
    path.write_bytes(package_wheel.build_wheel())
    return path


def test_the_closure_is_what_the_entry_point_imports():
    assert package_wheel.closure() == EXPECTED


def test_each_file_is_the_snippet_with_package_imports(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert {f"qwen3_fusion/{m}.py" for m in EXPECTED} | {"qwen3_fusion/__init__.py"} == {
            n for n in names if n.startswith("qwen3_fusion/")}
        for module in EXPECTED:
            packaged = archive.read(f"qwen3_fusion/{module}.py").decode().splitlines()
            original = (SNIPPETS / f"{module}.py").read_text().splitlines()
            assert len(packaged) == len(original)
            changed = [(a, b) for a, b in zip(original, packaged) if a != b]
            for before, after in changed:
                assert "import" in before and "qwen3_fusion" in after, (module, before, after)
            for line in packaged:  # no bare import of a snippet module is left
                words = line.split()
                if words[:1] in (["import"], ["from"]) and len(words) > 1:
                    assert words[1] not in EXPECTED, (module, line)
        record = archive.read("qwen3_fusion-0.1.0.dist-info/RECORD").decode()
        assert len(record.strip().splitlines()) == len(names)


def test_the_build_is_reproducible():
    assert package_wheel.build_wheel() == package_wheel.build_wheel()


def test_packaged_source_rewrites_imports_only():
    source = ('"""from swiglu import x is only text here."""\n'
              "import swiglu\nfrom rmsnorm_triton import (a,\n    b)\nimport torch\n"
              "def f():\n    from swiglu import g  # demo\n")
    out = package_wheel.packaged_source(source, {"swiglu", "rmsnorm_triton"})
    assert out.splitlines() == [
        '"""from swiglu import x is only text here."""', "from qwen3_fusion import swiglu",
        "from qwen3_fusion.rmsnorm_triton import (a,", "    b)", "import torch", "def f():",
        "    from qwen3_fusion.swiglu import g  # demo"]
    with pytest.raises(ValueError, match="one snippet module per line"):
        package_wheel.packaged_source("import swiglu, torch\n", {"swiglu"})


def test_installs_into_a_fresh_environment_and_runs(wheel, tmp_path):
    """pip install of the wheel alone into a new venv; snippets/package_use.py runs there."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    target = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    # torch, triton, transformers from this environment (not the package under test)
    (pathlib.Path(target) / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if "torch" in sys.modules and not sys.modules["torch"].cuda.is_available():
        environment["TRITON_INTERPRET"] = "1"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, env=environment, capture_output=True, text=True)
    script = tmp_path / "package_use.py"  # away from snippets/, which a script's folder would put on sys.path
    script.write_text((SNIPPETS / "package_use.py").read_text())
    where = subprocess.run(
        [str(python), "-c", "import qwen3_fusion, importlib.util as u; print(qwen3_fusion.__file__); "
                            "print(u.find_spec('rmsnorm_triton'), u.find_spec('swiglu'))"],
        capture_output=True, text=True, env=environment, cwd=tmp_path, check=True).stdout.splitlines()
    assert where[0].startswith(str(env_dir)) and where[1] == "None None"
    run = subprocess.run([str(python), str(script)], capture_output=True, text=True, env=environment,
                         cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("loss:")]
    hf, ours = (float(part.split()[-1]) for part in line.removeprefix("loss:").split(","))
    assert abs(hf - ours) < 1e-5 * abs(hf), line
