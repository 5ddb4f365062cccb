//! Weights, gradients and optimizer state per device, and the embedding / output-head
//! activations every method has.
//!
//! Mixed-precision Adam as in Megatron-LM: bf16 weights (2 bytes/parameter), main gradients in
//! their dtype g (fp32: 4, Megatron's default; bf16: 2, `--grad-dtype bf16`), optimizer state o
//! (fp32 master weights + Adam moments, 12; fp32 moments with 16-bit master remainders, 10;
//! bf16 moments without a master copy, 4: `--optimizer-dtype`) — 18 or 16 bytes/parameter with fp32 state (`config::precision`).
//! ZeRO (Rajbhandari et al. 2019) over a group of N ranks shards the optimizer state (stage 1,
//! which is Megatron's distributed optimizer: 2 + g + o/N), also the gradients (stage 2:
//! 2 + (g + o)/N), also the weights (stage 3: (2 + g + o)/N). Shards that do not divide
//! evenly are padded (ceiling), as real implementations pad their flat buffers.

use super::layer::{ceil_div, prod, tensor};
use super::{Block, Kind, Phase, Tensor};
use serde::Serialize;

use crate::config::{Dims, GradBuffer, GradDtype, OptimizerDtype, Workload, ZeroStage};
use crate::memory::names;

/// Bytes per parameter of the bf16 weights.
pub const WEIGHT_BYTES: u128 = 2;

/// What one pipeline stage holds of the model: its layers, and whether it runs the embedding
/// and the output head (without a pipeline: everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageShare {
    /// Layers of the stage (all its chunks).
    pub layers: u64,
    /// Whether the stage runs the input embedding.
    pub embedding: bool,
    /// Whether the stage runs the final norm, the output head and the loss.
    pub head: bool,
    /// Whether the model is split into pipeline stages (a tied output head then needs its own
    /// copy of the embedding on the last stage, as Megatron keeps one).
    pub pipelined: bool,
}

impl StageShare {
    /// The whole model on one stage.
    pub fn whole(w: &Workload) -> StageShare {
        StageShare {
            layers: w.model.layers,
            embedding: true,
            head: true,
            pipelined: false,
        }
    }
}

/// Parameters one device of a stage owns before ZeRO, per block: (block, params, replicated
/// across p).
pub fn local_params(w: &Workload, st: &StageShare) -> Vec<(Block, u128, bool)> {
    let m = &w.model;
    let p = w.p as u128;
    let l = st.layers as u128;
    let sharded = w.method.shards_weights();
    let split = |n: u128| if sharded { ceil_div(n, p) } else { n };
    let rep = !sharded && w.p > 1;
    // Embedding and head are vocabulary-parallel for the weight-sharding methods when enabled.
    let vocab_split = sharded && w.options.vocab_parallel;
    let vsplit = |n: u128| if vocab_split { ceil_div(n, p) } else { n };
    let vrep = !vocab_split && w.p > 1;
    let embedding = if st.embedding {
        m.embedding_params() as u128
    } else {
        0
    };
    // A tied head shares the embedding on one stage; across stages the last keeps a copy.
    let head = match (st.head, m.tied_embeddings && st.pipelined) {
        (false, _) => 0,
        (true, true) => m.embedding_params() as u128,
        (true, false) => m.head_params() as u128,
    };
    let final_norm = u128::from(st.head);
    // Row-parallel biases stay whole on every device (Megatron adds them after the reduction).
    let whole = |n: u64, kept: bool| {
        let kept = u128::from(kept) * m.hidden as u128;
        split(l * (n as u128 - kept)) + l * kept
    };
    vec![
        (
            Block::Attention,
            whole(m.attention_params_per_layer(), m.biases.attention_out),
            rep,
        ),
        (
            Block::Mlp,
            whole(m.mlp_params_per_layer(), m.biases.mlp),
            rep,
        ),
        // Norm weights are tiny and replicated by every method.
        (
            Block::Norm,
            (2 * l + final_norm) * m.norm_params() as u128,
            w.p > 1,
        ),
        (Block::Embedding, vsplit(embedding), vrep),
        (Block::Head, vsplit(head), vrep),
    ]
}

