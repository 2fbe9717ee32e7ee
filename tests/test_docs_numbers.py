"""Pages type no benchmark-like number (the rule lives in tests/tools/docs_numbers.py)."""
from __future__ import annotations

import pytest

import docs_tools
from docs_numbers import hand_typed_numbers

DOCS = docs_tools.DOCS
ROOT = docs_tools.ROOT
GENERATED = DOCS / "generated"


def _articles():
    return sorted(p for p in DOCS.rglob("*.md") if GENERATED not in p.parents)


@pytest.mark.parametrize("page", _articles(), ids=lambda p: str(p.relative_to(DOCS)))
def test_no_hand_typed_benchmark_numbers(page):
    findings = hand_typed_numbers(page.read_text(encoding="utf-8"))
    report = "\n".join(f"  {page.relative_to(ROOT)}:{n}: {hit!r} in: {line.strip()[:120]}" for n, hit, line in findings)
    assert not findings, (
        "benchmark-like numbers typed into an article; include them from docs/generated/ "
        "(bench/exp_*.py renders them from docs/data/h200/), or mark a non-measured figure with "
        "<!-- number-ok: reason -->:\n" + report)


@pytest.mark.parametrize("text", [
    "HF eager 一步要 484 ms。",
    "前向 69.9 µs，反向 791us",
    "带宽约 3.8 TB/s（90% 的拷贝带宽）",
    "峰值显存 69.7 GiB",
    "Triton 版快 1.3×。",
    "快了 2.1x, 比 eager",
    "加速 1.8 倍",
    "一步 0.45 s",
    "约 12 毫秒",
    "吞吐 35,000 tokens/s",
    "989 TFLOP/s 的 bf16 峰值",
    "- 列表项：占 5.2％",
    "## 结果：快 12%",
    "![快 1.2× 的图](generated/x.svg)",
    "行内代码也算 `484 ms`",
    "| setup | step (ms) |\n|---|---|\n| HF eager | 484 |",
    "| 形状 | 耗时 |\n| :-- | --: |\n| H=4096 | ~862 |",
    "```text\nstep time 484.4 ms\n```",
    "```mermaid\nflowchart LR\n  a[\"HF 484 ms\"] --> b\n```",
    "<!-- number-ok: -->\n数据表 4.8 TB/s",
])
def test_number_rule_flags(text):
    assert hand_typed_numbers(text), text


@pytest.mark.parametrize("text", [
    "Qwen3-8B 有 36 层，每层 4 个 RMSNorm，共 145 个。",
    "形状 16384×4096，q_norm 是 524288 × 128；36×4+1 = 145。",
    "H=4096, head_dim = 128, BLOCK_SIZE=1024, num_warps=8, fp32/bf16, sm_90, H200, 0x1F",
    "第 3 步 (step 3) 与 100 steps、2 sections、1st",
    '--8<-- "docs/generated/step_time.md"',
    "--8<--\ndocs/generated/a.md\ndocs/generated/b.md\n--8<--",
    "```python\nprint(f'{ms:.1f} ms')  # 484 ms\n```",
    "```bash\nsleep 5s && echo 100%\n```",
    "<!-- 484 ms 写在注释里不显示 -->",
    "<!--\n多行注释 484 ms\n-->",
    "H200 的 HBM3e 带宽为 4.8 TB/s。 <!-- number-ok: NVIDIA H200 datasheet -->",
    "<!-- number-ok: gate thresholds, not measurements -->\n最终 loss 相差不超过 0.5%，\n每步不超过 5%。",
    "<!-- number-ok: vendor table -->\n\n| GPU | bandwidth |\n|---|---|\n| H200 | 4.8 TB/s |",
    "| model | hidden | layers |\n|---|---|---|\n| 8B | 4096 | 36 |",
    "---\ntitle: 1.2× faster\n---\n正文",
    "![step time](generated/step_time.svg)",
    "$6 \\times 8.2\\times10^{9}$ FLOP",
])
def test_number_rule_allows(text):
    assert not hand_typed_numbers(text), hand_typed_numbers(text)


def test_marker_covers_only_the_next_block():
    text = "<!-- number-ok: datasheet -->\n带宽 4.8 TB/s\n\n实测 3.8 TB/s"
    assert [n for n, _, _ in hand_typed_numbers(text)] == [4]
