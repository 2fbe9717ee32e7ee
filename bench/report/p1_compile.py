"""p1_compile.json -> 篇1 §三.3 and §六: eager vs CUDA graph vs torch.compile, and the code Inductor writes."""
from __future__ import annotations

from bench.report import prose, tables
from bench.report.names import GRAPHS, LAYER_LABELS

NAME = "p1_compile"
# What the runs before the experiment recorded these used (bench/exp_p1_compile.py then): the contenders
# in table order, and the one the others are compared with.
BEFORE_RECORDED = {"contenders": ["eager", "cuda_graph", "compile"], "baseline": "eager"}


def config(data) -> dict:
    """The run's config, with what a file from before a key was recorded used in its place."""
    return BEFORE_RECORDED | data["config"]


def _caption(data, extra=""):
    c = data["config"]
    return prose.caption(
        f"一个 Qwen3DecoderLayer，Qwen3-{c['size']} 几何，{tables.dtype_short(c['dtype'])}，{c['attention']}",
        "forward 开着 autograd", extra, sep="；")


def _contender_rows(data):
    """(tokens cell, name, label, result, baseline's result, compile seconds) per shape and contender, the
    baseline (eager) first."""
    cfg = config(data)
    for entry in data["results"]["shapes"]:
        contenders = entry["contenders"]
        for name in cfg["contenders"]:
            if name in contenders:
                first = name == cfg["baseline"]
                tokens = f"{entry['tokens']:,}（B={entry['batch']}，T={entry['seq_len']}）" if first else ""
                yield tokens, name, LAYER_LABELS[name], contenders[name], contenders[cfg["baseline"]], entry["compile_s"]


def _before_after_table(data):
    baseline = config(data)["baseline"]
    rows = []
    for tokens, name, label, c, base, _ in _contender_rows(data):
        speedup = base["fwd_bwd"]["median_us"] / c["fwd_bwd"]["median_us"]
        rows.append([tokens, label, tables.fmt(c["fwd_bwd"]["median_us"]),
                     f"{tables.fmt(speedup)}×" if name != baseline else "1×",
                     c["launches_fwd_bwd"]["kernels"], c["launches_fwd_bwd"]["launch_calls"]])
    headers = ["每步 token", "实现", "fwd+bwd（µs）", "相对 eager", "GPU kernel 数", "CPU 发射次数"]
    return tables.md_table(headers, rows, align="llrrrr") + _caption(
        data, "fwd+bwd 含参数与输入的梯度；kernel 数与发射次数取自一次剖析的调用")


def _forward_table(data):
    rows = []
    for tokens, name, label, c, _, compile_s in _contender_rows(data):
        rows.append([tokens, label, tables.fmt(c["fwd"]["median_us"]), c["launches_fwd"]["kernels"],
                     c["launches_fwd"]["launch_calls"], f"{compile_s:.0f}" if name == "compile" else ""])
    headers = ["每步 token", "实现", "forward（µs）", "GPU kernel 数", "CPU 发射次数", "编译耗时（s）"]
    return tables.md_table(headers, rows, align="llrrrr") + _caption(
        data, "编译耗时含首次 forward + backward；kernel 数与发射次数取自一次剖析的调用")


# What each Inductor kernel of the layer does, read off the FX node names it fused: HF Qwen3's forward names
# its values (hidden_states, variance, query_states, q_embed, attn_output, down_proj ...), and Inductor keeps
# those names on the nodes. A forward kernel is named by the parts whose nodes it holds; a backward kernel
# by the forward kernels whose values it reads back (a node name held by one forward kernel only), or, when it
# reads none, as the part of the backward kernel holding all its nodes that its own nodes show (RoPE's sin,
# cos and neg). A backward label names a forward kernel by its parts' short names (before "：").
NORM = ("variance", "rsqrt")  # a norm's nodes: mean of squares, then rsqrt
ROPE = ("q_embed", "k_embed")
RESIDUAL_AFTER_ATTENTION = "attn_output"
RESIDUAL_AFTER_MLP = "down_proj"
SWIGLU = "silu"


def _base(node: str) -> str:
    """'hidden_states_7' -> 'hidden_states': the node's name without the counter FX appends."""
    head, _, tail = node.rpartition("_")
    return head if head and tail.isdigit() else node


def _has(nodes, *bases) -> bool:
    return any(_base(n) in bases for n in nodes)


def forward_parts(nodes: list[str]) -> list[str]:
    """What a forward kernel computes, in the layer's order, from its node names."""
    if not nodes:
        return []
    parts = []
    norm = _has(nodes, *NORM)
    if _has(nodes, RESIDUAL_AFTER_MLP):
        parts.append("MLP 后的残差加法")  # it recomputes the first residual sum too, which it reads
    elif _has(nodes, RESIDUAL_AFTER_ATTENTION):
        parts.append("注意力后的残差加法")
        if norm:
            parts.append("post_attention_layernorm")
    elif norm:
        head = "q" if _has(nodes, "query_states", "q_embed") else "k" if _has(nodes, "key_states", "k_embed") else None
        parts.append(f"{head}_norm" if head else "input_layernorm")
    if _has(nodes, *ROPE):
        parts.append("RoPE")
    if _has(nodes, SWIGLU):
        parts.append("SwiGLU：silu(gate) × up")
    return parts


