"""Launch plans (snippets/rmsnorm_triton.py, KernelLaunch / ForwardPlan / BackwardPlan).

A plan repeats a call's launches without Triton's per-call binding, so it must give the
same bits as the usual launch, never be used where a key property differs (alignment,
strides, dtype, eps), never be recorded for a call whose kernel read a copy, launch on the
current stream (CUDA-graph capture), and leave profilers' launch hooks working.

On a GPU the plans launch through the compiled binary's launcher. On CPU (the interpreter
has no binaries) the fixture turns planning on for CPU tensors and sets a launch hook, so
every replay takes KernelLaunch's hook path, ``kernel[grid](*tensors, *fixed)``: the same
argument order and the same plan bookkeeping, run by the interpreter.
"""
import pytest
import torch
import triton

import rmsnorm_triton as rt
from helpers import poisoned_allocations
from rmsnorm_fused_add import fused_add_rms_norm

EPS = 1e-6


def add_launch_hook(request, hook):
    """Triton 3.6's launch hooks are chains: add one, removed after the test."""
    chain = triton.knobs.runtime.launch_enter_hook
    chain.add(hook)
    request.addfinalizer(lambda: chain.remove(hook))


def _no_op_hook(metadata):
    return None


@pytest.fixture
def planning(monkeypatch, request, on_gpu):
    """Plans on, an empty plan cache; on CPU, a launch hook (replays take kernel[grid])."""
    monkeypatch.setattr(rt, "_PLANS", {})
    if on_gpu:
        assert rt._FAST_LAUNCH == triton.__version__.startswith(rt.FAST_LAUNCH_TRITON)
    else:
        monkeypatch.setattr(rt, "_FAST_LAUNCH", True)
        monkeypatch.setattr(rt, "_PLAN_DEVICE", "cpu")
        add_launch_hook(request, _no_op_hook)
    if not rt._FAST_LAUNCH:
        pytest.skip(f"Triton {triton.__version__} takes the usual launch path")


def usual_forward_backward(x, w, dy, ds=None, residual=None):
    """The same calls with a config override, which never plans."""
    n = x.shape[-1]
    if residual is None:
        y, rstd = rt.rms_norm_forward(x, w, EPS, config=rt.forward_config(n, x.device))
        s = x
    else:
        from rmsnorm_fused_add import fused_add_rms_norm_forward
        y, s, rstd = fused_add_rms_norm_forward(
            x, residual, w, EPS, config=rt.forward_config(n, x.device, fused=True))
    dx, dw = rt.rms_norm_backward(dy, s, w, rstd, ds=ds,
                                  config=rt.backward_config(n, x.device, fused=ds is not None))
    return y, dx, dw


def planned_forward_backward(x, w, dy, ds=None, residual=None):
    if residual is None:
        y, rstd = rt.rms_norm_forward(x, w, EPS)
        s = x
    else:
        from rmsnorm_fused_add import fused_add_rms_norm_forward
        y, s, rstd = fused_add_rms_norm_forward(x, residual, w, EPS)
    dx, dw = rt.rms_norm_backward(dy, s, w, rstd, ds=ds)
    return y, dx, dw


def inputs(shape, dtype, device, seed, transposed_dy=False):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype).to(device)
    w = (torch.rand(shape[-1], generator=gen) + 0.5).to(dtype).to(device)
    if transposed_dy:  # q/k-norm's dy: a (B, H, T, D) view of (B, T, H, D) memory
        dy = torch.randn(shape[0], shape[2], shape[1], shape[3], generator=gen)
        dy = dy.to(dtype).to(device).transpose(1, 2)
    else:
        dy = torch.randn(shape, generator=gen).to(dtype).to(device)
    return x, w, dy


def forbid_usual_path(monkeypatch):
    """A planned call must not prepare arguments or bind a launch again."""
    def refuse(*args, **kwargs):
        raise AssertionError("the usual launch path ran although a plan exists")
    monkeypatch.setattr(rt, "forward_arguments", refuse)
    monkeypatch.setattr(rt, "rows_layout", refuse)


CASES = [  # (shape, dtype, transposed dy)
    ((2, 5, 3, 32), torch.bfloat16, True),  # q/k-norm rows, strided dy
    ((7, 96), torch.float32, False),
    ((3, 300), torch.bfloat16, False),  # block + tail: 256 + 64
]


@pytest.mark.parametrize("shape, dtype, transposed_dy", CASES, ids=str)
def test_replayed_plans_give_the_usual_bits(planning, monkeypatch, device, shape, dtype,
                                            transposed_dy):
    x, w, dy = inputs(shape, dtype, device, 0, transposed_dy)
    planned_forward_backward(x, w, dy)  # records the forward and backward plans
    assert sorted(key[1] for key in rt._PLANS) == ["backward", "forward"]
    recorded = set(rt._PLANS)
    x, w, dy = inputs(shape, dtype, device, 1, transposed_dy)  # fresh values, same key
    expected = usual_forward_backward(x, w, dy)
    forbid_usual_path(monkeypatch)
    with poisoned_allocations():
        got = planned_forward_backward(x, w, dy)
    assert set(rt._PLANS) == recorded
    for name, a, b in zip(("y", "dx", "dw"), got, expected):
        assert torch.equal(a, b), name


