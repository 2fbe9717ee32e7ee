"""The kernels under torch.compile: no graph break, and no fp64 math from Inductor's fp64 floats.

Inductor passes a user kernel's Python-float arguments (eps) as fp64 scalars, where Triton's
own launcher passes fp32 (Liger #1350). The kernels cast eps to their compute dtype first; the
CPU test builds each kernel's Triton IR with fp64 scalars (a subprocess: the interpreter,
which the other tests run under, cannot build IR) and finds no fp64 tensor in it.
"""
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]

TTIR_SCRIPT = r"""
import json, re, sys
import triton.language as tl
from triton._C.libtriton import ir
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource, make_backend
import rmsnorm_triton as rt

target = GPUTarget("cuda", 90, 32)
backend = make_backend(target)
options = backend.parse_options({})

def ttir(kernel, constexprs):
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    pointers = {"RSTD": "*fp32", "DW_PARTIAL": "*fp32", "ROW_STATS": "*fp32"}
    signature = {n: "constexpr" if n in constexprs else "fp64" if n.startswith("eps")
                 else pointers.get(n, "*bf16") if n.isupper() else "i32" for n in kernel.arg_names}
    module = ASTSource(kernel, signature, constexprs=constexprs).make_ir(
        target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
        context)
    return str(module)

common = dict(COMPUTE_DTYPE=tl.float32, ALIGN=16)
cases = {
    "fwd": (rt.rms_norm_fwd_kernel, dict(common, BLOCK_ROWS=2, BLOCK_COLS=256, TAIL_COLS=64,
                                        HAS_RESIDUAL=True)),
    "fwd_chunked": (rt.rms_norm_fwd_chunked_kernel, dict(common, BLOCK_ROWS=1, BLOCK_COLS=256,
                                                        HAS_RESIDUAL=False, WIDTH=1024)),
    "fwd_chunked_fused": (rt.rms_norm_fwd_chunked_kernel,
                          dict(common, BLOCK_ROWS=1, BLOCK_COLS=256, HAS_RESIDUAL=True,
                               WIDTH=0)),
    "bwd_recompute": (rt.rms_norm_bwd_kernel, dict(common, BLOCK_ROWS=2, BLOCK_COLS=256,
                                                  TAIL_COLS=64, COMPUTE_DW=True,
                                                  RECOMPUTE_RSTD=True, HAS_DS=True,
                                                  PREFETCH=True)),
    "row_stats_recompute": (rt.rms_norm_bwd_row_stats_kernel,
                            dict(common, BLOCK_ROWS=2, BLOCK_COLS=256, RECOMPUTE_RSTD=True)),
}
print(json.dumps({name: re.findall(r"tensor<[^>]*xf64>", ttir(k, c))
                  for name, (k, c) in cases.items()}))
"""


def test_fp64_eps_from_inductor_keeps_the_math_in_fp32():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "snippets"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", TTIR_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    fp64_tensors = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(fp64_tensors) == {"fwd", "fwd_chunked", "fwd_chunked_fused", "bwd_recompute",
                                "row_stats_recompute"}
    assert fp64_tensors == {name: [] for name in fp64_tensors}, fp64_tensors


def test_split_eps_traces_when_torch_compile_makes_eps_symbolic():
    """torch.compile recompiles with eps symbolic on a second value (and with dynamic=True);
    split_eps must then trace in one graph (Dynamo recursed on struct.pack of a symbolic
    float) and still sum to eps."""
    from rmsnorm_triton import split_eps, tl

    def scaled(x, eps):
        high, low = split_eps(eps, tl.float64)
        return x * high + x * low

    x = torch.ones(2, dtype=torch.float64)
    for dynamic in (None, True):
        torch._dynamo.reset()
        compiled = torch.compile(scaled, fullgraph=True, backend="eager", dynamic=dynamic)
        for eps in (1e-6, 1e-5, 3.3e-4):
            assert compiled(x, eps).tolist() == [eps, eps]


def launch_plan(x, weight):
    """The four launch configs a launch on rows like x's would take, and the forward's args."""
    import rmsnorm_triton as rt

    _, _, args = rt.forward_arguments(x, weight, 1e-6)
    n_cols = args["n_cols"]
    configs = [rt.forward_config(n_cols, x.device), rt.backward_config(n_cols, x.device),
               rt.forward_config(n_cols, x.device, fused=True),
               rt.backward_config(n_cols, x.device, fused=True)]
    return configs, args


