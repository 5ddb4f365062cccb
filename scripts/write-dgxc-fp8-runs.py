#!/usr/bin/env python3
"""Writes the FP8 twins of the NVIDIA DGX Cloud Benchmarking run files (runs/nvidia-dgxc-*-fp8-*.json).

Each recipe of releases v24.11.1 (commit 35a9aec), v25.02 (commit 8f5cbb3) and v25.04 (commit
741c886) of github.com/NVIDIA/dgxc-benchmarking publishes a BF16 and an FP8 table side by side
for the same layout (in 24.11.1 and 25.02 the tables' headers give the same TP, PP, CP, VP, MBS
and GA; in 25.04 the layout table lists the size as "BF16/FP8"), measured with the same launch
script run with DTYPE=fp8 instead of bf16. For every BF16 run file of those releases in runs/
that has such a twin, this script writes the FP8 row at the same GPU count as a run file of its
own: the BF16 file's fields, with `linear_dtype: fp8`, the FP8 step time, and the source and
notes saying what DTYPE=fp8 changes (NeMo 1's configure.sh: model.fp8, fp8_hybrid,
+model.fp8_params; NeMo 2's pretrain_llama31.py: the bf16_with_fp8_mixed() plugin and FP8
userbuffer configurations). Release v25.05 (commit 68eaf7e) does the same for its GB200 tables
(llama3.1/README.md and nemotron/README.md: one layout table for "BF16/FP8", an FP8 table beside
each BF16 one; NeMo's scripts.performance set the bf16_with_fp8_mixed() plugin for
--compute_dtype fp8, its default --fp8_recipe ds, and the FP8 userbuffer configurations).

The values below are transcribed from the FP8 tables (README_<size>.md of each recipe at 24.11.1
and 25.02, llama3.1/README.md at 25.04: the "Training step time (seconds per step)" row, and
where the table has them the tokens/s and MFU rows). The run files are inputs; this script records how they were made and rewrites
them byte for byte:

    python3 scripts/write-dgxc-fp8-runs.py
"""
import json
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent

