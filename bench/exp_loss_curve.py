"""Experiment "loss_curve": train a small Qwen3 with HF's RMSNorm and with the Triton one; compare the losses.

Three models start from the same weights and train in lockstep on the same
batches (``snippets/loss_consistency.py``):

* ``hf``       transformers' ``Qwen3RMSNorm``;
* ``triton``   ``TritonQwen3RMSNorm`` (patched into modeling_qwen3 before construction);
* ``control``  a correct RMSNorm that rounds once instead of HF's twice (x_hat * weight in fp32,
  then one cast). It shows how far two *correct* implementations drift apart
  through bf16 rounding alone: the noise floor the gate has to sit above.

Data: byte tokens (256 bytes + EOS between files) of CPython's standard-library
``*.py`` files in sorted path order; random windows from a seeded generator.

Two precisions:

* ``amp``   fp32 parameters and AdamW state, bf16 autocast (what HF Trainer ``bf16=True`` does);
* ``bf16``  bf16 parameters and AdamW state. The norm weights start at exactly 1.0, where a bf16
  ulp is 2^-7, so AdamW steps of about lr = 1e-3 round away and the norm weights stay at 1.0.

Gate (``loss_gate``): final loss = mean of the last 50 steps, Triton within 0.5 %
of HF, or within twice the control's own final-loss difference from HF when that is
larger (the run's noise floor); no divergence = every loss finite and, at every step,
|Triton - HF| <= 5 % of HF's loss on the same batch. The 5 % is set at five times the
largest per-step gap between two correct implementations: a CPU calibration of HF vs the
one-rounding control (amp, hidden 128, 600 steps) gave a maximum of 1.0 % and a
99th percentile of 0.5 %; the ``control`` column re-measures it on the GPU.

Why the noise-floor term: at commit b370c8a (block + tail kernel, hidden 384 = 256 + 128)
the amp run ended 0.525 % from HF, over the fixed 0.5 %, while the correct control ended
0.427 % from HF in the same run: a fixed 0.5 % sits at this setup's noise level. Log:
docs/data/h200/loss-curve-fixed-gate-b370c8a.log. The CPU tests keep the gate's teeth: two
wrong backwards must fail it.

Schedule: warm-up, then cosine decay to a tenth of the peak lr. The first H200 run at
commit 85d659c kept the lr constant after warm-up and failed the final-loss gate in both
precisions (Triton 1.0 % / 1.7 % from HF) while the correct control was 0.7 % from HF in
amp: at a constant lr the last steps keep fluctuating, and trajectories that differ by one
ulp early on end about a percent apart whatever the kernel. A CPU proxy (hidden 128,
2 layers, 600 steps, amp, HF vs control) ended 0.63 % apart with a constant lr and
0.10 % apart with the cosine decay. Log: docs/data/h200/loss-curve-constant-lr-85d659c.log.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sysconfig
import time

import torch
from transformers import Qwen3ForCausalLM

from bench import common, prose
from bench.harness import mode
from loss_consistency import VOCAB_SIZE, batch_starts, build_pair, loss_gate, stdlib_tokens, train_lockstep
from qwen3_configs import rmsnorm_count, tiny_qwen3_config
from qwen3_patch import count_modules, patch_qwen3_rmsnorm
from rmsnorm_triton import TritonQwen3RMSNorm

NAME = "loss_curve"
MODELS = ("hf", "triton", "control")
LABELS = {"hf": "HF Qwen3RMSNorm", "triton": "Triton RMSNorm", "control": "control: one rounding"}
OPTIMIZER = ("AdamW(betas=(0.9, 0.95), weight_decay=0), grad-norm clip 1.0, linear warm-up, "
             "cosine decay to 0.1 x lr")
VARIANT_LABELS = {"amp": "fp32 weights + bf16 autocast", "bf16": "bf16 weights", "fp32": "fp32"}


def loss_config(quick: bool) -> dict:
    gate = dict(final_window=50, final_rtol=5e-3, step_rtol=0.05)
    if quick:
        return dict(model=dict(), steps=6, batch=2, seq_len=32, lr=3e-3, warmup=2, corpus_tokens=100_000,
                    variants=["amp", "bf16"], seed=0, data_seed=0, gate=dict(gate, final_window=2), quick=True)
    model = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=6,
                 num_key_value_heads=2, head_dim=64, max_position_embeddings=512)
    return dict(model=model, steps=1000, batch=32, seq_len=256, lr=1e-3, warmup=50, corpus_tokens=8_000_000,
                variants=["amp", "bf16"], seed=0, data_seed=0, gate=gate, quick=False)


def model_config(cfg: dict):
    return tiny_qwen3_config(vocab_size=VOCAB_SIZE, use_cache=False, **cfg["model"])


def control_norm_class():
    class OneRoundingRMSNorm(torch.nn.Module):
        """RMSNorm computed fully in fp32 and cast once (HF casts x_hat first, then multiplies)."""

        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, x):
            x32 = x.float()
            y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight.float()
            return y.to(torch.promote_types(x.dtype, self.weight.dtype))

    return OneRoundingRMSNorm


def rounded(values, digits: int = 5) -> list:
    return [float(f"{v:.{digits}g}") for v in values]


def gate_with_control(hf, patched, control, gate_cfg: dict, label: str, log=print) -> tuple[dict, dict]:
    """(gate, control_gate): ``patched`` vs ``hf`` with the control's final-loss distance from HF as the
    noise floor, and the control's own report against HF; logs one line that names the verdict."""
    control_gate = loss_gate(hf, control, **gate_cfg)
    gate = loss_gate(hf, patched, **gate_cfg, noise_final_rel_diff=control_gate["final_rel_diff"])
    log(f"{label}: gate {'PASSED' if gate['passed'] else 'FAILED'}: final rel diff {gate['final_rel_diff']:.2e} "
        f"(limit {gate['final_limit']:.2e}; control {control_gate['final_rel_diff']:.2e}), "
        f"max step rel diff {gate['max_rel_diff']:.2e} (control {control_gate['max_rel_diff']:.2e})")
    return gate, control_gate