@pytest.mark.parametrize("width", [300, 1000, 2560, 16383, 20480])
def test_launch_configs_under_torch_compile_with_a_symbolic_width(width, device):
    """dynamic=True (or a second shape) makes the width symbolic. Config choice is Python on
    the width: it must see the number (operator.index specializes it), not a symbol (a
    SymBool in `tail in (None, tail_cols > 0)` picked a wrong rung at 300)."""
    def plan(x, weight):
        configs, args = launch_plan(x, weight)
        fields = [v for c in configs for v in dataclasses.astuple(c)]
        return torch.tensor(fields + [args["ALIGN"], args["n_cols"]])

    torch._dynamo.reset()
    compiled = torch.compile(plan, fullgraph=True, backend="eager", dynamic=True)
    for rows in (3, 8):
        x, w = torch.ones(rows, width, device=device), torch.ones(width, device=device)
        assert compiled(x, w).tolist() == plan(x, w).tolist()


def graph_breaks(fn, *args, **kwargs):
    import torch._dynamo

    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(*args, **kwargs).graph_break_count


@pytest.mark.gpu
@pytest.mark.parametrize("width, dynamic",
                         [(1024, False), (1024, True), (20480, False), (20480, True)])
def test_modules_compile_fullgraph_and_match_eager(width, dynamic):  # pragma: gpu only
    """Both modules under torch.compile(fullgraph=True): the register kernels (1024) and the
    chunked ones (20480, whose plain forward takes its width as a constexpr), also with
    dynamic=True, where the row count is symbolic and the width still a constant."""
    from rmsnorm_fused_add import TritonQwen3FusedAddRMSNorm
    from rmsnorm_triton import TritonQwen3RMSNorm

    gen = torch.Generator(device="cuda").manual_seed(0)
    x, r, dy, ds = (torch.randn(64, width, device="cuda", generator=gen).to(torch.bfloat16)
                    for _ in range(4))
    import warnings

    for module, inputs, grads in ((TritonQwen3RMSNorm(width), (x,), (dy,)),
                                  (TritonQwen3FusedAddRMSNorm(width), (x, r), (dy, ds))):
        module = module.cuda().to(torch.bfloat16)
        assert graph_breaks(module, *inputs) == 0
        results = []
        torch._dynamo.reset()
        with warnings.catch_warnings(record=True) as caught:  # none may point at our code
            warnings.simplefilter("always")
            for fn in (module, torch.compile(module, fullgraph=True, dynamic=dynamic)):
                leaves = [t.clone().requires_grad_() for t in inputs]
                outputs = fn(*leaves)
                outputs = outputs if isinstance(outputs, tuple) else (outputs,)
                results.append(list(outputs) + list(torch.autograd.grad(
                    outputs, leaves + [module.weight], grads)))
        assert not our_warnings(caught), our_warnings(caught)
        for eager, compiled in zip(*results):  # the same kernels, the same fp32 eps
            torch.testing.assert_close(compiled, eager, rtol=2**-8, atol=1e-3)


