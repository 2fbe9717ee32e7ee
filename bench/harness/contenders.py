"""The contenders: every implementation an op-level experiment times, built per width.

A contender is ``id -> (fn, weight)``: ``fn`` takes the inputs (``x`` for RMSNorm; ``x`` and
``residual`` for the fused add) and returns the outputs, ``weight`` is the parameter whose
gradient the backward fills. The ids are the data's keys and the reports' vocabulary
(bench/report/names.py): ``triton`` is this project's RMSNorm kernel, ``triton_fused_add`` its
fused residual add + RMSNorm kernel, ``naive`` the teaching kernel of 篇2 §四/§五.

A contender that cannot run here (not installed, needs CUDA) is recorded in ``skipped[id]``
with the reason (:func:`optional_contender`), never a crash.
"""
from __future__ import annotations

import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from bench.harness.mode import gpu_available
from rmsnorm_naive_autograd import naive_rms_norm
from rmsnorm_triton import rms_norm

RMSNORM = ("hf", "torch_rms_norm", "compile_hf", "liger", "quack", "naive", "triton")
FUSED_ADD = ("unfused", "compile_hf", "liger", "quack", "triton_fused_add")


def optional_contender(name: str, skipped: dict, build):
    """``build()``, or None with the reason in ``skipped[name]`` when that contender cannot run
    here (not installed, needs CUDA): a skipped contender is recorded, never a crash."""
    try:
        return build()
    except Exception as error:
        skipped.setdefault(name, repr(error)[:300])
        return None


def quack_rmsnorm():
    """quack's autograd-aware ``rmsnorm(x, weight, residual=None, eps=..., prenorm=False)``.

    CuTe-DSL kernels: CUDA only. quack's version is in the environment block (record.environment).
    """
    if not gpu_available():
        raise RuntimeError("quack runs only on a CUDA GPU")
    from quack.rmsnorm import rmsnorm

    return rmsnorm


def liger_rms_norm():
    """Liger's functional LigerRMSNorm: fn(x, w, eps) with casting mode llama, in_place=False
    (its default in_place=True writes dX into the dy buffer, which the timed graphs reuse)."""
    if not gpu_available():
        raise RuntimeError("Liger's kernels need CUDA (its Triton code does not run under the interpreter)")
    from liger_kernel.transformers.functional import liger_rms_norm as fn

    return lambda x, w, eps: fn(x, w, eps, casting_mode="llama", in_place=False)


def liger_fused_add_rms_norm():
    """Liger's ``LigerFusedAddRMSNormFunction``: fn(x, residual, w, eps) -> (y, s), casting mode llama,
    in_place=False (the functional form's default in_place=True writes dX into dy)."""
    if not gpu_available():
        raise RuntimeError("Liger's kernels need CUDA (its Triton code does not run under the interpreter)")
    from liger_kernel.ops import LigerFusedAddRMSNormFunction

    return lambda x, r, w, eps: LigerFusedAddRMSNormFunction.apply(x, r, w, eps, 0.0, "llama", False)


def fused_add_rms_norm():
    """This project's fused residual add + RMSNorm (snippets/rmsnorm_fused_add.py)."""
    from rmsnorm_fused_add import fused_add_rms_norm as fn

    return fn


class HFAddNorm(torch.nn.Module):
    """What a Qwen3 decoder layer does between attention and MLP: s = residual + x, then the norm."""

    def __init__(self, norm):
        super().__init__()
        self.norm = norm

    def forward(self, x, residual):
        s = residual + x
        return self.norm(s), s


def compiled(module, device):
    """``torch.compile(module, dynamic=False)``, after a dynamo reset: one static graph per width, never
    a recompile of an earlier one. Inductor on a GPU; on the CPU (``--quick``) dynamo and AOTAutograd
    still run, without Inductor's code generation."""
    torch._dynamo.reset()
    return torch.compile(module, dynamic=False, backend="inductor" if device == "cuda" else "aot_eager")


def _on_cuda(device, build):
    """``build()`` when this run's device is CUDA: a CPU run on a GPU machine must not hand CUDA-only
    kernels (Liger, quack) its CPU tensors."""
    if device != "cuda":
        raise RuntimeError("timed on a CUDA GPU only")
    return build()


def _weight(width, dtype, device):
    return torch.nn.Parameter((torch.rand(width, device=device) + 0.5).to(dtype))


