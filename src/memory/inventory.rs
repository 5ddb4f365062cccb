//! Inventory types and the peak-memory rule.

use serde::Serialize;

use super::in_flight::{Moment, Step};
use super::{method_memory, names, params, stage_share, GradLifetime, HeldGrads, StageShare};
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
///
/// With a pipeline every stage has its own inventory ([`stage_inventories`]): its layers'
/// weights, the embedding on the first stage and the head on the last, and the activations of
/// the micro-batches it holds in flight at its peak (per-layer tensors count the layers held
/// then, the embedding's and head's the micro-batches).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inventory {
    /// Pipeline stage (0 without a pipeline).
    pub stage: u32,
    /// Layers the stage holds (all of them without a pipeline).
    pub layers: u64,
    /// Layers whose activations are stored at the peak (1F1B keeps up to pp micro-batches in
    /// flight on the first stage; without a pipeline: every layer once).
    pub in_flight_layers: u64,
    /// The tensors, static first, then stored, then transient.
    pub tensors: Vec<Tensor>,
    /// Weights, gradients and optimizer state (with lazily allocated gradients, those held at
    /// the peak).
    pub static_bytes: u128,
    /// Where the whole gradients are allocated lazily, what a chunk's take
    /// (`config::GradBuffer::Lazy`); `None`: held through the step, in `static_bytes`.
    pub held_grads: Option<HeldGrads>,
    /// The lazily allocated gradients held at the peak (in `static_bytes`; 0 without
    /// `held_grads`).
    pub held_grad_bytes: u128,
    /// Stored activations of one layer.
    pub activation_bytes_per_layer: u128,
    /// All stored activations at the peak (every layer held, embedding and head inputs).
    pub stored_bytes: u128,
    /// The transient working set at the peak: the largest one (without a pipeline; with one,
    /// the largest that meets the most stored activations).
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

/// The inventory of the device with the highest peak (the first stage among equals): the one
/// that decides whether a configuration fits. Without a pipeline, the one inventory.
pub fn inventory(w: &ValidWorkload) -> Inventory {
    INVENTORIES_BUILT.with(|n| n.set(n.get() + 1));
    // Every stage's peak, then the whole inventory (tensors, notes) of the critical one only:
    // what [`stage_inventories`] and [`critical_stage`] give, for a planner screening tens of
    // thousands of configurations.
    let (chunks, notes, bases) = stage_bases(w);
    let reserved_bytes = w.hardware.reserved_bytes();
    let mut worst: Option<(u128, u32)> = None;
    for (s, c) in chunks.iter().enumerate() {
        let base = &bases[s];
        let peak = peak_moment(w, s as u32, c, base);
        let bytes = base
            .static_bytes
            .saturating_add(peak.total)
            .saturating_add(reserved_bytes);
        if worst.is_none_or(|(b, _)| bytes > b) {
            worst = Some((bytes, s as u32));
        }
    }
    let s = worst.map_or(0, |(_, s)| s);
    stage_inventory(w, s, &chunks[s as usize], &bases[s as usize], &notes)
}

/// The stage with the highest peak (the first among equals).
pub fn critical_stage(stages: &[Inventory]) -> usize {
    let mut worst = 0;
    for (i, inv) in stages.iter().enumerate() {
        if inv.peak_bytes > stages[worst].peak_bytes {
            worst = i;
        }
    }
    worst
}

/// One inventory per pipeline stage (one without a pipeline).
pub fn stage_inventories(w: &ValidWorkload) -> Vec<Inventory> {
    INVENTORIES_BUILT.with(|n| n.set(n.get() + 1));
    let (chunks, notes, bases) = stage_bases(w);
    (0..w.outer.pp as u32)
        .map(|s| stage_inventory(w, s, &chunks[s as usize], &bases[s as usize], &notes))
        .collect()
}

/// Every stage's chunks, the method's notes, and every stage's [`Base`].
type StageBases = (Vec<Vec<(u64, u64)>>, Vec<String>, Vec<std::rc::Rc<Base>>);