def corpus(cfg: dict):
    """The training tokens (first ``cfg["corpus_tokens"]`` stdlib bytes, CPU); records their provenance
    in ``cfg["corpus"]``."""
    tokens = stdlib_tokens()[:cfg["corpus_tokens"]]  # all of it if the stdlib is smaller
    if tokens.numel() < 50 * cfg["seq_len"]:
        raise RuntimeError(f"only {tokens.numel()} stdlib tokens found at {sysconfig.get_paths()['stdlib']}")
    cfg["corpus"] = {
        "source": "CPython stdlib *.py files, sorted path order, bytes + EOS (256) between files",
        "stdlib": sysconfig.get_paths()["stdlib"],
        "python": platform.python_version(),
        "tokens": tokens.numel(),
        "sha256": hashlib.sha256(tokens.to(torch.int16).numpy().tobytes()).hexdigest(),
    }
    return tokens


def geometry(config) -> dict:
    return {k: getattr(config, k) for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "vocab_size", "rms_norm_eps")}


def run_variant(variant: str, cfg: dict, tokens, device: str, log=print) -> dict:
    config = model_config(cfg)
    hf, triton_model = build_pair(config, TritonQwen3RMSNorm, seed=cfg["seed"])
    undo = patch_qwen3_rmsnorm(control_norm_class())
    try:
        control = Qwen3ForCausalLM(config)
    finally:
        undo()
    control.load_state_dict(hf.state_dict())
    expected = rmsnorm_count(config)
    if count_modules(triton_model, TritonQwen3RMSNorm) != expected or count_modules(hf, TritonQwen3RMSNorm):
        raise RuntimeError("the Triton model does not have exactly one TritonQwen3RMSNorm per norm")

    dtype = torch.bfloat16 if variant == "bf16" else torch.float32
    models = [m.to(device=device, dtype=dtype).train() for m in (hf, triton_model, control)]
    autocast = torch.bfloat16 if variant == "amp" else None
    starts = batch_starts(tokens.numel(), cfg["batch"], cfg["seq_len"], cfg["steps"], seed=cfg["data_seed"])
    log(f"{variant}: {cfg['steps']} steps x 3 models (hf, triton, control)")
    start = time.perf_counter()
    curves = train_lockstep(models, tokens, starts, cfg["seq_len"], lr=cfg["lr"], warmup=cfg["warmup"],
                            autocast_dtype=autocast, log_every=max(1, cfg["steps"] // 10))
    seconds = time.perf_counter() - start
    gate, control_gate = gate_with_control(curves[0], curves[1], curves[2], cfg["gate"], variant, log)
    norm_weights = [p for n, p in models[0].named_parameters() if "norm" in n]
    return {
        "losses": {name: rounded(curve) for name, curve in zip(MODELS, curves)},
        "gate": gate,
        "control_gate": control_gate,
        "seconds": seconds,
        "norm_modules": expected,
        "parameters": sum(p.numel() for p in models[0].parameters()),
        "hf_norm_weights_all_one": bool(all(torch.all(w == 1) for w in norm_weights)),
    }


def run(args) -> dict:
    _, _, cfg, device, _ = mode.gpu_or_quick(args, NAME, loss_config(True), loss_config(False))
    tokens = corpus(cfg).to(device)
    results = {}
    for variant in cfg["variants"]:
        results[variant] = run_variant(variant, cfg, tokens, device,
                                       log=lambda m: print(f"  [loss_curve] {m}", flush=True))
    cfg["geometry"] = geometry(model_config(cfg))
    cfg["final_loss"] = f"mean of the last {cfg['gate']['final_window']} steps"
    cfg["optimizer"] = OPTIMIZER
    results["passed"] = all(results[v]["gate"]["passed"] for v in cfg["variants"])
    return {"config": cfg, "results": results}


# ---------------------------------------------------------------- rendering

VARIANT_ZH = {"amp": "fp32 权重 + bf16 autocast", "bf16": "bf16 权重", "fp32": "fp32"}


def variant_zh(variant: str) -> str:
    return VARIANT_ZH.get(variant, variant)


def _caption(cfg: dict) -> str:
    m = cfg["geometry"]
    gate = cfg["gate"]
    schedule = "余弦衰减到十分之一" if "cosine" in cfg.get("optimizer", "") else "lr 不变"
    return (f"Qwen3 {m.get('num_hidden_layers')} 层，hidden {m.get('hidden_size')}，intermediate "
            f"{m.get('intermediate_size')}，head_dim {m.get('head_dim')}，字节词表 {m.get('vocab_size')}；训练 "
            f"{cfg['steps']} 步，每步 B={cfg['batch']}×T={cfg['seq_len']} 个 CPython {cfg['corpus']['python']} "
            f"标准库的字节；AdamW，峰值 lr {cfg['lr']}，{cfg['warmup']} 步预热后{schedule}。末段 loss = 最后 "
            f"{gate['final_window']} 步的均值；门限：末段差不超过 {100 * gate['final_rtol']:g}%，或对照末段差的两倍"
            f"（取大者，即末段阈值），每一步的相对差不超过 {100 * gate['step_rtol']:g}%，全部有限。"
            f"对照：只舍入一次的正确 RMSNorm。")


def gate_sentence(data: dict) -> str:
    """Both gates in one sentence, with the control's own distance from HF as the yardstick."""
    cfg, results = data["config"], data["results"]
    variants = cfg["variants"]
    verdicts = [results[v]["gate"]["passed"] for v in variants]
    head = (f"{len(variants)} 种精度设置都通过门限" if all(verdicts) else
            f"未通过门限的精度设置：{prose.join(variant_zh(v) for v, ok in zip(variants, verdicts) if not ok)}")
    parts = []
    for v in variants:
        g, c = results[v]["gate"], results[v]["control_gate"]
        control = ("对照与 HF 逐位相同" if c["final_rel_diff"] == 0 and c["max_abs_diff"] == 0
                   else f"对照与 HF 相差 {prose.pct(c['final_rel_diff'], 3)}")
        parts.append(f"{variant_zh(v)}：生产版末段 loss 与 HF 相差 {prose.pct(g['final_rel_diff'], 3)}"
                     f"（阈值 {prose.pct(g.get('final_limit', g['final_rtol']), 3)}，{control}），"
                     f"逐步最大相对差 {prose.pct(g['max_rel_diff'], 2)}")
    return f"{cfg['steps']} 步训练，{head}。" + "；".join(parts) + "。"


def render(data: dict) -> dict[str, str]:
    cfg, results = data["config"], data["results"]
    f = common.fmt
    rows, detail = [], []
    for variant in cfg["variants"]:
        r = results[variant]
        g, c = r["gate"], r["control_gate"]
        rows.append([
            variant_zh(variant), f"{100 * g['final_rel_diff']:.3f}", f"{100 * c['final_rel_diff']:.3f}",
            f"{100 * g.get('final_limit', g['final_rtol']):.3f}",
            f"{100 * g['max_rel_diff']:.2f}（{100 * c['max_rel_diff']:.2f}）", "通过" if g["passed"] else "未通过",
        ])
        detail.append([
            variant_zh(variant), f(g["final_baseline"], 5), f(g["final_patched"], 5), f(g["max_abs_diff"], 3),
            f"{100 * c['max_rel_diff']:.2f}", f"{100 * g['step_rtol']:g}",
        ])
    table = common.md_table(
        ["精度设置", "末段差：生产版 vs HF（%）", "末段差：对照 vs HF（%）", "末段阈值（%）",
         "逐步最大相对差（%）：生产版（对照）", "判定"], rows, "lrrrrc")
    detail_table = common.md_table(
        ["精度设置", "末段 loss：HF（nats）", "末段 loss：生产版（nats）", "逐步最大绝对差（nats）",
         "对照逐步最大相对差（%）", "逐步阈值（%）"], detail, "lrrrrr")
    return {"loss_curve.md": prose.page(table, _caption(cfg), gate_sentence(data)),
            "loss_curve_detail.md": prose.page(detail_table, "loss 以每字节 nats 计；" + _caption(cfg)),
            "loss_curve.svg": _plot(data)}


PLOT_LABELS = {"hf": "HF Qwen3RMSNorm", "triton": "生产版 Triton RMSNorm"}
# Drawn in this order: the control under the kernels.
PLOT_DIFFS = {"control": "对照组 − HF（对照组：正确、只舍入一次的 RMSNorm）", "triton": "生产版 − HF"}
PLOT_COLORS = {"hf": common.PASTEL_LINE["blue"], "triton": common.PASTEL_LINE["pink"],
               "control": common.PASTEL_LINE["green"], "fused": common.PASTEL_LINE["purple"]}


def _plot(data: dict) -> str:
    cfg, results = data["config"], data["results"]
    return loss_plot({v: results[v]["losses"] for v in cfg["variants"]}, cfg["gate"]["step_rtol"])


def loss_plot(curves: dict[str, dict[str, list]], step_rtol: float, labels: dict = PLOT_LABELS,
              diffs: dict = PLOT_DIFFS) -> str:
    """One column per precision setting (``curves``: variant -> name -> losses): the loss curves of
    ``labels`` on top (HF solid, the others dashed), the relative differences from HF of ``diffs`` below."""
    plt = common.plot_style()
    variants = list(curves)
    fig, axes = plt.subplots(2, len(variants), figsize=(5.2 * len(variants), 6.4), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2], "wspace": 0.3, "hspace": 0.25})
    limit = 100 * step_rtol
    for col, variant in enumerate(variants):
        losses = curves[variant]
        steps = list(range(1, len(losses["hf"]) + 1))
        top, bottom = axes[0][col], axes[1][col]
        for name, label in labels.items():
            if name in losses:
                top.plot(steps, losses[name], color=PLOT_COLORS[name], linewidth=1.6 if name == "hf" else 1.0,
                         linestyle="-" if name == "hf" else "--", label=label)
        top.set_title(VARIANT_ZH.get(variant, variant), fontsize=10)
        top.set_ylabel("训练 loss（nats/字节）")
        top.legend(fontsize=8)
        largest = 0.0
        for name, label in diffs.items():
            if name not in losses:
                continue
            rel = [100 * (x - h) / h for x, h in zip(losses[name], losses["hf"])]
            largest = max([largest] + [abs(v) for v in rel if v == v])
            bottom.plot(steps, rel, color=PLOT_COLORS[name], linewidth=0.8, label=label)
        span = min(1.2 * limit, max(1.3 * largest, 0.01))
        if span >= limit:
            bottom.axhline(limit, color="#999999", linestyle=":", linewidth=1)
            bottom.axhline(-limit, color="#999999", linestyle=":", linewidth=1)
        bottom.set_ylim(-span, span)
        bottom.set_ylabel("与 HF 的相对差（%）")
        bottom.set_title(f"逐步相对差 (x − HF) / HF，阈值 ±{limit:g}%", fontsize=9)
        bottom.set_xlabel("训练步数")
        bottom.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=1)
    return common.svg_of(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    payload = run(args)
    print(json.dumps({v: payload["results"][v]["gate"] for v in payload["config"]["variants"]}, indent=1))
    return 0 if payload["results"]["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
