"""p1_profile.json -> 篇1 §二–§四: the static reading, the profiled step, the layer's timeline, launch overhead."""
from __future__ import annotations

import pathlib

from bench import store
from bench.report import plots, prose, tables
from bench.report.names import CATEGORY_COLOURS, CATEGORY_ZH, PASTEL_FILL, PASTEL_LINE

NAME = "p1_profile"


def _us(value):
    return tables.fmt(value) if value is not None else "—"


def _category(name):
    return CATEGORY_ZH.get(name, name)


STEP_ZH = "一个训练 step（forward + backward，不含优化器）"


def _caption(data, lead=STEP_ZH, seq_len=True, extra=""):
    """*<lead>：Qwen3-8B 层几何，4 个解码层，B=1，T=4096，bf16，sdpa。<extra>*: the setup of the profiled step."""
    c = data["config"]
    setup = "，".join(p for p in (f"Qwen3-{c['size']} 层几何", f"{c['layers']} 个解码层", f"B={c['batch']}",
                                  f"T={c['seq_len']}" if seq_len else "", tables.dtype_short(c["dtype"]),
                                  c["attention"]) if p)
    return prose.caption(f"{lead}：{setup}" + (f"。{extra}" if extra else ""))


def _modules_table(data):
    s = data["results"]["static"]
    rows = [[f"`{name}`", f"{count:,}", f"{s['parameters'].get(name, 0):,}"] for name, count in s["modules"].items()]
    table = tables.md_table(["模块类", "个数", "参数量（自身）"], rows)
    return table + prose.caption(
        f"Qwen3-{s['size']}，{s['num_hidden_layers']} 层，在 meta 设备上构建，共 {s['total_parameters']:,} 个参数",
        f"Qwen3RMSNorm 个数 = 4 × {s['num_hidden_layers']} + 1 = {s['expected_rmsnorm']}", sep="；")


def _graph_table(data):
    g = data["results"]["static"]["graph"]
    rows = []
    for entry in g["fx"]:
        if entry["ok"]:
            kinds = ", ".join(f"{k}×{v}" for k, v in entry["op_kinds"].items())
            rows.append([f"`{entry['module']}`", "✅", kinds])
        else:
            rows.append([f"`{entry['module']}`", "❌", f"`{entry['error']}`"])
    return tables.md_table(["模块", "symbolic_trace", "算子种类，或失败原因"], rows, align="lcl")


def _export_layer_table(data):
    g = data["results"]["static"]["graph"]
    rows = [[f"`{k}`", v] for k, v in g["export_layer_op_kinds"].items()]
    return tables.md_table(["ATen 算子", "次数"], rows) + prose.caption(
        "用 `torch.export` 导出一个 `Qwen3DecoderLayer`，按种类统计 ATen 算子")


def norms_per_layer(static: dict) -> int:
    """RMSNorms per decoder layer (4: two hidden-size norms, q_norm, k_norm), from the static reading's
    expected count, 4 × layers + 1."""
    return (static["expected_rmsnorm"] - 1) // static["num_hidden_layers"]


def _export_patterns_table(data):
    static = data["results"]["static"]
    g = static["graph"]
    layers = g["export_model_layers"]
    per_layer = norms_per_layer(static)
    expected = {"RMSNorm": f"{per_layer} × {layers} + 1 = {per_layer * layers + 1}",
                "RoPE rotate_half": f"2 × {layers} = {2 * layers}", "SwiGLU": f"1 × {layers} = {layers}"}
    rows = [[name, count, expected.get(name, "")] for name, count in g["export_model_patterns"].items()]
    return tables.md_table(["融合模式", "图中匹配次数", "按模块个数推算"], rows) + prose.caption(
        f"用 `torch.export` 导出整个 `Qwen3ForCausalLM`：{layers} 层（宽度取得很小，算子个数与宽度无关）",
        f"共 {g['export_model_ops']:,} 个 ATen 算子")


