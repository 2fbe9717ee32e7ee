"""bench/report/width_sweep.py: the bucket table, the plots and the values of the pages' readings say what the data
says, a width where ours raised is told apart, and the facts follow the numbers and the run's tie rule and targets."""
from __future__ import annotations

import copy
import json

import pytest

from bench.harness.op_timing import min_bytes
from bench.report import width_sweep
from bench_fixtures import check_artifacts


def test_renders_and_states_the_facts(quick_width_sweep):
    sweep = quick_width_sweep
    widths = len(sweep["results"]["shapes"])
    rendered = width_sweep.render(sweep)
    assert set(rendered) == {"width_sweep.md", "width_sweep.svg", "width_sweep_all.svg"}
    assert rendered["width_sweep.md"].startswith("| ")  # the methods page reads the table by hand
    assert width_sweep.values(sweep)["widths"] == str(widths)
    assert rendered == width_sweep.render(json.loads(json.dumps(sweep)))  # deterministic
    check_artifacts(rendered)
    facts = width_sweep.sweep_facts(sweep)
    assert facts["fwd"]["unsupported"] == [] and facts["fwd"]["compared"] == widths
    # a width where ours raised is counted, not dropped silently
    broken = copy.deepcopy(sweep)
    wide = broken["results"]["shapes"][-1]
    for phase in ("fwd", "fwd_bwd"):
        wide[phase].pop("triton")
    wide["errors"]["triton"] = "ValueError: rows too wide"
    assert width_sweep.sweep_facts(broken)["fwd"]["unsupported"] == [wide["width"]]
    assert width_sweep.render(broken)["width_sweep.md"].startswith("| ")  # the table still renders
    assert f"H={wide['width']}" not in width_sweep.values(broken)["fwd_behind"]  # and it is not counted as behind


def _with_times(sweep, ours, peer, phase="fwd"):
    """The quick data with ours' and F.rms_norm's times set per width (µs), other peers removed."""
    data = copy.deepcopy(sweep)
    for s in data["results"]["shapes"]:
        s[phase] = {}
        for name, us in (("triton", ours(s["width"])), ("torch_rms_norm", peer(s["width"]))):
            if us is not None:
                s[phase][name] = {"median_us": us, "gbps": s[f"bytes_{phase}"] / (us * 1e3)}
        s["errors"] = {}
    return data


@pytest.fixture
def four_widths(quick_width_sweep):
    """Ours and one peer at four widths, ours at a set share of the copy ceiling and the peer at another."""
    widths = [256, 1000, 2048, 3000]
    sweep = copy.deepcopy(quick_width_sweep)
    sweep["results"]["shapes"] = [dict(sweep["results"]["shapes"][0], width=w, label=f"H={w}",
                                       bytes_fwd=min_bytes(16, w)["fwd"]) for w in widths]
    ceiling = width_sweep.sweep_ceiling(sweep["results"])["gbps"]
    # ours' share of the ceiling, and the peer's; no share sits on a target (0.85, 0.95), where
    # rounding in the run's ceiling would decide the miss
    at_share = {256: 0.5, 1000: 0.9, 2048: 0.80, 3000: 0.96}
    peer = {256: 0.5 * 1.015, 1000: 0.9 * 0.9, 2048: 0.8 * 1.25, 3000: 0.96}

    def us(share, w):
        return min_bytes(16, w)["fwd"] / (share * ceiling * 1e3)

    return _with_times(sweep, lambda w: us(at_share[w], w), lambda w: us(peer[w], w))


