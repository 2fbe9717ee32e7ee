"""Shared plumbing for the experiments in bench/.

Every experiment is a module ``bench/exp_<name>.py`` with:

* ``NAME``: the data file stem, e.g. ``"rmsnorm"`` -> ``docs/data/<gpu>/rmsnorm.json``;
* ``run(args) -> dict``: runs on the GPU and returns ``{"config": ..., "results": ...}``;
  where (GPU, or ``--quick`` small sizes) comes from :func:`gpu_or_quick`, and every time
  from the timers below (:func:`cuda_graph_time_us`, :func:`eager_time_us`,
  :func:`call_times_ms`, :func:`copy_bandwidth`);
* ``render(data) -> dict[str, str]``: turns a loaded data file into generated
  artifacts, ``{relative path under docs/generated/: text}``. Plots are SVG text
  made with :func:`svg_of` so that rendering is deterministic.

``bench/run_all.py`` runs every experiment and writes the JSON through
:func:`save`; ``bench/render.py`` regenerates every artifact from the JSON.
"""
from __future__ import annotations

import datetime as _dt
import io
import json
import math
import os
import pathlib
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from typing import NamedTuple

import torch

from bench import ROOT

DATA_DIR = ROOT / "docs" / "data"
GENERATED_DIR = ROOT / "docs" / "generated"
DEFAULT_GPU = "h200"

# HF pastel palette shared with the mermaid diagrams (docs/assets/palette.css).
PASTEL_FILL = {"yellow": "#FDE8A9", "green": "#D4E8CF", "blue": "#CFE0F3", "pink": "#F6CED0", "purple": "#E3D7F0"}
PASTEL_LINE = {"yellow": "#E7C56D", "green": "#94C18A", "blue": "#8AB0DB", "pink": "#D98F92", "purple": "#A98BCB"}
SERIES_COLORS = ["#8AB0DB", "#D98F92", "#94C18A", "#E7C56D", "#A98BCB", "#7FC4C0", "#C49A6C", "#999999"]


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200'; 'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3'."""
    name = name.lower().replace("nvidia", "").strip()
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown"


def _git_commit() -> str:
    if os.environ.get("GIT_COMMIT"):
        return os.environ["GIT_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except Exception:
        return "unknown"


def _version(module_name: str) -> str | None:
    try:
        module = __import__(module_name)
    except Exception:
        return None
    return getattr(module, "__version__", None)


def environment() -> dict:
    """Everything a reader needs to know about where a number was measured."""
    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": _git_commit(),
        "command": os.environ.get("BENCH_COMMAND") or " ".join(shlex.quote(a) for a in sys.argv),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "transformers": _version("transformers"),
        "liger_kernel": None,
        "quack": None,
        "cuda": torch.version.cuda,
        "gpu": None,
        "gpu_count": 0,
        "driver": None,
        "sm_count": None,
    }
    from importlib.metadata import version

    for key, distribution in (("liger_kernel", "liger-kernel"), ("quack", "quack-kernels")):
        try:  # the installed distribution's metadata: quack itself is not imported here
            env[key] = version(distribution)
        except Exception:
            pass
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = props.name
        env["gpu_count"] = torch.cuda.device_count()
        env["sm_count"] = props.multi_processor_count
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        try:
            env["driver"] = subprocess.check_output(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], text=True
            ).strip().splitlines()[0]
        except Exception:
            pass
    return env


def data_path(name: str, gpu: str = DEFAULT_GPU) -> pathlib.Path:
    return DATA_DIR / gpu / f"{name}.json"


def save(name: str, payload: dict, out_dir: pathlib.Path | None = None) -> pathlib.Path:
    """Write ``{"environment", "config", "results"}`` for experiment ``name``.

    The GPU slug comes from the device that ran it, so an H100 run can never
    overwrite the H200 data. ``out_dir`` overrides the destination folder
    (the device job writes to $OUT and the files are committed from there).
    """
    env = environment()
    record = {"experiment": name, "environment": env, **payload}
    folder = out_dir if out_dir is not None else DATA_DIR / gpu_slug(env["gpu"] or "cpu")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=False, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def load(name: str, gpu: str = DEFAULT_GPU) -> dict:
    return json.loads(data_path(name, gpu).read_text(encoding="utf-8"))


# ---------------------------------------------------------------- rendering helpers