/// The group ZeRO shards over: data-parallel ranks (times the context-parallel ranks, which
/// hold the same weights), times the p devices for methods whose weights are otherwise
/// replicated across them (DeepSpeed shards over the DP × SP group).
pub fn zero_group(w: &Workload) -> u128 {
    let dp = (w.dp as u128) * (w.outer.cp as u128);
    if w.method.shards_weights() {
        dp
    } else {
        dp * (w.p as u128)
    }
}

/// Static tensors: weights per block, main gradients and optimizer state, plus ZeRO-3's
/// gathered-layer buffers.
pub fn static_tensors(w: &Workload, st: &StageShare) -> Vec<Tensor> {
    let n = zero_group(w);
    let stage = w.zero_stage();
    let sharded_by = |min_stage: ZeroStage| if stage >= min_stage { n } else { 1 };
    let params = local_params(w, st);
    let total: u128 = params.iter().map(|&(_, p, _)| p).sum();
    let all_rep = params
        .iter()
        .filter(|&&(_, n, _)| n > 0)
        .all(|&(_, _, r)| r);
    let mut out = Vec::new();
    for &(block, count, rep) in &params {
        let name = match block {
            Block::Attention => names::ATTN_WEIGHTS,
            Block::Mlp => names::MLP_WEIGHTS,
            Block::Norm => names::NORM_WEIGHTS,
            Block::Embedding => names::EMBEDDING_WEIGHTS,
            _ => names::HEAD_WEIGHTS,
        };
        let wn = sharded_by(ZeroStage::Zero3);
        out.push(tensor(
            name,
            block,
            Kind::Static,
            ceil_div(count * WEIGHT_BYTES, wn),
            1,
            rep && wn == 1,
            &[],
        ));
    }
    let gn = sharded_by(ZeroStage::Zero2);
    let grad = w.options.grad_dtype;
    out.push(tensor(
        match grad {
            GradDtype::Fp32 => names::OPTIMIZER_MAIN_GRADS_FP32,
            GradDtype::Bf16 => names::OPTIMIZER_MAIN_GRADS_BF16,
        },
        Block::Optimizer,
        Kind::Static,
        ceil_div(total * grad.bytes(), gn),
        1,
        all_rep && gn == 1,
        &[],
    ));
    let on = sharded_by(ZeroStage::Zero1);
    let state = w.options.optimizer_dtype;
    out.push(tensor(
        match state {
            OptimizerDtype::Fp32 => names::OPTIMIZER_ADAM_STATE_FP32,
            OptimizerDtype::Fp32Remainders => names::OPTIMIZER_ADAM_STATE_FP32_REMAINDERS,
            OptimizerDtype::Bf16 => names::OPTIMIZER_ADAM_STATE_BF16,
        },
        Block::Optimizer,
        Kind::Static,
        ceil_div(total * state.bytes_per_param(), on),
        1,
        all_rep && on == 1,
        &[],
    ));
    if stage == ZeroStage::Zero3 && n > 1 {
        // One layer gathered for compute and the next prefetched; in backward one layer's
        // gradients (in their dtype) wait for their reduce-scatter.
        let m = &w.model;
        let layer = (m.attention_params_per_layer()
            + m.mlp_params_per_layer()
            + 2 * m.norm_params()) as u128;
        out.push(tensor(
            "zero3.gathered_weights",
            Block::Optimizer,
            Kind::Transient,
            2 * layer * WEIGHT_BYTES,
            1,
            true,
            &Phase::ALL,
        ));
        out.push(tensor(
            "zero3.grad_bucket",
            Block::Optimizer,
            Kind::Transient,
            layer * grad.bytes(),
            1,
            false,
            &[Phase::BwdAttention, Phase::BwdMlp],
        ));
    }
    out
}

/// How long a model chunk's lazily allocated gradients are held (`config::GradBuffer::Lazy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GradLifetime {
    /// Whole gradients (ZeRO 0 or 1): from the chunk's first backward of the step to its last,
    /// whose synchronisation takes them (FSDP2's unsharded accumulator).
    ToLastBackward,
    /// Shards (ZeRO 2 and 3): from the chunk's first backward, whose reduce-scatter allocates
    /// them, to the optimizer step (FSDP2's sharded `.grad`, dropped by `zero_grad`).
    ToStepEnd,
}

