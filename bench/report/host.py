"""host.json -> what one RMSNorm forward + backward costs the CPU, contender by contender, and where ours spends it.

* ``host_table.md`` (a report: ``render(data)``, from host.json alone): rows = contenders, columns = shapes,
  each cell "host / wall" µs per eager forward + backward call.
* ``host_breakdown.md`` (same): ours' host time per part (forward alone, backward called directly, argument
  preparation, one launch through Triton's launcher, autograd's x * 2 forward + backward) at each shape.
* ``summary_values(load)`` ({{ host.NAME }}, it reads step.json too): the figures of the methods page's reading:
  at which shapes ours' host-inclusive call is slower than F.rms_norm's, what the breakdown says the time goes
  to, and what that host time amounts to in the 8-layer training step (its words: tests/test_readings_fusion.py).

Two host times count as different only when they differ by more than the spread of the timing loops of both
(``host_range_us``: min to max over the repeats, as a fraction of the median).
"""
from __future__ import annotations

from bench.report import prose, tables

NAME = "host"
STEP = "step"

# The contenders as this page names them (host.json's ids are the op-level ones of names.py's OP_LABELS).
LABELS = {"hf": "HF eager", "torch_rms_norm": "F.rms_norm", "compile_hf": "torch.compile(HF)", "liger": "Liger",
          "quack": "quack", "triton": "本站 RMSNorm"}
PEER = "torch_rms_norm"  # the contender ours is held against: torch's own fused op
STEP_PEER = "torch_rmsnorm"  # the same, in step.json (HF + F.rms_norm)
PARTS = {
    "forward": "forward 单独调用",
    "forward_usual": "forward 单独调用（不用启动计划）",
    "backward_direct": "backward 直接调用",
    "forward_arguments": "参数准备（forward_arguments）",
    "one_launch": "一次 launch（kernel[grid]）",
    "planned_launch": "一次 launch（启动计划）",
    "autograd_mul": "autograd：x*2 的 forward + backward",
}
PLANNED_PARTS = {"forward_usual", "planned_launch"}  # host.json from before the launch plans has neither
HOST_BOUND = 0.01  # wall within 1 % of host: the call waited on nothing but the CPU


def label(contender: str) -> str:
    return LABELS.get(contender, contender)


def shape_head(entry: dict) -> str:
    return entry["label"]


def shapes_zh(data: dict) -> str:
    """'H=1024 为 16384×1024，…': the shapes the short column heads stand for."""
    return "，".join(f"{e['label']} 为 {e['rows']}×{e['width']}" for e in data["results"]["shapes"])


def us(value: float) -> str:
    return tables.fmt(value, 3)


def spread(timing: dict) -> float:
    lo, hi = timing["host_range_us"]
    return (hi - lo) / timing["host_us"]


def differ(a: dict, b: dict, key: str = "wall_us") -> bool:
    """``a`` and ``b`` (two timings) differ by more than the spread of either's timing loops."""
    fast, slow = sorted((a[key], b[key]))
    return slow / fast - 1 > max(spread(a), spread(b))


def _timer(cfg: dict) -> str:
    return (f"主机时间 = 连续 {cfg['calls']} 次不同步调用的 perf_counter 时间 ÷ {cfg['calls']}，墙钟时间再加上最后一次 "
            f"torch.cuda.synchronize；取 {cfg['repeats']} 轮的中位数；{tables.dtype_short(cfg['dtype'])}")


def _cpu(env: dict) -> str:
    count = f"（{env['cpu_count']} 个逻辑核）" if env.get("cpu_count") else ""
    return f"CPU：{env.get('cpu') or '未记录'}{count}"


def host_table(data: dict) -> str:
    cfg, shapes = data["config"], data["results"]["shapes"]
    body = []
    for contender in cfg["contenders"]:
        cells = []
        for entry in shapes:
            t = entry["fwd_bwd"].get(contender)
            cells.append(f"{us(t['host_us'])} / {us(t['wall_us'])}" if t else "未运行")
        body.append([label(contender), *cells])
    table = tables.md_table(["档位（主机 / 墙钟，µs）", *(shape_head(e) for e in shapes)], body)
    caption = (f"每格为一次 forward + backward（eager autograd：`fn(x).backward(dy)`）的主机时间 / 墙钟时间（µs）；"
               f"{shapes_zh(data)}；{_timer(cfg)}；主机时间接近墙钟时间的调用是主机受限的；{_cpu(data['environment'])}")
    return prose.page(table, caption)


