//! Inventory types and the peak-memory rule.

use serde::Serialize;

use super::{method_memory, params};
use crate::config::{Dims, ValidWorkload};

/// Which part of the model a tensor belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Block {
    /// Attention (QKV, scores, context, out-projection, K/V buffers).
    Attention,
    /// MLP.
    Mlp,
    /// Normalisation layers.
    Norm,
    /// Input embedding.
    Embedding,
    /// Output head and loss.
    Head,
    /// Gradients and optimizer state.
    Optimizer,
}

/// How long a tensor lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// For the whole run (weights, gradients, optimizer state).
    Static,
    /// From a layer's forward to its backward (activations kept for backward).
    Stored,
    /// Only inside one phase (working sets, receive buffers, recomputed activations).
    Transient,
}

/// The phases transient tensors live in; the largest working set is the phase whose transients
/// add up highest. Stored and static tensors are live in every phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Forward of one layer's attention block.
    FwdAttention,
    /// Forward of one layer's MLP block.
    FwdMlp,
    /// Backward of one layer's attention block.
    BwdAttention,
    /// Backward of one layer's MLP block.
    BwdMlp,
    /// Output head and loss.
    Loss,
}

impl Phase {
    /// All phases.
    pub const ALL: [Phase; 5] = [
        Phase::FwdAttention,
        Phase::FwdMlp,
        Phase::BwdAttention,
        Phase::BwdMlp,
        Phase::Loss,
    ];

    /// Kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Phase::FwdAttention => "fwd-attention",
            Phase::FwdMlp => "fwd-mlp",
            Phase::BwdAttention => "bwd-attention",
            Phase::BwdMlp => "bwd-mlp",
            Phase::Loss => "loss",
        }
    }
}

/// One tensor (or one kind of tensor repeated `count` times) on one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tensor {
    /// Dotted name, e.g. `attn.softmax_out`.
    pub name: &'static str,
    /// Model block.
    pub block: Block,
    /// Lifetime.
    pub kind: Kind,
    /// Bytes of one instance.
    pub bytes_each: u128,
    /// Instances: the number of layers for per-layer activations, 1 otherwise.
    pub count: u64,
    /// Whether each of the p devices holds an identical copy.
    pub replicated: bool,
    /// Whether this is one layer's tensor repeated for every layer (`count` = layers).
    pub per_layer: bool,
    /// Phases a transient tensor is live in (empty for static and stored tensors).
    pub phases: Vec<Phase>,
}

impl Tensor {
    /// All instances together (saturating: never wraps).
    pub fn bytes(&self) -> u128 {
        self.bytes_each.saturating_mul(self.count as u128)
    }

    /// Whether this is a per-layer stored activation.
    pub fn is_layer_activation(&self) -> bool {
        self.kind == Kind::Stored && self.per_layer
    }
}

/// Everything one device holds, and the totals the reports need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inventory {
    /// The tensors, static first, then stored, then transient.
    pub tensors: Vec<Tensor>,
    /// Weights, gradients and optimizer state.
    pub static_bytes: u128,
    /// Stored activations of one layer.
    pub activation_bytes_per_layer: u128,
    /// All stored activations (every layer, embedding and head inputs).
    pub stored_bytes: u128,
    /// The largest transient working set.
    pub transient_peak_bytes: u128,
    /// The phase that sets `transient_peak_bytes`.
    pub transient_peak_phase: Phase,
    /// CUDA context, NCCL buffers and allocator headroom.
    pub reserved_bytes: u128,
    /// `static + stored + transient_peak + reserved`.
    pub peak_bytes: u128,
    /// Device memory.
    pub capacity_bytes: u128,
    /// `peak_bytes <= capacity_bytes`.
    pub fits: bool,
    /// Assumptions and remarks.
    pub notes: Vec<String>,
}

impl Inventory {
    /// Sum of the transients live in `phase`.
    pub fn transient_bytes(&self, phase: Phase) -> u128 {
        phase_sum(&self.tensors, phase)
    }
}

fn phase_sum(tensors: &[Tensor], phase: Phase) -> u128 {
    tensors
        .iter()
        .filter(|t| t.kind == Kind::Transient && t.phases.contains(&phase))
        .fold(0u128, |acc, t| acc.saturating_add(t.bytes()))
}

/// Builds the inventory of one device for a validated workload.
pub fn inventory(w: &ValidWorkload) -> Inventory {
    INVENTORIES_BUILT.with(|n| n.set(n.get() + 1));
    let mm = method_memory(w.method);
    let d = Dims::<u128>::new(w);
    let mut tensors = params::static_tensors(w);
    tensors.extend(mm.activation_tensors(w, &d));
    tensors.retain(|t| t.bytes_each > 0 && t.count > 0);
    tensors.sort_by_key(|t| t.kind);

    let sum = |kind: Kind| {
        tensors
            .iter()
            .filter(|t| t.kind == kind)
            .fold(0u128, |acc, t| acc.saturating_add(t.bytes()))
    };
    let static_bytes = sum(Kind::Static);
    let stored_bytes = sum(Kind::Stored);
    let activation_bytes_per_layer = tensors
        .iter()
        .filter(|t| t.is_layer_activation())
        .fold(0u128, |acc, t| acc.saturating_add(t.bytes_each));
    // Ties go to the earlier phase so the reported phase is deterministic.
    let (transient_peak_phase, transient_peak_bytes) = Phase::ALL
        .iter()
        .map(|&ph| (ph, phase_sum(&tensors, ph)))
        .fold((Phase::FwdAttention, 0u128), |best, cur| {
            if cur.1 > best.1 {
                cur
            } else {
                best
            }
        });
    let reserved_bytes = w.hardware.reserved_bytes();
    let peak_bytes = static_bytes
        .saturating_add(stored_bytes)
        .saturating_add(transient_peak_bytes)
        .saturating_add(reserved_bytes);
    let capacity_bytes = w.hardware.memory_bytes();
    Inventory {
        tensors,
        static_bytes,
        activation_bytes_per_layer,
        stored_bytes,
        transient_peak_bytes,
        transient_peak_phase,
        reserved_bytes,
        peak_bytes,
        capacity_bytes,
        fits: peak_bytes <= capacity_bytes,
        notes: mm.notes(w),
    }
}

thread_local! {
    /// Inventories built on this thread (instrumentation: see [`inventories_built`]).
    static INVENTORIES_BUILT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many inventories this thread has built so far: lets a test check that an evaluation
/// builds each workload's inventory once. Never part of a result.
pub fn inventories_built() -> u64 {
    INVENTORIES_BUILT.with(|n| n.get())
}