def test_sweep_facts_follow_the_data(four_widths):
    facts = width_sweep.sweep_facts(four_widths)["fwd"]
    assert facts["compared"] == 4 and facts["level_or_ahead"] == 3  # 256 within 2 %, 1000 ahead, 3000 level
    assert facts["behind"] == [2048] and facts["worst"]["width"] == 2048
    assert facts["worst"]["ratio"] == pytest.approx(0.8)
    assert facts["misses"] == [2048]  # 80 % < 85 % at a width >= 1024; 256 is below the targets' first width
    v = width_sweep.values(four_widths)
    assert (v["widths"], v["fwd_level_or_ahead"], v["fwd_worst_width"], v["fwd_worst_peer"]) == ("4", "3", "H=2048",
                                                                                                  "F.rms_norm")
    assert (v["fwd_worst_slower"], v["fwd_target"], v["fwd_misses"], v["tie"]) == ("25%", "85%", "H=2048", "2%")


def test_the_tie_rule_and_the_targets_come_from_the_run(four_widths):
    """The same times under a run that recorded a 1 % tie rule and other targets say other words."""
    data = copy.deepcopy(four_widths)
    data["config"].update(tie_rule="within_1pct", targets={"fwd": 0.95, "fwd_bwd": 0.75}, target_from_width=2048)
    facts = width_sweep.sweep_facts(data)["fwd"]
    assert facts["level_or_ahead"] == 2 and facts["behind"] == [2048, 256]  # 256's peer is 1 % ahead
    assert facts["misses"] == [2048]
    v = width_sweep.values(data)
    assert (v["tie"], v["target_from"], v["fwd_target"], v["fwd_misses"]) == ("1%", "2048", "95%", "H=2048")


def test_the_values_name_the_worst_width_of_each_direction(four_widths):
    """{{ width_sweep.NAME }}: per direction the widths level or ahead, behind, and the worst (width, peer, ratio);
    worst() is the lowest of both directions: here the forward at H=2048 (0.80×), the other way round when the
    backward is worse."""
    data = copy.deepcopy(four_widths)
    for s in data["results"]["shapes"]:  # forward + backward: ours 10 % behind at H=3000 only
        s["fwd_bwd"] = copy.deepcopy(s["fwd"])
        s["fwd_bwd"]["torch_rms_norm"] = dict(s["fwd"]["triton"], median_us=s["fwd"]["triton"]["median_us"] * (
            0.9 if s["width"] == 3000 else 1.1))
    low = width_sweep.worst(data)
    assert (low["phase"], low["width"], low["peer"]) == ("fwd", 2048, "torch_rms_norm")
    v = width_sweep.values(data)
    assert (v["fwd_worst_width"], v["fwd_worst_peer"], v["fwd_worst_ratio"]) == ("H=2048", "F.rms_norm", "0.80×")
    assert (v["fwd_bwd_worst_width"], v["fwd_bwd_worst_ratio"], v["fwd_bwd_behind"]) == ("H=3000", "0.90×", "H=3000")
    assert (v["widths"], v["fwd_level_or_ahead"], v["fwd_bwd_level_or_ahead"], v["tie"]) == ("4", "3", "3", "2%")
    for s in data["results"]["shapes"]:  # now the forward + backward is worse: 0.70× at H=3000
        if s["width"] == 3000:
            s["fwd_bwd"]["torch_rms_norm"]["median_us"] = s["fwd_bwd"]["triton"]["median_us"] * 0.7
    assert (width_sweep.worst(data)["phase"], width_sweep.values(data)["fwd_bwd_worst_ratio"]) == ("fwd_bwd", "0.70×")


def test_the_committed_sentence_and_plot_name_the_true_worst():
    """On the H200 sweep the plot names the worst point of either direction."""
    from bench import store
    from bench.report import plots

    data = store.load("width_sweep")
    facts = width_sweep.sweep_facts(data)
    low = width_sweep.worst(data)
    assert low["ratio"] == min(facts[p]["worst"]["ratio"] for p in ("fwd", "fwd_bwd"))
    rendered = width_sweep.render(data)
    check_artifacts(rendered)
    assert "width_sweep_article.md" not in rendered  # the article's sentence is hand-written (tests/test_readings_p1p2.py)
    texts = plots.svg_texts(rendered["width_sweep.svg"])  # the ratio plot: two directions, the tie band, the worst
    assert {"forward", "forward + backward", "持平（相差 2% 以内）", "用时比：最快的对比方案 ÷ 本站"} <= set(texts)
    assert f"最差：forward，H={low['width']}，{low['ratio']:.2f}×" in texts
    every = plots.svg_texts(rendered["width_sweep_all.svg"])  # the methods page's plot: every contender
    assert {"本站实现", "F.rms_norm", "torch.compile(HF)", "Liger", "quack"} <= set(every)


