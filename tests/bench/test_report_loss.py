"""bench/report/loss.py: the fused loss's tables and targets, on the --quick record (CPU: the contenders that
run under the interpreter) and on records edited to hold what a GPU run would (every contender, memory)."""
import copy

import torch

from bench.report import loss as report


def gpu_like(quick):
    """The quick record with every peer timed at the step's shape, with peak memory, as a GPU run records it."""
    data = copy.deepcopy(quick)
    data["results"]["skipped"] = {}
    entry = data["results"]["shapes"][0]
    ours = entry["fwd_bwd"]["ours"]
    for index, name in enumerate(data["config"]["peers"]):
        entry["fwd_bwd"][name] = dict(copy.deepcopy(ours), median_us=ours["median_us"] * (1.5 + index))
    for stats in entry["fwd_bwd"].values():
        stats["peak_bytes"] = 2 * 2**30
    return data


def test_renders_every_table_from_the_quick_record(quick_loss):
    rendered = report.render(quick_loss)
    assert set(rendered) == {"loss_env.md", "loss_table.md", "loss_sizes.md", "loss_chunks.md", "loss_targets.md"}
    table = rendered["loss_table.md"]
    ran = quick_loss["results"]["shapes"][0]["fwd_bwd"]
    assert all(f"| {report.label(name)} |" in table for name in ran if report.sweep_chunk(name) is None)
    for name in quick_loss["results"]["skipped"]:  # the caption says why each one did not run
        assert f"{report.label(name)}（" in table
    if not torch.cuda.is_available():  # on a GPU the skips are other reasons (a torch without F.linear_cross_entropy)
        assert "只在 GPU 上运行" in table
    chunks = rendered["loss_chunks.md"]
    assert all(f"| {chunk:,} |" in chunks for chunk in quick_loss["config"]["chunk_sweep"])


def test_targets_met_and_missed(quick_loss):
    data = gpu_like(quick_loss)
    met = report.targets(data)
    assert all(met[f"time:{name}"] for name in data["config"]["peers"])
    assert met["memory:liger"] is True and met["memory:cce"] is True
    stats = data["results"]["shapes"][0]["fwd_bwd"]
    stats["ours"]["peak_bytes"] = int(2.1 * 2**30)  # above Liger's, within 10 % of CCE's
    stats["liger"]["median_us"] = stats["ours"]["median_us"] * 0.99  # level within 2 %: met
    stats["cce"]["median_us"] = stats["ours"]["median_us"] * 0.9  # faster: missed
    met = report.targets(data)
    assert met["memory:liger"] is False and met["memory:cce"] is True
    assert met["time:liger"] is True and met["time:cce"] is False
    text = report.targets_text(data)
    assert "Liger：达到" in text and "Cut CE：未达到" in text


def test_a_wrong_loss_is_named(quick_loss):
    data = gpu_like(quick_loss)
    entry = data["results"]["shapes"][0]
    for phase in ("fwd", "fwd_bwd"):  # every loss on the reference first (on a GPU a peer may be off at this shape)
        for stats in entry[phase].values():
            stats.update(loss=entry["reference"]["loss"], loss_rel_err=0.0)
    assert "超过 1% 的：没有" in report.targets_text(data)
    wrong = data["results"]["shapes"][0]["fwd_bwd"]["liger_compile"]
    wrong.update(loss=5728.5, loss_rel_err=448.0)
    text = report.targets_text(data)
    assert "Liger + compile 在" in text and "5728.5" in text


def test_sizes_table_gives_the_gemm_floor_where_measured():
    """A shape with ``gemm_floor`` shows its total in ms; one without shows "—", and the caption says which."""
    import copy

    from bench import store
    from bench.report import loss as report
    from bench.report import render

    data = copy.deepcopy(store.load("loss", render.data_gpu("loss")))
    for entry in data["results"]["shapes"]:
        entry.pop("gemm_floor", None)
    without = report.sizes_table(data)
    assert "没有单独测 GEMM 下限" in without
    data["results"]["shapes"][0]["gemm_floor"] = {"total_us": 81234.0}
    text = report.sizes_table(data)
    first = next(line for line in text.splitlines() if line.startswith(f"| {data['results']['shapes'][0]['label']}"))
    assert first.split("|")[3].strip() == "81.2" and "单独计时之和" in text