def _kernels_table(data):
    m = data["results"]["main"]
    rows = [[f"`{r['kernel']}`", _category(r["category"]), r["calls"], _us(r["total_us"]), _us(r["mean_us"]),
             f"{100 * r['share']:.1f}%"] for r in m["kernels"]]
    headers = ["kernel（短名）", "类别", "调用次数", "总耗时（µs）", "平均（µs）", "占 kernel 时间"]
    return tables.md_table(headers, rows, align="llrrrr") + _caption(data)


def _categories_table(data):
    m = data["results"]["main"]
    rows = [[_category(r["category"]), r["kernels"], _us(r["total_us"]), f"{100 * r['share']:.1f}%",
             _us(r["total_us"] / r["kernels"])] for r in m["categories"]]
    headers = ["类别", "kernel 数", "总耗时（µs）", "占 kernel 时间", "平均（µs）"]
    return tables.md_table(headers, rows) + _caption(data)


def _ops_table(data):
    m = data["results"]["main"]
    on_device = any(r["self_device_us"] for r in m["top_ops"])
    key = "self_device_us" if on_device else "self_cpu_us"
    label = "自身 GPU 时间（µs）" if on_device else "自身 CPU 时间（µs）"
    rows = [[f"`{r['op']}`", r["calls"], _us(r[key])] for r in m["top_ops"]]
    return tables.md_table(["ATen 算子", "调用次数", label], rows) + _caption(data)


def _launch_table(data):
    m = data["results"]["main"]
    launch, step = m["launch"], m["step"]
    layer = m["layer"]
    runs = layer["memory_bound_runs"]
    rows = [
        ["每个训练 step 的 kernel 数", f"{launch['kernels']:,}"],
        ["step 耗时（未开 profiler，do_bench 中位数）", f"{tables.fmt(step['median_ms'])} ms"],
        ["kernel 耗时合计", f"{tables.fmt(launch['kernel_time_us'] / 1e3)} ms"],
        ["GPU 忙碌占比（kernel 区间的并集 ÷ 未开 profiler 的 step 耗时）",
         f"{100 * launch['busy_us'] / (1e3 * step['median_ms']):.1f}%"],
        ["kernel 耗时中位数", f"{tables.fmt(launch['median_kernel_us'])} µs"],
        [f"短于 {launch['small_us']:g} µs 的 kernel", f"{launch['small_kernels']:,} 个"
         f"（占 kernel 数 {100 * launch['small_kernels'] / launch['kernels']:.0f}%，"
         f"占 kernel 时间 {100 * launch['small_kernel_time_share']:.1f}%）"],
        ["第一个 kernel 开始到最后一个 kernel 结束",
         f"{tables.fmt(launch['span_us'] / 1e3)} ms（忙碌 {100 * launch['busy_fraction']:.1f}%）"],
        [f"kernel 之间长于 {launch['gap_us']:g} µs 的空隙",
         f"{launch['gaps_over_threshold']:,} 个，合计 {tables.fmt(launch['gap_time_over_threshold_us'] / 1e3)} ms"],
        [f"一个解码层 forward（`{layer['name']}`）的 kernel 数", f"{len(layer['device'])}"],
        ["其中最长的一串连续非 GEMM、非注意力 kernel", f"{max(runs) if runs else 0}"],
    ]
    if layer.get("gpu_lag_us") is not None:
        rows.append(["该层开始时 CPU 发射领先 GPU", f"{tables.fmt(layer['gpu_lag_us'] / 1e3)} ms"])
    note = ("step 耗时是不开 profiler 单独测的，其余各行取自开着 profiler 的那一步：profiler 自己占用 CPU，"
            "拉大了 kernel 之间的空隙，所以空隙一行是上界")
    return tables.md_table(["指标", "数值"], rows, align="lr") + _caption(data, extra=note)


