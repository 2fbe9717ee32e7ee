"""The GitHub workflows: lint-clean, pinned, least-privilege, and a publish gate that holds.

actionlint and zizmor (offline, default persona) must report nothing. The structure
tests check the property that matters most: Pages is deployed only by a job that
needs BOTH the CPU suite + strict build (ci.yml) and the GPU suite (gpu.yml).
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
BIN = pathlib.Path(sys.executable).parent
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def load(name: str) -> dict:
    text = (WORKFLOWS / name).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not installed (pip install -r requirements-test.txt)", pytrace=False)
    return found


def test_actionlint_reports_nothing():
    result = subprocess.run([tool("actionlint"), "-no-color"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"actionlint findings:\n{result.stdout}{result.stderr}"


def test_zizmor_reports_nothing():
    result = subprocess.run(
        [tool("zizmor"), "--offline", "--no-progress", "--color=never", ".github/workflows"],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode == 0, f"zizmor findings:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("name", ["ci.yml", "gpu.yml", "publish.yml", "newest.yml"])
def test_least_privilege_and_pinned_actions(name):
    workflow = load(name)
    assert workflow.get("permissions") == {}, f"{name}: top-level permissions must be {{}}"
    for job_id, job in workflow["jobs"].items():
        assert "permissions" in job, f"{name}:{job_id} must declare its own permissions"
        granted = {k for k, v in job["permissions"].items() if v == "write"}
        if job_id != "deploy":
            assert not granted, f"{name}:{job_id} needs no write permission, has {granted}"
        for step in job.get("steps", []):
            uses = step.get("uses")
            if uses:
                assert SHA_PIN.match(uses), f"{name}:{job_id}: '{uses}' is not pinned to a full commit SHA"
            if uses and uses.startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, f"{name}:{job_id}"


def test_deploy_needs_cpu_gpu_and_strict_build():
    publish = load("publish.yml")
    jobs = publish["jobs"]
    assert publish["on"].keys() <= {"push", "workflow_dispatch"}
    deploy_jobs = [j for j, job in jobs.items()
                   if any("deploy-pages" in str(s.get("uses", "")) for s in job.get("steps", []))]
    assert deploy_jobs == ["deploy"]
    deploy = jobs["deploy"]
    needs = set(deploy["needs"])
    callers = {j: jobs[j]["uses"] for j in needs}
    assert sorted(callers.values()) == ["$/.github/workflows/ci.yml", "$/.github/workflows/gpu.yml"], callers
    assert "if" not in deploy, "an `if:` on deploy could let it run after a failed suite (e.g. always())"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}

    ci = load("ci.yml")
    assert "workflow_call" in ci["on"] and {"push", "pull_request"} <= set(ci["on"])
    build_steps = ci["jobs"]["strict-build"]["steps"]
    commands = [s.get("run", "") for s in build_steps]
    assert any("mkdocs build --strict" in c for c in commands)
    uploads = [i for i, s in enumerate(build_steps) if "upload-pages-artifact" in str(s.get("uses", ""))]
    build = [i for i, c in enumerate(commands) if "mkdocs build --strict" in c]
    assert uploads and build and build[0] < uploads[0], "Pages must get the site of the strict build"
    assert "bash .ci/run" in [s.get("run") for s in ci["jobs"]["cpu-suite"]["steps"]]

    gpu = load("gpu.yml")
    assert "workflow_call" in gpu["on"] and "pull_request" not in gpu["on"]
    gpu_job = gpu["jobs"]["gpu-suite"]
    assert {"self-hosted", "gpu"} <= set(gpu_job["runs-on"])
    assert any(".ci/test.sh --gpu" in s.get("run", "") for s in gpu_job["steps"])


# The documented forms of `uses:`. A workflow of this repository: the self-repository form
# `$/.github/workflows/<file>` (GitHub changelog 2026-07-30, "Reference same-repository actions
# with self-repository syntax"; zizmor >= 1.30 flags the older workspace-relative `./...` form,
# which also resolves against the runner's checkout). Another repository's workflow or an action:
# `{owner}/{repo}[/path]@{ref}`, pinned here to a full commit SHA.
SELF_WORKFLOW = re.compile(r"\$/\.github/workflows/[\w.-]+\.ya?ml")
PINNED = re.compile(r"[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}")


def uses_problem(value: str, job_level: bool) -> str | None:
    """Why ``value`` is not a documented, pinned form of ``uses:`` (None if it is fine)."""
    if job_level and SELF_WORKFLOW.fullmatch(value):
        return None
    if PINNED.fullmatch(value):
        return None
    return f"`uses: {value}` is neither $/.github/workflows/<file> nor owner/repo[/path]@<40-hex sha>"


def test_every_uses_is_a_documented_form():
    problems = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for name, job in load(path.name)["jobs"].items():
            found = [(job["uses"], True)] if "uses" in job else []
            found += [(step["uses"], False) for step in job.get("steps", []) if "uses" in step]
            for value, job_level in found:
                problem = uses_problem(value, job_level)
                problems += [f"{path.name} job {name}: {problem}"] if problem else []
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("value, job_level, ok", [
    ("$/.github/workflows/ci.yml", True, True),
    ("./.github/workflows/ci.yml", True, False),  # workspace-relative: zizmor's self-repository audit
    (".github/workflows/ci.yml", True, False),
    ("$/github/workflows/ci.yml", True, False),
    ("$/.github/workflows/ci.yml", False, False),  # a step cannot call a workflow
    ("actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1", False, True),
    ("actions/checkout@v4", False, False),  # not pinned
    ("octo/repo/.github/workflows/x.yml@3d3c42e5aac5ba805825da76410c181273ba90b1", True, True),
])
def test_uses_forms(value, job_level, ok):
    assert (uses_problem(value, job_level) is None) == ok



def test_the_newest_stack_runs_weekly_by_hand_and_in_ci():
    """newest.yml runs .ci/newest.sh (the kernel and patch tests on the newest torch CPU build,
    Triton and transformers) on a weekly schedule, on demand, and as a job of ci.yml."""
    newest = load("newest.yml")
    assert {"schedule", "workflow_dispatch", "workflow_call"} <= set(newest["on"])
    (cron,) = [entry["cron"] for entry in newest["on"]["schedule"]]
    minute, hour, day, month, weekday = cron.split()
    assert (day, month) == ("*", "*") and weekday.isdigit(), f"not weekly: {cron}"
    (job,) = newest["jobs"].values()
    assert any(step.get("run") == "bash .ci/newest.sh" for step in job["steps"])
    ci_jobs = load("ci.yml")["jobs"]
    assert any(j.get("uses") == "$/.github/workflows/newest.yml" for j in ci_jobs.values())

    script = (ROOT / ".ci" / "newest.sh").read_text(encoding="utf-8")
    assert "download.pytorch.org/whl/cpu" in script  # the CPU build, not PyPI's CUDA one
    assert re.search(r"--upgrade triton transformers numpy", script)  # unpinned: the newest
    for tests in ("tests/test_rmsnorm_*.py", "tests/test_qwen3_*.py"):
        assert tests in script