@pytest.mark.gpu
def test_a_second_eps_recompiles_with_eps_symbolic_and_stays_exact_in_fp64():  # pragma: gpu only
    """A second eps value makes Dynamo recompile with eps symbolic (automatic dynamic), as in
    a model whose norms differ in eps. fp64 inputs: rstd must still use the fp64 eps."""
    from rmsnorm_fused_add import TritonQwen3FusedAddRMSNorm
    from rmsnorm_triton import TritonQwen3RMSNorm, rms_norm_forward

    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(64, 20480, device="cuda", dtype=torch.float64, generator=gen) * 1e-2
    w = torch.ones(20480, device="cuda", dtype=torch.float64)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, eps: rms_norm_forward(x, w, eps)[1], fullgraph=True)
    for eps in (1e-3, 2e-3 + 1e-12, 3.3e-4):  # eps matters: mean(x^2) is about 1e-4
        expected = torch.rsqrt(x.pow(2).mean(-1) + eps)
        torch.testing.assert_close(compiled(x, eps), expected, rtol=1e-14, atol=0)
    for width in (1024, 20480):
        xb, rb = (torch.randn(8, width, device="cuda", generator=gen).to(torch.bfloat16)
                  for _ in range(2))
        for module, inputs in ((TritonQwen3RMSNorm(width), (xb,)),
                               (TritonQwen3FusedAddRMSNorm(width), (xb, rb))):
            module = module.cuda().to(torch.bfloat16)
            torch._dynamo.reset()
            compiled = torch.compile(module, fullgraph=True)
            for eps in (1e-6, 1e-5):
                module.variance_epsilon = eps
                got, want = compiled(*inputs), module(*inputs)
                for got_t, want_t in zip(*(t if isinstance(t, tuple) else (t,)
                                           for t in (got, want))):
                    torch.testing.assert_close(got_t, want_t, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("patch", ["plain", "fused_in_place", "fused_built"])
def test_patched_qwen3_compiles_fullgraph(patch):  # pragma: gpu only
    """Each patch under torch.compile(fullgraph=True): no graph break, HF's loss, a backward,
    and no warning that points at our code."""
    import warnings

    from transformers import Qwen3ForCausalLM

    from qwen3_configs import tiny_qwen3_config
    from qwen3_fused_add_patch import apply_fused_add_rmsnorm, patch_qwen3_fused_add_rmsnorm
    from qwen3_patch import patch_qwen3_rmsnorm

    torch.manual_seed(0)
    undo_build = {"plain": patch_qwen3_rmsnorm, "fused_built": patch_qwen3_fused_add_rmsnorm}.get(
        patch, lambda: (lambda: None))()
    model = Qwen3ForCausalLM(tiny_qwen3_config()).cuda()
    undo_build()
    undo = apply_fused_add_rmsnorm(model) if patch == "fused_in_place" else (lambda: None)
    try:
        ids = torch.randint(0, model.config.vocab_size, (2, 16), device="cuda")
        assert graph_breaks(model, input_ids=ids, labels=ids) == 0
        eager = model(input_ids=ids, labels=ids).loss
        torch._dynamo.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = torch.compile(model, fullgraph=True)(input_ids=ids, labels=ids).loss
            compiled.backward()
        assert not our_warnings(caught), our_warnings(caught)
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
    finally:
        undo()


# ------------------------------------------------------------------ warnings and rounding

def our_warnings(caught) -> list[str]:
    """The warnings among ``caught`` that come from or point at a file of snippets/."""
    ours = {path.name for path in (ROOT / "snippets").glob("*.py")}
    return [f"{w.filename}:{w.lineno}: {w.message}" for w in caught
            if pathlib.Path(w.filename).name in ours or any(name in str(w.message) for name in ours)]


def test_launch_configs_compile_without_a_warning(device):
    """Dynamo warns on every compile when it meets a functools.lru_cache wrapper ("Silent
    incorrectness is only a *potential* risk"): the config lookups a launch makes
    (forward_config, backward_config and their ladder, sm_count) must not be one."""
    import warnings

    import rmsnorm_triton as rt

    def plan(x, weight):
        configs, _ = launch_plan(x, weight)
        return x * (len(configs) + rt.sm_count(x.device))

    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = torch.compile(plan, fullgraph=True, backend="eager")
        x, w = torch.ones(3, 300, device=device), torch.ones(300, device=device)
        assert torch.equal(compiled(x, w), plan(x, w))
    assert not our_warnings(caught), our_warnings(caught)


def test_the_eager_caches_still_cache():
    """Outside torch.compile the config lookups stay memoized (a launch costs host time)."""
    import rmsnorm_triton as rt

    rt.sm_count.cache_clear()
    calls = []
    original = torch.cuda.get_device_properties

    def counted(device):
        calls.append(device)
        return original(device)

    torch.cuda.get_device_properties = counted
    try:
        device = torch.device("cuda", 0)
        if torch.cuda.is_available():
            assert rt.sm_count(device) == rt.sm_count(device) and len(calls) == 1
        assert rt.sm_count(torch.device("cpu")) == 2 and len(calls) <= 1
    finally:
        torch.cuda.get_device_properties = original
        rt.sm_count.cache_clear()


def test_every_launch_pins_fp_fusion(device, monkeypatch):
    """The rounding decision: every launch of the production kernels passes
    enable_fp_fusion=True (FMA contraction on, as measured), so Triton 3.10's new default
    (off) cannot change the kernels' rounding. Covers the register, reread and chunked
    paths, forward and backward, plain and fused, and the dW reduction."""
    import rmsnorm_triton as rt
    from rmsnorm_config import LaunchConfig
    from rmsnorm_fused_add import fused_add_rms_norm

    kernels = ["rms_norm_fwd_kernel", "rms_norm_fwd_chunked_kernel", "rms_norm_bwd_kernel",
               "rms_norm_bwd_reread_kernel", "rms_norm_bwd_row_stats_kernel",
               "rms_norm_bwd_chunked_kernel", "dw_reduce_kernel"]
    launches = []
    for name in kernels:
        kernel = getattr(rt, name)

        def spy(*args, _name=name, _run=kernel.run, **kwargs):
            launches.append((_name, kwargs.get("enable_fp_fusion")))
            return _run(*args, **kwargs)

        monkeypatch.setattr(kernel, "run", spy, raising=False)
    gen = torch.Generator().manual_seed(0)
    x, r, dy = (torch.randn(4, 300, generator=gen).to(device) for _ in range(3))
    w = torch.rand(300, generator=gen).to(device) + 0.5
    for config in (None, LaunchConfig(1, 128, 0, 4, 1, chunked=True),
                   LaunchConfig(1, 256, 64, 4, 1, reread=True)):
        _, rstd = rt.rms_norm_forward(x, w, config=None if config is None or config.reread
                                      else config)
        rt.rms_norm_backward(dy, x, w, rstd, config=config)
    x_, r_ = x.clone().requires_grad_(), r.clone().requires_grad_()
    y, s = fused_add_rms_norm(x_, r_, w)
    torch.autograd.backward((y, s), (dy, dy))
    assert {name for name, _ in launches} == set(kernels)
    assert {option for _, option in launches} == {True}, launches


FP_FUSION_SCRIPT = r"""
import json, os, re, torch
import rmsnorm_triton as rt
from rmsnorm_config import LaunchConfig
from rmsnorm_fused_add import fused_add_rms_norm

def compiled(name):
    found = []
    for cache in getattr(rt, name).device_caches.values():
        found += [k for k in cache[0].values() if hasattr(k, "metadata")]
    return [(k.metadata.enable_fp_fusion, len(re.findall(r"\bfma\.rn\.f32", k.asm["ptx"])))
            for k in found]

x, r, dy = (torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(3))
w = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
for config in (None, LaunchConfig(1, 2048, 0, 8, 1, chunked=True)):
    y, rstd = rt.rms_norm_forward(x, w, config=config)
    rt.rms_norm_backward(dy, x, w, rstd, config=config)
fused_add_rms_norm(x, r, w)
names = ("rms_norm_fwd_kernel", "rms_norm_bwd_kernel", "rms_norm_fwd_chunked_kernel",
         "rms_norm_bwd_chunked_kernel")
ours = {name: compiled(name) for name in names}
# The control: the same backward compiled with the option off, as Triton 3.10's default would.
rt.COMPILE_OPTIONS["enable_fp_fusion"] = False
rt.rms_norm_backward(dy, x, w, rstd)
torch.cuda.synchronize()
control = [fma for flag, fma in compiled("rms_norm_bwd_kernel") if flag is False]
print(json.dumps({"ours": ours, "control_fma": control,
                  "default": os.environ.get("TRITON_DEFAULT_FP_FUSION")}))
"""


@pytest.mark.gpu
def test_fp_fusion_stays_on_when_tritons_default_is_off():  # pragma: gpu only
    """With TRITON_DEFAULT_FP_FUSION=0 (Triton 3.10's default), every compiled kernel still has
    enable_fp_fusion=True and contracted FMAs in its PTX; the control, the backward compiled
    with the option off, has fewer (so the PTX count can tell the two apart)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_DEFAULT_FP_FUSION="0", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "snippets"), env.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory() as cache:
        env["TRITON_CACHE_DIR"] = cache
        done = subprocess.run([sys.executable, "-c", FP_FUSION_SCRIPT], capture_output=True,
                              text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["default"] == "0"
    for name, kernels in result["ours"].items():
        assert kernels and all(flag is True for flag, _ in kernels), (name, kernels)
    (flag, bwd_fma), *_ = result["ours"]["rms_norm_bwd_kernel"]
    (control_fma,) = result["control_fma"]
    assert bwd_fma > control_fma, result