/// [`StageBases`]: stages that hold the
/// same share (most of a deep pipeline's) hold the same tensors, built once per distinct share
/// (only what is in flight at the peak differs by stage).
fn stage_bases(w: &ValidWorkload) -> StageBases {
    let chunks = w.all_stage_chunks();
    let notes = method_memory(w.method).notes(w);
    let mut distinct: Vec<std::rc::Rc<Base>> = Vec::new();
    let bases = (0..w.outer.pp as u32)
        .map(|s| {
            let share = StageShare {
                layers: chunks[s as usize].iter().map(|c| c.1).sum(),
                embedding: w.has_embedding(s),
                head: w.has_head(s),
                pipelined: w.outer.pp > 1,
            };
            debug_assert_eq!(share, stage_share(w, s));
            match distinct.iter().find(|b| b.share == share) {
                Some(b) => b.clone(),
                None => {
                    let b = std::rc::Rc::new(Base::of(w, &share));
                    distinct.push(b.clone());
                    b
                }
            }
        })
        .collect();
    (chunks, notes, bases)
}

/// Live stored bytes and the transient working set at the peak moment of a stage.
struct PeakMoment {
    total: u128,
    layers: u64,
    embedding: u64,
    head: u64,
    phase: Phase,
    transient: u128,
    /// Lazily allocated gradients held (in `total`), and their layers.
    grad_bytes: u128,
    grad_layers: u64,
}

/// What every stage holding one share holds alike: its tensors (static first, then stored,
/// then transient; counts before the peak sets them) and their sums.
struct Base {
    share: StageShare,
    tensors: Vec<Tensor>,
    /// Without lazily allocated gradients (those are counted at each moment).
    static_bytes: u128,
    held_grads: Option<HeldGrads>,
    activation_bytes_per_layer: u128,
    /// Stored inputs of the embedding and of the head, per micro-batch in flight.
    emb_each: u128,
    head_each: u128,
    /// The transients of each phase of [`Phase::ALL`], in that order.
    phase_bytes: [u128; 5],
}

impl Base {
    fn of(w: &ValidWorkload, share: &StageShare) -> Base {
        let mm = method_memory(w.method);
        let mut d = Dims::<u128>::new(w);
        d.layers = share.layers;
        let mut tensors = params::static_tensors(w, share);
        tensors.extend(mm.activation_tensors(w, &d));
        tensors.retain(|t| {
            t.bytes_each > 0
                && t.count > 0
                && !(t.block == Block::Embedding && t.kind != Kind::Static && !share.embedding)
                && !(t.block == Block::Head && t.kind != Kind::Static && !share.head)
        });
        tensors.sort_by_key(|t| t.kind);
        let held_grads = HeldGrads::of(w, share);
        let static_bytes = tensors
            .iter()
            .filter(|t| t.kind == Kind::Static && !(held_grads.is_some() && is_main_grads(t)))
            .fold(0u128, |acc, t| acc.saturating_add(t.bytes()));
        let activation_bytes_per_layer = tensors
            .iter()
            .filter(|t| t.is_layer_activation())
            .fold(0u128, |acc, t| acc.saturating_add(t.bytes_each));
        let edge = |block: Block| {
            tensors
                .iter()
                .filter(|t| t.kind == Kind::Stored && !t.per_layer && t.block == block)
                .fold(0u128, |acc, t| acc.saturating_add(t.bytes()))
        };
        let (emb_each, head_each) = (edge(Block::Embedding), edge(Block::Head));
        let phase_bytes = Phase::ALL.map(|p| phase_sum(&tensors, p));
        Base {
            share: *share,
            tensors,
            static_bytes,
            held_grads,
            activation_bytes_per_layer,
            emb_each,
            head_each,
            phase_bytes,
        }
    }
}

/// Whether `t` is the main gradients.
fn is_main_grads(t: &Tensor) -> bool {
    t.name == names::OPTIMIZER_MAIN_GRADS_FP32 || t.name == names::OPTIMIZER_MAIN_GRADS_BF16
}

