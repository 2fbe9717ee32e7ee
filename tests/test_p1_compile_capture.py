"""snippets/p1_compile_capture.py (篇1 §六): capture what Inductor generates for Qwen3RMSNorm."""
import pytest
import torch

from p1_compile_capture import compile_rmsnorm, generated_kernels, graph_kind, kernel_body

# The layout of one kernel definition in Inductor's output code (TORCH_LOGS=output_code), trimmed.
TRITON_MODULE = """# AOT ID: ['3_forward']
import torch
async_compile = AsyncCompile()


# kernel path: /tmp/torchinductor_root/ab/cabc.py
# Topologically Sorted Source Nodes: [hidden_states, pow_1, variance, add, rsqrt, hidden_states_1, to_1, mul_1], Original ATen: [aten._to_copy, aten.pow, aten.mean, aten.add, aten.rsqrt, aten.mul]
# Source node to ATen node mapping:
#   add => add
triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0 = async_compile.triton('triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0', '''
import triton
import triton.language as tl

@triton_heuristics.persistent_reduction(size_hints={'x': 16384, 'r0_': 4096})
@triton.jit
def triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    tmp0 = tl.load(in_ptr0 + (r0_1 + 4096*x0), None).to(tl.float32)
''', device_str='cuda')


async_compile.wait(globals())
"""


def test_parser_reads_name_fused_nodes_and_body():
    kernels = generated_kernels(TRITON_MODULE)
    assert len(kernels) == 1
    k = kernels[0]
    assert k["name"] == "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0" and k["kind"] == "triton"
    assert k["source_nodes"] == ["hidden_states", "pow_1", "variance", "add", "rsqrt", "hidden_states_1", "to_1",
                                 "mul_1"]
    body = kernel_body(k["source"])
    assert body.startswith("@triton.jit\ndef triton_per_fused")
    assert "triton_heuristics" not in body and "tl.load" in body
    assert graph_kind(TRITON_MODULE) == "forward"
    assert graph_kind("import torch\n") == "unknown"
    assert generated_kernels("x = 1\n") == []


@pytest.fixture(scope="module")
def rmsnorm_kernels(device):
    torch._dynamo.reset()
    return compile_rmsnorm(hidden_size=64, rows=8, device=device, dtype=torch.float32)


def test_inductor_fuses_the_rmsnorm_forward_into_one_kernel(rmsnorm_kernels, on_gpu):
    assert set(rmsnorm_kernels) == {"forward", "backward"}
    forward = rmsnorm_kernels["forward"]
    assert len(forward) == 1  # eager HF launches 8 kernels for the same lines
    name = forward[0]["name"]
    for op in ("add", "mean", "mul", "pow", "rsqrt"):
        assert op in name
    assert forward[0]["kind"] == ("triton" if on_gpu else "cpp_pybinding")
    assert rmsnorm_kernels["backward"], "the backward graph generated no kernel"
    assert any("sum" in k["name"] for k in rmsnorm_kernels["backward"])  # dW / the row reduction


@pytest.mark.gpu
def test_triton_code_on_gpu(rmsnorm_kernels):
    forward = rmsnorm_kernels["forward"][0]
    assert kernel_body(forward["source"]).startswith("@triton.jit")
    assert "rsqrt" in forward["source"] and forward["source_nodes"]