def _built(names, builds, weight, skipped) -> dict:
    out = {}
    for name in names:
        fn = optional_contender(name, skipped, builds[name])
        if fn is not None:
            out[name] = (fn, weight)
    return out


def rmsnorm_contenders(names, width: int, dtype, device, skipped: dict, eps: float) -> dict:
    """``id -> (fn(x) -> y, weight)`` for the RMSNorm contenders ``names`` (from :data:`RMSNORM`) at one
    width, sharing one weight; what cannot run here goes in ``skipped``."""
    weight = _weight(width, dtype, device)
    hf = Qwen3RMSNorm(width, eps=eps).to(device=device, dtype=dtype)
    hf.weight = weight

    def liger():
        fn = liger_rms_norm()
        return lambda x: fn(x, weight, eps)

    def quack():
        fn = quack_rmsnorm()
        return lambda x: fn(x, weight, eps=eps)

    builds = {
        "hf": lambda: hf,
        "torch_rms_norm": lambda: lambda x: torch.nn.functional.rms_norm(x, (width,), weight, eps),
        "compile_hf": lambda: compiled(hf, device),
        "liger": lambda: _on_cuda(device, liger),
        "quack": lambda: _on_cuda(device, quack),
        "naive": lambda: lambda x: naive_rms_norm(x, weight, eps),
        "triton": lambda: lambda x: rms_norm(x, weight, eps),
    }
    return _built(names, builds, weight, skipped)


def fused_add_contenders(names, width: int, dtype, device, skipped: dict, eps: float) -> dict:
    """``id -> (fn(x, residual) -> (y, s), weight)`` for the fused add + RMSNorm contenders ``names``
    (from :data:`FUSED_ADD`) at one width: each computes ``s = residual + x`` and ``y = RMSNorm(s)``."""
    weight = _weight(width, dtype, device)
    norm = Qwen3RMSNorm(width, eps=eps).to(device=device, dtype=dtype)
    norm.weight = weight

    def unfused(x, r):  # a torch add, then this project's plain kernel: what the fusion removes
        s = r + x
        return rms_norm(s, weight, eps), s

    def liger():
        fn = liger_fused_add_rms_norm()
        return lambda x, r: fn(x, r, weight, eps)

    def quack():  # returns (out, residual_out) only with prenorm=True
        fn = quack_rmsnorm()
        return lambda x, r: fn(x, weight, residual=r, eps=eps, prenorm=True)

    def ours():
        fn = fused_add_rms_norm()
        return lambda x, r: fn(x, r, weight, eps)

    builds = {
        "unfused": lambda: unfused,
        "compile_hf": lambda: compiled(HFAddNorm(norm), device),
        "liger": lambda: _on_cuda(device, liger),
        "quack": lambda: _on_cuda(device, quack),
        "triton_fused_add": ours,
    }
    return _built(names, builds, weight, skipped)


# ---------------------------------------------------------------- the other fusion points (exp_fusion)

QK_ROPE = ("hf", "compile_hf", "liger", "triton_rmsnorm", "triton_qk_rope")
SWIGLU = ("hf", "compile_hf", "liger", "triton_swiglu")


class HFQKNormRope(torch.nn.Module):
    """What Qwen3Attention does between the q/k projections and attention, in HF's own code:
    per-head RMSNorm of q and k, the transpose to (B, heads, T, D), then RoPE."""

    def __init__(self, q_norm, k_norm):
        super().__init__()
        self.q_norm, self.k_norm = q_norm, k_norm

    def forward(self, q, k, cos, sin):
        from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

        return apply_rotary_pos_emb(self.q_norm(q).transpose(1, 2), self.k_norm(k).transpose(1, 2), cos, sin)