def _sweep_table(data):
    rows = []
    for entry in data["results"]["sweep"]:
        launch, step = entry["launch"], entry["step"]
        busy = launch["busy_us"] / (1e3 * step["median_ms"])
        rows.append([entry["tokens"], f"{launch['kernels']:,}", tables.fmt(step["median_ms"]),
                     tables.fmt(launch["kernel_time_us"] / 1e3), f"{100 * busy:.0f}%",
                     tables.fmt(launch["median_kernel_us"])])
    headers = ["每步 token 数", "kernel 数", "step 中位数（ms）", "kernel 时间（ms）", "GPU 忙碌占比", "kernel 中位数（µs）"]
    return tables.md_table(headers, rows) + _caption(
        data, seq_len=False, extra="GPU 忙碌占比 = kernel 区间的并集 ÷ step 耗时（中位数）")


def _sweep_plot(data):
    plt = plots.plot_style()
    sweep = data["results"]["sweep"]
    tokens = [e["tokens"] for e in sweep]
    step_ms = [e["step"]["median_ms"] for e in sweep]
    busy_ms = [e["launch"]["busy_us"] / 1e3 for e in sweep]
    fig, ax = plt.subplots(figsize=(6.4, 3.3))
    ax.plot(tokens, step_ms, marker="o", color=PASTEL_LINE["blue"], label="step 时间（do_bench 中位数）")
    ax.plot(tokens, busy_ms, marker="s", color=PASTEL_LINE["pink"], label="GPU 忙碌时间（kernel 区间的并集）")
    for t, s, b in zip(tokens, step_ms, busy_ms):
        ax.annotate(f"忙碌 {100 * b / s:.0f}%", (t, b), textcoords="offset points", xytext=(0, -15), ha="center",
                    fontsize=plots.SMALL)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(tokens, [str(t) for t in tokens])
    ax.yaxis.set_major_locator(plt.LogLocator(subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_ylim(min(busy_ms) / 2, max(step_ms) * 1.6)
    ax.margins(x=0.08)
    ax.set_xlabel("每个训练 step 的 token 数（对数坐标）")
    ax.set_ylabel("时间（ms，对数坐标）")
    ax.legend(loc="upper left")
    ax.set_title("两条线之间的差 = GPU 空等 CPU 的时间")
    return plots.svg_of(fig)


# Kernel categories as the timeline's legend names them: the tables' names, GEMM kept short.
CATEGORY_NAMES = CATEGORY_ZH | {"GEMM": "GEMM"}
IDLE_GAP_US = 10.0  # GPU gaps between the layer's kernels shaded on the timeline


def trace_path(data) -> pathlib.Path:
    """The Perfetto trace saved next to the JSON by run() (same folder rule as record.save)."""
    main = data["results"]["main"]
    path = store.DATA_DIR / store.gpu_slug(data["environment"].get("gpu") or "cpu") / main["trace_file"]
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: the timeline is drawn from the trace that run() saved with the JSON")
    if path.stat().st_size != main["trace_bytes"]:
        raise RuntimeError(f"{path} has {path.stat().st_size} bytes, the JSON recorded {main['trace_bytes']}: "
                           "not the trace of this run")
    return path


ATTENTION_OP = "aten::scaled_dot_product_attention"  # the CPU op whose time the timeline marks


def timeline_crop(pairs: list) -> tuple[list, dict | None]:
    """The launches the timeline draws: from the layer's start up to and including the first launch of an
    attention kernel (the part of the layer 篇1 §三 reads), with that launch; all of them and None when the
    layer launched no attention kernel."""
    for index, pair in enumerate(pairs):
        if pair["category"] == "attention":
            return pairs[:index + 1], pair
    return pairs, None


def _cpu_op(events, cpu_range, name):
    """The first CPU op called ``name`` on the range's thread inside the range, as (start, duration) in µs
    from the range's start; None when there is none."""
    start, end = cpu_range["ts"], cpu_range["ts"] + cpu_range["dur"]
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        if (e.get("ph") == "X" and e.get("cat") == "cpu_op" and e.get("name") == name
                and e.get("tid") == cpu_range["tid"] and start <= e["ts"] < end):
            return e["ts"] - start, e["dur"]
    return None


# What a Qwen3 decoder layer's forward runs before attention, in the order transformers 5.17 calls it
# (Qwen3DecoderLayer.forward, then Qwen3Attention.forward): three projections, each an aten::linear and each
# followed by what acts on its output (q_norm, k_norm, and after v_proj the RoPE of q and k).
PRE_ATTENTION_MODULES = ("input_layernorm", "q_proj", "q_norm", "k_proj", "k_norm", "v_proj", "RoPE")
PROJECTION_OP = "aten::linear"


def module_spans(events, cpu_range, until_us) -> list[tuple[str, float, float]]:
    """(module, start, end) on the CPU, in µs from the range's start: the range's outermost ATen ops that start
    before ``until_us``, split at each aten::linear and named by PRE_ATTENTION_MODULES (the ops between two
    projections are the norm of the first one's output, those after the last one are RoPE); [] when the ops do
    not have that shape, so that a label is only drawn where the trace shows the module."""
    from p1_profile_step import outermost

    start = cpu_range["ts"]
    ops = outermost(e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"
                    and e.get("tid") == cpu_range["tid"] and start <= e["ts"] < start + until_us)
    segments = []  # [is a projection, first op, last op]
    for op in ops:
        projection = op["name"] == PROJECTION_OP
        if projection or not segments or segments[-1][0]:
            segments.append([projection, op, op])
        else:
            segments[-1][2] = op
    shape = [name.endswith("_proj") for name in PRE_ATTENTION_MODULES]
    if [s[0] for s in segments] != shape:
        return []
    return [(name, first["ts"] - start, last["ts"] + last["dur"] - start)
            for name, (_, first, last) in zip(PRE_ATTENTION_MODULES, segments)]


def label_rows(widths, spans, left=0.0, gap=4.0, levels=2):
    """Where to put a label over each of ``spans`` ((start, end), left to right, in pixels) given its ``widths``:
    a list of (level, left edge). A label is centred on its span, or slid right (its left edge at most at the
    span's middle) to clear the label before it on its level, and never starts left of ``left``. Of the
    assignments where every label fits, the one with the fewest labels above level 0, then the least sliding;
    with none, every label on level 0."""
    import itertools

    best = None
    for assignment in itertools.product(range(levels), repeat=len(spans)):
        right_end, placed, slid = [left - gap] * levels, [], 0.0
        for level, width, (lo, hi) in zip(assignment, widths, spans):
            centred = max((lo + hi - width) / 2, left)
            x0 = max(centred, right_end[level] + gap)
            if x0 > max(centred, (lo + hi) / 2):
                break
            slid += x0 - centred
            right_end[level] = x0 + width
            placed.append((level, x0))
        else:
            score = (sum(level > 0 for level in assignment), slid)
            if best is None or score < best[0]:
                best = (score, placed)
    if best is None:
        return [(0, max((lo + hi - w) / 2, left)) for w, (lo, hi) in zip(widths, spans)]
    return best[1]


def _label_modules(ax, spans, base_y, step_y):
    """Each (name, start, end) span as a bracket above the CPU row with its name on top (:func:`label_rows`)."""
    renderer = ax.figure.canvas.get_renderer()
    to_pixels, to_data = ax.transData.transform, ax.transData.inverted().transform
    texts = [ax.text(0, 0, name, ha="left", va="bottom", fontsize=plots.SMALL) for name, _, _ in spans]
    widths = [t.get_window_extent(renderer).width for t in texts]
    pixels = [(to_pixels((lo, 0))[0], to_pixels((hi, 0))[0]) for _, lo, hi in spans]
    for text, (_, lo, hi), (level, x0) in zip(texts, spans, label_rows(widths, pixels, to_pixels((0, 0))[0])):
        y = base_y + step_y * level
        text.set_position((to_data((x0, 0))[0], y + 0.02))
        ax.plot([lo, lo, hi, hi], [y - 0.04, y, y, y - 0.04], color="#777777", linewidth=0.8)


def _timeline_plot(data):
    """CPU launch calls above, the GPU work they started below, one time axis, linked by correlation id;
    from the layer's start to the end of its attention kernel (:func:`timeline_crop`), with the CPU's time
    in scaled_dot_product_attention and the GPU's longest idle gap named."""
    from matplotlib.collections import LineCollection

    from p1_profile_step import load_trace, range_launches

    plt = plots.plot_style()
    name = data["results"]["main"]["layer"]["name"]
    events = load_trace(trace_path(data))
    cpu_range = next(e for e in events if e.get("cat") == "user_annotation" and e.get("name") == name)
    pairs, attention = timeline_crop(range_launches(events, name))
    span = max([p["kernel_us"] + p["kernel_dur_us"] for p in pairs] + [p["launch_us"] + p["launch_dur_us"]
                                                                          for p in pairs]
               + ([] if attention else [cpu_range["dur"]]))
    least = span / 600  # about one pixel as shown: every call and kernel stays visible
    cpu_y, gpu_y, height = 1.0, 0.0, 0.46
    label_y, label_step = cpu_y + height / 2 + 0.07, 0.22  # the module brackets' heights above the CPU row
    fig, ax = plt.subplots(figsize=(plots.FIGURE_WIDTH, 3.3))
    ax.broken_barh([(0, min(cpu_range["dur"], span))], (cpu_y - height / 2, height), facecolors="#E4E4E4",
                   edgecolors="none")
    sdpa = _cpu_op(events, cpu_range, ATTENTION_OP) if attention else None
    ax.set_xlim(0, span * 1.01)  # before the labels, which are placed by their drawn width
    if sdpa:
        ax.broken_barh([sdpa], (cpu_y - height / 2, height), facecolors=PASTEL_FILL["purple"], edgecolors="none")
        _label_modules(ax, module_spans(events, cpu_range, sdpa[0])
                       + [(f"sdpa：CPU 上 {sdpa[1]:,.0f} µs", sdpa[0], sdpa[0] + sdpa[1])], label_y, label_step)
    ax.broken_barh([(p["launch_us"], max(p["launch_dur_us"], least)) for p in pairs], (cpu_y - height / 2, height),
                   facecolors="#555555", edgecolors="none")
    kernels = sorted(pairs, key=lambda p: p["kernel_us"])
    gaps = [(a["kernel_us"] + a["kernel_dur_us"], b["kernel_us"]) for a, b in zip(kernels, kernels[1:])]
    gaps = [(lo, hi - lo) for lo, hi in gaps if hi - lo > IDLE_GAP_US]
    ax.broken_barh(gaps, (gpu_y - height / 2, height), facecolors="none", edgecolors="#D98F92", hatch="////",
                   linewidth=0)
    used = []
    for category in CATEGORY_NAMES:
        bars = [(p["kernel_us"], max(p["kernel_dur_us"], least)) for p in kernels if p["category"] == category]
        if bars:
            ax.broken_barh(bars, (gpu_y - height / 2, height), facecolors=CATEGORY_COLOURS[category], edgecolors="none")
            used.append(category)
    links = [[(p["launch_us"] + p["launch_dur_us"] / 2, cpu_y - height / 2), (p["kernel_us"], gpu_y + height / 2)]
             for p in pairs]
    ax.add_collection(LineCollection(links, colors="#777777", linewidths=0.7, alpha=0.7))
    idle = sum(width for _, width in gaps)
    if kernels:
        ax.text(kernels[0]["kernel_us"] / 2, gpu_y, "GPU 还在执行\n之前排队的 kernel", ha="center", va="center",
                fontsize=plots.SMALL)
    else:
        ax.text(span / 2, gpu_y, "trace 中没有 GPU kernel（CPU 上的运行）", ha="center", va="center",
                fontsize=plots.SMALL)
    if gaps:
        longest = max(gaps, key=lambda g: g[1])
        ax.text(longest[0] + longest[1] / 2, gpu_y - height / 2 - 0.04, f"最长空等 {longest[1]:,.0f} µs", ha="center",
                va="top", fontsize=plots.SMALL, color="#C0777A")
    ax.set_yticks([gpu_y, cpu_y], ["GPU：kernel", "CPU：启动调用"])
    ax.set_ylim(gpu_y - 0.62, label_y + (label_step if sdpa else 0) + 0.2)
    ax.set_xlim(0, span * 1.01)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(f"时间（µs，从 {name} forward 在 CPU 上开始计）")
    what = f"{name} forward 从开始到注意力 kernel" if attention else f"{name} forward"
    ax.set_title(f"{what}：{len(pairs)} 次启动，细线连起每次启动和它的 kernel", loc="left")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=CATEGORY_COLOURS[c]) for c in used]
    handles += [plt.Rectangle((0, 0), 1, 1, facecolor="#555555"),
                plt.Rectangle((0, 0), 1, 1, facecolor="none", edgecolor="#D98F92", hatch="////", linewidth=0)]
    labels = [CATEGORY_NAMES[c] for c in used] + ["启动调用", f"GPU 空等（间隔 > {IDLE_GAP_US:g} µs），共 {idle:,.0f} µs"]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.27), ncol=4, handlelength=1.2,
              columnspacing=1.0)
    return plots.svg_of(fig)


