#!/usr/bin/env python3
"""Measure the kernels a training step issues, with PyTorch, on one GPU.

Writes a kernel-measurement file in metp-sim's format (src/fitting/measurements.rs, the format
of ../shared/gpu-data/h200-2026-11-30.json, extended with q_tokens/kv_tokens/head_dim), so that
`metp-sim kernels --hw PROFILE --input FILE --compare` can check a profile's kernel model on
shapes it was not fitted on, and `metp-sim calibrate --fit FILE --base PROFILE` can refit it.

What is measured, METP's shapes first (they are what the shared file lacks):
  * bf16 GEMMs of the shapes the schedules issue: for LLaMA-2 7B / 13B / 70B layer dimensions
    and degrees p, with c tokens per device: QKV (c x 3h/p x h), attention output (c x h x h/p),
    MLP up (c x f/p x h, twice f for SwiGLU) and down (c x h x f/p), and each one's two
    backward GEMMs (input gradient c x k x n, weight gradient k x n x c); plus squares 1k-16k;
  * FlashAttention (PyTorch's SDPA flash backend) forward and backward: METP's blocks (one
    sequence, a/p heads, c x c, causal diagonal blocks and full off-diagonal ones), zig-zag half
    blocks (c/2 x c), and a general grid of batch x heads 1-64, lengths 256-64k, head dim 64 and
    128, causal and not;
  * device-to-device copies and an element-wise multiply, 64 KiB - 4 GiB;
  * the eager per-op host time.
Each time is the median of up to 10 calls timed one by one with CUDA events after 3 warm-ups
(fewer repetitions for long calls), launch included, as in the shared file. Attention 'bwd_s'
is (forward + backward) minus forward. Calls are skipped, never truncated, when the time budget
would be exceeded; the file says how many were skipped.

Usage: gpu-kernels.py --out FILE [--budget-s 75] [--smoke]   (--smoke: tiny sizes, CPU allowed)

scripts/gpu-dist.py (torchrun, several GPUs) measures with this file's `measure` on every rank.
The shape lists import without torch (the distributed script's plan is tested without it).
"""

import argparse
import json
import math
import statistics
import sys
import time

try:
    import torch
except ImportError:  # the shape lists and the plan work without torch; measuring does not
    torch = None

MODELS = {
    # name: (hidden, heads, kv_heads, ffn, swiglu)
    "llama2-7b": (4096, 32, 32, 11008, True),
    "llama2-13b": (5120, 40, 40, 13824, True),
    "llama2-70b": (8192, 64, 8, 28672, True),
}


class Timer:
    def __init__(self, device, budget_s):
        self.device = device
        self.cuda = device.type == "cuda"
        self.start = time.monotonic()
        self.budget_s = budget_s
        self.skipped = 0

    def left(self):
        return self.budget_s - (time.monotonic() - self.start)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def one(self, fn):
        """Seconds of one call, timed with CUDA events (wall clock on the CPU)."""
        if self.cuda:
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def median(self, fn, estimate_s, warmups=3, reps=10):
        """Median seconds per call, or None when the budget cannot cover it."""
        reps = max(3, min(reps, int(0.25 / max(estimate_s, 1e-9))))
        if (warmups + reps) * estimate_s * 1.5 + 0.05 > self.left():
            self.skipped += 1
            return None
        for _ in range(warmups):
            fn()
        self.sync()
        return statistics.median(self.one(fn) for _ in range(reps))


