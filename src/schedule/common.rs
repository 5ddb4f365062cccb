//! Pieces every method's plan shares: the embedding, the optimizer and gradient
//! synchronisation.

use super::kernels::{self, AttnShape};
use super::stage::{Kernel, PhaseBlock, Stage, StepPlan};
use super::CollectiveOp;
use crate::config::{
    Dims, MethodId, ParamGather, Recompute, ValidWorkload, Workload, Zero3Gather, ZeroStage,
};
use crate::memory::{self, Phase};

/// Attention shape helper: `heads` query heads of `b` samples, `sq` queries against `sk` keys,
/// causal when the workload is.
pub fn attn(
    w: &Workload,
    b: f64,
    sq: f64,
    sk: f64,
    heads: f64,
    kv_heads: f64,
    d: f64,
) -> AttnShape {
    AttnShape {
        b,
        sq,
        sk,
        heads,
        d,
        kv_heads,
        causal: w.options.causal,
    }
}

/// Embedding lookup over `rows` local tokens.
fn embedding(rows: f64, h: f64) -> Vec<Kernel> {
    vec![Kernel::elementwise("embedding", rows * h, 1.0)]
}

/// The recomputation a policy adds to a block's backward: the forward kernels again (full), or
/// the attention core again (selective).
pub fn recompute_kernels(
    w: &Workload,
    block_fwd: &[Kernel],
    attention_core_fwd: &[Kernel],
) -> Vec<Kernel> {
    match w.options.recompute {
        Recompute::None => Vec::new(),
        Recompute::Selective => attention_core_fwd.to_vec(),
        Recompute::Full => block_fwd.to_vec(),
    }
}

/// A phase block.
fn block(phase: Phase, name: &'static str, stages: Vec<Stage>) -> PhaseBlock {
    PhaseBlock {
        phase,
        block: name,
        stages,
    }
}

/// The stages of each phase of one layer (and the head), as a method describes them.
pub struct Parts {
    /// Forward attention.
    pub attn_fwd: Vec<Stage>,
    /// Forward MLP.
    pub mlp_fwd: Vec<Stage>,
    /// Head and loss, forward and backward.
    pub head: Vec<Stage>,
    /// Backward MLP.
    pub mlp_bwd: Vec<Stage>,
    /// Backward attention.
    pub attn_bwd: Vec<Stage>,
}

