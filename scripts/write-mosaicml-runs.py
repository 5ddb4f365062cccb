#!/usr/bin/env python3
"""Writes the run files of MosaicML's published MPT training benchmarks on H100 (runs/mosaicml-*.json
and their models, runs/models/mpt-*.json) from the rows of the table they come from.

Source: mosaicml/llm-foundry, scripts/train/benchmarking/README.md at commit 5e85bd62d (6 January
2024, "Shashank/new benchmarks (#838)"), table "H100 80GB BF16 (Large Scale, >= 128 GPUs)", with the
settings of scripts/train/benchmarking/sweep.py of the same commit (the sweep that produced the
table) and the model yamls scripts/train/yamls/pretrain/mpt-*.yaml. Only the rows whose attention
the tool can price are written: sweep.py ran the 1B, 3B, 7B and 70B models with `--attn_impl flash`
and the 13B and 30B ones with `--attn_impl triton` (llm-foundry's Triton FlashAttention kernel,
which no profile models), so 12 of the table's 18 rows.

The run files are inputs (hand-checked, committed); this script records how they were transcribed
and rewrites them byte for byte. Run it again only when the transcription itself changes:

    python3 scripts/write-mosaicml-runs.py

`--one-node DIR` instead writes the one-node rows of the README's other H100 table into DIR (not
run files of runs/: they ran an attention kernel no profile models), for the comparison the
README makes: `metp-sim validate --runs DIR --out DIR/report`.
"""
import json
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parent.parent
COMMIT = "5e85bd62d"

# name: (d_model, n_heads, n_layers, the table's NumParams at sequence 2048)
MODELS = {
    "1b": (2048, 16, 24, 1315950592),
    "3b": (2560, 20, 32, 2651837440),
    "7b": (4096, 32, 32, 6658859008),
    "70b": (8192, 64, 80, 64862437376),
}
# The one-node check's other models (NumParams at sequence 2048, the table's).
ONE_NODE_MODELS = {
    "13b": (5120, 40, 40, 12853954560),
    "30b": (7168, 56, 48, 29975214080),
}

# (model, GPUs, MFU %, micro-batch, global batch, T/s/GPU, sharding, activation checkpointing),
# exactly as the table prints them (every row: sequence 2048, GradAccum 1, amp_bf16, MP mode
# DEFAULT, no CPU offload).
ROWS = [
    ("70b", 512, 41.25, 8, 4096, 1007, "FULL_SHARD", True),
    ("70b", 256, 42.42, 8, 2048, 1035, "FULL_SHARD", True),
    ("70b", 128, 43.36, 8, 1024, 1058, "FULL_SHARD", True),
    ("7b", 512, 42.2, 6, 3072, 9670, "FULL_SHARD", False),
    ("7b", 256, 44.15, 6, 1536, 10119, "FULL_SHARD", False),
    ("7b", 128, 45.71, 6, 768, 10475, "FULL_SHARD", False),
    ("3b", 512, 39.24, 8, 4096, 21664, "SHARD_GRAD_OP", False),
    ("3b", 256, 41.25, 8, 2048, 22772, "SHARD_GRAD_OP", False),
    ("3b", 128, 42.43, 8, 1024, 23422, "SHARD_GRAD_OP", False),
    ("1b", 512, 36.65, 12, 6144, 39837, "SHARD_GRAD_OP", False),
    ("1b", 256, 39.15, 12, 3072, 42555, "SHARD_GRAD_OP", False),
    ("1b", 128, 40.6, 12, 1536, 44123, "SHARD_GRAD_OP", False),
]

# The tolerance of each model's rows: wide, because the tool prices these runs far faster than
# measured for a reason not found (TOLERANCE_WHY); it guards against regressions from here.
TOLERANCE = {"70b": 0.2, "7b": 0.55, "3b": 0.6, "1b": 0.65}