def _layer_kernels_table(data):
    """Kernels of one layer forward grouped by name: the repeated patterns behind §四."""
    import collections

    layer = data["results"]["main"]["layer"]
    counts, time_us, category = collections.Counter(), collections.Counter(), {}
    for item in layer["device"]:
        counts[item["kernel"]] += 1
        time_us[item["kernel"]] += item["dur_us"]
        category[item["kernel"]] = item["category"]
    total = sum(time_us.values()) or 1.0
    rows = [[f"`{name}`", _category(category[name]), n, _us(time_us[name]), f"{100 * time_us[name] / total:.1f}%"]
            for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], -time_us[kv[0]]))]
    headers = ["kernel（短名）", "类别", "次数", "总耗时（µs）", "占该层"]
    lead = f"一个训练 step 中 `{layer['name']}` 的 forward，按 kernel 名合并"
    return tables.md_table(headers, rows, align="llrrr") + _caption(data, lead=lead)


def render(data: dict) -> dict[str, str]:
    static = data["results"]["static"]
    forward = static["decoder_forward"]
    header = (f"# transformers {static['modeling_file']['transformers']}: {static['modeling_file']['relative']}, "
              f"line {forward['first_line']}\n")
    import textwrap

    return {
        "p1_static_modules.md": _modules_table(data),
        "p1_model_repr.txt": static["repr"] + "\n",
        "p1_decoder_layer_forward.txt": header + textwrap.dedent(forward["text"]),
        "p1_fx_trace.md": _graph_table(data),
        "p1_export_layer_ops.md": _export_layer_table(data),
        "p1_export_patterns.md": _export_patterns_table(data),
        "p1_profile_kernels.md": _kernels_table(data),
        "p1_profile_categories.md": _categories_table(data),
        "p1_profile_ops.md": _ops_table(data),
        "p1_profile_launch.md": _launch_table(data),
        "p1_profile_layer_kernels.md": _layer_kernels_table(data),
        "p1_profile_layer_timeline.svg": _timeline_plot(data),
        "p1_profile_sweep.md": _sweep_table(data),
        "p1_profile_sweep.svg": _sweep_plot(data),
    }