def test_backward_variants_replay(planning, monkeypatch, device):
    """rstd recomputed from eps, no dW, and the fused add's ds: each its own plan."""
    x, w, dy = inputs((6, 64), torch.float32, device, 2)
    ds = torch.randn_like(x)
    rstd = rt.rms_norm_forward(x, w, EPS)[1]
    calls = [lambda: rt.rms_norm_backward(dy, x, w, None, eps=EPS),
             lambda: rt.rms_norm_backward(dy, x, w, rstd, compute_dw=False),
             lambda: rt.rms_norm_backward(dy, x, w, rstd, ds=ds)]
    first = [call() for call in calls]
    assert len([k for k in rt._PLANS if k[1] == "backward"]) == 3
    forbid_usual_path(monkeypatch)
    with poisoned_allocations():
        again = [call() for call in calls]
    for (dx0, dw0), (dx1, dw1) in zip(first, again):
        assert torch.equal(dx0, dx1)
        assert (dw0 is None and dw1 is None) or torch.equal(dw0, dw1)
    assert again[1][1] is None


def test_fused_add_replays(planning, monkeypatch, device):
    x, w, dy = inputs((4, 128), torch.bfloat16, device, 3)
    residual, ds = torch.randn_like(x), torch.randn_like(x)
    first = planned_forward_backward(x, w, dy, ds, residual)
    forbid_usual_path(monkeypatch)
    with poisoned_allocations():
        again = planned_forward_backward(x, w, dy, ds, residual)
    monkeypatch.undo()
    expected = usual_forward_backward(x, w, dy, ds, residual)
    for a, b, c in zip(first, again, expected):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_autograd_calls_replay(planning, device):
    """TritonRMSNormFunction and the fused add's Function go through the plans."""
    x, w, dy = inputs((5, 64), torch.bfloat16, device, 4)
    results = []
    for _ in range(2):
        leaf, weight = x.clone().requires_grad_(), w.clone().requires_grad_()
        rt.rms_norm(leaf, weight, EPS).backward(dy)
        r_leaf = x.clone().requires_grad_()
        y, s = fused_add_rms_norm(leaf.detach().requires_grad_(), r_leaf, weight, EPS)
        torch.autograd.backward((y, s), (dy, dy))
        results.append((leaf.grad, weight.grad, r_leaf.grad))
    assert len(rt._PLANS) == 4  # plain and fused, forward and backward
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_alignment_strides_and_eps_pick_their_own_plans(planning, device):
    """Same shape, other 16-byte alignment / strides / eps: never another key's plan."""
    buffer = torch.randn(8, 70, device=device).to(torch.bfloat16)
    w = torch.rand(64, device=device).to(torch.bfloat16) + 0.5
    views = [buffer[:, :64], buffer[:, 1:65], buffer[:, 2:66].contiguous()]
    for view in views:
        y = rt.rms_norm_forward(view, w, EPS)[0]
        expected = rt.rms_norm_forward(view, w, EPS, config=rt.forward_config(64, device))[0]
        assert torch.equal(y, expected)
    aligned = [k[2][4] for k in rt._PLANS]
    assert len(rt._PLANS) == 3 and True in aligned and False in aligned
    y = rt.rms_norm_forward(views[2], w, 1e-2)[0]
    assert len(rt._PLANS) == 4
    assert torch.equal(y, rt.rms_norm_forward(views[2], w, 1e-2,
                                              config=rt.forward_config(64, device))[0])


def test_the_current_device_is_part_of_the_key(planning, monkeypatch, device):
    """A binary is loaded into the device that was current when it was compiled: after a
    torch.cuda.set_device, the same tensors get a plan of their own."""
    x, w, _ = inputs((4, 64), torch.float32, device, 10)
    for current in (0, 1):
        monkeypatch.setattr(rt, "_current_device", lambda current=current: current)
        rt.rms_norm_forward(x, w, EPS)
    assert sorted(key[-1] for key in rt._PLANS) == [0, 1]


def test_calls_that_copy_are_not_planned(planning, device):
    """A strided last dim (rows_layout copies) or a strided weight: no plan, right result."""
    x = torch.randn(64, 6, device=device).t()  # last dim strided: copied
    w = torch.rand(64, device=device) + 0.5
    wide = torch.rand(128, device=device) + 0.5
    strided_w = wide[::2]
    for xi, wi in ((x, w), (x.contiguous(), strided_w)):
        y = rt.rms_norm_forward(xi, wi, EPS)[0]
        ref = rt.reference_rms_norm(xi, wi.contiguous(), EPS)
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    assert not rt._PLANS


