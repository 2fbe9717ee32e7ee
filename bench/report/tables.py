"""Markdown tables, number formats, and the boxes every article carries (实验环境, provenance)."""
from __future__ import annotations

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


def env_box(envs: list[dict], extra_keys=(), note: str | None = None) -> str:
    """The article's one "实验环境" admonition, from the environment blocks of its data files.

    A version that differs between the files lists each distinct value; dates become a range.
    ``note``: a last line under the versions (what they do not cover).
    """
    def item(key):
        return f"{ENV_LABELS.get(key, key)}：{_distinct(str(e[key]) if e.get(key) else None for e in envs)}"

    dates = sorted({str(e["date"])[:10] for e in envs if e.get("date")})
    date = "—" if not dates else dates[0] if len(dates) == 1 else f"{dates[0]} 至 {dates[-1]}"
    hardware = [f"GPU：{_distinct(_gpu_text(e) for e in envs)}", item("driver"), item("cuda")]
    software = [item(key) for key in ("torch", "triton", "transformers", *extra_keys)] + [f"测量日期：{date}"]
    # Two short lines: the hardware, then the software and the date (then the note).
    lines = [" · ".join(hardware), " · ".join(software)] + ([note] if note else [])
    return '!!! info "实验环境"\n\n' + "".join(f"    {line}\n\n" for line in lines).rstrip("\n") + "\n"


def provenance_table(records: dict[str, dict]) -> str:
    """数据文件 | 提交 | 测量日期, one row per file name -> the data it came with (the command that wrote it stays in
    the file's environment block; bench/README.md says how to regenerate)."""
    rows = []
    for name, data in records.items():
        env = data["environment"]
        rows.append([f"`{name}`", f"`{str(env.get('git_commit', ''))[:7]}`", str(env.get("date", ""))[:10]])
    return md_table(["数据文件", "提交", "测量日期"], rows, align="lll")


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