def kernel_labels(kernels: dict) -> dict[str, list[str]]:
    """{graph: [label per kernel]} for Inductor's kernels of one layer (``{"forward": [...], "backward": [...]}``
    as the data has them, each with ``source_nodes``); "—" where a kernel names no node."""
    forward = kernels.get("forward", [])
    owners: dict[str, list[int]] = {}
    for index, k in enumerate(forward):
        for node in set(k["source_nodes"]):
            owners.setdefault(node, []).append(index)
    own = {index: {n for n in k["source_nodes"] if owners[n] == [index]} for index, k in enumerate(forward)}
    names = [" + ".join(forward_parts(k["source_nodes"])) or "—" for k in forward]
    out = {"forward": names}
    backward = kernels.get("backward", [])
    read = [[i for i in range(len(forward)) if own[i] & set(k["source_nodes"])] for k in backward]
    labels = []
    for index, k in enumerate(backward):
        if read[index]:
            labels.append(" 与 ".join(names[i].split("：")[0] for i in reversed(read[index])) + " 的反向")
            continue
        nodes = set(k["source_nodes"])
        holder = next((j for j, other in enumerate(backward) if j != index and read[j] and nodes
                       and nodes <= set(other["source_nodes"])), None)
        rope = _has(nodes, "neg") and _has(nodes, "cos") and _has(nodes, "sin")
        if holder is not None and rope:
            heads = [p[0] for i in read[holder] for p in forward_parts(forward[i]["source_nodes"]) if p.endswith("_norm")]
            labels.append("RoPE 的反向" + (f"（{heads[0]} 一路）" if heads else ""))
        else:
            labels.append("—")
    out["backward"] = labels
    return out


def _kernel_kind(name: str) -> str:
    """Inductor's prefix: triton_poi (pointwise), triton_red (reduction, looped), triton_per (persistent)."""
    kind = name.split("_fused")[0].rsplit("_", 1)[-1]
    return {"poi": "逐点", "red": "归约（分块循环）", "per": "归约（整行一次）"}.get(kind, "—")


def _labelled_kernels(data):
    """(graph, what the kernel does, kernel) for each kernel of the layer, forward first."""
    kernels = data["results"]["layer_kernels"] or {}
    labels = kernel_labels(kernels)
    return [(graph, label, k) for graph in ("forward", "backward")
            for k, label in zip(kernels.get(graph, []), labels.get(graph, []))]


def _layer_kernels_table(data):
    """The article's table: what each kernel does, its kind, how many graph nodes it fused."""
    rows = [[GRAPHS[graph], label, _kernel_kind(k["name"]), len(k["source_nodes"]) or "—"]
            for graph, label, k in _labelled_kernels(data)]
    last = data["results"]["shapes"][-1]
    return tables.md_table(["图", "这个 kernel 做什么", "类型", "融合的图节点（个）"], rows, align="lllr") + prose.caption(
        f"Inductor 为 B={last['batch']}、T={last['seq_len']} 的解码层生成的 kernel",
        "矩阵乘与注意力交给 cuBLAS / sdpa，不在表中",
        "「做什么」由 kernel 融合的图节点名推出（HF 代码里的变量名，如 q_embed、attn_output）；kernel 名与节点的完整列表见方法页",
        sep="；")


def _kernel_nodes_table(data):
    """The methods page's table: each kernel's name and every graph node it fused."""
    rows = [[GRAPHS[graph], label, f"`{k['name']}`", ", ".join(k["source_nodes"]) or "—"]
            for graph, label, k in _labelled_kernels(data)]
    last = data["results"]["shapes"][-1]
    return tables.md_table(["图", "这个 kernel 做什么", "生成的 kernel", "融合的图节点"], rows, align="llll") + prose.caption(
        f"Inductor 为 B={last['batch']}、T={last['seq_len']} 的解码层生成的 kernel",
        "kernel 名里列着融合进去的 ATen 算子，节点名是 FX 图里的名字", sep="；")


def _rmsnorm_code(data, graph):
    r = data["results"]["rmsnorm"]
    env = data["environment"]
    lines = [f"# Generated by torch {env.get('torch')} Inductor for HF Qwen3RMSNorm ({graph}), "
             f"x: {r['rows']} x {r['hidden']} {data['config']['dtype']}; device: {env.get('gpu') or 'CPU'}"]
    for k in r["graphs"].get(graph, []):
        lines.append(f"# kernel {k['name']}" + (f": fuses {', '.join(k['source_nodes'])}" if k["source_nodes"] else ""))
        lines.append(k["body"].rstrip())
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render(data: dict) -> dict[str, str]:
    markdown = {"p1_compile.md": _before_after_table(data), "p1_compile_fwd.md": _forward_table(data),
                "p1_compile_kernels.md": _layer_kernels_table(data),
                "p1_compile_kernel_nodes.md": _kernel_nodes_table(data)}
    return markdown | {f"p1_inductor_rmsnorm_{short}.txt": _rmsnorm_code(data, graph)
                      for short, graph in (("fwd", "forward"), ("bwd", "backward"))}