/// The main gradients of a stage held per model chunk, when they are allocated lazily
/// (`config::GradBuffer::Lazy`): what the gradients of one layer, of the embedding and of the
/// head (with the final norm) take, in the gradients' dtype — whole, or the device's shards
/// under ZeRO 2 and 3 — and how long a chunk's are held. Linear in the layers held, so that the
/// chunks' allocations add up to the moments' (`memory::in_flight`); a layer's share of a
/// row-split weight, and a layer's shard, are rounded up, as their buffers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HeldGrads {
    /// One layer's gradients.
    pub per_layer_bytes: u128,
    /// The embedding's (0 on stages without it).
    pub embedding_bytes: u128,
    /// The output head's and the final norm's (0 on stages without them).
    pub head_bytes: u128,
    /// How long a chunk's are held.
    pub lifetime: GradLifetime,
}

impl HeldGrads {
    /// The held gradients' parts for `st`, or `None` where the gradients are held through the
    /// step (`persistent`).
    pub fn of(w: &Workload, st: &StageShare) -> Option<HeldGrads> {
        if w.options.runtime.grad_buffer != GradBuffer::Lazy {
            return None;
        }
        let g = w.options.grad_dtype.bytes();
        let (shards, lifetime) = if w.zero_stage() >= ZeroStage::Zero2 {
            (zero_group(w), GradLifetime::ToStepEnd)
        } else {
            (1, GradLifetime::ToLastBackward)
        };
        let bytes = |layers: u64, embedding: bool, head: bool| -> u128 {
            let share = StageShare {
                layers,
                embedding,
                head,
                pipelined: st.pipelined,
            };
            let params: u128 = local_params(w, &share).iter().map(|&(_, n, _)| n).sum();
            ceil_div(params * g, shards)
        };
        Some(HeldGrads {
            per_layer_bytes: bytes(1, false, false),
            embedding_bytes: if st.embedding {
                bytes(0, true, false)
            } else {
                0
            },
            head_bytes: if st.head { bytes(0, false, true) } else { 0 },
            lifetime,
        })
    }

    /// The bytes held with `layers` layers' gradients and the embedding's and head's where set.
    pub fn bytes(&self, layers: u64, embedding: bool, head: bool) -> u128 {
        self.per_layer_bytes
            .saturating_mul(layers as u128)
            .saturating_add(if embedding { self.embedding_bytes } else { 0 })
            .saturating_add(if head { self.head_bytes } else { 0 })
    }
}

/// Embedding and output-head activations.
///
/// `rows`: local b × s at the model's input and output (replicated when `replicated`);
/// `logit_rows` × `vocab_local`: the logits one device materialises (fp32, as the cross-entropy
/// computes in fp32; the gradient is written in place).
pub fn edge_tensors(
    w: &Workload,
    d: &Dims<u128>,
    rows: u128,
    replicated: bool,
    logit_rows: u128,
    vocab_local: u128,
) -> Vec<Tensor> {
    let mut out = vec![tensor(
        names::EMBEDDING_TOKEN_IDS,
        Block::Embedding,
        Kind::Stored,
        prod(&[8, rows]),
        1,
        replicated,
        &[],
    )];
    if w.dropout() {
        out.push(tensor(
            names::EMBEDDING_DROPOUT_MASK,
            Block::Embedding,
            Kind::Stored,
            prod(&[rows, d.h]),
            1,
            replicated,
            &[],
        ));
    }
    out.push(tensor(
        names::HEAD_FINAL_NORM_INPUT,
        Block::Head,
        Kind::Stored,
        prod(&[2, rows, d.h]),
        1,
        replicated,
        &[],
    ));
    out.push(tensor(
        names::HEAD_INPUT,
        Block::Head,
        Kind::Stored,
        prod(&[2, rows, d.h]),
        1,
        replicated,
        &[],
    ));
    out.push(tensor(
        names::HEAD_LOGITS_FP32,
        Block::Head,
        Kind::Transient,
        prod(&[4, logit_rows, vocab_local]),
        1,
        false,
        &[Phase::Loss],
    ));
    out
}