def qk_rope_contenders(names, head_dim: int, dtype, device, skipped: dict, eps: float) -> dict:
    """``id -> (fn(q, k, cos, sin) -> (q_out, k_out), (q_weight, k_weight))`` for the QK-norm + RoPE
    contenders ``names`` (from :data:`QK_ROPE`): q (B, T, Hq, D) and k (B, T, Hkv, D) in, the rotated
    (B, heads, T, D) tensors out, as Qwen3Attention hands them to attention."""
    q_weight, k_weight = _weight(head_dim, dtype, device), _weight(head_dim, dtype, device)
    q_norm = Qwen3RMSNorm(head_dim, eps=eps).to(device=device, dtype=dtype)
    k_norm = Qwen3RMSNorm(head_dim, eps=eps).to(device=device, dtype=dtype)
    q_norm.weight, k_norm.weight = q_weight, k_weight
    hf = HFQKNormRope(q_norm, k_norm)

    def liger():
        norm = liger_rms_norm()
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        return lambda q, k, cos, sin: liger_rotary_pos_emb(norm(q, q_weight, eps).transpose(1, 2),
                                                           norm(k, k_weight, eps).transpose(1, 2), cos, sin)

    def triton_rmsnorm():  # the site's RMSNorm patch: our norm, HF's RoPE
        from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

        return lambda q, k, cos, sin: apply_rotary_pos_emb(rms_norm(q, q_weight, eps).transpose(1, 2),
                                                           rms_norm(k, k_weight, eps).transpose(1, 2), cos, sin)

    def ours():
        from qk_norm_rope import qk_norm_rope

        return lambda q, k, cos, sin: qk_norm_rope(q, k, q_weight, k_weight, cos, sin, eps)

    builds = {"hf": lambda: hf, "compile_hf": lambda: compiled(hf, device), "liger": lambda: _on_cuda(device, liger),
              "triton_rmsnorm": triton_rmsnorm, "triton_qk_rope": ours}
    return _built(names, builds, (q_weight, k_weight), skipped)


def hf_swiglu(gate, up):
    """Qwen3MLP's activation: ``act_fn(gate_proj(x)) * up_proj(x)`` with act_fn = SiLU."""
    return torch.nn.functional.silu(gate) * up


def swiglu_contenders(names, dtype, device, skipped: dict) -> dict:
    """``id -> (fn(gate, up) -> act, ())`` for the SwiGLU contenders ``names`` (from :data:`SWIGLU`)."""

    def liger():
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        return lambda gate, up: LigerSiLUMulFunction.apply(gate, up)

    def ours():
        from swiglu import swiglu

        return swiglu

    builds = {"hf": lambda: hf_swiglu, "compile_hf": lambda: compiled(hf_swiglu, device),
              "liger": lambda: _on_cuda(device, liger), "triton_swiglu": ours}
    return _built(names, builds, (), skipped)


QKV = ("three_gemms", "compile_three", "merged_gemm")


class HFQKVProjections(torch.nn.Module):
    """Qwen3Attention's three projections as HF builds them: q_proj, k_proj, v_proj, ``nn.Linear`` without
    bias, each reading the same x (attention_bias=False in every Qwen3 config)."""

    def __init__(self, hidden: int, q_out: int, kv_out: int):
        super().__init__()
        self.q_proj = torch.nn.Linear(hidden, q_out, bias=False)
        self.k_proj = torch.nn.Linear(hidden, kv_out, bias=False)
        self.v_proj = torch.nn.Linear(hidden, kv_out, bias=False)

    def forward(self, x):
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)


def qkv_contenders(names, hidden: int, q_out: int, kv_out: int, dtype, device, skipped: dict) -> dict:
    """``id -> (fn(x) -> (q, k, v), weights)`` for the QKV projection contenders ``names`` (from :data:`QKV`):
    x (tokens, hidden) in, q (tokens, q_out), k and v (tokens, kv_out) out. ``three_gemms`` is HF's three
    ``nn.Linear`` (three F.linear calls), ``compile_three`` torch.compile of the same module, ``merged_gemm``
    one F.linear with the weight ``cat(q_proj.weight, k_proj.weight, v_proj.weight)`` (same values, one
    contiguous parameter of shape (q_out + 2 kv_out, hidden)) whose output is split into three views."""
    hf = HFQKVProjections(hidden, q_out, kv_out).to(device=device, dtype=dtype)
    three = (hf.q_proj.weight, hf.k_proj.weight, hf.v_proj.weight)
    merged = torch.nn.Parameter(torch.cat([w.detach() for w in three]))

    def merged_gemm(x):
        return torch.nn.functional.linear(x, merged).split((q_out, kv_out, kv_out), dim=-1)

    builds = {"three_gemms": lambda: (hf, three), "compile_three": lambda: (compiled(hf, device), three),
              "merged_gemm": lambda: (merged_gemm, (merged,))}
    out = {}
    for name in names:
        built = optional_contender(name, skipped, builds[name])
        if built is not None:
            out[name] = built
    return out
