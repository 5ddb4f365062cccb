#!/usr/bin/env python3
"""Derive the attention implementations and the non-NVIDIA-Hopper kernel models of the bundled
profiles from published measurements, with metp-sim's own fitter, so the derivation reruns.

What it does (every figure it writes says where it came from):

1. Attention implementations (`kernels.attention`, src/config/attention.rs). dgx-h100's fused
   figures are FlashAttention-2-level (PyTorch SDPA's flash backend, derived from the H200 fit);
   FlashAttention-3 and cuDNN are fitted here to the FlashAttention-3 paper's H100 figures
   (tests/data/published-attention.json) with the kernel model's own tiles-and-waves form, the
   FA3 tile geometry of Dao-AILab/flash-attention hopper/ (tile_size.h, flash_bwd_launch_template.h)
   and one thread block per SM; hgx-h200 takes them unchanged (same GH100 compute die and clocks;
   these kernels are compute-bound at the paper's shapes). The A100 profiles' fused kernel is
   FlashAttention-2 (fitted to its paper's maxima, hardware-profiles/measurements/a100-*).
2. Device memory: every profile's `gpu.memory_bytes` is what the driver reports as the device's
   total (nvidia-smi / rocm-smi), the vendor's marketing figure in the source. The NVIDIA
   profiles already were; MI300X, MI325X, B200 and GB200 are set here.
3. MI300X, MI325X, B200, GB200: GEMM fitted to the maximum achievable matmul FLOPS measured on
   each (stas00/ml-engineering, compute/accelerator/README.md, MAMF table, BF16) as a one-point
   measurement file; B200's and GB200's FP8 GEMMs (`gpu.peak_fp8_flops_per_s`,
   `kernels.gemm.fp8.mma_fraction`) fitted the same way to the same table's FP8 maxima, and
   GB200's step clock (`kernels.gemm.step_clock_fraction`) to Azure's FP8 GEMMs timed after
   10,000 warm-up calls (the sustained state; MAMF's short runs are the burst one); HBM from
   published bandwidth measurements; B200's FlashAttention-4 fitted to
   its paper's maximum and B200's cuDNN (9.13) to cudnn-frontend's measured forward and backward
   (benchmark/sdpa_benchmark_training, 512 to 131,072 tokens). What
   has no measurement is a placeholder and the profile says so (`kernels.placeholder`, the
   implementations' `placeholder`), which `list` and every report header repeat.

Usage: cargo build && python3 scripts/derive-kernel-models.py   (METP_SIM=path overrides the
binary). It rewrites the profiles named above and the measurement files
hardware-profiles/measurements/{h100-fa3,h100-cudnn,b200-fa4,b200-cudnn,mi300x,mi325x,b200,gb200}
-published.json. Rerun after refitting hgx-h200 (then scripts/derive-dgx-h100.py first).
"""
import copy
import json
import math
import os
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROFILES = ROOT / "hardware-profiles"
MEAS = PROFILES / "measurements"
PUBLISHED = ROOT / "tests" / "data" / "published-attention.json"
BIN = os.environ.get("METP_SIM", str(ROOT / "target" / "debug" / "metp-sim"))
SCRIPT = "scripts/derive-kernel-models.py"

FA3_REPO = ("Dao-AILab/flash-attention at 0251105a, hopper/tile_size.h (tile_size_fwd_sm90: "
            "head dim 128 runs 128 x 128 tiles causal, 128 x 176 non-causal) and "
            "hopper/flash_bwd_launch_template.h (run_mha_bwd_hdim128 on sm90: 64 x 128 causal, "
            "80 x 128 non-causal)")


def fig(value, source):
    return {"value": float(value), "source": source}


def load(name):
    return json.loads((PROFILES / f"{name}.json").read_text())


def save(name, p):
    (PROFILES / f"{name}.json").write_text(json.dumps(p, indent=2, ensure_ascii=False) + "\n")


