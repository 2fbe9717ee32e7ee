"""bench/report/fusion.py: the op-level tables of the fusion set and the tie rule's split of their shapes, from the
quick run and from made-up times."""
import copy

from bench.report import fusion


def test_tables_from_the_quick_run(quick_fusion):
    out = fusion.render(quick_fusion)
    assert set(out) == {f"fusion_{k}_{p}.md" for k in ("qk_rope", "swiglu", "qkv") for p in ("fwd", "fwd_bwd")}
    assert "本站 QK-norm + RoPE µs" in out["fusion_qk_rope_fwd.md"]
    assert "HF eager ÷ 本站" in out["fusion_swiglu_fwd_bwd.md"]
    for phase in ("fwd", "fwd_bwd"):
        qkv = out[f"fusion_qkv_{phase}.md"]
        assert qkv.startswith("| 权重 N×K（Qwen3） | 三个 GEMM µs（TFLOP/s） | 合并 GEMM µs（TFLOP/s） | 合并 ÷ 三个 |")
    assert all(text.startswith("| ") for text in out.values())  # the pages read every table by hand


def without_qkv(data):
    data = copy.deepcopy(data)
    del data["results"]["kernels"]["qkv"], data["config"]["kernels"]["qkv"], data["results"]["skipped"]["qkv"]
    return data


def test_no_qkv_file_without_qkv_data_and_the_other_tables_unchanged(quick_fusion):
    """A record from before the qkv kernel renders no fusion_qkv_<phase>.md, and the GEMM
    entries (they time no copy) change nothing in the other kernels' tables."""
    with_qkv, before = fusion.render(quick_fusion), fusion.render(without_qkv(quick_fusion))
    assert set(with_qkv) - set(before) == {"fusion_qkv_fwd.md", "fusion_qkv_fwd_bwd.md"}
    assert all(before[name] == with_qkv[name] for name in before)


def qkv_payload(quick_fusion, three, merged, compiled=None):
    """The quick record with made-up qkv times (µs) for both phases and a GEMM of 1e9 FLOPs forward."""
    data = copy.deepcopy(quick_fusion)
    (entry,) = data["results"]["kernels"]["qkv"]
    entry["flops_fwd"], entry["flops_fwd_bwd"] = 10**9, 3 * 10**9
    entry.pop("device_kernels", None)  # a GPU run's profiler counts; the tests that want them set their own
    for phase in ("fwd", "fwd_bwd"):
        times = entry[phase]
        times["three_gemms"]["median_us"], times["merged_gemm"]["median_us"] = three, merged
        if compiled is None:
            times.pop("compile_three")
        else:
            times["compile_three"]["median_us"] = compiled
    return data, entry


def test_qkv_ratio_is_merged_over_three(quick_fusion):
    data, _ = qkv_payload(quick_fusion, 100.0, 90.0, compiled=101.0)
    (row,) = fusion.gemm_rows(data, "qkv", "fwd")
    assert row["ratio"] == 0.9 and row["others"] == {"compile_three": 1.01}
    assert row["base_tflops"] == 10.0 and row["merged_tflops"] == 1e9 / 90e6
    assert row["kernels"] == {"three_gemms": 3, "merged_gemm": 1} and not row["measured"]
    text = fusion.gemm_table(data, "qkv", "fwd")
    assert "| 100（10.0） | 90.0（11.1） | 0.90× | 1.01× | 3 / 1 |" in text
    assert [r["ratio"] for r in fusion.gemm_by_tie(data, "qkv", "fwd")["faster"]] == [0.9]
    assert "按做法数出" in text
    (row,) = fusion.gemm_rows(data, "qkv", "fwd_bwd")
    assert row["base_tflops"] == 30.0 and row["kernels"] == {"three_gemms": 11, "merged_gemm": 4}


def test_qkv_tie_and_slower(quick_fusion):
    data, _ = qkv_payload(quick_fusion, 100.0, 101.5)  # within 2 %: level
    text = fusion.gemm_table(data, "qkv", "fwd")
    assert len(fusion.gemm_by_tie(data, "qkv", "fwd")["level"]) == 1 and "1.01×" in text and "torch.compile" not in text
    data, _ = qkv_payload(quick_fusion, 100.0, 110.0)
    (row,) = fusion.gemm_by_tie(data, "qkv", "fwd")["slower"]
    assert row["ratio"] == 1.1


def test_qkv_kernels_as_the_profiler_counted_them(quick_fusion):
    data, entry = qkv_payload(quick_fusion, 100.0, 95.0, compiled=99.0)
    entry["device_kernels"] = {"fwd": {"three_gemms": ["gemm"] * 3, "compile_three": ["gemm"] * 3,
                                       "merged_gemm": ["gemm"]},
                               "fwd_bwd": {"three_gemms": ["k"] * 12, "compile_three": ["k"] * 10,
                                           "merged_gemm": ["k"] * 5}}
    text = fusion.gemm_table(data, "qkv", "fwd_bwd")
    assert "kernel 数（三个 / compile / 合并）" in text and "| 12 / 10 / 5 |" in text
    assert "torch.profiler 记录" in text


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
    assert "1.50×" in text and [r["label"] for r in fusion.by_peer_tie(data, "swiglu", "fwd")["level"]] == [row["label"]]
    entry["fwd"]["compile_hf"]["median_us"] = 90.0  # 10 % faster than ours: slower
    assert [r["ratio"] for r in fusion.by_peer_tie(data, "swiglu", "fwd")["slower"]] == [0.9]