# Kernel categories (snippets/p1_profile_step.py KERNEL_CATEGORIES) as tables and plots name them.
CATEGORY_ZH = {
    "GEMM": "矩阵乘（GEMM）", "attention": "注意力", "elementwise": "逐元素", "reduction": "归约",
    "copy / cast / layout": "拷贝/类型转换", "softmax / loss": "softmax/loss", "Triton (Inductor)": "Triton（Inductor）",
    "other": "其他",
}
# The five fusable points of snippets/p1_roofline.py.
FUSION_POINT_ZH = {"RMSNorm": "RMSNorm", "RoPE": "RoPE", "SwiGLU": "SwiGLU", "QKV merge": "QKV 合并",
                   "Attention softmax": "注意力 softmax"}
ENV_LABELS = {"driver": "驱动", "cuda": "CUDA", "torch": "torch", "triton": "triton", "transformers": "transformers",
              "liger_kernel": "liger-kernel", "quack": "quack-kernels", "python": "Python"}


def _distinct(values) -> str:
    """Each distinct non-empty value once, in order of appearance."""
    seen = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return "、".join(seen) or "—"


def _gpu_text(env: dict) -> str:
    if not env.get("gpu"):
        return "CPU"
    details = [f"{env['sm_count']} 个 SM" if env.get("sm_count") else None,
               f"显存 {env['gpu_memory_gib']:g} GiB" if env.get("gpu_memory_gib") else None]
    details = "，".join(d for d in details if d)
    return env["gpu"] + (f"（{details}）" if details else "")


def env_box(envs: list[dict], extra_keys=()) -> str:
    """The article's one "实验环境" admonition, from the environment blocks of its data files.

    A version that differs between the files lists each distinct value; dates become a range.
    """
    def item(key):
        return f"{ENV_LABELS.get(key, key)}：{_distinct(str(e[key]) if e.get(key) else None for e in envs)}"

    dates = sorted({str(e["date"])[:10] for e in envs if e.get("date")})
    date = "—" if not dates else dates[0] if len(dates) == 1 else f"{dates[0]} 至 {dates[-1]}"
    hardware = [f"GPU：{_distinct(_gpu_text(e) for e in envs)}", item("driver"), item("cuda")]
    software = [item(key) for key in ("torch", "triton", "transformers", *extra_keys)] + [f"测量日期：{date}"]
    # Two short lines: the hardware, then the software and the date.
    return '!!! info "实验环境"\n\n' + "".join(f"    {' · '.join(line)}\n\n" for line in (hardware, software)).rstrip("\n") + "\n"


def provenance_table(records: dict[str, dict]) -> str:
    """数据文件 | 提交 | 测量日期 | 重新生成的命令, one row per file name -> the data it came with."""
    rows = []
    for name, data in records.items():
        env = data["environment"]
        rows.append([f"`{name}`", f"`{str(env.get('git_commit', ''))[:7]}`", str(env.get("date", ""))[:10],
                     f"`{env.get('command', '')}`"])
    return md_table(["数据文件", "提交", "测量日期", "重新生成的命令"], rows, align="llll")


def dtype_short(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype)


def md_table(headers: list[str], rows: list[list], align: str | None = None) -> str:
    """A GitHub-style markdown table. ``align`` is e.g. 'lrrr'."""
    align = align or "l" + "r" * (len(headers) - 1)
    marks = {"l": ":--", "r": "--:", "c": ":-:"}
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join(marks[a] for a in align) + " |"]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(out) + "\n"


def fmt(value: float, digits: int = 3) -> str:
    """Significant-digit formatting that reads well in a table."""
    if value is None:
        return "—"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 10 ** digits:
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - int(f"{magnitude:e}".split("e")[1]))
    return f"{value:.{decimals}f}"


# The plots' one font: Noto Sans SC (SIL OFL 1.1, from notofonts/noto-cjk), shipped by the PyPI package
# pylopdf-fonts-zh-cn (pinned in requirements-test.txt). Loaded by file path, never looked up by name
# among the system's fonts, and written as glyph paths, so every machine renders the same bytes.
FONT_PACKAGE = "pylopdf-fonts-zh-cn"
FONT_MODULE = "pylopdf_fonts_zh_cn"
FONT_FILE = "NotoSansSC-Regular.otf"


def cjk_font_path() -> pathlib.Path:
    """The pinned Noto Sans SC file; RuntimeError naming the package when it is not installed."""
    import importlib.util

    spec = importlib.util.find_spec(FONT_MODULE)
    path = pathlib.Path(spec.origin).parent / FONT_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        raise RuntimeError(f"plots need the font {FONT_FILE} from the PyPI package {FONT_PACKAGE}: "
                           f"pip install -r requirements-test.txt (it pins {FONT_PACKAGE})")
    return path