# (release prefix of the BF16 files, model part of their names) -> (the tolerance of the group's
# run files, the FP8 table's title, {GPUs: (step s, tokens/s or None, MFU % or None)}). The
# tolerances guard against regressions: each is a little above the group's largest error when
# the files were written (runs.md gives the errors), raised at stop 41 for the groups that pricing
# Transformer Engine's bulk overlaps as whole GEMMs moved past it (the BF16 files say how far),
# and the GB200 groups' lowered the same stop once GB200's step clock was fitted (gb200-nvl72's
# kernels.gemm.step_clock_fraction).
FP8 = {
    ("2411", "llama31-405b"): (
        0.1,
        "Llama 3.1 405b 24.09 FP8 (TP=8, PP=9, CP=2, VP=7, MBS=1, GA=63)",
        {576: (11.24, None, None), 1152: (11.31, None, None), 2304: (12.35, None, None)},
    ),
    ("2411", "llama31-70b"): (
        0.15,
        "Llama 3.1 70b 24.09 FP8 (TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64)",
        {
            64: (11.01, 95239, 36.17),
            128: (10.93, 191871, 36.43),
            256: (11.16, 375834, 35.68),
            512: (11.18, 750323, 35.62),
            1024: (11.28, 1487342, 35.30),
            2048: (11.39, 2945955, 34.96),
        },
    ),
    ("2411", "nemotron4-15b"): (
        0.11,
        "Nemotron4 15b 24.11 FP8 (TP=4, PP=1, MBS=4, GA=4)",
        {
            16: (2.08, 126031, 42.22),
            32: (2.07, 253279, 42.43),
            64: (2.09, 501711, 42.02),
            128: (2.08, 1008246, 42.22),
            256: (2.1, 1997288, 41.82),
            512: (2.12, 3956891, 41.43),
            1024: (2.12, 7913781, 41.43),
            2048: (2.18, 15391941, 40.29),
        },
    ),
    ("2411", "nemotron4-340b"): (
        0.13,
        "Nemotron4 340b 24.11 FP8 (TP=8, PP=8, MBS=1, GA=16, VP=12)",
        {
            128: (3.16, 41478, 40.38),
            256: (3.21, 81665, 39.75),
            512: (3.26, 160825, 39.14),
            1024: (3.34, 313945, 38.20),
            2048: (3.49, 600903, 36.56),
        },
    ),
    ("2502", "llama31-405b"): (
        0.12,
        "Llama 3.1 405b FP8 (TP=8, PP=9, CP=2, VP=7, MBS=1, GA=63)",
        {576: (11.00, None, None), 1152: (11.10, None, None), 2304: (11.20, None, None)},
    ),
    ("2502", "llama31-70b"): (
        0.12,
        "Llama 3.1 70b FP8 (TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64)",
        {
            64: (10.46, 100275, 38.08),
            128: (10.52, 199292, 37.84),
            256: (10.75, 390167, 37.04),
            512: (10.76, 779393, 37.00),
            1024: (10.83, 1549142, 36.77),
            2048: (10.99, 3053178, 36.23),
        },
    ),
    ("2502", "llama31-8b"): (
        0.15,
        "Llama 3.1 8b FP8 (TP=1, PP=1, CP=2, MBS=1, GA=32)",
        {
            8: (9.44, 111054, 40.59),
            16: (9.47, 221358, 40.45),
            32: (9.60, 437088, 39.94),
            64: (9.64, 870639, 39.77),
            128: (9.73, 1725163, 39.41),
        },
    ),
    # Release 25.04 (NeMo 25.02.01): the README's layout table lists these sizes as
    # "BF16/FP8", one layout for both; the FP8 tables are titled by model and dtype only. (Its
    # 70B FP8 rows run another layout, TP 4 × PP 8 without CP: no bf16 twin, not written.)
    ("2504", "llama31-8b"): (
        0.15,
        "Llama 3.1 8b FP8",
        {
            8: (9.33, 112388, 41.07),
            16: (9.36, 224055, 40.94),
            32: (9.43, 444783, 40.64),
            64: (9.48, 884874, 40.42),
            128: (9.54, 1758618, 40.17),
        },
    ),
    ("2504", "llama31-405b"): (
        0.14,
        "Llama 3.1 405b FP8",
        {512: (12.37, 169535, 44.35), 1024: (12.42, 337706, 44.17), 2048: (12.56, 667883, 43.68)},
    ),
    ("2504", "llama31-405b-proxy"): (
        0.12,
        "Llama 3.1 405b FP8",
        {32: (3.53, 148524, 42.24), 64: (6.32, 82957, 41.97), 128: (12.18, 86090, 44.55)},
    ),
    # Release 25.05 (GB200 NVL72; NeMo 25.04.01 for Llama, 25.04 for Nemotron): the FP8 tables
    # beside the BF16 ones, same layout table ("BF16/FP8").
    ("2505", "llama31-405b-gb200"): (
        0.18,
        "Llama3.1 405b FP8",
        {128: (6.131, 85514, 36.1), 256: (6.183, 169590, 35.8), 512: (6.244, 335867, 35.5)},
    ),
    ("2505", "nemotron4-340b-gb200"): (
        0.1,
        "Nemotron 340b FP8 GB200",
        {128: (1.483, 88383, 29.7), 256: (1.517, 172804, 28.9), 512: (1.549, 338468, 28.4)},
    ),
    ("2505", "nemotron4-340b-gb200-gbs512"): (
        0.1,
        "Nemotron 340b FP8 GB200 Strong Scaling",
        {128: (21.83, 96067, 32.2), 256: (11.21, 187078, 31.4), 512: (5.668, 369998, 31.0)},
    ),
}

