"""bench/harness/step_profile.py: each kernel of a profiled step in one bucket, by its name; the GPU's busy
and idle time from the kernels' intervals; and the full-size job's profiled step."""
from __future__ import annotations

import pytest

from bench.harness import fullsize_job, step_profile

OURS = step_profile.our_kernel_names()


def _kernel(name, ts, dur, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_our_kernels_are_named_from_the_snippets():
    """Every kernel the fusion set launches, read from the @triton.jit functions of its snippet modules."""
    assert {"rms_norm_fwd_kernel", "rms_norm_bwd_kernel", "qk_norm_rope_fwd_kernel", "qk_norm_rope_bwd_kernel",
            "swiglu_fwd_kernel", "swiglu_bwd_kernel", "cross_entropy_rows_kernel", "dw_reduce_kernel"} <= OURS


@pytest.mark.parametrize("name, expected", [
    ("rms_norm_fwd_kernel", step_profile.OURS),
    ("rms_norm_fwd_kernel_0", step_profile.OURS),  # as torch.compile may launch a user kernel
    ("_rms_norm_forward_kernel", step_profile.LIGER),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "Inductor (torch.compile)"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "GEMM"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "GEMM"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false>>", "attention"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
     "elementwise"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "copy / cast / layout"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps>>", "reduction"),
    ("void at::native::cunn_SoftMaxForward<8, float>", "softmax / loss"),
    ("some_kernel_nobody_names", step_profile.OTHER),
])
def test_each_kernel_lands_in_one_bucket(name, expected):
    assert step_profile.bucket(name, OURS, {"_rms_norm_forward_kernel"}) == expected


def test_busy_and_idle_come_from_the_intervals():
    """Two overlapping kernels and a gap: busy is their union, idle the gap, the host time outside the span the
    wall time's rest; buckets keep their launches and time."""
    events = [_kernel("rms_norm_fwd_kernel", 100, 50), _kernel("nvjet_gemm", 120, 60),  # overlap: 100-180
              _kernel("void at::native::vectorized_elementwise_kernel<add>", 200, 10),  # gap 180-200
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 5}]  # not device work
    out = step_profile.breakdown(events, wall_us=150.0 + 100.0, ours=OURS, liger=set())
    assert out["launches"] == 3 and out["kernel_time_us"] == 120
    assert (out["span_us"], out["busy_us"], out["gpu_idle_us"], out["outside_span_us"]) == (110, 90, 20, 140)
    assert out["buckets"] == {"GEMM": {"kernels": 1, "total_us": 60}, step_profile.OURS: {"kernels": 1, "total_us": 50},
                              "elementwise": {"kernels": 1, "total_us": 10}}
    assert list(out["buckets"]) == [b for b in step_profile.BUCKETS if b in out["buckets"]]  # the table's order


def test_a_profiled_step_of_the_full_size_job():
    """With profile_step on (experiment fullsize_loss), a contender's record holds one profiled step's breakdown;
    on a CPU there are no kernels, only the wall time. (HF eager: in this process, a patching contender would
    leave modeling_qwen3 patched for the tests after it; the job runs each contender in a process of its own.)"""
    assert fullsize_job.PROFILED == ("fullsize_loss",)
    cfg = dict(fullsize_job.fullsize_config(quick=True), profile_step=True, timed_steps=1)
    record = fullsize_job.measure_contender("eager", cfg, "cpu", log=lambda message: None)
    profile = record["profile"]
    assert profile["wall_us"] > 0 and profile["launches"] == 0 and profile["buckets"] == {}
    assert "profile" not in fullsize_job.measure_contender("eager", dict(cfg, profile_step=False), "cpu",
                                                           log=lambda message: None)
