"""Where does the RMSNorm time go? GPU kernel time vs host time, per shape.

    python -m bench.profile_rmsnorm

Prints, for the production kernel and the naive one: do_bench medians of the
full autograd path, the summed CUDA kernel time per call from torch.profiler,
and the host time per call without synchronisation. When do_bench exceeds the
kernel time, the host (Python, launches) is the bottleneck, not the GPU.
"""
import time

import torch
from torch.profiler import ProfilerActivity, profile

from bench.harness import timers
from bench.harness.shapes import RMSNORM_SHAPES
from rmsnorm_naive_autograd import naive_rms_norm
from rmsnorm_triton import rms_norm

SHAPES = [RMSNORM_SHAPES[name] for name in ("H=1024", "H=4096", "k_norm", "q_norm")]


def kernel_us_per_call(fn, calls=20):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per_kernel = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_kernel[event.name[:60]] = per_kernel.get(event.name[:60], 0) + event.device_time / calls
    return sum(per_kernel.values()), per_kernel


def host_us_per_call(fn, calls=200):
    """Host time per call, no synchronisation between calls: what the CPU needs to issue one call
    (not a GPU timer, so not one of bench/harness/timers.py's)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return host


def main():
    for rows, width in SHAPES:
        x = torch.randn(rows, width, device="cuda").to(torch.bfloat16)
        dy = torch.randn_like(x)
        w = torch.nn.Parameter((torch.rand(width, device="cuda") + 0.5).to(torch.bfloat16))
        xg = x.clone().requires_grad_()
        for name, norm in (("triton", rms_norm), ("naive", naive_rms_norm)):
            def fwd():
                with torch.no_grad():
                    norm(x, w)

            def fwd_bwd():
                xg.grad = None
                w.grad = None
                norm(xg, w).backward(dy)

            for phase, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                bench = timers.eager_time_us(fn, rep_ms=200)["median_us"]
                kernel, per_kernel = kernel_us_per_call(fn)
                host = host_us_per_call(fn)
                top = ", ".join(f"{k}={v:.1f}" for k, v in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:4])
                print(f"{rows}x{width} {name:<6} {phase:<7} do_bench {bench:7.1f} µs | kernels {kernel:7.1f} µs | "
                      f"host {host:6.1f} µs | {top}", flush=True)


if __name__ == "__main__":
    main()
