#!/usr/bin/env python3
"""Writes the run files of NeMo 25.02's published FP8 pre-training table on DGX B200
(runs/nemo-2502-b200-*.json): the first B200 training runs the tool meets.

Source: NVIDIA NeMo Framework User Guide, "Performance Summary for Large Language Models"
(docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance_summary.html, the
version for container NeMo 25.02), "Pretraining: ... FP8 precision (using NeMo 2.0)", "System:
DGX-B200": per model the GPUs, GBS, MBS, sequence, TP, PP, CP, VP, EP, GA and the measured
tokens/s per GPU. Written: the dense models the tool can express whose layout the table states
in full — Llama 3 8B, 70B and 405B, Nemotron-4 15B and 340B. Left out: the Mixtral rows
(mixtures of experts) and GPT-3 175B (its NeMo 2 recipe, pretrain_gpt3_175b.py with its own
tokenizer and settings, is not read here).

What the table leaves unstated is read from the NeMo release of that container (v2.2.0,
scripts/llm/performance/: pretrain_<model>.py, utils.py, recommended_model_configs/
model_configs_b200.csv, whose B200 rows give these same layouts): --compute_dtype fp8 sets the
bf16_with_fp8_mixed() plugin (delayed scaling, fp8_param_gather) with grad_reduce_in_fp32 False
(bf16 gradients); performance mode's MegatronCommOverlapCallback (tensor-parallel userbuffers
with B200 configurations for 70B, 405B and 340B, overlapped pipeline exchanges with virtual
stages, the parameter gather overlapped); PerfEnvPlugin(enable_vboost=True); CUDA graphs for
Nemotron-4 15B on B200. Each row takes the knobs of the NVIDIA run file of the same NeMo 2
recipe family that runs/ already has (TEMPLATE), with this table's layout and FP8.

The run files are inputs; this script records how they were made and rewrites them byte for
byte (scripts/regen-reports.sh runs it):

    python3 scripts/write-nemo-2502-b200-runs.py [--out DIR]
"""
import json
import pathlib

from run_layout import layout_fields, write_runs

root = pathlib.Path(__file__).resolve().parent.parent
PAGE = (
    "NVIDIA NeMo Framework User Guide, 'Performance Summary for Large Language Models' "
    "(docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance_summary.html, the "
    "version for container NeMo 25.02)"
)

# (stem, table name, GPUs, GBS, MBS, sequence, TP, PP, CP, VP, GA, tokens/s/GPU, model TFLOP/s/GPU)
ROWS = [
    ("llama3-8b", "LLAMA3-8B", 8, 128, 2, 8192, 1, 1, 1, 1, 8, 26006, 1506),
    ("llama3-70b", "LLAMA3-70B", 64, 128, 1, 8192, 2, 4, 2, 5, 32, 3062, 1474),
    ("llama3-405b", "LLAMA3-405B", 128, 64, 1, 8192, 4, 8, 2, 8, 32, 625, 1658),
    ("nemotron4-15b", "Nemotron-15B", 64, 256, 2, 4096, 1, 1, 1, 1, 2, 14760, 1387),
    ("nemotron4-340b", "Nemotron-340B", 128, 32, 1, 4096, 8, 4, 1, 12, 8, 602, 1268),
]

# Per model: the run file whose knobs (same NeMo 2 performance recipe) are taken, the model, and
# what differs on B200 or in FP8.
TEMPLATE = {
    "llama3-8b": ("nvidia-dgxc-2504-llama31-8b-8gpus", "llama3-8b"),
    "llama3-70b": ("nvidia-dgxc-2504-llama31-70b-64gpus", "llama3-70b"),
    "llama3-405b": ("nvidia-dgxc-2504-llama31-405b-512gpus", "llama3-405b"),
    "nemotron4-15b": ("nvidia-dgxc-2504-llama31-8b-8gpus", "models/nemotron4-15b.json"),
    "nemotron4-340b": ("nvidia-dgxc-2505-nemotron4-340b-gb200-128gpus", "models/nemotron4-340b.json"),
}
KNOBS = (
    "recompute", "zero", "attention_kernel", "causal", "pp_p2p", "tp_comm_overlap", "param_gather",
    "cross_entropy",
)

DIFFERENCES = {
    "llama3-8b": "no context parallelism here (CP 1, micro-batch 2)",
    "llama3-70b": "tensor parallelism 2 with the B200 userbuffers (userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192)",
    "llama3-405b": "tensor parallelism 4 with the B200 userbuffers (userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192)",
    "nemotron4-15b": (
        "no tensor parallelism (so no userbuffers), the NeMo 2 nemotron4_15b recipe (Nemotron-4 15B's "
        "shape: runs/models/nemotron4-15b.json) and CUDA graphs on B200 (pretrain_nemotron4_15b.py: "
        "enable_cuda_graph for b200; not modelled)"
    ),
    "nemotron4-340b": (
        "B200 nodes of 8 GPUs on NVLink instead of GB200 racks, the tokenizer a 256,000-token NullTokenizer "
        "on B200 (pretrain_nemotron4_340b.py), userbuffers_bf16_b200_h18432_tp8_mbs1_seqlen4096 (the script "
        "sets the BF16 configuration for FP8 too)"
    ),
}