def run(args):
    r = subprocess.run([BIN] + args, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"metp-sim {' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


# --- published attention rows → measurement files -----------------------------------------

def attention_file(s, what, device):
    """The rows of published set `s` as a kernel measurement file: each row in the FA3
    benchmark's setting (hidden 2048 = 16 heads of 128, batch × sequence = 16k tokens) unless it
    gives its own batch, heads, kv_heads and head_dim."""
    by_key = {}
    for r in s["rows"]:
        seq, causal = r["seq"], r["causal"]
        d = r.get("head_dim", 128)
        heads = r.get("heads", 2048 // d)
        b = r.get("batch", 16384 // seq)
        flops = 4 * b * seq * seq * heads * d / (2 if causal else 1)
        e = by_key.setdefault((seq, causal), {
            "b": b, "heads": heads, "s": seq, "head_dim": d, "causal": causal,
            "fwd_flops": flops})
        if "kv_heads" in r:
            e["kv_heads"] = r["kv_heads"]
        if r["pass"] == "fwd":
            e["fwd_s"] = flops / (r["tflops"] * 1e12)
        else:
            e["bwd_s"] = 2.5 * flops / (r["tflops"] * 1e12)
    entries = [e for _, e in sorted(by_key.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    for e in entries:
        if "fwd_s" not in e:
            raise SystemExit(f"{s['implementation']}: a backward row without a forward row")
    return {
        "what": f"{what} Published rates as device times (time = FLOPs / rate), written by "
                f"{SCRIPT} from tests/data/published-attention.json. Source: {s['source']}",
        "date": "published",
        "device": device,
        "software": s["implementation"],
        "timing": "device",
        "attention": entries,
    }


def published(profile, impl):
    for s in json.loads(PUBLISHED.read_text())["sets"]:
        if s["profile"] == profile and s["implementation"] == impl:
            return s
    raise SystemExit(f"no published set {profile}/{impl}")


def attention_start(hw, block_q, block_k, mma, extra, why, ctas=1):
    """A pass-level fused-attention model (no per-head-dim tiles: every head dimension runs
    these tiles unpadded) with starting values for the fit."""
    return {
        "block_q": fig(block_q, why),
        "block_k": fig(block_k, why),
        "ctas_per_sm": fig(ctas, "one thread block per SM (warp-specialised producer and two "
                                 "consumer warpgroups fill an SM's registers and shared memory)"
                           if ctas == 1 else "two 4-warp blocks per SM (FlashAttention-2's "
                           "forward: 64 KiB of shared memory and 128 threads x 255 registers)"),
        "mma_fraction": fig(mma, "starting value for the fit"),
        "tile_s": fig(3e-6, "starting value for the fit"),
        "call_s": fig(1e-5, "starting value for the fit"),
        "extra_bytes_per_element": fig(extra, "starting value for the fit" if extra else
                                       "0: the forward kernel makes no extra memory-bound pass"),
        "isolated_extra_s": fig(0, "0: fitted to device times (no framework around the call)"),
    }


def fit_attention(profile, impl, hw, fwd, bwd, device):
    """Fits `fwd`/`bwd` on profile `hw` to the published set; returns the fitted passes."""
    s = published(profile, impl)
    mfile = MEAS / f"{profile_gpu(profile)}-{impl}-published.json"
    mfile.write_text(json.dumps(attention_file(s, f"{impl} on {device}.", device), indent=1) + "\n")
    base = copy.deepcopy(hw)
    base["kernels"]["attention_fwd"] = fwd
    base["kernels"]["attention_bwd"] = bwd
    base["kernels"].pop("attention", None)
    with tempfile.TemporaryDirectory() as tmp:
        bpath = pathlib.Path(tmp) / "base.json"
        out = pathlib.Path(tmp) / "out.json"
        bpath.write_text(json.dumps(base))
        rel = mfile.relative_to(ROOT)
        run(["calibrate", "--fit", str(rel), "--base", str(bpath), "--out", str(out), "--force"])
        fitted = json.loads(out.read_text())["kernels"]
    label = f"{profile} with {impl}'s geometry ({SCRIPT})"
    passes = {}
    for p in ("attention_fwd", "attention_bwd"):
        passes[p] = json.loads(json.dumps(fitted[p]).replace(str(bpath), label))
    return passes, str(mfile.relative_to(ROOT))


def fitted_implementation(profile, impl, hw, fwd, bwd, device, lead="", tail=""):
    """An implementation whose two passes are fitted to its published set: the fitted passes
    and a source naming the measurement file and the set's own source (`lead` before it,
    `tail` after)."""
    passes, mfile = fit_attention(profile, impl, hw, fwd, bwd, device)
    return {
        "source": f"fitted by metp-sim calibrate --fit {mfile} ({SCRIPT}): {lead}"
                  f"{published(profile, impl)['source']}{tail}",
        "fwd": passes["attention_fwd"],
        "bwd": passes["attention_bwd"],
    }


def profile_gpu(profile):
    return {"dgx-h100": "h100", "b200-8": "b200", "gb200-nvl72": "gb200",
            "mi300x-8": "mi300x", "mi325x-8": "mi325x"}[profile]


# --- 1. Hopper: FlashAttention-3 and cuDNN ---------------------------------------------------

def hopper():
    h100 = load("dgx-h100")
    h200 = load("hgx-h200")
    bwd_extra = h100["kernels"]["attention_bwd"]["extra_bytes_per_element"]["value"]
    impls = {}
    fa2_why = ("FlashAttention-2's head-dim-128 tiles (flash_fwd_launch_template.h / "
               "flash_bwd_launch_template.h, the sm80 kernels it also runs on sm90: forward "
               "128 x 64, backward 64 x 128)")
    fwd = attention_start(h100, 128, 64, 0.4, 0, fa2_why, ctas=2)
    bwd = attention_start(h100, 64, 128, 0.35, bwd_extra, fa2_why)
    impls["fa2"] = fitted_implementation("dgx-h100", "fa2", h100, fwd, bwd,
                                         "NVIDIA H100 80GB SXM5", lead="the ")
    for impl, why in [
        ("fa3", f"FlashAttention-3's tiles: {FA3_REPO}; the causal tiles for both masks"),
        ("cudnn", "cuDNN's kernels are closed: FlashAttention-3's Hopper tiles assumed "
                  f"({FA3_REPO})"),
    ]:
        fwd = attention_start(h100, 128, 128, 0.7, 0, why)
        bwd = attention_start(h100, 64, 128, 0.6, bwd_extra, why)
        impls[impl] = fitted_implementation(
            "dgx-h100", impl, h100, fwd, bwd, "NVIDIA H100 80GB SXM5", lead="the ",
            tail=" Head dimension 128 only: other head dimensions run these tiles (no "
                 "per-head-dim kernels). Backward fitted to non-causal rows only; its causal "
                 "blocks follow from the model's masks.")
    fused_h100 = ("FlashAttention-2 level: PyTorch scaled_dot_product_attention's flash "
                  "backend, derived from hgx-h200's fit (scripts/derive-dgx-h100.py)")
    h100["kernels"]["attention"] = {
        "fused": "sdpa-fa2",
        "fused_source": fused_h100,
        "default": "sdpa-fa2",
        "default_source": "PyTorch's default fused attention on Hopper (SDPA's flash backend, "
                          "FlashAttention-2); fa3 and cudnn are what Megatron/Transformer "
                          "Engine runs of 2024-26 use (--attention-kernel)",
        "implementations": impls,
    }
    save("dgx-h100", h100)
    same = ("; taken unchanged for the H200: the same GH100 compute die, clocks and 700 W "
            "(hardware.md §4, S2 note 4, S51), and these kernels are compute-bound at the "
            "paper's shapes")
    h200["kernels"]["attention"] = {
        "fused": "sdpa-fa2",
        "fused_source": "PyTorch scaled_dot_product_attention's flash backend (FlashAttention-2) "
                        "as measured on this H200 (hardware-profiles/measurements/"
                        "h200-2026-11-30-fit.json)",
        "default": "sdpa-fa2",
        "default_source": "what this profile's kernel model is fitted to (the shared H200 "
                          "measurements); fa3 and cudnn are published H100 figures",
        "implementations": {
            k: dict(v, source=v["source"] + same) for k, v in impls.items()
        },
    }
    save("hgx-h200", h200)
    return impls


# --- the A100 profiles ----------------------------------------------------------------------

def ampere():
    for name in ["dgx-a100-80gb", "dgx-a100-40gb", "a100-80gb-pcie", "a100-cluster-2to1"]:
        p = load(name)
        p["kernels"]["attention"] = {
            "fused": "fa2",
            "fused_source": "FlashAttention-2 (Dao-AILab flash_attn), fitted to its paper's A100 "
                            "maxima (hardware-profiles/measurements/a100-sxm-published.json)",
            "default": "fa2",
            "default_source": "FlashAttention-2 is the fastest published fused attention on "
                              "Ampere (FlashAttention-3 needs Hopper)",
        }
        save(name, p)


# --- 2 and 3: MI300X, MI325X, B200, GB200 ---------------------------------------------------

MAMF = ("stas00/ml-engineering at 744d01e, compute/accelerator/README.md, 'Maximum Achievable "
        "Matmul FLOPS comparison table' (BF16, mean of 100 matmuls after 50 warm-ups, best shape "
        "of a brute-force search)")

GPUS = {
    "mi300x-8": {
        "gpu": "AMD Instinct MI300X",
        "mamf": (10240, 15360, 8192, 668.4e12, "torch 2.5.1+rocm6.3, PYTORCH_TUNABLEOP_ENABLED=1"),
        "memory": (206141652992, "rocm-smi 'VRAM Total Memory (B): 206141652992' on bare-metal "
                   "MI300X (ROCm/legacy-rocm-build issue #4750; 192 GiB less 16 MiB; a cloud VF "
                   "reports 205822885888, HIP totalGlobalMem the same); AMD's data sheet says "
                   "192 GB HBM3"),
        "hbm": (3910.62e9, "3910.62 GB/s, the HBM bandwidth rocprofiler-compute's roofline "
                "benchmark measures on MI300X (its expected value in ROCm/rocm-systems PR #2934, "
                "tests/test_metric_validation.py); ROCm/legacy-rocm-build issue #5070 reports "
                "4.2 TB/s from the same roofline tool; peak 5.3 TB/s (AMD data sheet)"),
        "sms": 304,
    },
    "mi325x-8": {
        "gpu": "AMD Instinct MI325X",
        "mamf": (13312, 10240, 8192, 784.9e12, "torch 2.6.0+rocm6.2.4, "
                 "PYTORCH_TUNABLEOP_ENABLED=1, 1000 W"),
        "memory": (274861129728, "derived: 256 GiB of HBM3E less the 16 MiB MI300X's driver keeps "
                   "(206141652992 = 192 GiB - 16 MiB, see mi300x-8), i.e. 8 stacks of 32 GiB; no "
                   "rocm-smi total for MI325X found; AMD's data sheet says 256 GB HBM3E"),
        "hbm": (4287.31e9, "4287.31 GB/s, the HBM bandwidth rocprofiler-compute's roofline "
                "benchmark measures on MI325X (its expected value in ROCm/rocm-systems PR #2934); "
                "peak 6.0 TB/s (AMD data sheet)"),
        "sms": 304,
    },
    "b200-8": {
        "gpu": "NVIDIA B200",
        "mamf": (1792, 16128, 3072, 1745.0e12, "torch 2.7.1+cu128"),
        "fp8": {
            "peak": (4.5e15, "4.5 PFLOP/s dense FP8 (E4M3/E5M2) for the HGX B200 at 1000 W, twice "
                     "its dense BF16 (the 'Theory' column of stas00/ml-engineering's MAMF table at "
                     "744d01e; NVIDIA's DGX B200 data sheet: 72 PFLOP/s FP8 training for 8 GPUs "
                     "with sparsity)"),
            "mamf": (15360, 4096, 3072, 3432.5e12, "torch 2.7.1+cu128, float8_e4m3fn"),
        },
        "memory": (192265846784, "nvidia-smi total 183359 MiB on B200 (NVIDIA/TensorRT-LLM issue "
                   "#10278; cudaGetDeviceProperties reports 178.35 GiB, pytorch/ao PR #4002); "
                   "NVIDIA's data sheet says 180 GB HBM3e (192 GB physical)"),
        "hbm": (6.0e12, "6.0 TB/s: 'over 6,000 GB/s device-to-device' from the CUDA samples' "
                "bandwidthTest (which counts bytes read plus written) on 8x B200 HGX "
                "(newmind.ai journal 18, Apr 2025) — a lower bound; peak 7.67 TB/s after the "
                "driver's bus-width correction to 7680 bits (pytorch/ao PR #4002), 8 TB/s on "
                "the data sheet"),
        "sms": 148,
    },
    "gb200-nvl72": {
        "gpu": "NVIDIA GB200",
        "mamf": (4096, 9728, 2048, 1822.0e12, "torch 2.10.0.dev20250916+cu130"),
        "fp8": {
            "peak": (5.0e15, "5.0 PFLOP/s dense FP8 (E4M3/E5M2) per GB200 GPU at 1200 W, twice its "
                     "dense BF16 (the 'Theory' column of stas00/ml-engineering's MAMF table at "
                     "744d01e; NVIDIA's DGX Cloud recipes for GB200 state 4.9 PFLOP/s FP8 beside "
                     "2.45 BF16)"),
            "mamf": (19456, 5120, 1536, 3615.6e12, "torch 2.10.0.dev20250916+cu130, float8_e4m3fn"),
            # cuBLASLt FP8 GEMMs timed after 10,000 warm-up calls (the sustained state a
            # training step holds): fitted squares, then held-out shapes, in TFLOP/s.
            "sustained": {
                "squares": [(4096, 2694.7), (8192, 2781.5), (16384, 2819.5), (32768, 2755.3)],
                "held_out": [((6144, 12288, 12288), 2798.7), ((802816, 192, 768), 1482.5)],
                "source": "Azure's AI-benchmarking-guide, Azure_Results/ND_GB200_v6_results.md "
                          "(github.com/egmsft/AI-benchmarking-guide at 3371c0c, the file as of "
                          "4c986ce, November 2025; ND GB200 v6, CUDA 12.8, driver 570.133.20): "
                          "'GEMM CuBLASLt (FP8)', random initialization, 10,000 warm-up "
                          "iterations — the same benchmark as the ND H100 v5 FP8 squares "
                          "dgx-h100's FP8 fractions are fitted to",
            },
        },
        "memory": (198674743296, "nvidia-smi total 189471 MiB on GB200 (nvidia-smi output in "
                   "public logs, e.g. '0MiB / 189471MiB', 1200 W); NVIDIA says 186 GB HBM3e"),
        "hbm": (6.0e12, "derived: B200's measured 6.0 TB/s (see b200-8; the same 8-stack HBM3e "
                "at 8 TB/s peak); no GB200 bandwidth measurement found"),
        "sms": 148,
    },
}


def gemm_file(name, g):
    m, n, k, rate, sw = g["mamf"]
    flops = 2 * m * n * k
    return {
        "what": f"Maximum achievable matmul FLOPS on {g['gpu']}: {rate / 1e12:.1f} TFLOP/s at "
                f"{m}x{n}x{k} ({sw}), as a device time (FLOPs / rate). Source: {MAMF}. The best "
                f"shape of a sweep, so an optimistic point; one GEMM fixes only the combined "
                f"effect of the GEMM figures. Written by {SCRIPT}.",
        "date": "published",
        "device": g["gpu"],
        "software": sw,
        "timing": "device",
        "sm_count": g["sms"],
        "gemm": [{"m": m, "n": n, "k": k, "flops": float(flops), "s": flops / rate}],
    }


def price(p, mfile, extra=()):
    """metp-sim kernels' device-time error on profile dict `p` for measurement file `mfile`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "hw.json"
        path.write_text(json.dumps(p))
        out = json.loads(run(["kernels", "--hw", str(path), "--input",
                              str(mfile.relative_to(ROOT)), "--compare", "--format", "json",
                              *extra]))
    return out["kernels"][0]["error"]


# The shapes mamf-finder searches (stas00/ml-engineering at 744d01e, compute/accelerator/
# benchmarks/README.md: its exhaustive search runs M, N and K over 0..20480; the 'more exhaustive'
# example steps by 1024), every multiple of 1024 up to 20480 here, with the published best shape.
SEARCH = [(m, n, k) for m in range(1024, 20481, 1024) for n in range(1024, 20481, 1024)
          for k in range(1024, 20481, 1024)]


def priced_gemms(p, shapes, dtype):
    """metp-sim kernels' JSON for GEMMs of `shapes` in `dtype` on profile dict `p`: each with
    its device_s (a call timed alone) and step_s (inside a training step)."""
    with tempfile.TemporaryDirectory() as tmp:
        hw = pathlib.Path(tmp) / "hw.json"
        hw.write_text(json.dumps(p))
        inp = pathlib.Path(tmp) / "gemms.json"
        inp.write_text(json.dumps([{"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype}
                                   for m, n, k in shapes]))
        return json.loads(run(["kernels", "--hw", str(hw), "--input", str(inp), "--format",
                               "json"]))


def best_rate(p, g, dtype="bf16"):
    """The model's fastest GEMM (device time, FLOP/s) over the MAMF search and its shape, in
    `dtype` (the FP8 search's published best shape where fp8)."""
    m0, n0, k0 = (g["fp8"]["mamf"] if dtype == "fp8" else g["mamf"])[:3]
    shapes = SEARCH + [(m0, n0, k0)]
    out = priced_gemms(p, shapes, dtype)
    rates = [(2 * m * n * k / o["device_s"], (m, n, k)) for (m, n, k), o in zip(shapes, out)]
    return max(rates)


def fit_gemm_rate(p, mfile, name, g):
    """Fits kernels.gemm.mma_fraction alone by bisection so that the model's fastest GEMM over
    the shapes MAMF searches runs at the published maximum (the fixed times stay at their
    carried-over values: one figure cannot separate them from the rate); where even a full rate
    is too slow, the per-call time is dropped first, then the per-tile one.

    MAMF is the best of a brute-force search over shapes, so no shape may run faster than it:
    fitting the model at the published best shape alone let its larger shapes run up to 28%
    faster than the maximum (GB200: 2.33 PFLOP/s at 16384^3 against a MAMF of 1.82), because
    the fixed per-tile and per-call times carried over from the H100 weigh on that shape more
    than on a large one."""
    gemm = p["kernels"]["gemm"]
    rate = g["mamf"][3]
    dropped = []
    for field in (None, "call_s", "tile_s"):
        if field:
            gemm[field] = fig(0, f"0: with dgx-h100's value the published rate is out of reach "
                                 f"even at the full per-SM rate ({SCRIPT}); not measured")
            dropped.append(field)
        gemm["mma_fraction"]["value"] = 1.0
        if best_rate(p, g)[0] >= rate:
            break
    lo, hi = 0.01, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        gemm["mma_fraction"]["value"] = mid
        if best_rate(p, g)[0] < rate:
            lo = mid
        else:
            hi = mid
    gemm["mma_fraction"]["value"] = (lo + hi) / 2
    best, (bm, bn, bk) = best_rate(p, g)
    m, n, k = g["mamf"][:3]
    err = price(p, mfile)
    gemm["mma_fraction"] = fig(
        (lo + hi) / 2,
        f"fitted by {SCRIPT} (bisection on this figure alone, the others held) so that the "
        f"model's fastest GEMM over the shapes MAMF searches (M, N, K every multiple of 1024 up "
        f"to 20480, and the published best shape) runs at the published {rate / 1e12:.1f} "
        f"TFLOP/s (MAMF, {MAMF}; hardware-profiles/measurements/{mfile.name}): the model's "
        f"fastest is {bm}x{bn}x{bk} at {best / 1e12:.1f}; at the published best shape "
        f"{m}x{n}x{k} the model's time is {100 * err:+.1f}% from the measured one"
        + (" (the GEMM tile structure is the H100's, not this GPU's)" if err > 0.005 else "")
        + (f"; {', '.join(dropped)} set to 0" if dropped else ""))


def fp8_device_s(p, m, n, k):
    """The device time profile dict `p` gives one FP8 GEMM of shape m × n × k."""
    return priced_gemms(p, [(m, n, k)], "fp8")[0]["device_s"]


def fit_fp8_rate(p, g):
    """Sets gpu.peak_fp8_flops_per_s and fits kernels.gemm.fp8.mma_fraction alone by bisection,
    as fit_gemm_rate does for BF16, so that the model's fastest FP8 GEMM over the shapes MAMF
    searches runs at the published FP8 maximum (the tiles, fixed times and clock are the BF16
    model's; FP8 k-steps are twice as deep, src/cost/gemm.rs). No power cap: these profiles
    have none (the MAMF figures are sustained rates of short GEMMs), so no FP8 power fraction."""
    f8 = g["fp8"]
    p["gpu"]["peak_fp8_flops_per_s"] = fig(*f8["peak"])
    m, n, k, rate, sw = f8["mamf"]
    gemm = p["kernels"]["gemm"]
    gemm["fp8"] = {"mma_fraction": fig(1.0, "")}
    if best_rate(p, g, "fp8")[0] < rate:
        raise SystemExit(f"{g['gpu']}: the published FP8 maximum is out of the model's reach")
    lo, hi = 0.01, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        gemm["fp8"]["mma_fraction"]["value"] = mid
        if best_rate(p, g, "fp8")[0] < rate:
            lo = mid
        else:
            hi = mid
    gemm["fp8"]["mma_fraction"]["value"] = (lo + hi) / 2
    best, (bm, bn, bk) = best_rate(p, g, "fp8")
    err = fp8_device_s(p, m, n, k) / (2 * m * n * k / rate) - 1
    # What the H100's fixed per-tile and per-call times carried over cost at that shape.
    bare = copy.deepcopy(p)
    for f in ("tile_s", "call_s"):
        if f in bare["kernels"]["gemm"]:
            bare["kernels"]["gemm"][f]["value"] = 0.0
    err_bare = fp8_device_s(bare, m, n, k) / (2 * m * n * k / rate) - 1
    gemm["fp8"]["mma_fraction"] = fig(
        (lo + hi) / 2,
        f"fitted by {SCRIPT} (bisection on this figure alone, the BF16 model's tiles, fixed times "
        f"and clock held, k-steps twice as deep) so that the model's fastest FP8 GEMM over the "
        f"shapes MAMF searches (M, N, K every multiple of 1024 up to 20480, and the published "
        f"best shape) runs at the published FP8 maximum {rate / 1e12:.1f} TFLOP/s at {m}x{n}x{k} "
        f"({sw}; stas00/ml-engineering at 744d01e, compute/accelerator/README.md, 'Maximum "
        f"Achievable Matmul FLOPS comparison table', FP8, mean of 100 matmuls after 50 warm-ups): "
        f"the model's fastest is {bm}x{bn}x{bk} at {best / 1e12:.1f}; at the published best shape "
        f"the model's time is {100 * err:+.1f}% from the measured one (the GEMM tile structure "
        f"and its fixed per-tile and per-call times are the H100's, not this GPU's: without them "
        f"{100 * err_bare:+.1f}%). One point: FP8 calls of other shapes are not measured on this "
        f"GPU")


def step_rates(p, shapes, clock):
    """The step-clock price (FLOP/s) profile dict `p` gives FP8 GEMMs of `shapes` with
    kernels.gemm.step_clock_fraction = `clock`."""
    q = copy.deepcopy(p)
    q["kernels"]["gemm"]["step_clock_fraction"] = fig(clock, "trial")
    out = priced_gemms(q, shapes, "fp8")
    return [2 * m * n * k / o["step_s"] for (m, n, k), o in zip(shapes, out)]


def fit_step_clock(p, g):
    """Fits kernels.gemm.step_clock_fraction alone, by golden-section search on the sum of
    squared log errors, so that the step-clock price of the FP8 squares timed after 10,000
    warm-up calls meets them (4096^3 to 32768^3, as dgx-h100's FP8 fit takes the H100's; 1024^3
    and 2048^3 are bound by the per-call time), the burst fractions fitted to MAMF held: the
    clock a GPU holds when GEMMs run back to back for seconds, which a training step prices
    every GEMM at (cost::gemm::step_device_s), whatever its dtype."""
    sus = g["fp8"]["sustained"]
    shapes = [(n, n, n) for n, _ in sus["squares"]]
    measured = [r * 1e12 for _, r in sus["squares"]]

    def loss(c):
        return sum(math.log(a / b) ** 2 for a, b in zip(step_rates(p, shapes, c), measured))
    lo, hi = 0.5, 1.0
    gr = (math.sqrt(5) - 1) / 2
    a, b = hi - gr * (hi - lo), lo + gr * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(30):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - gr * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + gr * (hi - lo)
            fb = loss(b)
    c = round((lo + hi) / 2, 4)
    if not 0.51 < c < 0.99:
        raise SystemExit(f"{g['gpu']}: the sustained GEMMs put the step clock at the search's "
                         f"edge ({c}): a clock above the burst one or far below it is not "
                         f"what this fit assumes")
    fitted = step_rates(p, shapes, c)
    held = step_rates(p, [s for s, _ in sus["held_out"]], c)
    res = ", ".join(f"{n}^3 {100 * (f / m - 1):+.1f}%" for (n, _), f, m in
                    zip(sus["squares"], fitted, measured))
    out = ", ".join(f"{s[0]}x{s[1]}x{s[2]} {100 * (f / (r * 1e12) - 1):+.1f}% ({r})" for (s, r), f in
                    zip(sus["held_out"], held))
    p["kernels"]["gemm"]["step_clock_fraction"] = fig(
        c,
        f"fitted by {SCRIPT} (golden-section search on this figure alone, the burst fractions "
        f"fitted to MAMF held) to the FP8 GEMMs of {sus['source']}: least squares in log rate over "
        f"the squares 4096^3 to 32768^3 = {' / '.join(str(r) for _, r in sus['squares'])} "
        f"TFLOP/s, where MAMF's short runs reach {g['fp8']['mamf'][3] / 1e12:.1f}: the clock "
        f"the GPU holds after thousands of back-to-back calls, which a training step prices its "
        f"GEMMs at, BF16 ones included (no sustained BF16 GEMM of this GPU was found; dgx-h100 "
        f"likewise prices FP8 at a clock measured with BF16 GEMMs). The step price against the "
        f"measured rate: {res}; the H100 "
        f"tile structure and fixed times carried over price 4096^3 slow already at the burst "
        f"clock; the large squares are flat where the model still rises. Held out: {out}")


def other_gpus():
    h100 = load("dgx-h100")
    for name, g in GPUS.items():
        p = load(name)
        gpu = p["gpu"]
        gpu["memory_bytes"] = fig(g["memory"][0], g["memory"][1])
        gpu["hbm_bytes_per_s"] = fig(g["hbm"][0], g["hbm"][1])
        # Start from dgx-h100's kernel model (the H200 fit), without Hopper's power cap (the
        # MAMF figures are sustained rates of short GEMMs; no long-GEMM data here).
        k = copy.deepcopy(h100["kernels"])
        k.pop("attention", None)
        k["gemm"].pop("power_fraction", None)
        k["gemm"].pop("power_time_s", None)
        # Nor the H200's step clock (measured on an H200 only), nor the H100's FP8 fractions
        # (no FP8 GEMM measured here, and these profiles state no FP8 peak).
        k["gemm"].pop("step_clock_fraction", None)
        k["gemm"].pop("fp8", None)
        # Nor the H100 fleet's clock spread (fitted to H100 runs): a GPU gets its own from
        # scripts/derive-fleet-clock-spread.py where published runs measure it, or none.
        k["gemm"].pop("fleet_clock_spread", None)
        carried = (f"carried over from dgx-h100 ({SCRIPT}; placeholder: not measured on "
                   f"{g['gpu']}). dgx-h100's source: ")

        def mark(node):
            if isinstance(node, dict) and "value" in node and "source" in node:
                if not node["source"].startswith("fitted by metp-sim calibrate --fit "
                                                 "hardware-profiles/measurements/" +
                                                 profile_gpu(name)):
                    node["source"] = carried + node["source"]
                return
            if isinstance(node, dict):
                for v in node.values():
                    mark(v)
            elif isinstance(node, list):
                for v in node:
                    mark(v)
        p["kernels"] = k
        mfile = MEAS / f"{profile_gpu(name)}-published.json"
        mfile.write_text(json.dumps(gemm_file(name, g), indent=1) + "\n")
        fit_gemm_rate(p, mfile, name, g)
        if "fp8" in g:
            fit_fp8_rate(p, g)
            if "sustained" in g["fp8"]:
                fit_step_clock(p, g)
        mark(p["kernels"]["host"])
        mark(p["kernels"]["memory"])
        for f in ("tile", "k_step", "stream_k", "tile_s", "call_s"):
            if f in p["kernels"]["gemm"] and not p["kernels"]["gemm"][f]["source"].startswith("0:"):
                mark(p["kernels"]["gemm"][f])
        rates = "the BF16 and FP8 GEMM rates are each" if "fp8" in g else "the GEMM rate is"
        clock = ("; the step clock is fitted to FP8 GEMMs timed after 10,000 warm-up calls"
                 if "sustained" in g.get("fp8", {}) else "")
        p["kernels"]["placeholder"] = (
            f"host and memory-latency figures and the GEMM tile structure are dgx-h100's "
            f"(H100); {rates} fitted to one published matmul ({MAMF.split(',')[0]}, MAMF)"
            f"{clock}")
        save(name, p)
    amd_attention()
    blackwell_attention()


def scaled_attention(h100, factor, why):
    """dgx-h100's fused (FlashAttention-2-level) passes with every mma_fraction × factor."""
    out = {}
    for p in ("attention_fwd", "attention_bwd"):
        a = copy.deepcopy(h100["kernels"][p])

        def walk(node, path):
            if isinstance(node, dict) and "value" in node and "source" in node:
                if path.endswith("mma_fraction"):
                    node["value"] = min(node["value"] * factor, 1.0)
                    node["source"] = f"placeholder: dgx-h100's value x {factor:.4f} ({why}). " \
                                     f"dgx-h100's source: " + node["source"]
                else:
                    node["source"] = f"placeholder: dgx-h100's value ({why}). dgx-h100's " \
                                     f"source: " + node["source"]
                return
            if isinstance(node, dict):
                for k, v in node.items():
                    walk(v, f"{path}.{k}")
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, f"{path}[{i}]")
        walk(a, p)
        out[p] = a
    return out


def amd_attention():
    h100 = load("dgx-h100")
    h_gemm = h100["kernels"]["gemm"]["mma_fraction"]["value"]
    for name in ("mi300x-8", "mi325x-8"):
        p = load(name)
        factor = p["kernels"]["gemm"]["mma_fraction"]["value"] / h_gemm
        why = ("no published per-shape CK/AITER flash-attention rates on this GPU were found: "
               "attention keeps the H100's ratio of attention to GEMM efficiency")
        a = scaled_attention(h100, factor, why)
        p["kernels"]["attention_fwd"] = a["attention_fwd"]
        p["kernels"]["attention_bwd"] = a["attention_bwd"]
        p["kernels"]["attention"] = {
            "fused": "ck",
            "fused_source": "Composable Kernel / AITER flash attention (what ROCm PyTorch and "
                            "Transformer Engine run on CDNA3): a placeholder scaled from the "
                            "H100's FlashAttention-2-level model",
            "fused_placeholder": "no measurement on this GPU: the H100 FlashAttention-2 model "
                                 "at this GPU's GEMM efficiency",
            "default": "ck",
            "default_source": "AMD's fused attention for training on CDNA3",
        }
        save(name, p)


def blackwell_attention():
    b200 = load("b200-8")
    h100 = load("dgx-h100")
    fa3 = h100["kernels"]["attention"]["implementations"]["fa3"]
    bwd_ratio = (fa3["bwd"]["mma_fraction"]["value"] / fa3["fwd"]["mma_fraction"]["value"])
    fitted = {}
    # cuDNN: both passes fitted to its measured forward and backward (cudnn-frontend's B200
    # benchmark).
    why = "cuDNN's Blackwell kernels are closed: FlashAttention-4's tiles assumed"
    fwd = attention_start(b200, 128, 128, 0.7, 0, why)
    bwd = attention_start(b200, 64, 128, 0.6, fa3["bwd"]["extra_bytes_per_element"]["value"], why)
    fitted["cudnn"] = fitted_implementation("b200-8", "cudnn", b200, fwd, bwd, "NVIDIA B200")
    for impl, why in [
        ("fa4", "FlashAttention-4's tiles assumed: 128 x 128 per thread block, one block per SM "
                "(its 2-CTA MMA pairs blocks; not modelled)"),
    ]:
        fwd = attention_start(b200, 128, 128, 0.7, 0, why)
        bwd = attention_start(b200, 64, 128, 0.6,
                              fa3["bwd"]["extra_bytes_per_element"]["value"], why)
        passes, mfile = fit_attention("b200-8", impl, b200, fwd, bwd, "NVIDIA B200")
        # No published backward: the forward's fit, at FA3's H100 backward/forward rate ratio.
        bwd = copy.deepcopy(passes["attention_fwd"])
        bwd["block_q"] = fig(64, why)
        bwd["block_k"] = fig(128, why)
        bwd["mma_fraction"] = fig(
            passes["attention_fwd"]["mma_fraction"]["value"] * bwd_ratio,
            f"placeholder: the forward's fitted value x {bwd_ratio:.4f}, FlashAttention-3's "
            f"backward/forward ratio on the H100 (dgx-h100's fa3): no published {impl} "
            f"backward on B200")
        bwd["extra_bytes_per_element"] = fa3["bwd"]["extra_bytes_per_element"]
        fitted[impl] = {
            "source": f"forward fitted by metp-sim calibrate --fit {mfile} ({SCRIPT}): "
                      f"{published('b200-8', impl)['source']} One point fixes only the combined "
                      "effect of the forward's figures.",
            "placeholder": "forward from one published maximum; backward not measured (the "
                           "forward at FlashAttention-3's H100 backward/forward ratio)",
            "fwd": passes["attention_fwd"],
            "bwd": bwd,
        }
    for name in ("b200-8", "gb200-nvl72"):
        p = load(name)
        impls = copy.deepcopy(fitted)
        if name == "gb200-nvl72":
            for v in impls.values():
                v["source"] = ("derived: b200-8's, the same Blackwell SMs (148) and kernels at "
                               "GB200's own peak FLOP/s (the fractions carry over). b200-8's "
                               "source: " + v["source"])
                v["placeholder"] = "B200's figures at GB200's peak" + (
                    "; " + v["placeholder"] if "placeholder" in v else "")
        c = impls.pop("cudnn")
        p["kernels"]["attention_fwd"] = c["fwd"]
        p["kernels"]["attention_bwd"] = c["bwd"]
        p["kernels"]["attention"] = {
            "fused": "cudnn",
            "fused_source": c["source"],
            **({"fused_placeholder": c["placeholder"]} if "placeholder" in c else {}),
            "default": "cudnn",
            "default_source": "Transformer Engine's fused attention on Blackwell is cuDNN's",
            "implementations": impls,
        }
        save(name, p)


if __name__ == "__main__":
    hopper()
    ampere()
    other_gpus()
    print("derived; run `cargo test --test it attention` and `metp-sim list` to check")