def _use_font(path: pathlib.Path) -> str:
    """Register ``path`` with matplotlib as the only font of its family name; return that name."""
    from matplotlib import font_manager

    name = font_manager.FontProperties(fname=path).get_name()
    manager = font_manager.fontManager
    manager.ttflist = [f for f in manager.ttflist if f.name != name]  # an installed copy must not win
    manager.addfont(path)
    found = font_manager.findfont(font_manager.FontProperties(family=name), fallback_to_default=False)
    if pathlib.Path(found).resolve() != path.resolve():
        raise RuntimeError(f"matplotlib resolved {name!r} to {found}, not {path}")
    return name


def plot_style():
    """Matplotlib settings that give deterministic SVG readable on light and dark pages.

    Text is drawn as glyph outlines in the pinned CJK font (the string stays in an XML
    comment next to its glyphs: see :func:`svg_texts`), so no font needs to be installed
    to view a plot. No mathtext: ``$`` is a plain character.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcdefaults()
    family = _use_font(cjk_font_path())
    plt.rcParams.update({
        "svg.hashsalt": "qwen3-triton-docs",
        "svg.fonttype": "path",
        "font.family": [family],
        "text.parse_math": False,
        "font.size": 10,
        "figure.facecolor": "none",
        "axes.facecolor": "none",
        "savefig.facecolor": "none",
        "savefig.transparent": True,
        "text.color": "#777777",
        "axes.labelcolor": "#777777",
        "axes.titlecolor": "#666666",
        "axes.edgecolor": "#888888",
        "xtick.color": "#777777",
        "ytick.color": "#777777",
        "grid.color": "#888888",
        "grid.alpha": 0.3,
        "axes.grid": True,
        "axes.axisbelow": True,
        "legend.frameon": False,
        "axes.prop_cycle": matplotlib.cycler(color=SERIES_COLORS),
    })
    return plt


def svg_of(fig) -> str:
    """Serialize a figure to SVG text with no date or random ids."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buffer.getvalue()


def svg_texts(svg: str) -> list[str]:
    """The strings of a plot made by :func:`svg_of`: matplotlib writes each one as an XML
    comment before its glyph paths (titles, axis labels, ticks, legend entries)."""
    import html

    return [html.unescape(t) for t in re.findall(r"<!-- (.*?) -->", svg, flags=re.S)]


# ---------------------------------------------------------------- where an experiment runs

def gpu_available() -> bool:
    """True when kernels run compiled on a CUDA GPU: False on a CPU and under TRITON_INTERPRET=1."""
    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"


class Mode(NamedTuple):
    quick: bool  # --quick: the smoke-test sizes
    on_gpu: bool
    setup: object  # quick_setup or gpu_setup
    device: str
    dtype: torch.dtype  # bf16 on the GPU, fp32 on the CPU; experiments with a fixed dtype ignore it


def gpu_or_quick(args, name: str, quick_setup, gpu_setup) -> Mode:
    """Where and at which sizes experiment ``name`` runs: the GPU sizes need a GPU, ``--quick``
    (``args.quick``) runs the small ones on whatever is there. Every experiment decides it here."""
    quick = bool(getattr(args, "quick", False))
    on_gpu = gpu_available()
    if not (quick or on_gpu):
        raise RuntimeError(f"{name} needs a CUDA GPU; use --quick for the CPU smoke test")
    device, dtype = ("cuda", torch.bfloat16) if on_gpu else ("cpu", torch.float32)
    return Mode(quick, on_gpu, quick_setup if quick else gpu_setup, device, dtype)


# Stand-in L2 size without a GPU (--quick on CPU): small, so the rotating-input rule still
# yields its minimum of input sets; no CPU number is ever published.
CPU_L2_BYTES = 4 * 2**20


def l2_cache_bytes(device) -> int:
    """The GPU's L2 size as the driver reports it; CPU_L2_BYTES on a CPU."""
    if torch.device(device).type != "cuda":
        return CPU_L2_BYTES
    return torch.cuda.get_device_properties(device).L2_cache_size