def model_file(name):
    d, heads, layers, params = {**MODELS, **ONE_NODE_MODELS}[name]
    return {
        "name": f"MPT {name.upper()} (llm-foundry benchmark yaml)",
        "layers": layers,
        "hidden": d,
        "heads": heads,
        "kv_heads": heads,
        "ffn_hidden": 4 * d,
        "vocab": 50368,
        "activation": "gelu",
        "norm": "layernorm",
        "dropout": False,
        "tied_embeddings": True,
        "source": (
            f"mosaicml/llm-foundry at {COMMIT}, scripts/train/yamls/pretrain/mpt-{name}.yaml: d_model {d}, "
            f"n_heads {heads}, n_layers {layers}, expansion_ratio 4, vocab_size 50368; the MPT defaults of "
            "llmfoundry/models/mpt/configuration_mpt.py at the same commit: GeLU MLP, low_precision_layernorm, "
            "tied input and output embeddings (tie_word_embeddings true), no dropout (attn_pdrop, resid_pdrop "
            "and emb_pdrop 0), biases in every linear layer and norm (no_bias false) and learned absolute "
            "positions (learned_pos_emb true, alibi false). The table's NumParams at sequence 2048, "
            f"{params:,}, is these layers with their biases plus the token and position embeddings: the "
            "tool's model has neither the biases (13 numbers per hidden unit per layer, under 0.01% of the "
            "parameters) nor the position table (2048 rows), which add no GEMM."
        ),
    }


SHARDING = {
    "FULL_SHARD": (
        "FSDP FULL_SHARD (PyTorch FSDP1, flat parameters per MPT block): weights, gradients and optimizer "
        "state sharded over all GPUs, each block's weights all-gathered before its forward and again before "
        "its backward, its gradients reduce-scattered after it — the tool's ZeRO 3 with flat gathers"
    ),
    "SHARD_GRAD_OP": (
        "FSDP SHARD_GRAD_OP: gradients and optimizer state sharded, each block's weights all-gathered "
        "before its forward (prefetched one block ahead: forward_prefetch true) and kept until its backward "
        "ends, gradients reduce-scattered after it; with one micro-batch per step that is one gather of the "
        "updated weights per step, overlapped with the forward, and one reduce-scatter — the tool's ZeRO 2 "
        "with the weights gathered overlapped"
    ),
}

NOTES = (
    "The table's rows are MosaicML platform runs of llm-foundry's MPT models on H100 80GB, 30 batches "
    "each (submit_benchmarks.py max_duration 30ba), throughput from Composer's SpeedMonitor over a window "
    "of 10 batches (the yaml's callbacks) — end to end, data loading and per-batch logging included. "
    "Throughput (T/s/GPU) is the tokens of the global batch over the step time and the GPUs; the run files "
    "use it (no FLOP convention needed): step = global batch × 2048 / (T/s/GPU × GPUs). The README's MFU "
    "is 6 × NumParams per token (embeddings included) + 12·n_layers·d_model·seq per token of attention "
    "(every score counted), of 989 TFLOP/s (MFU 45.71 at 10,475 tokens/s for 7B: 4.52e14 / 9.89e14). "
    "sweep.py at the same commit: --precisions bf16, --fsdp_config_limit_all_gathers true, "
    "--fsdp_config_forward_prefetch true, --fsdp_config_backward_prefetch BACKWARD_PRE, --accum 1, "
    "--seq_len_exp 11 11 (sequence 2048); 1B and 3B with activation checkpointing false, SHARD_GRAD_OP, "
    "micro-batch 12 and 8; 7B with checkpointing false, FULL_SHARD, micro-batch 6; 70B with checkpointing "
    "true, FULL_SHARD, micro-batch 8; all four with --attn_impl flash. It also passes "
    "--fsdp_config_mixed_precision PURE, while the table, which collect_results.py builds from each run's "
    "own configuration, prints DEFAULT: Composer's DEFAULT reduces the gradients in FP32 and PURE in bf16 "
    "(composer/trainer/mosaic_fsdp_utils.py, get_mixed_precision, at Composer commit 2deccf2 of January "
    "2024: DEFAULT sets param_dtype and buffer_dtype to the precision's and reduce_dtype to torch.float32, "
    "PURE all three to the precision's), so the gradient dtype is a knob tried both ways. Attention: llm-foundry's 'flash' calls "
    "flash_attn_varlen_func of FlashAttention 2 when flash-attn 2.4.2 is installed (setup.py extra "
    "gpu-flash2) and flash_attn_unpadded_func of FlashAttention 1 (1.0.9, the plain gpu extra) otherwise "
    "(llmfoundry/models/layers/attention.py); the benchmark image is not named (sweep.py: "
    "'<insert_image_name>'), and no profile models FlashAttention 1: fa2 is priced. Layers as MPT writes "
    "them in PyTorch eager (layer_ops eager: the LayerNorm one ATen kernel each way, GeLU its own kernel). "
    "The loss: llm-foundry's default loss_fn, fused_crossentropy, flash-attn's xentropy kernel "
    "(llmfoundry/models/mpt/modeling_mpt.py at the same commit, which refuses to run without it): a fused "
    "cross-entropy, as the tool prices it. Composer's DecoupledAdamW on the sharded FP32 weights. The cluster is not described: the dgx-h100 "
    "profile (8 H100 SXM per node on NVLink, 8 × 400 Gb/s NDR InfiniBand) is assumed."
)

