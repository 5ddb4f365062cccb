#!/usr/bin/env python3
"""Measure METP's and TP's communication and every GPU's kernels with torch.distributed.

Run under torchrun, one process per GPU (scripts/gpu-check.sh --gpus N does):

    torchrun --standalone --nproc_per_node N scripts/gpu-dist.py --out DIR [--budget-s 90]

What is measured (NCCL on GPUs; gloo on the CPU with --smoke, for tests):
  * ring steps at METP's message sizes: every rank sends one message to its ring successor and
    receives one from its predecessor at once (torch.distributed.batch_isend_irecv; what
    nccl-tests' sendrecv_perf times). The sizes are the messages METP's schedule passes
    (src/schedule/metp.rs, ring.rs) for LLaMA-2 7B / 13B / 70B at p = N ranks and c = s/p of
    512 ... 32768 tokens: a head group's K and V (2 * 2 * c * kv/p * d bytes, bf16), their fp32
    gradient accumulators in backward (twice that), a head group's attention weights
    (2 * (h * (h/p + 2 kv d/p) + h/p * h)), an MLP weight shard (2 * mats * h * f/p) and its
    fp32 weight-gradient accumulator in backward (twice that);
  * all-gather and reduce-scatter at TP's sizes (TP with sequence parallelism gathers and
    scatters a layer's input, s * h bf16 values, s = N * c), the size as nccl-tests defines it
    (all-gather: the whole output; reduce-scatter: the whole input);
  * every GPU's kernels (scripts/gpu-kernels.py's `measure`): rank 0 the whole set (attention,
    GEMMs, copies, eager op time), the other ranks METP's GEMMs at p = N, at the same time.

Each collective is timed as nccl-tests times it: after warm-ups and a barrier, a batch of calls
back to back, wall time per call once the stream is done, the slowest rank's. A measurement is
skipped, never truncated, when the budget would run out (rank 0 decides, every rank follows).

Rank 0 writes, atomically, into --out:
  * dist-measurements.json: metp-sim's measurement format (src/fitting/measurements.rs) —
    ring steps as `p2p` entries with `ranks` (all ranks sent at once), collectives with nccl-tests'
    bus bandwidth, rank 0's GEMMs, attention calls and copies. `metp-sim calibrate --fit` takes
    it (the intra-node link is fitted from the ring steps and collectives);
  * dist-gemm-per-gpu.json: every GPU's GEMMs, GPU r as measurement `session` r (`calibrate
    --fit` gives each GPU a clock factor against GPU 0; a slower fit);
  * nccl-tests-sendrecv.log, nccl-tests-all_gather.log, nccl-tests-reduce_scatter.log: the same
    collectives as nccl-tests prints them (out-of-place columns, #wrong N/A), for readers of
    nccl-tests logs;
  * dist-summary.txt: one line per measurement kind, every GPU's best GEMM rate and its GEMM
    times relative to GPU 0's.

Without torch, --plan prints the sizes that would be measured (JSON), and --format RAW turns a
raw results file (what rank 0 gathers) into the outputs above: both are tested in CI.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

# LLaMA-2 layer dimensions: name -> (hidden, heads, kv_heads, ffn, swiglu)
MODELS = {
    "llama2-7b": (4096, 32, 32, 11008, True),
    "llama2-13b": (5120, 40, 40, 13824, True),
    "llama2-70b": (8192, 64, 8, 28672, True),
}
TOKENS_PER_RANK = [512, 2048, 8192, 32768]
MAX_BYTES = 1 << 30  # largest message or collective buffer measured
SMALL = [1 << 16, 1 << 20]  # latency-bound sizes, for the fit's intercept
# Most GPUs whose GEMMs the file keeps, one measurement session each (metp-sim's limit).
MAX_SESSIONS = 16
# nccl-tests' bus bandwidth factors.
BUS_FACTOR = {
    "sendrecv": lambda n: 1.0,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}
FILE_OP = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter"}


def metp_messages(ranks):
    """{bytes: what} of the messages METP's ring steps pass at p = `ranks`."""
    out = {}
    p = ranks
    for name, (h, a, kv, f, swiglu) in MODELS.items():
        if a % p or kv % p or f % p:
            continue
        d = h // a
        kv_g = kv // p
        attn_w = 2 * (h * (h // p + 2 * kv_g * d) + (h // p) * h)
        mats = 3 if swiglu else 2
        mlp_w = 2 * mats * h * (f // p)
        out.setdefault(attn_w, f"{name} attention weights of one head group")
        out.setdefault(mlp_w, f"{name} MLP weight shard")
        out.setdefault(2 * mlp_w, f"{name} MLP fp32 weight-gradient accumulator")
        for c in TOKENS_PER_RANK:
            kv_elems = 2 * c * kv_g * d
            out.setdefault(2 * kv_elems, f"{name} K/V of one head group, c = {c}")
            out.setdefault(4 * kv_elems, f"{name} fp32 dK/dV accumulators, c = {c}")
    return out


def tp_buffers(ranks):
    """{bytes: what} of TP-SP's all-gather / reduce-scatter buffers (s * h bf16, s = ranks * c)."""
    out = {}
    for name, (h, *_rest) in MODELS.items():
        for c in TOKENS_PER_RANK:
            out.setdefault(2 * ranks * c * h, f"{name} layer input, s = {ranks * c}")
    return out


def plan(ranks, smoke):
    """The sizes to measure: {op: [[bytes, what], ...]} in increasing size, each a multiple of
    2 * ranks bytes (bf16 elements split evenly over the ranks), at most MAX_BYTES."""
    if smoke:
        sizes = {op: {1 << 12: "smoke", 1 << 16: "smoke", 1 << 20: "smoke"} for op in BUS_FACTOR}
    else:
        small = {b: "latency-bound size" for b in SMALL}
        sizes = {
            "sendrecv": {**small, **metp_messages(ranks)},
            "all_gather": {**small, **tp_buffers(ranks)},
            "reduce_scatter": {**small, **tp_buffers(ranks)},
        }
    out = {}
    for op, m in sizes.items():
        unit = 2 * ranks
        rows = sorted((b - b % unit, w) for b, w in m.items() if unit <= b <= MAX_BYTES)
        seen, kept = set(), []
        for b, w in rows:
            if b not in seen:
                seen.add(b)
                kept.append([b, w])
        out[op] = kept
    return out


# ---- the formatting half (no torch) ------------------------------------------------------


def bus_bytes_per_s(op, ranks, nbytes, s):
    return nbytes / s * BUS_FACTOR[op](ranks)


def measurement_file(raw):
    """metp-sim's measurement file from the raw results rank 0 gathered."""
    ranks = raw["ranks"]
    k0 = raw["kernels"][0] if raw["kernels"] else {}
    devices = raw["devices"]
    out = {
        "what": "",
        "date": raw["date"],
        "device": devices[0],
        "software": raw["software"],
    }
    if k0.get("sm_count"):
        out["sm_count"] = k0["sm_count"]
    out["gemm"] = list(k0.get("gemm", []))
    out["attention"] = list(k0.get("attention", []))
    out["copy"] = list(k0.get("copy", []))
    if "eager_op_s" in k0:
        out["eager_op_s"] = k0["eager_op_s"]
    via = f"{raw['backend']} send/recv ring step over {ranks} ranks (torch.distributed)"
    out["p2p"] = [
        {"from": 0, "to": 1, "bytes": row["bytes"], "s": row["s"], "via": via, "ranks": ranks}
        for row in raw["sendrecv"]
    ]
    out["collectives"] = [
        {
            "op": FILE_OP[op],
            "ranks": ranks,
            "bytes": row["bytes"],
            "s": row["s"],
            "bus_bytes_per_s": bus_bytes_per_s(op, ranks, row["bytes"], row["s"]),
        }
        for op in ("all_gather", "reduce_scatter")
        for row in raw[op]
    ]
    same = all(d == devices[0] for d in devices)
    out["what"] = (
        f"Measured by scripts/gpu-dist.py under torchrun with {raw['software']} "
        f"({raw['backend']}) on {ranks} rank(s) of {raw['host']}"
        + ("" if same else f" (devices differ: {', '.join(devices)})")
        + ": ring steps at METP's message sizes (every rank sends one message to its successor "
        "and receives one at once, batch_isend_irecv: nccl-tests' sendrecv; as 'p2p' entries with "
        "'ranks'), all-gather and reduce-scatter at TP-SP's sizes (nccl-tests' size convention "
        "and bus bandwidth), each the slowest rank's wall time per call over a batch of calls "
        "after warm-ups and a barrier; GEMMs, attention calls and copies of rank 0, timed by "
        "scripts/gpu-kernels.py (every GPU's GEMMs: dist-gemm-per-gpu.json). "
        f"{raw['skipped']} measurement(s) skipped to stay within the {raw['budget_s']:.0f} s "
        "budget."
    )
    return out


def per_gpu_file(raw):
    """Every GPU's GEMMs in one measurement file, GPU r as measurement session r (at most
    MAX_SESSIONS GPUs): `calibrate --fit` gives each GPU a clock factor against GPU 0."""
    out = measurement_file(raw)
    for key in ("attention", "copy", "p2p", "collectives"):
        out[key] = []
    out.pop("eager_op_s", None)
    gemm = []
    for r, k in enumerate(raw["kernels"][:MAX_SESSIONS]):
        for g in k.get("gemm", []):
            row = dict(g)
            if r > 0:
                row["session"] = r
            gemm.append(row)
    out["gemm"] = gemm
    out["what"] = (
        f"The GEMMs of every GPU measured by scripts/gpu-dist.py under torchrun with "
        f"{raw['software']} on {raw['ranks']} rank(s) of {raw['host']} at the same time, GPU r "
        f"as measurement session r (of the first {MAX_SESSIONS}): each board runs at a clock of "
        "its own. Timed by scripts/gpu-kernels.py (median of up to 10 calls, CUDA events)."
    )
    return out


def relative_gemm_times(raw):
    """Per GPU, the median over the GEMM shapes every GPU ran of its time / GPU 0's."""
    by_rank = [{(g["m"], g["n"], g["k"]): g["s"] for g in k.get("gemm", [])}
               for k in raw["kernels"]]
    if not by_rank or not by_rank[0]:
        return []
    common = set(by_rank[0]).intersection(*by_rank[1:])
    if not common:
        return []
    return [statistics.median(t[s] / by_rank[0][s] for s in common) for t in by_rank]


def nccl_tests_log(raw, op):
    """The `op` rows as nccl-tests prints them (out-of-place columns only)."""
    ranks = raw["ranks"]
    rows = raw[op]
    lines = [
        f"# metp-sim scripts/gpu-dist.py: {op} measured with torch.distributed "
        f"({raw['backend']}, {raw['software']}), printed as nccl-tests' {op}_perf prints it "
        "(time: the slowest rank's wall time per call; out-of-place only; not checked: #wrong N/A)",
        f"# nThread 1 nGpus 1 minBytes {rows[0]['bytes'] if rows else 0} "
        f"maxBytes {rows[-1]['bytes'] if rows else 0} step: METP/TP sizes warmup iters: 2 "
        "iters: batch validation: 0 graph: 0",
        "#",
        "# Using devices",
    ]
    for r, name in enumerate(raw["devices"]):
        lines.append(f"#  Rank {r:2d} Group  0 Pid {0:6d} on {raw['host']:>10} device {r:2d} "
                     f"[0x00] {name}")
    redop, root = ("sum", -1) if op == "reduce_scatter" else ("none", -1)
    lines += [
        "#",
        "#                                                              out-of-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
    ]
    total = 0.0
    for row in rows:
        nbytes, s = row["bytes"], row["s"]
        # nccl-tests' count: elements of the message, or of one rank's part of the buffer.
        count = nbytes // 2 if op == "sendrecv" else nbytes // 2 // ranks
        algbw = nbytes / s / 1e9
        busbw = algbw * BUS_FACTOR[op](ranks)
        total += busbw
        us = s * 1e6
        t = f"{us:8.2f}" if us < 100 else f"{us:8.1f}" if us < 10000 else f"{us:8.0f}"
        lines.append(f"{nbytes:12d}  {count:12d}  bfloat16  {redop:>6}  {root:6d}  {t} "
                     f"{algbw:7.2f} {busbw:7.2f}    N/A")
    lines += [
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {total / len(rows) if rows else 0:.3f}",
        "#",
        "",
    ]
    return "\n".join(lines)


def summary(raw, path):
    lines = [f"gpu-dist: {raw['ranks']} rank(s) ({raw['backend']}) on {raw['host']}, "
             f"{raw['software']}; {raw['skipped']} skipped; {raw['elapsed_s']:.0f} s"]
    for op in BUS_FACTOR:
        rows = raw[op]
        if rows:
            best = max(bus_bytes_per_s(op, raw["ranks"], r["bytes"], r["s"]) for r in rows)
            lines.append(f"{op}: {len(rows)} size(s), {rows[0]['bytes']} .. {rows[-1]['bytes']} B,"
                         f" best busbw {best / 1e9:.1f} GB/s")
        else:
            lines.append(f"{op}: nothing measured")
    for r, k in enumerate(raw["kernels"]):
        best = max((2.0 * g["m"] * g["n"] * g["k"] / g["s"] for g in k.get("gemm", [])), default=0)
        lines.append(f"rank {r} ({raw['devices'][r]}): {len(k.get('gemm', []))} GEMMs, best "
                     f"{best / 1e12:.1f} TFLOP/s, {len(k.get('attention', []))} attention calls")
    rel = relative_gemm_times(raw)
    if len(rel) > 1:
        lines.append("GEMM time per GPU / GPU 0's (median over the shapes all ran): "
                     + " ".join(f"{x:.3f}" for x in rel)
                     + f"; spread {100 * (max(rel) / min(rel) - 1):.1f}%")
    lines.append(f"-> {path}")
    return "\n".join(lines) + "\n"


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_outputs(raw, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    meas = os.path.join(out_dir, "dist-measurements.json")
    write_atomic(meas, json.dumps(measurement_file(raw), indent=1) + "\n")
    write_atomic(os.path.join(out_dir, "dist-gemm-per-gpu.json"),
                 json.dumps(per_gpu_file(raw), indent=1) + "\n")
    for op in BUS_FACTOR:
        write_atomic(os.path.join(out_dir, f"nccl-tests-{op}.log"), nccl_tests_log(raw, op))
    text = summary(raw, meas)
    write_atomic(os.path.join(out_dir, "dist-summary.txt"), text)
    return text


# ---- the measuring half (torch) -----------------------------------------------------------


def measure(args):
    import importlib.util

    import torch
    import torch.distributed as dist

    start = time.monotonic()
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = not args.smoke
    if cuda and not torch.cuda.is_available():
        print("gpu-dist: FAILED: no CUDA device visible to PyTorch (--smoke runs on the CPU)",
              file=sys.stderr)
        return 1
    if cuda:
        if local >= torch.cuda.device_count():
            print(f"gpu-dist: FAILED: local rank {local} but only {torch.cuda.device_count()} "
                  "GPU(s) visible", file=sys.stderr)
            return 1
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend, device_id=dev if cuda else None)
    ranks = dist.get_world_size()
    if ranks < 2:
        print("gpu-dist: FAILED: one rank: run it under torchrun --nproc_per_node N with N >= 2",
              file=sys.stderr)
        dist.destroy_process_group()
        return 1

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def left():
        return args.budget_s - (time.monotonic() - start)

    def agreed(flag):
        """Rank 0's decision, on every rank (so that no rank waits for a call others skip)."""
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=dev)
        dist.broadcast(t, 0)
        return bool(t.item())

    def slowest(x):
        t = torch.tensor([x], dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def timed(fn):
        """Seconds per call: warm-ups, then a batch sized to ~20 ms, the slowest rank's."""
        fn()
        fn()
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        sync()
        one = slowest(time.perf_counter() - t0)
        iters = max(1, min(50, int(0.02 / max(one, 1e-6))))
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        return slowest((time.perf_counter() - t0) / iters)

    sizes = plan(ranks, args.smoke)
    bw_guess = 5e10 if cuda else 2e8  # bytes/s, only to size the budget check
    comm_budget = args.budget_s * 0.4
    raw = {"ranks": ranks, "backend": backend, "skipped": 0, "budget_s": args.budget_s,
           "date": time.strftime("%Y-%m-%d", time.gmtime()), "host": socket.gethostname(),
           "sendrecv": [], "all_gather": [], "reduce_scatter": []}
    nxt, prv = (rank + 1) % ranks, (rank - 1) % ranks
    for op, rows in sizes.items():
        for nbytes, _what in rows:
            est = 60 * (2e-5 + nbytes / bw_guess)
            go = agreed(rank != 0 or (time.monotonic() - start) + est < comm_budget)
            if not go:
                raw["skipped"] += 1
                continue
            elems = nbytes // 2
            if op == "sendrecv":
                send = torch.ones(elems, dtype=torch.bfloat16, device=dev)
                recv = torch.empty_like(send)

                def fn():
                    for q in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt),
                                                     dist.P2POp(dist.irecv, recv, prv)]):
                        q.wait()
            elif op == "all_gather":
                send = torch.ones(elems // ranks, dtype=torch.bfloat16, device=dev)
                recv = torch.empty(elems, dtype=torch.bfloat16, device=dev)

                def fn():
                    dist.all_gather_into_tensor(recv, send)
            else:
                send = torch.ones(elems, dtype=torch.bfloat16, device=dev)
                recv = torch.empty(elems // ranks, dtype=torch.bfloat16, device=dev)

                def fn():
                    dist.reduce_scatter_tensor(recv, send)
            s = timed(fn)
            send = recv = None
            raw[op].append({"bytes": nbytes, "s": s})

    # Every GPU's kernels at once (each rank on its own device), with what budget is left.
    spec = importlib.util.spec_from_file_location(
        "gpu_kernels", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu-kernels.py"))
    gk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gk)
    kernel_budget = max(0.0, left() - 10.0)
    parts = ("attention", "gemm", "copy") if rank == 0 else ("gemm",)
    t = gk.Timer(dev, kernel_budget)
    kernels = gk.measure(dev, kernel_budget, args.smoke, parts=parts, ps=[ranks], t=t)
    kernels["skipped"] = t.skipped
    name = torch.cuda.get_device_name(dev) if cuda else "cpu (smoke test)"
    gathered = [None] * ranks
    dist.all_gather_object(gathered, {"kernels": kernels, "device": name})
    if rank == 0:
        raw["kernels"] = [g["kernels"] for g in gathered]
        raw["devices"] = [g["device"] for g in gathered]
        raw["skipped"] += sum(k.pop("skipped", 0) for k in raw["kernels"])
        nccl = ""
        if cuda:
            try:
                nccl = " nccl " + ".".join(str(x) for x in torch.cuda.nccl.version())
            except Exception:  # noqa: BLE001 - the version is informative only
                nccl = ""
        raw["software"] = f"torch {torch.__version__}{nccl}"
        raw["elapsed_s"] = time.monotonic() - start
        if args.raw:
            write_atomic(args.raw, json.dumps(raw, indent=1) + "\n")
        print(write_outputs(raw, args.out), end="")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for the outputs (rank 0 writes them)")
    ap.add_argument("--budget-s", type=float, default=90.0,
                    help="seconds for the measurements (40%% for the collectives)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, gloo on the CPU")
    ap.add_argument("--raw", help="also write the raw results (rank 0) to this file")
    ap.add_argument("--plan", type=int, metavar="RANKS",
                    help="print the sizes measured over RANKS ranks (JSON) and exit; no torch")
    ap.add_argument("--format", metavar="RAW",
                    help="write the outputs from a raw results file and exit; no torch")
    args = ap.parse_args()
    if args.plan is not None:
        if args.plan < 2:
            print("gpu-dist: --plan: give at least 2 ranks", file=sys.stderr)
            return 2
        print(json.dumps(plan(args.plan, args.smoke), indent=1))
        return 0
    if not args.out:
        print("gpu-dist: --out DIR is required", file=sys.stderr)
        return 2
    if args.format:
        try:
            with open(args.format) as fh:
                raw = json.load(fh)
            print(write_outputs(raw, args.out), end="")
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            print(f"gpu-dist: FAILED: {args.format}: not a raw results file ({type(e).__name__}: "
                  f"{e})", file=sys.stderr)
            return 1
        return 0
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        print(f"gpu-dist: FAILED: --out {args.out}: {e}", file=sys.stderr)
        return 1
    try:
        import torch  # noqa: F401
    except ImportError:
        print("gpu-dist: FAILED: python3 cannot import torch", file=sys.stderr)
        return 1
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