/// Assembles a plan from a method's phases, with what every plan fills the same way: the
/// embedding over `embedding_rows` local tokens, optimizer (per pipeline stage), gradient
/// synchronisation, ZeRO-3 gathers, pipeline and embedding-group messages, layer and
/// micro-batch counts, and whether the method's ranks run the same program.
pub fn finish(w: &ValidWorkload, embedding_rows: f64, parts: Parts) -> StepPlan {
    let h = w.model.hidden as f64;
    let embedding_fwd = embedding(embedding_rows, h);
    let embedding_bwd = embedding(embedding_rows, h);
    let m = &w.model;
    let layer_params =
        (m.attention_params_per_layer() + m.mlp_params_per_layer() + 2 * m.norm_params()) as u128;
    let replicated = !w.method.shards_weights();
    let layer_params_local = if replicated {
        layer_params
    } else {
        layer_params.div_ceil(w.p as u128)
    };
    let (mut attn_fwd, mut mlp_bwd) = (parts.attn_fwd, parts.mlp_bwd);
    // FSDP2 copies each gathered layer's weights out of the all-gather buffer before the layer
    // computes, forward and backward (`config::Zero3Gather`): the gathered bf16 weights read
    // and written once.
    if w.gathers_layer_weights() && w.options.runtime.zero3_gather == Zero3Gather::PerParameter {
        let copy = Kernel::memory("zero3-copy-out", 4.0 * layer_params_local as f64);
        attn_fwd.insert(0, Stage::Compute(vec![copy]));
        mlp_bwd.insert(0, Stage::Compute(vec![copy]));
    }
    let layer_fwd = vec![
        block(Phase::FwdAttention, "attention", attn_fwd),
        block(Phase::FwdMlp, "mlp", parts.mlp_fwd),
    ];
    let head = block(Phase::Loss, "head", parts.head);
    let replicas = w.weight_replicas();
    let zero = w.zero_stage();
    let mut attn_bwd = parts.attn_bwd;
    if let Some(pass) = grad_accumulation(w, layer_params_local, replicas, zero) {
        attn_bwd.push(Stage::Compute(vec![pass]));
    }
    let layer_bwd = vec![
        block(Phase::BwdMlp, "mlp", mlp_bwd),
        block(Phase::BwdAttention, "attention", attn_bwd),
    ];
    // Gradients travel in their dtype (`config::precision`): all-reduced when every replica
    // keeps the whole optimizer state, reduce-scattered to the shard owners when it is sharded
    // (ZeRO ≥ 1, Megatron's distributed optimizer), whose updated bf16 weights are then
    // all-gathered after the step — unless ZeRO-3 gathers each layer where it is used.
    let layer_grad_sync_bytes = if replicas > 1 {
        (w.options.grad_dtype.bytes() * layer_params_local) as u64
    } else {
        0
    };
    let grad_sync_op = if zero >= ZeroStage::Zero1 {
        CollectiveOp::ReduceScatter
    } else {
        CollectiveOp::AllReduce
    };
    let layer_param_gather_bytes =
        if replicas > 1 && (ZeroStage::Zero1..=ZeroStage::Zero2).contains(&zero) {
            (2 * layer_params_local) as u64
        } else {
            0
        };
    let zero3_gather_bytes = if w.gathers_layer_weights() {
        (2 * layer_params_local) as u64
    } else {
        0
    };
    // `config::ParamGather`: after the optimizer step, or layer by layer during the next
    // step's first forward.
    let overlapped = w.options.runtime.param_gather == ParamGather::Overlapped;
    let first_forward_gather_bytes = if overlapped {
        layer_param_gather_bytes
    } else {
        0
    };
    let param_gather_bytes = (0..w.outer.pp as u32)
        .map(|stage| {
            if overlapped {
                0
            } else {
                layer_param_gather_bytes.saturating_mul(w.stage_layers(stage))
            }
        })
        .collect();
    let optimizer = (0..w.outer.pp as u32)
        .map(|stage| {
            kernels::optimizer(
                memory::optimizer_params(w, stage).0 as f64,
                w.options.optimizer_dtype,
                w.options.grad_dtype.bytes() as f64,
            )
        })
        .collect();
    let devices_per_stage = (w.p * w.outer.cp) as f64;
    let pipeline_bytes = if w.outer.pp > 1 {
        (2.0 * w.micro_batch as f64 * w.seq as f64 * h / devices_per_stage).ceil() as u64
    } else {
        0
    };
    // TP without sequence parallelism holds the layer output whole on every rank: each sends
    // its 1/p and the receiving ranks all-gather the pieces before using them.
    let pipeline_gather_bytes = if pipeline_bytes > 0 && w.method == MethodId::Tp && w.p > 1 {
        pipeline_bytes.saturating_mul(w.p)
    } else {
        0
    };
    let embedding_sync_bytes = if w.outer.pp > 1 && m.tied_embeddings {
        let vocab_split = w.method.shards_weights() && w.options.vocab_parallel;
        let local = if vocab_split {
            (m.embedding_params() as u128).div_ceil(w.p as u128)
        } else {
            m.embedding_params() as u128
        };
        (2 * local) as u64
    } else {
        0
    };
    let causal = w.options.causal;
    let ranks_symmetric = match w.method {
        MethodId::Tp | MethodId::TpSp | MethodId::Ulysses => true,
        MethodId::Ring | MethodId::Rsa => !causal,
        MethodId::Metp => w.p == 1,
    };
    StepPlan {
        embedding_fwd,
        layer_fwd,
        head,
        layer_bwd,
        embedding_bwd,
        layer_grad_sync_bytes,
        grad_sync_op,
        grad_sync_every_micro_batch: zero >= ZeroStage::Zero2,
        grad_sync_over_p: replicated,
        zero3_gather_bytes,
        layer_param_gather_bytes,
        param_gather_bytes,
        first_forward_gather_bytes,
        optimizer,
        layers: w.model.layers as u32,
        micro_batches: w.micro_batches as u32,
        pipeline_bytes,
        pipeline_gather_bytes,
        embedding_sync_bytes,
        ranks_symmetric,
        context_symmetric: !causal,
    }
}