def test_the_wide_forward_values_group_the_widths_by_the_tie(four_widths):
    """Past the chunked bound (here 1000 lanes), the widths where ours' forward is ahead of, level with or behind the
    fastest peer (the run's tie), each group's peer ÷ ours and its fastest peers."""
    data = copy.deepcopy(four_widths)
    data["config"]["chunked_backward_above"] = 1000
    for s in data["results"]["shapes"]:
        if s["width"] == 3000:  # torch.compile 10 % faster than ours there, F.rms_norm slower
            ours = s["fwd"]["triton"]
            s["fwd"]["compile_hf"] = dict(ours, median_us=ours["median_us"] / 1.1)
    v = width_sweep.values(data)
    assert v["wide_from"] == "1000" and "wide_fwd_level" not in v and "wide_fwd_ahead" not in v
    assert (v["wide_fwd_behind"], v["wide_fwd_behind_ratio"]) == ("H=2048、H=3000", "0.80–0.91")
    assert v["wide_fwd_behind_peers"] == "F.rms_norm、torch.compile(HF)"
    for s in data["results"]["shapes"]:  # now level at 2048 (within 2 %) and ahead at 3000
        ours = s["fwd"]["triton"]
        if s["width"] == 2048:
            s["fwd"]["torch_rms_norm"] = dict(ours, median_us=ours["median_us"] * 0.99)
        if s["width"] == 3000:  # every peer 5 % slower
            for peer in data["config"]["peers"]:
                if peer in s["fwd"]:
                    s["fwd"][peer] = dict(ours, median_us=ours["median_us"] * 1.05)
    v = width_sweep.values(data)
    assert (v["wide_fwd_level"], v["wide_fwd_level_ratio"], v["wide_fwd_level_peers"]) == ("H=2048", "0.99", "F.rms_norm")
    assert (v["wide_fwd_ahead"], v["wide_fwd_ahead_ratio"]) == ("H=3000", "1.05") and "wide_fwd_behind" not in v
    data["config"]["chunked_backward_above"] = 4096
    assert not any(name.startswith("wide_fwd_") for name in width_sweep.values(data))


def test_the_worst_points_label_sits_inside_the_plot(monkeypatch):
    """The "最差" label is drawn inside the axes, clear of the tick labels, whichever side the worst width is on."""
    import matplotlib.pyplot as plt

    from bench import store

    if not store.data_path("width_sweep").exists():
        pytest.skip("width_sweep.json not committed")
    data = store.load("width_sweep")
    figures = []
    monkeypatch.setattr(width_sweep.plots, "svg_of", lambda fig: figures.append(fig) or "")
    for flip in (False, True):  # the committed worst width, then the same sweep with its widths mirrored
        case = copy.deepcopy(data)
        if flip:
            widths = sorted(s["width"] for s in case["results"]["shapes"])
            mirror = dict(zip(widths, reversed(widths)))
            for s in case["results"]["shapes"]:
                s["width"] = mirror[s["width"]]
        figures.clear()
        width_sweep._ratio_plot(case)
        fig = figures[0]
        ax = fig.axes[0]
        renderer = fig.canvas.get_renderer()
        label = next(c for c in ax.texts if c.get_text().startswith("最差："))
        box, frame = label.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, (box, frame)
        ticks = [t.get_window_extent(renderer) for t in ax.get_yticklabels() + ax.get_xticklabels() if t.get_text()]
        assert not any(box.overlaps(t) for t in ticks)
        plt.close(fig)