/// The bytes of `tensors` of one kind (saturating).
fn sum(tensors: &[Tensor], kind: Kind) -> u128 {
    tensors
        .iter()
        .filter(|t| t.kind == kind)
        .fold(0u128, |acc, t| acc.saturating_add(t.bytes()))
}

/// The inventory of stage `stage`, whose chunks are `chunks` and whose share's tensors are
/// `base`; `method_notes` the method's remarks.
fn stage_inventory(
    w: &ValidWorkload,
    stage: u32,
    chunks: &[(u64, u64)],
    base: &Base,
    method_notes: &[String],
) -> Inventory {
    let share = base.share;
    let mut tensors = base.tensors.clone();
    let peak = peak_moment(w, stage, chunks, base);
    let (static_bytes, activation_bytes_per_layer) = (
        base.static_bytes.saturating_add(peak.grad_bytes),
        base.activation_bytes_per_layer,
    );
    if base.held_grads.is_some() {
        // The main gradients as held at the peak.
        for t in tensors.iter_mut().filter(|t| is_main_grads(t)) {
            t.bytes_each = peak.grad_bytes;
        }
        tensors.retain(|t| !(is_main_grads(t) && t.bytes_each == 0));
    }
    // The stored tensors as held at the peak: each layer's as many times as layers are held,
    // the embedding's and head's once per micro-batch in flight.
    for t in tensors.iter_mut().filter(|t| t.kind == Kind::Stored) {
        if t.per_layer {
            t.count = peak.layers;
        } else if t.block == Block::Embedding {
            t.count = peak.embedding;
        } else if t.block == Block::Head {
            t.count = peak.head;
        }
    }
    tensors.retain(|t| t.count > 0);
    let stored_bytes = sum(&tensors, Kind::Stored);
    let reserved_bytes = w.hardware.reserved_bytes();
    let peak_bytes = static_bytes
        .saturating_add(stored_bytes)
        .saturating_add(peak.transient)
        .saturating_add(reserved_bytes);
    debug_assert_eq!(
        stored_bytes
            .saturating_add(peak.transient)
            .saturating_add(peak.grad_bytes),
        peak.total
    );
    let capacity_bytes = w.hardware.memory_bytes();
    let mut notes = method_notes.to_vec();
    if w.outer.pp > 1 {
        let held: Vec<String> = chunks
            .iter()
            .filter(|&&(_, n)| n > 0)
            .map(|&(first, n)| match n {
                1 => format!("{first}"),
                _ => format!("{first}–{}", first + n - 1),
            })
            .collect();
        notes.push(format!(
            "pipeline stage {stage} of {}: layers {}{}{}; activations of {} layer(s) held at the \
             peak ({} micro-batch(es) of {} layer(s) in flight)",
            w.outer.pp,
            held.join(", "),
            if share.embedding { ", embedding" } else { "" },
            if share.head { ", head and loss" } else { "" },
            peak.layers,
            peak.layers.div_ceil(share.layers.max(1)),
            share.layers
        ));
        if let Some(n) = w.uneven_layers_note() {
            notes.push(n);
        }
    }
    if let Some(g) = base.held_grads {
        notes.push(format!(
            "main gradients allocated lazily (PyTorch FSDP2's {}): at the peak those of {} of \
             the stage's {} layer(s) are held",
            match g.lifetime {
                GradLifetime::ToLastBackward => {
                    "unsharded accumulators, from a model chunk's first backward of the step to \
                     its last"
                }
                GradLifetime::ToStepEnd => {
                    "sharded gradients, from a model chunk's first backward of the step to the \
                     optimizer step"
                }
            },
            peak.grad_layers,
            share.layers
        ));
    }
    if w.options.linear_dtype == crate::config::LinearDtype::Fp8 {
        // Time is priced in FP8 (`schedule`'s FP8 pass); memory is not re-counted.
        notes.push(
            "FP8 linear layers: tensors counted as in bf16 — Transformer Engine keeps some \
             saved inputs in FP8 (fewer bytes) and, without FP8 primary weights, an FP8 copy \
             and transpose of each weight (2 bytes per parameter more); neither is modelled"
                .to_string(),
        );
    }
    Inventory {
        stage,
        layers: share.layers,
        in_flight_layers: peak.layers,
        tensors,
        static_bytes,
        held_grads: base.held_grads,
        held_grad_bytes: peak.grad_bytes,
        activation_bytes_per_layer,
        stored_bytes,
        transient_peak_bytes: peak.transient,
        transient_peak_phase: peak.phase,
        reserved_bytes,
        peak_bytes,
        capacity_bytes,
        fits: peak_bytes <= capacity_bytes,
        notes,
    }
}