/// The element-wise pass that adds a micro-batch's weight gradients of one layer to the
/// accumulated ones, where the software does not fuse it into the weight-gradient GEMMs
/// (`config::GradAccumulation`), at the end of the layer's backward (PyTorch's post-backward
/// hooks run there, before the layer's gradients are synchronised). Whole gradients (ZeRO 0
/// and 1, or a single replica): the new 16-bit gradient read, the accumulator read and
/// written. Under ZeRO ≥ 2 with replicas the gradients are reduce-scattered every micro-batch
/// and only the device's shard is accumulated (the reduced shard read, the accumulator read
/// and written, in the gradients' dtype). The embedding's and the output head's gradients are left out (on one stage each,
/// under 1% of a stage's pass on the published runs' layouts).
fn grad_accumulation(
    w: &ValidWorkload,
    layer_params_local: u128,
    replicas: u64,
    zero: ZeroStage,
) -> Option<Kernel> {
    let per_param = w
        .options
        .grad_accumulation
        .pass_bytes_per_param(w.options.grad_dtype);
    if per_param == 0 {
        return None;
    }
    let bytes = if zero >= ZeroStage::Zero2 && replicas > 1 {
        3 * w.options.grad_dtype.bytes() * layer_params_local.div_ceil(u128::from(replicas.max(1)))
    } else {
        per_param * layer_params_local
    };
    Some(Kernel::memory("grad-accumulate", bytes as f64))
}

/// The plan of a method whose MLP, norms and head run on its `local` tokens with full weights
/// (Ulysses, ring attention, RSA): only the attention stages differ between them.
pub fn sequence_split_plan(
    w: &ValidWorkload,
    d: &Dims<f64>,
    local: f64,
    attn_fwd: Vec<Stage>,
    attn_bwd: Vec<Stage>,
) -> StepPlan {
    use super::kernels::{mlp_bwd, mlp_fwd, norm, norm_bwd, residual_bwd, residual_fwd};
    let px = super::kernels::Passes::of(w);
    let drop = w.dropout();
    let mut mlp_k = norm(px, "ln2", local, d.h);
    mlp_k.extend(mlp_fwd(px, local, d.h, d.f));
    mlp_k.push(residual_fwd("mlp-residual", local, d.h, drop));
    let mut mlp_b = Vec::new();
    if w.options.recompute == Recompute::Full {
        mlp_b.push(Stage::Compute(mlp_k.clone()));
    }
    let mut k = vec![residual_bwd("mlp-residual-bwd", local, d.h, drop)];
    k.extend(mlp_bwd(px, local, d.h, d.f));
    k.extend(norm_bwd(px, "ln2-bwd", local, d.h));
    mlp_b.push(Stage::Compute(k));
    let mut head_k = norm(px, "final-ln", local, d.h);
    head_k.extend(super::kernels::head(
        local,
        d.v,
        d.h,
        w.options.runtime.cross_entropy,
    ));
    finish(
        w,
        local,
        Parts {
            attn_fwd,
            mlp_fwd: vec![Stage::Compute(mlp_k)],
            head: vec![Stage::Compute(head_k)],
            mlp_bwd: mlp_b,
            attn_bwd,
        },
    )
}