TOLERANCE_WHY = (
    "A check of the FSDP path on H100 at 128 to 512 GPUs with one micro-batch per GPU and step, from a "
    "stack the other H100 runs do not use (Composer and PyTorch FSDP1, MPT in PyTorch eager). The tool "
    "prices the 1B, 3B and 7B rows far faster than measured and the 70B rows (activation checkpointing, "
    "larger micro-batches) close to it; the breakdown below says which part of the step the tool spends "
    "where. The communication is hidden under the compute in the tool (the weight gathers and FP32 "
    "reduce-scatters of a 7B model take about a fifth of its step over 8 × 400 Gb/s per node), so the gap "
    "is in what the GPUs compute or wait for inside a step, not in the network: the same models on one "
    "8-GPU node in the same README's other H100 table (ran with llm-foundry's Triton attention, which no "
    "profile models, so not run files here) show the same shortfall, about a third for the rows without "
    "activation checkpointing and about a tenth for the 7B and 13B rows with it. The measured throughput "
    "per GPU also falls from 128 to 512 GPUs at the same work per GPU (the step grows by 0.06 s for 1B and "
    "3B, 0.10 s for 7B and 0.78 s for 70B) while the tool's step grows by under 0.02 s: a cost that grows "
    "with the ranks of every FSDP collective (a ring over 512 ranks has 511 steps, each with its latency) "
    "is exposed in these runs and hidden in the tool. Not modelled and "
    "suspected: FlashAttention 1 instead of 2 (about a tenth of these steps is attention), the allocator "
    "near the device's capacity (these micro-batches are the largest that fit; the tool's peak is the "
    "tensors it counts), and per-step framework time. Nothing is fitted to these rows; the tolerance "
    "guards against regressions and the 5% goal is not met."
)


def run_file(model, gpus, mfu, mb, gbs, tps, sharding, ac):
    zero = 3 if sharding == "FULL_SHARD" else 2
    f = {
        "title": (
            f"MosaicML 2024 — MPT {model.upper()} on {gpus} H100, FSDP {sharding}, "
            f"sequence 2048, micro-batch {mb}"
        ),
        "source": {
            "paper": (
                "MosaicML LLM Foundry, scripts/train/benchmarking/README.md (github.com/mosaicml/llm-foundry, "
                f"commit {COMMIT} of 6 January 2024, 'Shashank/new benchmarks (#838)'; the same rows at later commits)"
            ),
            "table": "H100 80GB BF16 (Large Scale, >= 128 GPUs)",
            "row": (
                f"{model}, SeqLen 2048, {gpus} GPUs, MFU {mfu}, MicroBatchSize {mb}, GradAccum 1, "
                f"GlobalBatchSize {gbs}, Throughput {tps} T/s/GPU, amp_bf16, DEFAULT, {sharding}, "
                f"Activation Checkpointing {ac}"
            ),
            "notes": NOTES + " Sharding: " + SHARDING[sharding] + ".",
        },
        "model": f"models/mpt-{model}.json",
        "hardware": "dgx-h100",
        "nodes": gpus // 8,
        "method": "tp-sp",
        "p": 1,
        "cp": 1,
        "pp": 1,
        "interleave": 1,
        "dp": gpus,
        "micro_batch": mb,
        "global_batch": gbs,
        "seq": 2048,
        "recompute": "full" if ac else "none",
        "zero": zero,
        "grad_dtype": "fp32",
        "grad_accumulation": "separate",
        "attention_kernel": "fa2",
        "causal": True,
        "layer_ops": "eager",
    }
    if zero == 2:
        f["param_gather"] = "overlapped"
    f["measured"] = {
        "quantity": "tokens-per-s-per-gpu",
        "value": tps,
        "also_published": f"MFU {mfu}% by the README's count (6 × NumParams + every attention score, of 989 TFLOP/s)",
    }
    f["tolerance"] = TOLERANCE.get(model, 1.0)
    f["tolerance_why"] = TOLERANCE_WHY
    f["unstated"] = [
        {
            "knob": "grad-dtype",
            "tried": ["fp32", "bf16"],
            "why": (
                "The table prints MP mode DEFAULT (Composer: bf16 weights for compute, gradients reduced "
                "in FP32); the sweep that ran it passes PURE (reduced in bf16). The table records each "
                "run's own configuration: fp32."
            ),
        }
    ]
    return f