NEMO1 = (
    "configure.sh at the same tag then sets model.fp8=true and model.fp8_hybrid=true "
    "(Transformer Engine's delayed-scaling FP8 recipe: E4M3 forward, E5M2 gradients, amax "
    "history 1024 as the model yaml says) and +model.fp8_params=true"
)
NEMO2 = (
    "pretrain_llama31.py at the same tag then sets the trainer's precision plugin to NeMo's "
    "bf16_with_fp8_mixed() (nemo/collections/llm/recipes/precision/mixed_precision.py: "
    "fp8='hybrid', delayed scaling with amax history 1024, fp8_params=True) and the FP8 "
    "userbuffer configurations (userbuffers_fp8_h100_*)"
)
NEMO2_GB200 = (
    "launch.sh at the same tag passes --compute_dtype fp8 to NeMo's scripts.performance, whose "
    "set_primary_perf_configs (scripts/performance/utils.py at the recipe's NeMo commit) then "
    "sets the trainer's precision plugin to bf16_with_fp8_mixed() (the default --fp8_recipe ds: "
    "fp8='hybrid', delayed scaling, fp8_param_gather=True) and grad_reduce_in_fp32 False, and leaves "
    "out the precision-aware optimizer it sets for BF16 (fp32 main weights and moments either "
    "way, the tool's default optimizer state); the recipe picks the FP8 userbuffer "
    "configuration (userbuffers_fp8_b200_*)"
)
LAUNCH = {"2411": NEMO1, "2502": NEMO1, "2504": NEMO2, "2505": NEMO2_GB200}
# What each profile's FP8 GEMM figures were fitted to, and the FP8 peak the recipe's MFU is of.
FP8_FIT = {
    "dgx-h100": (
        "with the two fractions fitted to the H100's cuBLASLt FP8 GEMMs timed after 10,000 "
        "warm-up calls, the "
        "sustained clock a training step holds (kernels.gemm.fp8)",
        "1979 TFLOP/s",
    ),
    "gb200-nvl72-seg64": (
        "with its one FP8 fraction fitted to GB200's one published FP8 matmul maximum (MAMF, stas00/ml-engineering; "
        "kernels.gemm.fp8.mma_fraction: the profile's source gives the fit and what the H100's "
        "fixed per-tile times, carried over, cost at that shape), at the clock GB200 holds "
        "after 10,000 back-to-back FP8 GEMMs (kernels.gemm.step_clock_fraction, fitted to "
        "Azure's ND GB200 v6 cuBLASLt squares)",
        "4.9 PFLOP/s",
    ),
}
FP8_NOTE = (
    "FP8 twin of {bf16} (the same recipe, layout, data and container, launched with DTYPE=fp8 "
    "instead of bf16): {launch} — the layers' QKV, projection and MLP GEMMs run FP8 forward "
    "and backward, their bf16 inputs cast to FP8 first, while attention (bf16: FP8 attention is "
    "a separate switch the recipe leaves off), the embedding and the output layer stay bf16: "
    "the tool's linear_dtype fp8. fp8_params keeps the weights as FP8 primary weights, cast "
    "once in the optimizer step and all-gathered in FP8, which the tool does not model: it "
    "keeps the bf16 weights' memory and prices the weight all-gather in bf16{extra}. "
    "Everything else is the BF16 row's: its run file's notes give the recipe (model, parallel "
    "layout, attention kernel, optimizer, overlaps) as read from the same launch scripts."
)
EXTRA_405B = (
    "; for 405B the recipe also sets the userbuffers of the projection and FC2 reduce-scatters "
    "to FP8 (ub_tp_comm_overlap_cfg.proj_fprop.fp8_buf, fc2_fprop.fp8_buf), which the tool "
    "prices in bf16 (overlapped with the GEMMs either way)"
)
EXTRA_405B_NEMO2 = (
    "; for 405B the FP8 userbuffer configuration (NeMo's userbuffers_fp8_h100_h16384_tp8_cp2_"
    "mbs1_seqlen8192) also runs the projection and FC2 forward reduce-scatters as ring exchanges "
    "instead of pipelined splits, which the tool prices as for bf16"
)


