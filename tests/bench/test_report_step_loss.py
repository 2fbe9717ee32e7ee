"""bench/report/step_loss.py: the step table and targets of the set with its loss against Liger's full patch, on
the --quick record (CPU: the set with its loss) and on records edited to hold what a GPU run would."""
import copy

from bench.report import step_loss as report


def with_every_contender(quick, steps, losses, peaks):
    """The quick record with each contender given a GPU-like result (step ms, interval +-1 ms, loss, peak)."""
    data = copy.deepcopy(quick)
    ran = next(r for r in data["results"].values() if r["status"] == "ok")
    for name, step in steps.items():
        data["results"][name] = dict(copy.deepcopy(ran), contender=name, median_ms=step, ci95_ms=[step - 1, step + 1],
                                     loss=losses[name], peak_gib=peaks[name])
    data["config"]["pairs"] = [list(p) for p in data["config"]["pairs"]]
    return data


def test_quick_record_renders(quick_step_loss):
    results = quick_step_loss["results"]
    assert results["fusion_set_loss"]["status"] == "ok", results["fusion_set_loss"]
    assert results["fusion_set_loss"]["fusion_parts"]["loss"] is True
    rendered = report.render(quick_step_loss)
    assert set(rendered) == {"step_loss_table.md", "step_loss_targets.md"}
    assert "未比较" in rendered["step_loss_targets.md"]  # Liger did not run on the CPU


def test_targets_and_a_wrong_loss(quick_step_loss):
    names = ["liger", "fusion_set_loss", "compile", "liger_compile", "fusion_set_loss_compile"]
    steps = dict(zip(names, [400.0, 360.0, 390.0, 380.0, 350.0]))
    losses = dict(zip(names, [12.75, 12.748, 12.748, 5728.5, 12.748]))
    peaks = dict(zip(names, [28.9, 28.5, 45.0, 37.7, 28.0]))
    data = with_every_contender(quick_step_loss, steps, losses, peaks)
    target = report.eager_target(data)
    assert target["ratio"] == 360 / 400 and target["time"] is True and target["memory"] is True
    text = report.targets_text(data)
    assert "：达到；峰值显存不超过它：达到" in text
    assert "5728.5" in text and "Liger（全套补丁）+ torch.compile（5728.5" in text
    data["results"]["fusion_set_loss"].update(median_ms=390.0, ci95_ms=[389.0, 391.0], peak_gib=30.0)
    target = report.eager_target(data)
    assert target["time"] is False and target["memory"] is False  # 0.975 x Liger, more memory
    assert "未达到" in report.targets_text(data)