/// The moment a stage holds most: walking its 1F1B order, a forward adds its chunk's layers
/// (and, on the first virtual stage, the embedding's stored inputs; on the last, the head's),
/// and its last layer runs the forward phases (and the loss) with all of them live; a backward's
/// first layer runs the backward phases before anything is freed. Among equal totals the phase
/// first in [`Phase::ALL`] wins, then the earliest moment (without a pipeline this is the
/// largest transient on top of every layer's activations). Lazily allocated gradients count at
/// the moments that hold them (`in_flight`): a chunk's from its first backward to its last.
fn peak_moment(w: &ValidWorkload, stage: u32, chunks: &[(u64, u64)], base: &Base) -> PeakMoment {
    let (per_layer, emb_each, head_each) = (
        base.activation_bytes_per_layer,
        base.emb_each,
        base.head_each,
    );
    let of = |p: Phase| base.phase_bytes[Phase::ALL.iter().position(|&q| q == p).unwrap_or(0)];
    let mut best: Option<(PeakMoment, usize)> = None;
    let mut consider = |mo: &Moment, phases: &[Phase]| {
        let (layers, emb, head) = (mo.layers, mo.embedding, mo.head);
        let grad_bytes = base.held_grads.map_or(0, |g| {
            g.bytes(mo.grad_layers, mo.grad_embedding, mo.grad_head)
        });
        // Stored activations and any lazily allocated gradients: what the moment holds besides
        // the static tensors and its phase's transients.
        let held = per_layer
            .saturating_mul(layers as u128)
            .saturating_add(emb_each.saturating_mul(emb as u128))
            .saturating_add(head_each.saturating_mul(head as u128))
            .saturating_add(grad_bytes);
        for &ph in phases {
            let rank = Phase::ALL.iter().position(|&q| q == ph).unwrap_or(0);
            let total = held.saturating_add(of(ph));
            let better = match &best {
                None => true,
                Some((b, r)) => total > b.total || (total == b.total && rank < *r),
            };
            if better {
                best = Some((
                    PeakMoment {
                        total,
                        layers,
                        embedding: emb,
                        head,
                        phase: ph,
                        transient: of(ph),
                        grad_bytes,
                        grad_layers: mo.grad_layers,
                    },
                    rank,
                ));
            }
        }
    };
    // The distinct moments of its order (`in_flight`: walked once per pipeline shape).
    let lifetime = base.held_grads.map(|g| g.lifetime);
    for mo in super::in_flight::moments(w, stage, chunks, lifetime).iter() {
        let phases: &[Phase] = match mo.step {
            Step::Forward => &[Phase::FwdAttention, Phase::FwdMlp],
            Step::ForwardWithLoss => &[Phase::FwdAttention, Phase::FwdMlp, Phase::Loss],
            Step::Backward => &[Phase::BwdAttention, Phase::BwdMlp],
        };
        consider(mo, phases);
    }
    best.map(|(b, _)| b).unwrap_or(PeakMoment {
        total: 0,
        layers: 0,
        embedding: 0,
        head: 0,
        phase: Phase::FwdAttention,
        transient: 0,
        grad_bytes: 0,
        grad_layers: 0,
    })
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
