"""snippets/p1_profile_step.py (篇1 §三): one profiled training step and the launch-overhead figures."""
import collections
import json
import pathlib

import pytest
import torch

from p1_profile_step import (annotate_decoder_layers, category_table, device_events, kernel_category, kernel_table,
                             launch_summary, layer_timeline, load_trace, memory_bound_runs, outermost,
                             profile_training_step, range_launches, short_kernel_name, top_ops,
                             training_step)
from p1_static_read import build_qwen3
from qwen3_configs import tiny_qwen3_config

SMALL_TRACE = pathlib.Path(__file__).parent / "fixtures" / "traces" / "p1_profile_small_trace.json"

# Kernel names as the H200 profiler reports them (torch 2.11, CUDA 13).
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor"
       "<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
MEAN = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
        "float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
        "float>, unsigned int, float, 4, 4>)")
POW = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::pow_tensor_scalar_kernel_"
       "impl<float, float>(at::TensorIteratorBase&, float)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::"
       "native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase&, float)::"
       "{lambda(float)#1}, std::array<char*, 2ul>)")
COPY = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
        "{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(c10::BFloat16)#1}, std::array"
        "<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::"
        "native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, ...)")
GEMM = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>"
TRITON = "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0"


def kernel(name, ts, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7}


def test_short_names_keep_the_op():
    assert short_kernel_name(MUL) == "vectorized_elementwise_kernel[Mul]"
    assert short_kernel_name(ADD) == "vectorized_elementwise_kernel[add]"
    assert short_kernel_name(MEAN) == "reduce_kernel[Mean]"
    assert short_kernel_name(POW) == "vectorized_elementwise_kernel[pow_tensor_scalar]"
    assert short_kernel_name(COPY) == "unrolled_elementwise_kernel[direct_copy]"
    assert short_kernel_name(GEMM) == GEMM
    assert short_kernel_name(TRITON) == TRITON


def test_categories():
    assert [kernel_category(n) for n in (MUL, MEAN, COPY, GEMM, FLASH, TRITON)] == [
        "elementwise", "reduction", "copy / cast / layout", "GEMM", "attention", "Triton (Inductor)"]
    assert kernel_category("aten::linear") == "other"


def test_launch_summary_by_hand():
    events = [kernel(MUL, 0, 10), kernel(ADD, 5, 10), kernel(GEMM, 20, 10), kernel(MEAN, 40, 1),
              {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "ts": 0, "dur": 100, "pid": 0, "tid": 1}]
    s = launch_summary(events, small_us=10.0, gap_us=5.0)
    assert s["kernels"] == 4  # the CPU op is not a kernel when kernels exist
    assert s["kernel_time_us"] == 31
    assert s["busy_us"] == 15 + 10 + 1  # [0, 15] merged, [20, 30], [40, 41]
    assert s["span_us"] == 41
    assert s["idle_us"] == 15
    assert s["gaps_over_threshold"] == 1  # gaps of 5 and 10 µs: only 10 > 5
    assert s["gap_time_over_threshold_us"] == 10
    assert s["small_kernels"] == 1 and s["small_kernel_time_share"] == pytest.approx(1 / 31)
    assert s["median_kernel_us"] == 10
    with pytest.raises(ValueError):
        launch_summary([])


def test_tables_and_runs():
    events = [kernel(GEMM, 0, 50), kernel(COPY, 50, 2), kernel(POW, 52, 3), kernel(MEAN, 55, 4),
              kernel(MUL, 59, 3), kernel(GEMM, 62, 50), kernel(MUL, 112, 3)]
    table = kernel_table(events)
    assert table[0]["kernel"] == GEMM and table[0]["calls"] == 2 and table[0]["total_us"] == 100
    assert sum(row["share"] for row in table) == pytest.approx(1.0)
    categories = {row["category"]: row["kernels"] for row in category_table(events)}
    assert categories == {"GEMM": 2, "copy / cast / layout": 1, "elementwise": 3, "reduction": 1}
    timeline = [{"category": kernel_category(e["name"])} for e in events]
    assert memory_bound_runs(timeline) == [4, 1]


def test_outermost_drops_nested_ops():
    ops = [{"ts": 0, "dur": 10, "tid": 1, "name": "aten::linear"}, {"ts": 1, "dur": 5, "tid": 1, "name": "aten::mm"},
           {"ts": 12, "dur": 2, "tid": 1, "name": "aten::add"}, {"ts": 2, "dur": 1, "tid": 2, "name": "aten::mul"}]
    assert [e["name"] for e in outermost(ops)] == ["aten::linear", "aten::add", "aten::mul"]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    torch.manual_seed(0)
    model = build_qwen3(tiny_qwen3_config(), device="cpu")
    handles = annotate_decoder_layers(model)
    input_ids = torch.randint(0, model.config.vocab_size, (1, 16))
    path = tmp_path_factory.mktemp("trace") / "step.json.gz"
    profiler = profile_training_step(model, input_ids, trace_path=path, warmup_steps=1)
    return model, handles, input_ids, profiler, path


