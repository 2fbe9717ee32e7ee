"""host.json -> what one RMSNorm forward + backward costs the CPU, contender by contender, and where ours spends it.

* ``host_table.md`` (a report: ``render(data)``, from host.json alone): rows = contenders, columns = shapes,
  each cell "host / wall" µs per eager forward + backward call.
* ``host_breakdown.md`` (same): ours' host time per part (forward alone, backward called directly, argument
  preparation, one launch through Triton's launcher, autograd's x * 2 forward + backward) at each shape.
* ``host_sentence.md`` (a summary: ``render_summary(load)``, it reads step.json too): at which shapes ours'
  host-inclusive call is slower than F.rms_norm's, what the breakdown says the time goes to, and what that
  host time amounts to in the 8-layer training step, where the step time shows whether it was hidden.
* ``values(data)``: the shapes where that call is slower and by how much, for 篇 2 §6.2's hand-written sentence.

Two host times count as different only when they differ by more than the spread of the timing loops of both
(``host_range_us``: min to max over the repeats, as a fraction of the median).
"""
from __future__ import annotations

from bench.report import prose, tables
from bench.report.fullsize import spaced

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


# ---------------------------------------------------------------- the sentence (reads step.json too)

def _span(values, form=us) -> str:
    return prose.span(values, form)


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


def step_clause(data: dict, step: dict) -> str | None:
    """What ours' extra host time comes to in the 8-layer step, and whether the step shows it; None when the
    host run does not cover the step's shapes or a contender is missing."""
    ours_id = data["config"]["ours"]
    step_ours_id = step["config"]["ours"]
    results = step["results"]
    mine, peer = results.get(step_ours_id, {}), results.get(STEP_PEER, {})
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
    if extra_ms <= 0:
        return None
    cfg = step["config"]
    a, b = mine["ci95_ms"], peer["ci95_ms"]
    disjoint = a[1] < b[0] or b[1] < a[0]
    ratio = peer["median_ms"] / mine["median_ms"]
    head = (f"{cfg['geometry']['num_hidden_layers']} 层训练 step（B={cfg['batch']}、T={cfg['seq_len']}）每步 {calls} 次 "
            f"RMSNorm 调用，按上表{label(ours_id)}比 F.rms_norm 每步多花约 {tables.fmt(extra_ms)} ms 主机时间"
            f"（一步 {tables.fmt(mine['median_ms'], 4)} ms 的 {prose.pct(extra_ms / mine['median_ms'], 1)}）")
    if disjoint and ratio > 1:
        return (head + f"，step 却比 F.rms_norm 快 {prose.pct(ratio - 1, 1)}（95% 区间不重叠）：在这种 GPU 受限的 step 里，"
                "这笔主机开销被 GPU 工作盖住了")
    if not disjoint:
        return head + "，两者的 step 持平（95% 区间重叠）：这笔主机开销没有在 step 上显出来"
    return head + f"，step 也比 F.rms_norm 慢 {prose.pct(1 / ratio - 1, 1)}（95% 区间不重叠）"