def rotating_input_sets(bytes_per_call: int, device, low: int = 2, high: int = 8) -> int:
    """How many input sets a timed cycle rotates through so that it touches >= 4x L2
    (no call finds its inputs left in L2 by the previous one); at least ``low``, at most ``high``."""
    return min(high, max(low, -(-4 * l2_cache_bytes(device) // bytes_per_call)))


# ---------------------------------------------------------------- timing
# GPU time: cuda_graph_time_us. Eager wall time: eager_time_us. Per-call times of a long call
# (a training step): call_times_ms. The copy ceiling: copy_bandwidth. Without a GPU (--quick
# smoke runs) each falls back to perf_counter samples: numbers for the smoke test only.

def _quantile(ordered: list, q: float) -> float:
    """Linear interpolation between the closest ranks, as triton.testing.do_bench computes quantiles."""
    point = q * (len(ordered) - 1)
    lower, upper = math.floor(point), math.ceil(point)
    t = point - lower
    return (1 - t) * ordered[lower] + t * ordered[upper]


def _stats_us(samples_ms: list) -> dict:
    ordered = sorted(samples_ms)
    return {"median_us": _quantile(ordered, 0.5) * 1e3, "p20_us": _quantile(ordered, 0.2) * 1e3,
            "p80_us": _quantile(ordered, 0.8) * 1e3, "min_us": ordered[0] * 1e3, "n": len(ordered)}


def wall_time_us(fn, samples: int = 3, grad_to_none=None) -> dict:
    """CPU stand-in for the GPU timers: one warm-up call, then ``samples`` perf_counter-timed calls."""
    fn()
    times_ms = []
    for _ in range(samples):
        for tensor in grad_to_none or ():
            tensor.grad = None
        start = time.perf_counter()
        fn()
        times_ms.append((time.perf_counter() - start) * 1e3)
    return _stats_us(times_ms)


def eager_time_us(fn, warmup_ms: float = 50, rep_ms: float = 300, grad_to_none=None, on_gpu=None) -> dict:
    """Wall time of eager calls, host overhead included: triton.testing.do_bench (L2 flushed
    before each call, ``grad_to_none`` grads reset). Median, 20/80 % quantiles, min in µs; n calls."""
    if not (gpu_available() if on_gpu is None else on_gpu):
        return wall_time_us(fn, grad_to_none=grad_to_none)
    import triton.testing

    samples_ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none,
                                         return_mode="all")
    torch.cuda.synchronize()
    return _stats_us(samples_ms)


def cuda_graph_time_us(fns, min_calls: int = 12, replays: int = 25, on_gpu=None) -> dict:
    """GPU time per call, from CUDA-graph replays: no Python or launch overhead.

    ``fns`` is a list of callables that do the same work on *different* buffers;
    the graph cycles through them so that consecutive calls do not find their
    inputs in L2 (see :func:`rotating_input_sets`). Returns median and 20/80
    percentiles in µs.
    """
    if not (gpu_available() if on_gpu is None else on_gpu):
        return wall_time_us(fns[0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns * 2:  # warm-up: compilation, autotuning, allocator
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    calls = -(-min_calls // len(fns)) * len(fns)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    del graph
    times.sort()
    return {"median_us": statistics.median(times), "p20_us": times[len(times) // 5],
            "p80_us": times[(4 * len(times)) // 5], "calls_per_graph": calls}


def call_times_ms(fns, calls: int, on_gpu=None) -> list[float]:
    """The time of each of ``calls`` calls, cycling through ``fns``, in ms: CUDA events around
    each call, waited for before the next. For calls long enough to time one by one (a training step)."""
    on_gpu = gpu_available() if on_gpu is None else on_gpu
    times_ms = []
    for i in range(calls):
        fn = fns[i % len(fns)]
        if on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times_ms.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            fn()
            times_ms.append((time.perf_counter() - begin) * 1e3)
    return times_ms


def in_ms(stats: dict) -> dict:
    """A timer's result with every ``*_us`` value as ``*_ms``."""
    return {(k[:-3] + "_ms" if k.endswith("_us") else k): (v / 1e3 if k.endswith("_us") else v)
            for k, v in stats.items()}


def copy_bandwidth(nbytes: int, device, timer: str = "graph") -> dict:
    """The copy ceiling: ``dst.copy_(src)`` on the device moving ``nbytes`` in all (half read, half
    written), timed like the kernels it bounds (``"graph"``: :func:`cuda_graph_time_us`) or eagerly
    (``"eager"``: :func:`eager_time_us`). The timer's result plus ``gbps``."""
    src = torch.randn(nbytes // 8, device=device)  # fp32: nbytes / 2 read, nbytes / 2 written
    dst = torch.empty_like(src)
    timers = {"graph": lambda: cuda_graph_time_us([lambda: dst.copy_(src)]),
              "eager": lambda: eager_time_us(lambda: dst.copy_(src))}
    stats = timers[timer]()
    return stats | {"gbps": 2 * src.numel() * 4 / (stats["median_us"] * 1e3)}