def test_profiled_step_trace_opens_and_shows_the_layer(profiled):
    model, _, _, profiler, path = profiled
    events = load_trace(path)
    assert json.dumps(events[:3])  # plain JSON, as Perfetto reads it
    summary = launch_summary(events)
    assert summary["kernels"] > 0 and 0 < summary["busy_us"] <= summary["span_us"]
    timeline = layer_timeline(events, "decoder_layer.1", row="cpu")
    names = collections.Counter(row["kernel"] for row in timeline)
    # 4 Qwen3RMSNorm per layer: each runs pow, mean and rsqrt once
    assert names["pow"] == names["rsqrt"] == names["mean"] == 4
    assert names["linear"] == 7 and names["silu"] == 1
    assert timeline == sorted(timeline, key=lambda row: row["start_us"])
    assert layer_timeline(events, "decoder_layer.1") == timeline  # no GPU: the device row is the CPU row
    assert memory_bound_runs(timeline)
    ops = top_ops(profiler, n=5)
    assert len(ops) == 5 and all(op["op"].startswith("aten::") for op in ops)
    assert ops == sorted(ops, key=lambda op: op["self_cpu_us"], reverse=True)
    with pytest.raises(ValueError):
        layer_timeline(events, "decoder_layer.1", row="gpu")
    with pytest.raises(ValueError):
        layer_timeline(events, "no_such_range")


def test_profiled_step_leaves_fresh_gradients(profiled):
    model, _, _, _, _ = profiled
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_removing_the_hooks_removes_the_ranges(profiled, tmp_path):
    model, handles, input_ids, _, _ = profiled
    for handle in handles:
        handle.remove()
    path = tmp_path / "plain.json"
    profile_training_step(model, input_ids, trace_path=path, warmup_steps=0)
    events = load_trace(path)
    assert device_events(events)
    with pytest.raises(ValueError):
        layer_timeline(events, "decoder_layer.0")


def test_training_step():
    torch.manual_seed(0)
    model = build_qwen3(tiny_qwen3_config(num_hidden_layers=1), device="cpu")
    input_ids = torch.randint(0, model.config.vocab_size, (1, 8))
    loss = training_step(model, input_ids)
    assert loss.ndim == 0 and torch.isfinite(loss)
    # random init: next-token loss is close to log(vocab)
    assert abs(loss.item() - torch.log(torch.tensor(float(model.config.vocab_size))).item()) < 1.0


def test_layer_timeline_on_a_gpu_trace_follows_correlation_ids():
    """The GPU row holds the kernels the layer's CPU range launched, even when the GPU runs them later."""
    cpu_range = {"ph": "X", "cat": "user_annotation", "name": "decoder_layer.1", "ts": 100, "dur": 50, "pid": 1, "tid": 1}
    gpu_range = {"ph": "X", "cat": "gpu_user_annotation", "name": "decoder_layer.1", "ts": 900, "dur": 60,
                 "pid": 0, "tid": 7}

    def launch(ts, correlation):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 3, "pid": 1, "tid": 1,
                "args": {"correlation": correlation}}

    def gpu_kernel(name, ts, dur, correlation):
        return {**kernel(name, ts, dur), "args": {"correlation": correlation}}

    events = [cpu_range, gpu_range,
              launch(90, 1), launch(110, 2), launch(120, 3), launch(160, 4),
              gpu_kernel(GEMM, 880, 30, 1),  # launched before the range: not the layer's
              gpu_kernel(POW, 910, 5, 2), gpu_kernel(MEAN, 915, 5, 3),
              gpu_kernel(MUL, 930, 5, 4),  # inside the GPU range but launched after the CPU range
              {"ph": "X", "cat": "cpu_op", "name": "aten::pow", "ts": 105, "dur": 8, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mean", "ts": 118, "dur": 8, "pid": 1, "tid": 1}]
    timeline = layer_timeline(events, "decoder_layer.1")
    assert [(row["start_us"], row["kernel"]) for row in timeline] == [
        (10, "vectorized_elementwise_kernel[pow_tensor_scalar]"), (15, "reduce_kernel[Mean]")]
    assert [row["kernel"] for row in layer_timeline(events, "decoder_layer.1", row="cpu")] == ["pow", "mean"]
    without_gpu_range = [e for e in events if e is not gpu_range]
    assert [row["start_us"] for row in layer_timeline(without_gpu_range, "decoder_layer.1")] == [0, 5]


def test_range_launches_pairs_each_launch_with_its_kernel():
    """Hand-made GPU trace: the range decoder_layer.1 runs from ts 1000 to 1100 on thread 1."""
    events = load_trace(SMALL_TRACE)
    pairs = range_launches(events, "decoder_layer.1")
    # correlation 1 launched before the range, 3 started no GPU work (cudaGetErrorString),
    # 6 came from another thread, 7 after the range ended: none of them is the range's
    assert [p["correlation"] for p in pairs] == [2, 4, 5]
    assert [(p["launch"], p["launch_us"], p["kernel_us"]) for p in pairs] == [
        ("cudaLaunchKernel", 10, 60), ("cudaMemsetAsync", 30, 70), ("cuLaunchKernelEx", 40, 90)]
    assert [p["category"] for p in pairs] == ["reduction", "copy / cast / layout", "GEMM"]
    assert pairs[0]["kernel"] == "reduce_kernel[Mean]" and pairs[2]["kernel_dur_us"] == 100
    assert all(p["kernel_us"] >= p["launch_us"] + p["launch_dur_us"] for p in pairs)  # a kernel runs after its launch
    with pytest.raises(ValueError):
        range_launches(events, "decoder_layer.0")


def test_range_launches_on_a_cpu_trace_is_empty(profiled):
    assert range_launches(load_trace(profiled[-1]), "decoder_layer.1") == []
