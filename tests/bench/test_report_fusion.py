"""bench/report/fusion.py: the op-level tables of the fusion set, from the quick run and from made-up times."""
import copy

from bench.report import fusion


def test_tables_from_the_quick_run(quick_fusion):
    out = fusion.render(quick_fusion)
    assert set(out) == {f"fusion_{k}_{p}.md" for k in ("qk_rope", "swiglu") for p in ("fwd", "fwd_bwd")}
    assert "本站 QK-norm + RoPE µs" in out["fusion_qk_rope_fwd.md"]
    assert "HF eager ÷ 本站" in out["fusion_swiglu_fwd_bwd.md"]


def test_ratios_and_the_two_percent_tie(quick_fusion):
    data = copy.deepcopy(quick_fusion)
    (entry,) = data["results"]["kernels"]["swiglu"]
    for phase in ("fwd", "fwd_bwd"):
        times = entry[phase]
        times.pop("liger", None)  # on a GPU the quick run has it too
        times["triton_swiglu"]["median_us"] = 100.0
        times["hf"]["median_us"] = 150.0
        times["compile_hf"]["median_us"] = 101.5  # within 2 %: level
    (row,) = fusion.rows(data, "swiglu", "fwd")
    assert row["ratios"] == {"hf": 1.5, "compile_hf": 1.015} and row["peer"] == "compile_hf"
    text = fusion.table(data, "swiglu", "fwd")
    assert "1.50×" in text and "持平" in text
    entry["fwd"]["compile_hf"]["median_us"] = 90.0  # 10 % faster than ours: slower, and said so
    assert "慢 11%" in fusion.table(data, "swiglu", "fwd")