def breakdown_table(data: dict) -> str:
    cfg, shapes = data["config"], data["results"]["shapes"]
    ours = cfg["ours"]
    body = [["完整 forward + backward（autograd）", *(us(e["fwd_bwd"][ours]["host_us"]) if ours in e["fwd_bwd"]
                                                     else "未运行" for e in shapes)]]
    for part, name in PARTS.items():
        body.append([name, *(us(e["ours"][part]["host_us"]) if part in e.get("ours", {}) else "—" for e in shapes)])
    table = tables.md_table([f"{label(ours)}（主机 µs）", *(shape_head(e) for e in shapes)], body)
    planned = any("planned_launch" in e.get("ours", {}) for e in shapes)
    caption = ("forward 单独调用 = 不经 autograd 的 forward" + ("（走启动计划：分配输出 + 一次计划内 launch）；"
               "不用启动计划 = 参数准备 + 一次 kernel[grid]" if planned else "（参数准备 + 一次 launch）") +
               "；backward 直接调用 = 不经 autograd 调用 backward 函数；一次 launch（kernel[grid]）= 参数备好后经 Triton 的 "
               "Python launcher 发射一次 forward kernel；" + ("一次 launch（启动计划）= 把第一次调用编译好的 kernel 和不变的"
               "参数记下，之后直接交给 launcher；" if planned else "") +
               "autograd 一行是任何算子经 autograd 的 backward() 调用都要付的固定开销；" + shapes_zh(data) + "；" + _timer(cfg))
    return prose.page(table, caption)


def render(data: dict) -> dict[str, str]:
    return {"host_table.md": host_table(data), "host_breakdown.md": breakdown_table(data)}


# ---------------------------------------------------------------- the methods page's reading (reads step.json too)

def _span(values, form=us) -> str:
    return prose.span(values, form) + " µs"


def shape_key(entry: dict) -> str:
    """'h1024', 'k_norm': a shape's label as a value name."""
    return entry["label"].lower().replace("=", "")


def step_counts(step_cfg: dict) -> dict[tuple[int, int], int]:
    """RMSNorm calls per step of the 8-layer run by (rows, width): two per layer and the final norm on the
    hidden states, one q_norm and one k_norm per layer on the heads."""
    g = step_cfg["geometry"]
    tokens, layers = step_cfg["batch"] * step_cfg["seq_len"], g["num_hidden_layers"]
    counts = {(tokens, g["hidden_size"]): 2 * layers + 1}
    for heads in (g["num_attention_heads"], g["num_key_value_heads"]):
        key = (tokens * heads, g["head_dim"])
        counts[key] = counts.get(key, 0) + layers
    return counts


def step_cost(data: dict, step: dict) -> dict | None:
    """What ours' extra host time over F.rms_norm's comes to in the 8-layer step (calls per step × the host
    times of the table), next to the step times of both and whether their 95 % intervals are disjoint; None when
    the host run does not cover the step's shapes or a contender is missing."""
    ours_id = data["config"]["ours"]
    results = step["results"]
    mine, peer = results.get(step["config"]["ours"], {}), results.get(STEP_PEER, {})
    if mine.get("status") != "ok" or peer.get("status") != "ok":
        return None
    by_shape = {(e["rows"], e["width"]): e for e in data["results"]["shapes"]}
    counts = step_counts(step["config"])
    if any(k not in by_shape or not {ours_id, PEER} <= set(by_shape[k]["fwd_bwd"]) for k in counts):
        return None
    calls = sum(counts.values())
    if mine.get("norm_count") not in (None, calls):
        return None
    extra_ms = sum(n * (by_shape[k]["fwd_bwd"][ours_id]["host_us"] - by_shape[k]["fwd_bwd"][PEER]["host_us"])
                   for k, n in counts.items()) / 1e3
    a, b = mine["ci95_ms"], peer["ci95_ms"]
    return {"calls": calls, "extra_ms": extra_ms, "step_ms": mine["median_ms"], "peer_ms": peer["median_ms"],
            "disjoint": a[1] < b[0] or b[1] < a[0]}