# Each row's tolerance: the prediction's distance (simulated or closed form) from the measurement
# when the files were written plus at least 3 points, rounded up to a multiple of 5% (tolerance_why says what it is for).
TOLERANCE = {"llama3-8b": 0.5, "llama3-70b": 0.25, "llama3-405b": 0.15, "nemotron4-15b": 0.65, "nemotron4-340b": 0.3}

TOLERANCE_WHY = (
    "The first B200 training runs in runs/. b200-8's kernel model is mostly a placeholder (the H100's "
    "tile structure, host and memory figures; the BF16 and FP8 GEMM rates each fitted to one published "
    "matmul maximum, a burst measurement, with no clock a training step holds; cuDNN attention fitted "
    "to cudnn-frontend's measured B200 forward and backward, cuDNN 9.13, newer than this release's), "
    "and the launch's vboost is not modelled. "
    "Nothing is fitted to these runs; the tolerance is the prediction's distance from this figure when the "
    "file was written, with a margin, and guards against regressions; the 5% goal stands."
)


def run_file(row):
    stem, name, gpus, gbs, mbs, seq, tp, pp, cp, vp, ga, tps, tflops = row
    template, model = TEMPLATE[stem]
    t = json.loads((root / "runs" / f"{template}.json").read_text())
    dp = gpus // (tp * pp * cp)
    assert dp * tp * pp * cp == gpus and gbs == dp * mbs * ga, row
    f = {
        "title": f"NeMo 25.02 performance summary — {name}, FP8, on {gpus} B200 (DGX B200), TP {tp} PP {pp} CP {cp} VP {vp}",
        "source": {
            "paper": PAGE,
            "table": "Pretraining, FP8 (NeMo 2.0), container NeMo 25.02, System: DGX-B200",
            "row": (
                f"{name}, {gpus} GPUs, GBS {gbs}, MBS {mbs}, sequence length {seq}, TP {tp}, PP {pp}, "
                f"CP {cp}, VP {vp}, EP 1, GA {ga}, {tps} tokens/s/GPU, {tflops} model TFLOP/s/GPU"
            ),
            "notes": (
                "NVIDIA's own measurement of its NeMo 25.02 container on DGX B200 nodes (8 B200 on NVLink, "
                "InfiniBand between nodes), in FP8. What the table leaves unstated is read from NeMo v2.2.0's "
                "scripts/llm/performance (pretrain_<model>.py, utils.py, recommended_model_configs/"
                "model_configs_b200.csv, whose B200 row gives this layout): --compute_dtype fp8 sets the "
                "bf16_with_fp8_mixed() precision plugin (fp8 'hybrid', delayed scaling, amax history 1024, "
                "fp8_param_gather true) with grad_reduce_in_fp32 False (bf16 gradients: grad_dtype bf16), so "
                "the layers' linear GEMMs run FP8 (linear_dtype fp8) and attention, the embedding and the "
                "output layer bf16; the launch adds PerfEnvPlugin(enable_vboost=True), not modelled. The "
                "recipe is the NeMo 2 performance recipe of "
                f"runs/{template}.json, whose notes give its settings and their sources; its recomputation, "
                "ZeRO stage, attention kernel (cuDNN, Transformer Engine's backend on Blackwell), pipeline "
                "exchanges, tensor-parallel overlap and weight gathers are taken, with this table's layout. "
                f"On B200: {DIFFERENCES[stem]}. The measured figure is the table's tokens per second per GPU: "
                "step = global batch × sequence / (tokens/s/GPU × GPUs)."
            ),
        },
        **layout_fields(model, "b200-8", gpus, tp, cp, pp, vp, dp, mbs, gbs, seq),
        "grad_dtype": "bf16",
    }
    for k in KNOBS:
        if k in t:
            f[k] = t[k]
    if tp == 1:
        f.pop("tp_comm_overlap", None)
    if pp == 1:
        f.pop("pp_p2p", None)
    if cp > 1:
        f["cp_comm"] = "ring"
    order = (
        "title", "source", "model", "hardware", "nodes", "method", "p", "cp", "pp", "interleave", "dp",
        "micro_batch", "global_batch", "seq", "recompute", "zero", "grad_dtype", "attention_kernel",
        "causal", "pp_p2p", "cp_comm", "tp_comm_overlap", "param_gather", "cross_entropy",
    )
    f = {k: f[k] for k in order if k in f}
    f["linear_dtype"] = "fp8"
    f["measured"] = {
        "quantity": "tokens-per-s-per-gpu",
        "value": tps,
        "also_published": f"{tflops} model TFLOP/s per GPU",
    }
    f["tolerance"] = TOLERANCE[stem]
    f["tolerance_why"] = TOLERANCE_WHY
    f["unstated"] = [
        {
            "knob": "grad-dtype",
            "tried": ["bf16", "fp32"],
            "why": (
                "The FP8 path of NeMo v2.2.0's performance scripts sets the precision plugin's "
                "grad_reduce_in_fp32 False: bf16. fp32 is tried."
            ),
        }
    ]
    return f"nemo-2502-b200-{stem}-{gpus}gpus", f


write_runs(root / "runs", "write-nemo-2502-b200-runs.py", (run_file(row) for row in ROWS))