def test_plan_cache_starts_over_when_full(planning, monkeypatch, device):
    monkeypatch.setattr(rt, "MAX_PLANS", 2)
    w = torch.rand(32, device=device) + 0.5
    for rows in (3, 4, 5):
        x = torch.randn(rows, 32, device=device)
        y = rt.rms_norm_forward(x, w, EPS)[0]
        torch.testing.assert_close(y, rt.reference_rms_norm(x, w, EPS), rtol=1e-5, atol=1e-5)
    assert len(rt._PLANS) == 1


def test_no_plans_under_the_interpreter_or_for_configs(device, monkeypatch, on_gpu):
    """Off by default on CPU; a config override never plans, on any device."""
    monkeypatch.setattr(rt, "_PLANS", {})
    x, w, dy = inputs((4, 64), torch.float32, device, 5)
    usual_forward_backward(x, w, dy)
    assert not rt._PLANS
    if not on_gpu:
        assert rt._plan_key("forward", x, w, EPS) is None
        planned_forward_backward(x, w, dy)
        assert not rt._PLANS


def test_compile_options_and_wrapped_kernels(planning, monkeypatch, device):
    """Other COMPILE_OPTIONS: another key (another binary). A wrapped kernel (a spy, a profiler's
    wrapper) is launched the usual way every time: no plan is recorded for it."""
    x, w, _ = inputs((4, 64), torch.float32, device, 9)
    rt.rms_norm_forward(x, w, EPS)
    monkeypatch.setitem(rt.COMPILE_OPTIONS, "enable_fp_fusion", False)
    rt.rms_norm_forward(x, w, EPS)
    assert len(rt._PLANS) == 2
    monkeypatch.setattr(rt, "_PLANS", {})
    seen, kernel = [], rt.rms_norm_fwd_kernel

    class Wrapped:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: seen.append(grid) or kernel[grid](*args, **kwargs)

    monkeypatch.setattr(rt, "rms_norm_fwd_kernel", Wrapped())
    for _ in range(2):
        rt.rms_norm_forward(x, w, EPS)
    assert len(seen) == 2 and not rt._PLANS


def test_arguments_of_other_types_get_the_usual_error(planning, device):
    x = torch.randn(4, 8, device=device)
    with pytest.raises(TypeError, match="tensors"):
        fused_add_rms_norm(x, [[0.0] * 8] * 4, torch.ones(8, device=device))
    with pytest.raises(ValueError, match="eps"):
        rt.rms_norm_forward(x, torch.ones(8, device=device), [1e-6])


def test_kernel_launch_needs_tensors_first(device):
    """KernelLaunch keeps no tensor: it refuses a signature with a tensor after a scalar."""
    def toy():
        return None

    class Kernel:
        arg_names = ["X", "n", "Y"]
        fn = staticmethod(toy)

        def __getitem__(self, grid):
            return lambda **kwargs: None

    x = torch.zeros(2, device=device)
    with pytest.raises(TypeError, match="toy: tensors must come first"):
        rt.KernelLaunch(Kernel(), (1,), dict(X=x, n=2, Y=x), {})


def test_strided_weight_is_read_correctly(device):
    """A non-contiguous weight (a view) gives HF's result, forward and backward."""
    x = torch.randn(5, 64, device=device, dtype=torch.float64)
    wide = (torch.rand(128, device=device, dtype=torch.float64) + 0.5).requires_grad_()
    leaf = x.clone().requires_grad_()
    y = rt.rms_norm(leaf, wide[::2], EPS)
    ref_leaf, ref_wide = x.clone().requires_grad_(), wide.detach().clone().requires_grad_()
    ref = rt.reference_rms_norm(ref_leaf, ref_wide[::2], EPS)
    torch.testing.assert_close(y, ref)
    dy = torch.randn_like(y)
    y.backward(dy)
    ref.backward(dy)
    torch.testing.assert_close(leaf.grad, ref_leaf.grad)
    torch.testing.assert_close(wide.grad, ref_wide.grad)


@pytest.mark.gpu
def test_plans_launch_on_the_current_stream(planning, device):
    """Captured into a CUDA graph on a side stream (a launch on any other stream fails the
    capture), then replayed with new values: the same bits as eager."""
    x, w, dy = inputs((64, 1024), torch.bfloat16, device, 6)
    planned_forward_backward(x, w, dy)  # plans recorded outside the capture
    static = [t.clone() for t in (x, w, dy)]
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        planned_forward_backward(*static)  # warm-up on the side stream
        with torch.cuda.graph(graph, stream=side):
            outputs = planned_forward_backward(*static)
    torch.cuda.current_stream().wait_stream(side)
    fresh = inputs((64, 1024), torch.bfloat16, device, 7)
    for buffer, value in zip(static, fresh):
        buffer.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(outputs, usual_forward_backward(*fresh)):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_profiler_hooks_still_see_every_launch(planning, request, device):
    x, w, dy = inputs((16, 256), torch.bfloat16, device, 8)
    planned_forward_backward(x, w, dy)
    seen = []
    add_launch_hook(request, seen.append)
    got = planned_forward_backward(x, w, dy)
    assert len(seen) == 3  # forward, backward, dW reduction
    for a, b in zip(got, usual_forward_backward(x, w, dy)):
        assert torch.equal(a, b)
