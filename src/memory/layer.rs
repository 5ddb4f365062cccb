//! The per-layer activation template of Korthikanti et al. (2022), which every baseline's
//! inventory instantiates with its own partitioning, plus the dimensions it needs.
//!
//! One GPT layer stores, for backward (no parallelism, bytes; 2-byte activations, 1-byte masks):
//!
//! ```text
//! attention  QKV input 2sbh, Q 2sbh, K 2sbh_kv, V 2sbh_kv, softmax output 2as²b,
//!            softmax-dropout mask as²b, dropout output 2as²b, out-projection input 2sbh,
//!            attention-output dropout mask sbh                          → 11sbh + 5as²b
//! MLP        fc1 input 2sbh, activation input 2sbf, fc2 input 2sbf, dropout mask sbh → 19sbh
//! norms      two LayerNorm inputs                                                    → 4sbh
//! ```
//!
//! which is sbh(34 + 5as/h) for MHA, f = 4h, GeLU, dropout. With FlashAttention the quadratic
//! tensors are replaced by the fp32 log-sum-exp (4abs). Each method says how each tensor is
//! partitioned: a [`Part`] gives the local rows (b × local sequence) and the local width
//! (heads or MLP columns) of one group of tensors.

use super::{Block, Kind, Phase, Tensor};
use crate::config::{Activation, Dims, Recompute, Workload};
use crate::memory::names;

/// Multiplies factors, saturating instead of wrapping.
pub fn prod(factors: &[u128]) -> u128 {
    factors.iter().fold(1u128, |acc, &f| acc.saturating_mul(f))
}

/// Ceiling division (for shards that do not divide evenly and are padded).
pub fn ceil_div(n: u128, d: u128) -> u128 {
    n.div_ceil(d)
}

/// How one group of layer tensors is laid out on a device.
#[derive(Debug, Clone, Copy)]
pub struct Part {
    /// Local rows: b × (local sequence length).
    pub rows: u128,
    /// Local query heads (attention) — also sets the local width h_local = heads · d.
    pub heads: u128,
    /// Local KV heads.
    pub kv_heads: u128,
    /// Local MLP width.
    pub f: u128,
    /// Whether every device holds the same copy.
    pub replicated: bool,
}

/// How the attention core is stored.
#[derive(Debug, Clone, Copy)]
pub enum Core {
    /// Scores materialised for `cols` keys per local query row (unfused; stored unless
    /// recomputed) — or the fp32 log-sum-exp when `flash` is on.
    Scores {
        /// Key columns per query row.
        cols: u128,
    },
    /// Blockwise online softmax (ring attention): only the log-sum-exp is stored; unfused
    /// blocks of `block_cols` keys are transient.
    Blockwise {
        /// Key columns per block.
        block_cols: u128,
    },
}

/// The three partitions of a layer and how its attention core works.
#[derive(Debug, Clone, Copy)]
pub struct LayerLayout {
    /// Layer-boundary tensors: norm inputs, QKV input, fc1 input, the two dropout masks.
    pub boundary: Part,
    /// Attention-inner tensors: Q, K, V, scores, out-projection input.
    pub attention: Part,
    /// MLP-inner tensors: activation input, fc2 input.
    pub mlp: Part,
    /// Attention core.
    pub core: Core,
    /// Whether FlashAttention is used (for `Core::Scores`).
    pub flash: bool,
}

const FWD_ATTN: &[Phase] = &[Phase::FwdAttention];
const BWD_ATTN: &[Phase] = &[Phase::BwdAttention];
const BWD_MLP: &[Phase] = &[Phase::BwdMlp];
const BWD_BOTH: &[Phase] = &[Phase::BwdAttention, Phase::BwdMlp];

/// A tensor constructor with the fields the template varies.
pub fn tensor(
    name: &'static str,
    block: Block,
    kind: Kind,
    bytes_each: u128,
    count: u64,
    replicated: bool,
    phases: &[Phase],
) -> Tensor {
    Tensor {
        name,
        block,
        kind,
        bytes_each,
        count,
        replicated,
        per_layer: false,
        phases: phases.to_vec(),
    }
}

/// A stored activation of every layer (`count` = layers).
pub fn stored_per_layer(
    name: &'static str,
    block: Block,
    bytes_each: u128,
    layers: u64,
    replicated: bool,
) -> Tensor {
    Tensor {
        per_layer: true,
        ..tensor(
            name,
            block,
            Kind::Stored,
            bytes_each,
            layers,
            replicated,
            &[],
        )
    }
}