def sentence(data: dict, step: dict) -> str:
    ours = data["config"]["ours"]
    shapes = [e for e in data["results"]["shapes"] if {ours, PEER} <= set(e["fwd_bwd"])]
    if not shapes:
        return f"{label(ours)}或 F.rms_norm 这次没有跑成，见表。\n"
    slower, faster = [], []
    for e in shapes:
        mine, peer = e["fwd_bwd"][ours], e["fwd_bwd"][PEER]
        if differ(mine, peer):
            (slower if mine["wall_us"] > peer["wall_us"] else faster).append(e)

    def pair(e):
        return f"{us(e['fwd_bwd'][ours]['wall_us'])} 对 {us(e['fwd_bwd'][PEER]['wall_us'])} µs"

    if slower:
        ratios = [e["fwd_bwd"][ours]["wall_us"] / e["fwd_bwd"][PEER]["wall_us"] for e in slower]
        text = (f"含主机开销，{label(ours)}一次 forward + backward 在 {prose.join(e['label'] for e in slower)} 上比 "
                f"F.rms_norm 慢，墙钟时间是它的 {'、'.join(prose.times(r) for r in ratios)}"
                f"（{'、'.join(pair(e) for e in slower)}）")
        if faster:
            text += f"，只在 {prose.join(e['label'] for e in faster)} 上更快（{'、'.join(pair(e) for e in faster)}）"
        bound = all(e["fwd_bwd"][ours]["wall_us"] / e["fwd_bwd"][ours]["host_us"] - 1 < HOST_BOUND for e in slower)
        if bound:
            text += f"；慢的这几处{label(ours)}的墙钟与主机时间相差不到 {prose.pct(HOST_BOUND)}：调用是主机受限的"
        text += "。"
    else:
        text = (f"含主机开销，{label(ours)}一次 forward + backward 在所有形状上都不比 F.rms_norm 慢"
                f"（墙钟 {'、'.join(pair(e) for e in shapes)}）。")

    parts = [e for e in shapes if set(PARTS) - PLANNED_PARTS <= set(e.get("ours", {}))]
    if parts:
        def host(e, part):
            return e["ours"][part]["host_us"]

        n = len(step["results"].get(step["config"]["ours"], {}).get("profile", {}).get("named_rmsnorm_kernels") or [])
        launch = [host(e, "one_launch") for e in parts]
        direct = [host(e, "forward") + host(e, "backward_direct") for e in parts]
        whole = [e["fwd_bwd"][ours]["host_us"] for e in parts]
        rest = [w - d for w, d in zip(whole, direct)]
        planned = [e for e in parts if PLANNED_PARTS <= set(e["ours"])]
        if planned:
            text += (f"拆开看{label(ours)}的主机时间：Triton 的 kernel[grid] 发射一次 kernel 要 {_span(launch)} µs，"
                     f"启动计划（第一次调用后记下编译好的 kernel 和不变的参数）只要 "
                     f"{_span([host(e, 'planned_launch') for e in planned])} µs；forward 单独调用因此从 "
                     f"{_span([host(e, 'forward_usual') for e in planned])} µs 降到 "
                     f"{_span([host(e, 'forward') for e in planned])} µs（省下的还有参数准备："
                     f"{_span([host(e, 'forward_arguments') for e in parts])} µs）；")
        else:
            text += f"拆开看{label(ours)}的主机时间：Triton 的 Python launcher 发射一次 kernel 要 {_span(launch)} µs"
            if n:
                text += f"，一次 forward + backward 发射 {n} 个 kernel，计 {_span([n * v for v in launch])} µs"
            text += f"；forward 的参数准备 {_span([host(e, 'forward_arguments') for e in parts])} µs；"
        text += (f"不经 autograd 直接调用 forward 和 backward 合计 {_span(direct)} µs，"
                 f"只占经 autograd 调用的 {prose.pct_span([d / w for d, w in zip(direct, whole)])}，"
                 f"其余 {_span(rest)} µs 是经由 autograd 多出来的："
                 f"单是 autograd 一次 x*2 的 forward + backward（任何算子的 backward() 调用都要付）就要 "
                 f"{_span([host(e, 'autograd_mul') for e in parts])} µs。")
    clause = step_clause(data, step)
    if clause:
        text += clause + "；"
        text += "GPU 工作少、主机跟不上的设置（小模型、短序列）则要直接付这笔开销。" if slower else ""
        text = text.rstrip("；") + ("" if text.endswith("。") else "。")
    return text + "\n"


def render_summary(load) -> dict[str, str]:
    data, step = load(NAME), load(STEP)
    return {"host_sentence.md": spaced(sentence(data, step))}


def slower_shapes(data: dict) -> list[dict]:
    """The shapes where ours' host-inclusive forward + backward is slower than F.rms_norm's by more than the
    spread of either's timing loops (:func:`differ`)."""
    ours = data["config"]["ours"]
    return [e for e in data["results"]["shapes"] if {ours, PEER} <= set(e["fwd_bwd"])
            and differ(e["fwd_bwd"][ours], e["fwd_bwd"][PEER]) and e["fwd_bwd"][ours]["wall_us"] > e["fwd_bwd"][PEER]["wall_us"]]


def values(data: dict) -> dict[str, str]:
    """{{ host.NAME }}: where ours' host-inclusive call is slower than F.rms_norm's (篇 2 §6.2) and by how much
    (wall time over F.rms_norm's)."""
    ours, slower = data["config"]["ours"], slower_shapes(data)
    labels = [e["label"] for e in slower]
    return {"slower_shapes": "、".join(labels[:-1]) + (" 和 " if len(labels) > 1 else "") + (labels[-1] if labels else ""),
            "slower_ratio": prose.times_span((e["fwd_bwd"][ours]["wall_us"] / e["fwd_bwd"][PEER]["wall_us"]
                                              for e in slower), 1) if slower else ""}