# The README's other H100 table, "H100 80GB BF16" (added at b2a43a147, October 2023): rows on one
# node of 8 GPUs, every one FULL_SHARD: (model, sequence, MFU %, micro-batch, GradAccum, T/s/GPU,
# activation checkpointing). Its sweep.sh names no --attn_impl, so the yamls' default ran:
# llm-foundry's Triton attention, which no profile models. These are not run files: `--one-node
# DIR` writes them into DIR with FlashAttention 2 standing in, for the README's comparison.
ONE_NODE_ROWS = [
    ("30b", 2048, 38.11, 3, 21, 2002, True),
    ("30b", 1024, 38.76, 6, 21, 2084, True),
    ("13b", 4096, 41.6, 10, 3, 4717, True),
    ("13b", 2048, 39.79, 2, 1, 4792, False),
    ("13b", 1024, 44.27, 40, 3, 5502, True),
    ("7b", 2048, 46.44, 6, 1, 10643, False),
    ("7b", 1024, 42.83, 64, 2, 10203, True),
    ("3b", 4096, 42.31, 5, 6, 20964, False),
    ("3b", 1024, 46.2, 20, 6, 27046, False),
    ("3b", 512, 46.32, 40, 6, 27965, False),
    ("1b", 4096, 40.26, 7, 4, 38535, False),
    ("1b", 2048, 41.82, 14, 1, 45455, False),
    ("1b", 1024, 41.95, 18, 4, 48910, False),
    ("1b", 512, 43.21, 56, 4, 52275, False),
]


def one_node_file(model, seq, mfu, mb, accum, tps, ac):
    f = run_file(model, 8, mfu, mb, mb * accum * 8, tps, "FULL_SHARD", ac)
    f["title"] = f"MosaicML 2023 — MPT {model.upper()} on one node of 8 H100, sequence {seq} (fa2 standing in for Triton attention)"
    f["source"]["table"] = "H100 80GB BF16 (one node; commit b2a43a147)"
    f["source"]["row"] = (
        f"{model}, SeqLen {seq}, 8 GPUs, MFU {mfu}, MicroBatchSize {mb}, GradAccum {accum}, "
        f"Throughput {tps} T/s/GPU, FULL_SHARD, Activation Checkpointing {ac}"
    )
    f["seq"] = seq
    f["model"] = f"models/mpt-{model}.json"
    f["tolerance"] = 1.0
    f["unstated"] = []
    return f


def write(path, obj):
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {path.relative_to(root)}")


if len(sys.argv) == 3 and sys.argv[1] == "--one-node":
    out = pathlib.Path(sys.argv[2]).resolve()
    (out / "models").mkdir(parents=True, exist_ok=True)
    for name in {**MODELS, **ONE_NODE_MODELS}:
        (out / f"models/mpt-{name}.json").write_text(json.dumps(model_file(name), indent=2) + "\n")
    for row in ONE_NODE_ROWS:
        (out / f"mosaicml-2023-mpt-{row[0]}-s{row[1]}-8gpus.json").write_text(
            json.dumps(one_node_file(*row), indent=2, ensure_ascii=False) + "\n"
        )
    print(f"wrote {len(ONE_NODE_ROWS)} one-node run files to {out}")
    sys.exit(0)
if len(sys.argv) != 1:
    sys.exit("usage: write-mosaicml-runs.py [--one-node DIR]")
for name in MODELS:
    write(root / f"runs/models/mpt-{name}.json", model_file(name))
for row in ROWS:
    write(root / f"runs/mosaicml-2024-mpt-{row[0]}-{row[1]}gpus.json", run_file(*row))