/// The stored, recomputed and working-set tensors of one layer under `layout`, for all layers.
pub fn layer_tensors(w: &Workload, d: &Dims<u128>, l: &LayerLayout) -> Vec<Tensor> {
    let dropout = w.dropout();
    let layers = d.layers;
    let (bd, at, ml) = (l.boundary, l.attention, l.mlp);
    let h_b = d.h;
    let h_at = at.heads * d.d;
    let hkv_at = at.kv_heads * d.d;
    let act_factor = match w.model.activation {
        Activation::Gelu => 1,
        Activation::Swiglu => 2,
    };
    // PyTorch eager (`config::LayerOps`): SDPA keeps the keys and values copied out to every
    // query head, RMSNorm's ops keep an FP32 copy of the input (and the normalised bf16 values in
    // place of the bf16 input, which nothing saves: the norm input's entry), SwiGLU's product
    // keeps the silu output.
    let ops = w.options.runtime.layer_ops;
    let hkv_kept = if ops.eager() { h_at } else { hkv_at };
    let eager_norm = ops.eager_norm(w.model.norm);
    let eager_silu = ops.eager() && w.model.activation == Activation::Swiglu;

    // (name, block, bytes, replicated, quadratic) for everything a layer keeps without
    // recomputation, in Korthikanti's order.
    let mut keep: Vec<(&'static str, Block, u128, bool, bool)> = vec![
        (
            names::NORM_LN1_INPUT,
            Block::Norm,
            prod(&[2, bd.rows, h_b]),
            bd.replicated,
            false,
        ),
        (
            names::ATTN_QKV_INPUT,
            Block::Attention,
            prod(&[2, bd.rows, h_b]),
            bd.replicated,
            false,
        ),
        (
            names::ATTN_Q,
            Block::Attention,
            prod(&[2, at.rows, h_at]),
            at.replicated,
            false,
        ),
        (
            names::ATTN_K,
            Block::Attention,
            prod(&[2, at.rows, hkv_kept]),
            at.replicated,
            false,
        ),
        (
            names::ATTN_V,
            Block::Attention,
            prod(&[2, at.rows, hkv_kept]),
            at.replicated,
            false,
        ),
    ];
    if eager_norm {
        keep.insert(
            1,
            (
                names::NORM_LN1_EAGER,
                Block::Norm,
                prod(&[4, bd.rows, h_b]),
                bd.replicated,
                false,
            ),
        );
    }
    let mut block_transient: Option<(u128, u128)> = None; // (elements of one block, per-layer count)
    match l.core {
        Core::Scores { cols } if !l.flash => {
            let elems = prod(&[at.heads, at.rows, cols]);
            keep.push((
                names::ATTN_SOFTMAX_OUT,
                Block::Attention,
                prod(&[2, elems]),
                at.replicated,
                true,
            ));
            if dropout {
                keep.push((
                    names::ATTN_SOFTMAX_DROPOUT_MASK,
                    Block::Attention,
                    elems,
                    at.replicated,
                    true,
                ));
                keep.push((
                    names::ATTN_SOFTMAX_DROPOUT_OUT,
                    Block::Attention,
                    prod(&[2, elems]),
                    at.replicated,
                    true,
                ));
            }
            block_transient = Some((elems, 1));
        }
        Core::Scores { .. } => {
            keep.push((
                names::ATTN_LSE,
                Block::Attention,
                prod(&[4, at.heads, at.rows]),
                at.replicated,
                false,
            ));
        }
        Core::Blockwise { block_cols } => {
            keep.push((
                names::ATTN_LSE,
                Block::Attention,
                prod(&[4, at.heads, at.rows]),
                at.replicated,
                false,
            ));
            if !l.flash {
                block_transient = Some((prod(&[at.heads, at.rows, block_cols]), 1));
            }
        }
    }
    keep.push((
        names::ATTN_PROJ_INPUT,
        Block::Attention,
        prod(&[2, at.rows, h_at]),
        at.replicated,
        false,
    ));
    if dropout {
        keep.push((
            names::ATTN_OUT_DROPOUT_MASK,
            Block::Attention,
            prod(&[bd.rows, h_b]),
            bd.replicated,
            false,
        ));
    }
    keep.push((
        names::NORM_LN2_INPUT,
        Block::Norm,
        prod(&[2, bd.rows, h_b]),
        bd.replicated,
        false,
    ));
    if eager_norm {
        keep.push((
            names::NORM_LN2_EAGER,
            Block::Norm,
            prod(&[4, bd.rows, h_b]),
            bd.replicated,
            false,
        ));
    }
    keep.push((
        names::MLP_FC1_INPUT,
        Block::Mlp,
        prod(&[2, bd.rows, h_b]),
        bd.replicated,
        false,
    ));
    keep.push((
        names::MLP_ACT_INPUT,
        Block::Mlp,
        prod(&[2 * act_factor, ml.rows, ml.f]),
        ml.replicated,
        false,
    ));
    if eager_silu {
        keep.push((
            names::MLP_SILU_OUTPUT,
            Block::Mlp,
            prod(&[2, ml.rows, ml.f]),
            ml.replicated,
            false,
        ));
    }
    keep.push((
        names::MLP_FC2_INPUT,
        Block::Mlp,
        prod(&[2, ml.rows, ml.f]),
        ml.replicated,
        false,
    ));
    if dropout {
        keep.push((
            names::MLP_OUT_DROPOUT_MASK,
            Block::Mlp,
            prod(&[bd.rows, h_b]),
            bd.replicated,
            false,
        ));
    }

    let mut out = Vec::new();
    for &(name, block, bytes, rep, quadratic) in &keep {
        let stored = match w.options.recompute {
            Recompute::None => true,
            // Selective recomputation drops exactly the quadratic attention-core tensors.
            Recompute::Selective => !quadratic,
            // Full recomputation keeps only each layer's input.
            Recompute::Full => name == names::NORM_LN1_INPUT,
        };
        if stored {
            out.push(stored_per_layer(name, block, bytes, layers, rep));
        } else {
            // Recomputed in backward: one layer's copy lives while that layer's backward runs
            // (and, for the quadratic core, in forward before it is discarded).
            let phases: &[Phase] = match (w.options.recompute, quadratic) {
                (Recompute::Full, _) => BWD_BOTH,
                (_, true) => &[Phase::FwdAttention, Phase::BwdAttention],
                _ => BWD_ATTN,
            };
            out.push(tensor(name, block, Kind::Transient, bytes, 1, rep, phases));
        }
    }

    // Raw QKᵀ scores exist until the softmax consumes them; backward needs the gradients of the
    // probabilities and the scores (2 bytes each per element).
    if let Some((elems, _)) = block_transient {
        let rep = at.replicated;
        out.push(tensor(
            names::ATTN_SCORES,
            Block::Attention,
            Kind::Transient,
            prod(&[2, elems]),
            1,
            rep,
            FWD_ATTN,
        ));
        if matches!(l.core, Core::Blockwise { .. }) {
            // Blockwise: nothing of the block is stored; forward also holds the probabilities,
            // backward recomputes them.
            out.push(tensor(
                names::ATTN_BLOCK_PROBS,
                Block::Attention,
                Kind::Transient,
                prod(&[2, elems]),
                1,
                rep,
                &[Phase::FwdAttention, Phase::BwdAttention],
            ));
        }
        out.push(tensor(
            names::ATTN_GRAD_PROBS,
            Block::Attention,
            Kind::Transient,
            prod(&[2, elems]),
            1,
            rep,
            BWD_ATTN,
        ));
        out.push(tensor(
            names::ATTN_GRAD_SCORES,
            Block::Attention,
            Kind::Transient,
            prod(&[2, elems]),
            1,
            rep,
            BWD_ATTN,
        ));
    }
    // Gradients flowing through the layer: dY and dX at the boundary, dQ/dK/dV and the MLP
    // activation gradient inside.
    out.push(tensor(
        names::GRAD_LAYER_OUTPUT,
        Block::Attention,
        Kind::Transient,
        prod(&[2, bd.rows, h_b]),
        1,
        bd.replicated,
        BWD_BOTH,
    ));
    out.push(tensor(
        names::GRAD_LAYER_INPUT,
        Block::Attention,
        Kind::Transient,
        prod(&[2, bd.rows, h_b]),
        1,
        bd.replicated,
        BWD_BOTH,
    ));
    out.push(tensor(
        names::GRAD_QKV,
        Block::Attention,
        Kind::Transient,
        prod(&[2, at.rows, h_at + 2 * hkv_at]),
        1,
        at.replicated,
        BWD_ATTN,
    ));
    out.push(tensor(
        names::GRAD_MLP_ACT,
        Block::Mlp,
        Kind::Transient,
        prod(&[2 * act_factor, ml.rows, ml.f]),
        1,
        ml.replicated,
        BWD_MLP,
    ));
    out
}