def twin(path, release, tolerance, table, rows, model):
    bf16 = json.loads(path.read_text())
    gpus = bf16["p"] * bf16["cp"] * bf16["pp"] * bf16["dp"]
    if gpus not in rows:
        raise SystemExit(f"{path.name}: no FP8 row for {gpus} GPUs")
    step, tokens, mfu = rows[gpus]
    header = re.search(r"\(TP=[^)]*\)", table)
    if header is not None and header.group(0) not in bf16["source"]["table"]:
        raise SystemExit(f"{path.name}: FP8 layout {header.group(0)} differs from the BF16 table's")
    out = dict(bf16)
    out["title"] = bf16["title"].replace(", BF16,", ", FP8,")
    src = dict(bf16["source"])
    src["table"] = re.sub(r"'[^']*BF16[^']*'", f"'{table}'", src["table"])
    gbs = bf16["global_batch"]
    gpu = "GB200" if bf16["hardware"].startswith("gb200") else "H100"
    src["row"] = f"{gpus}x {gpu} GPUs (GBS={gbs}): training step time {step:.{3 if release == '2505' else 2}f} s"
    # The H100 405B recipes' FP8 userbuffer settings (GB200's are named in its LAUNCH text).
    extra = {"2411": EXTRA_405B, "2502": EXTRA_405B, "2504": EXTRA_405B_NEMO2}.get(release, "")
    extra = extra if "405b" in model else ""
    src["notes"] = FP8_NOTE.format(bf16=path.name, launch=LAUNCH[release], extra=extra)
    out["source"] = src
    measured = {"quantity": "iteration-s", "value": step}
    if tokens is not None:
        measured["also_published"] = (
            f"{tokens:,} tokens/s on {gpus} GPUs; MFU {mfu:.{1 if release == '2505' else 2}f}% of "
            f"{FP8_FIT[bf16['hardware']][1]} (the FP8 peak) "
            "by the recipe's FLOP count (attention scores counted in full)"
        )
    out["measured"] = measured
    # Keys in the BF16 file's order, linear_dtype just before what was measured.
    ordered = {}
    for k, v in out.items():
        if k == "measured":
            ordered["linear_dtype"] = "fp8"
        ordered[k] = v
    bf16_s = bf16["measured"]["value"]
    ordered["tolerance"] = tolerance
    ordered["tolerance_why"] = TOLERANCE_WHY.format(
        step=f"{step:.{3 if release == '2505' else 2}f}", bf16_s=bf16_s, speedup=bf16_s / step,
        bf16=path.name,
        fit=FP8_FIT[bf16["hardware"]][0],
    )
    name = path.name.replace(f"-{gpus}gpus.json", f"-fp8-{gpus}gpus.json")
    (root / "runs" / name).write_text(json.dumps(ordered, indent=2, ensure_ascii=False) + "\n")
    return name


TOLERANCE_WHY = (
    "Measured {step} s, {speedup:.2f}× faster than the BF16 row ({bf16_s:.2f} s, {bf16}): "
    "the FP8 speed-up is what this row tests beyond its twin, whose analysis (kernel model, "
    "overlapped tensor-parallel communication, the cost of scale) holds here too. FP8 GEMMs are "
    "priced at the profile's FP8 peak {fit}, and each forward and input-gradient GEMM is preceded by the cast of its bf16 input "
    "(schedule's FP8 pass); nothing is fitted to this run. runs.md's section \"FP8 against "
    "bf16\" compares the predicted speed-up with the measured one pair by pair. The tolerance "
    "guards against regressions; the 5% goal stands."
)


def main():
    written = []
    for (release, model), (tolerance, table, rows) in FP8.items():
        pattern = f"nvidia-dgxc-{release}-{model}-*gpus.json"
        for path in sorted((root / "runs").glob(pattern)):
            if "-fp8-" in path.name or not re.fullmatch(
                rf"nvidia-dgxc-{release}-{model}-\d+gpus\.json", path.name
            ):
                continue
            written.append(twin(path, release, tolerance, table, rows, model))
    print(f"wrote {len(written)} run files")


main()