def gemm_shapes(smoke, ps=None):
    """(m, n, k) of METP's GEMMs, forward and backward, then squares (`ps`: the degrees, default
    1, 2, 4, 8)."""
    shapes = []
    if smoke:
        cs, ps, models = [64, 128], [2], {"tiny": (256, 4, 4, 512, True)}
    else:
        cs, ps, models = [512, 2048, 8192, 32768], ps or [1, 2, 4, 8], MODELS
    for name, (h, a, kv, f, swiglu) in models.items():
        for p in ps:
            if name == "llama2-70b" and p < 4:
                continue
            d = h // a
            qkv_n = (a + 2 * kv) * d // p
            up_n = (2 if swiglu else 1) * f // p
            for c in cs:
                for (m, n, k) in [(c, qkv_n, h), (c, h, h // p), (c, up_n, h), (c, h, f // p)]:
                    shapes.append((m, n, k))  # forward
                    shapes.append((m, k, n))  # input gradient: dY (m x n) . W^T (n x k)
                    shapes.append((k, n, m))  # weight gradient: X^T (k x m) . dY (m x n)
    squares = [64, 128] if smoke else [1024, 2048, 4096, 8192, 16384]
    shapes += [(s, s, s) for s in squares]
    seen, out = set(), []
    for s in shapes:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def attention_calls(smoke):
    """(b, heads, q, kv, d, causal) of METP's blocks, zig-zag halves, then a general grid."""
    calls = []
    if smoke:
        return [(1, 2, 64, 64, 64, False), (1, 2, 64, 64, 64, True), (2, 4, 32, 64, 128, False)]
    for name, (h, a, kv, f, swiglu) in MODELS.items():
        d = h // a
        for p in [2, 4, 8]:
            heads = a // p
            for c in [512, 1024, 2048, 4096, 8192, 16384]:
                calls.append((1, heads, c, c, d, True))  # diagonal block
                calls.append((1, heads, c, c, d, False))  # below-diagonal block
                if name == "llama2-7b":
                    calls.append((1, heads, c // 2, c, d, False))  # zig-zag half block
    for d in [128, 64]:
        for bh in [1, 4, 16, 64]:
            for s in [256, 1024, 4096, 16384, 65536]:
                heads = min(bh, 16)
                b = bh // heads
                for causal in [False, True]:
                    calls.append((b, heads, s, s, d, causal))
    seen, out = set(), []
    for c in calls:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


def measure(dev, budget_s, smoke, parts=("attention", "gemm", "copy"), ps=None, t=None):
    """The measurement file's fields (a dict) for the kernels of `parts` on `dev` within
    `budget_s` seconds (`ps`: the degrees of the GEMM shapes). The timer `t` (a `Timer`) may be
    passed to share a budget; the count of skipped calls is `t.skipped`."""
    cuda = dev.type == "cuda"
    t = t or Timer(dev, budget_s)
    dtype = torch.bfloat16
    props = torch.cuda.get_device_properties(dev) if cuda else None
    peak_guess = 8e14 if cuda else 5e10  # FLOP/s, only to size repetitions and the budget
    bw_guess = 4e12 if cuda else 1e10

    # Eager per-op host time: a chain of tiny in-place adds; the device work per op is far
    # shorter than the host's, so the chain's wall time per op is the host time.
    x = torch.zeros(16, device=dev, dtype=torch.float32)
    for _ in range(50):
        x.add_(1.0)
    t.sync()
    n_ops = 2000
    t0 = time.perf_counter()
    for _ in range(n_ops):
        x.add_(1.0)
    t.sync()
    eager_op_s = (time.perf_counter() - t0) / n_ops

    out = {
        "what": "",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "device": torch.cuda.get_device_name(dev) if cuda else "cpu (smoke test)",
        "software": f"torch {torch.__version__}",
        "gemm": [],
        "attention": [],
        "copy": [],
        "eager_op_s": eager_op_s,
    }
    if props is not None:
        out["sm_count"] = props.multi_processor_count

    # Attention first (the costliest to skip), then GEMMs, then copies.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    backend = SDPBackend.FLASH_ATTENTION
    cap_flops = 5e10 if smoke else 3e12
    for (b, heads, q, kv, d, causal) in (attention_calls(smoke) if "attention" in parts else []):
        flops = 4.0 * b * heads * q * kv * d * (0.5 if causal else 1.0)
        if flops > cap_flops:
            continue
        try:
            Q = torch.randn(b, heads, q, d, device=dev, dtype=dtype, requires_grad=True)
            K = torch.randn(b, heads, kv, d, device=dev, dtype=dtype, requires_grad=True)
            V = torch.randn(b, heads, kv, d, device=dev, dtype=dtype, requires_grad=True)
            dO = torch.randn(b, heads, q, d, device=dev, dtype=dtype)

            def fwd():
                with torch.no_grad(), sdpa_kernel(backend):
                    F.scaled_dot_product_attention(Q, K, V, is_causal=causal)

            def fwd_bwd():
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(Q, K, V, is_causal=causal)
                o.backward(dO)

            est = flops / (0.3 * peak_guess) + 2e-5
            f_s = t.median(fwd, est)
            if f_s is None:
                continue
            fb_s = t.median(fwd_bwd, 4.0 * est)
            if fb_s is None:
                continue
            row = {"b": b, "heads": heads}
            if q == kv:
                row["s"] = q
            else:
                row["q_tokens"] = q
                row["kv_tokens"] = kv
            if d != 128:
                row["head_dim"] = d
            row.update({"causal": causal, "fwd_flops": flops, "fwd_s": f_s,
                        "bwd_s": max(fb_s - f_s, 1e-7)})
            out["attention"].append(row)
        except RuntimeError as e:  # e.g. no flash kernel for a shape: say so, go on
            print(f"gpu-kernels: attention {(b, heads, q, kv, d, causal)}: {e}".splitlines()[0],
                  file=sys.stderr)
        finally:
            Q = K = V = dO = None

    for (m, n, k) in (gemm_shapes(smoke, ps) if "gemm" in parts else []):
        flops = 2.0 * m * n * k
        A = torch.randn(m, k, device=dev, dtype=dtype)
        B = torch.randn(k, n, device=dev, dtype=dtype)
        est = flops / (0.7 * peak_guess) + 2e-5
        s = t.median(lambda: torch.matmul(A, B), est)
        A = B = None
        if s is not None:
            out["gemm"].append({"m": m, "n": n, "k": k, "flops": flops, "s": s})

    sizes = [1 << 16, 1 << 20, 1 << 24, 1 << 28] if smoke else \
        [1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30, 1 << 32]
    if "copy" not in parts:
        sizes = []
    for nbytes in sizes:
        src = torch.empty(nbytes // 2, device=dev, dtype=dtype).normal_()
        dst = torch.empty_like(src)
        est = 2.0 * nbytes / bw_guess + 2e-5
        c_s = t.median(lambda: dst.copy_(src), est)
        m_s = t.median(lambda: torch.mul(src, 1.5, out=dst), est)
        src = dst = None
        row = {"bytes": nbytes}
        if c_s is not None:
            row["copy_s"] = c_s
        if m_s is not None:
            row["mul_s"] = m_s
        if len(row) > 1:
            out["copy"].append(row)

    out["what"] = (
        f"Kernel timings measured by scripts/gpu-kernels.py with {out['software']} on "
        f"{out['device']}: cuBLAS bf16 GEMMs (torch.matmul) of METP's shapes (LLaMA-2 7B/13B/70B "
        "layer dimensions over degree p, c tokens per device, forward and both backward GEMMs) "
        "and squares; FlashAttention through scaled_dot_product_attention's flash backend "
        "(METP's single-sequence a/p-head blocks, causal diagonal and full, zig-zag half blocks, "
        "and a general batch x heads x length grid, head dim 64/128); device-to-device copies "
        "and an element-wise multiply; eager per-op host time (a chain of 2000 tiny adds). "
        "Each time is the median of up to 10 calls timed one by one with CUDA events after 3 "
        "warm-ups, launch included. Attention 'bwd_s' is (forward + backward) minus forward; "
        "'fwd_flops' counts 4*b*heads*q*kv*d, halved when causal. "
        f"{t.skipped} measurement(s) skipped to stay within the {budget_s:.0f} s budget; "
        f"calls above {cap_flops:.0e} forward FLOPs not attempted."
    )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=75.0)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes; runs on a CPU too")
    args = ap.parse_args()

    if torch is None:
        print("gpu-kernels: python3 cannot import torch", file=sys.stderr)
        return 1
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("gpu-kernels: no CUDA device visible to PyTorch (use --smoke on a CPU)", file=sys.stderr)
        return 1
    dev = torch.device("cuda" if cuda else "cpu")
    t = Timer(dev, args.budget_s)
    out = measure(dev, args.budget_s, args.smoke, t=t)
    eager_op_s = out["eager_op_s"]
    tmp = args.out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    import os
    os.replace(tmp, args.out)
    print(f"gpu-kernels: {len(out['gemm'])} GEMMs, {len(out['attention'])} attention calls, "
          f"{len(out['copy'])} copy sizes, eager op {eager_op_s * 1e6:.1f} us, "
          f"{t.skipped} skipped, {time.monotonic() - t.start:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