def summary_values(load) -> dict[str, dict[str, str]]:
    """{{ host.NAME }}: the figures of the methods page's hand-written reading: per shape ours' and F.rms_norm's
    wall time per forward + backward and their ratio; the host-bound margin; ours' host time by part (spans over
    the shapes); what the extra host time comes to in the 8-layer step."""
    data, step = load(NAME), load(STEP)
    ours = data["config"]["ours"]
    out = {"host_bound": prose.pct(HOST_BOUND)} | slower_values(data)
    for e in data["results"]["shapes"]:
        if {ours, PEER} <= set(e["fwd_bwd"]):
            mine, peer, key = e["fwd_bwd"][ours]["wall_us"], e["fwd_bwd"][PEER]["wall_us"], shape_key(e)
            out |= {f"{key}_ours": f"{us(mine)} µs", f"{key}_torch": f"{us(peer)} µs",
                    f"{key}_vs_torch": prose.times(mine / peer)}
    parts = [e for e in data["results"]["shapes"] if set(PARTS) <= set(e.get("ours", {})) and ours in e["fwd_bwd"]]
    if parts:
        def host(part):
            return [e["ours"][part]["host_us"] for e in parts]

        direct = [f + b for f, b in zip(host("forward"), host("backward_direct"))]
        whole = [e["fwd_bwd"][ours]["host_us"] for e in parts]
        out |= {name: _span(host(part)) for name, part in (
            ("launch", "one_launch"), ("planned_launch", "planned_launch"), ("forward_usual", "forward_usual"),
            ("forward", "forward"), ("arguments", "forward_arguments"), ("autograd_mul", "autograd_mul"))}
        out |= {"direct": _span(direct), "direct_share": prose.pct_span([d / w for d, w in zip(direct, whole)]),
                "rest": _span([w - d for w, d in zip(whole, direct)])}
    cost = step_cost(data, step)
    if cost:
        cfg = step["config"]
        out |= {"step_layers": str(cfg["geometry"]["num_hidden_layers"]),
                "step_shape": f"B={cfg['batch']}、T={cfg['seq_len']}", "step_calls": str(cost["calls"]),
                "step_extra_ms": f"{tables.fmt(cost['extra_ms'])} ms", "step_ms": f"{tables.fmt(cost['step_ms'], 4)} ms",
                "step_extra_share": prose.pct(cost["extra_ms"] / cost["step_ms"], 1),
                "step_gain": prose.pct(abs(cost["peer_ms"] / cost["step_ms"] - 1), 1)}
    return {"host": out}


def slower_shapes(data: dict) -> list[dict]:
    """The shapes where ours' host-inclusive forward + backward is slower than F.rms_norm's by more than the
    spread of either's timing loops (:func:`differ`)."""
    ours = data["config"]["ours"]
    return [e for e in data["results"]["shapes"] if {ours, PEER} <= set(e["fwd_bwd"])
            and differ(e["fwd_bwd"][ours], e["fwd_bwd"][PEER])
            and e["fwd_bwd"][ours]["wall_us"] > e["fwd_bwd"][PEER]["wall_us"]]


def slower_values(data: dict) -> dict[str, str]:
    """{{ host.slower_shapes }}, {{ host.slower_ratio }}: where ours' host-inclusive call is slower than
    F.rms_norm's (篇 2 §6.2) and by how much (wall time over F.rms_norm's)."""
    ours, slower = data["config"]["ours"], slower_shapes(data)
    labels = [e["label"] for e in slower]
    return {"slower_shapes": "、".join(labels[:-1]) + (" 和 " if len(labels) > 1 else "") + (labels[-1] if labels else ""),
            "slower_ratio": prose.times_span((e["fwd_bwd"][ours]["wall_us"] / e["fwd_bwd"][PEER]["wall_us"]
                                              for e in slower), 1) if slower else ""}
