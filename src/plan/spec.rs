//! What to plan: the model, the cluster, the sequence and the search limits.

use super::SimDepth;
use crate::config::{limits, Hardware, MethodId, Model, Options, Recompute, ZeroStage};
use crate::error::{Error, Result};
use crate::sim::LinkModel;

/// The most GPUs a plan enumerates over (`config::limits::MAX_PLAN_GPUS`).
pub const MAX_GPUS: u64 = limits::MAX_PLAN_GPUS;

/// The largest global batch, in sequences (`config::limits::MAX_GLOBAL_BATCH`).
pub const MAX_GLOBAL_BATCH: u64 = limits::MAX_GLOBAL_BATCH;

/// The most context-parallel ranks the planner tries (tp-sp only).
pub const MAX_CP: u64 = 64;
/// The most pipeline stages the planner tries.
pub const MAX_PP: u64 = 64;
/// Virtual stages per pipeline stage tried (Megatron's interleaved 1F1B).
pub const INTERLEAVES: [u64; 2] = [1, 2];
/// Micro-batch sizes tried.
pub const MICRO_BATCHES: [u64; 3] = [1, 2, 4];

/// Recomputation policies tried, in tie-break order.
pub const RECOMPUTE: [Recompute; 3] = [Recompute::None, Recompute::Selective, Recompute::Full];

/// ZeRO stages tried, in tie-break order.
pub const ZERO: [ZeroStage; 4] = [
    ZeroStage::Zero0,
    ZeroStage::Zero1,
    ZeroStage::Zero2,
    ZeroStage::Zero3,
];

/// What to plan.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlanSpec {
    /// The model.
    pub model: Model,
    /// The hardware profile; its `nodes` is replaced by ceil(gpus / gpus_per_node).
    pub hardware: Hardware,
    /// GPUs to use, N ≥ 1.
    pub gpus: u64,
    /// Sequence length.
    pub seq: u64,
    /// Sequences per step over all replicas; `None` = dp (one sequence per replica).
    pub global_batch: Option<u64>,
    /// Methods to consider.
    pub methods: Vec<MethodId>,
    /// How many ranked configurations to return.
    pub top: usize,
    /// How many of the analytically best go through the simulator; `None` = 3 × top.
    pub sim_candidates: Option<usize>,
    /// Also try unfused attention (FlashAttention off).
    pub include_no_flash: bool,
    /// Options every candidate shares (causal masking and its order, dropout, vocabulary
    /// parallelism, METP knobs); flash, recompute and zero are set per candidate.
    pub options: Options,
    /// Link model of the simulator.
    pub link_model: LinkModel,
    /// Whole-model simulation or extrapolation from shortened models.
    pub sim_depth: SimDepth,
    /// Also try pipeline stages, interleaving and (for tp-sp) context parallelism; off, only
    /// method × p × dp as before.
    pub outer_axes: bool,
}

impl PlanSpec {
    /// A spec with the defaults: all methods, top 10, FlashAttention only, default options,
    /// max-min fair links, extrapolated simulation.
    pub fn new(model: Model, hardware: Hardware, gpus: u64, seq: u64) -> PlanSpec {
        PlanSpec {
            model,
            hardware,
            gpus,
            seq,
            global_batch: None,
            methods: MethodId::ALL.to_vec(),
            top: 10,
            sim_candidates: None,
            include_no_flash: false,
            options: Options::default(),
            link_model: LinkModel::MaxMin,
            sim_depth: SimDepth::Extrapolate,
            outer_axes: true,
        }
    }

    /// Checks the spec: N in 1..=[`MAX_GPUS`], positive sizes, a global batch up to
    /// [`MAX_GLOBAL_BATCH`], at least one method. Usage errors (exit 2).
    pub fn check(&self) -> Result<()> {
        if self.gpus == 0 {
            return Err(Error::arg("--gpus", "must be at least 1"));
        }
        if self.gpus > MAX_GPUS {
            return Err(Error::arg(
                "--gpus",
                format!(
                    "{} is more than the planner handles ({MAX_GPUS})",
                    self.gpus
                ),
            ));
        }
        if self.seq == 0 {
            return Err(Error::arg("--seq", "must be positive"));
        }
        if self.seq > limits::MAX_SEQ {
            return Err(Error::arg(
                "--seq",
                format!(
                    "{} is longer than the longest sequence the tool models ({}, \
                     config::limits)",
                    self.seq,
                    limits::MAX_SEQ
                ),
            ));
        }
        match self.global_batch {
            Some(0) => return Err(Error::arg("--global-batch", "must be positive")),
            Some(g) if g > MAX_GLOBAL_BATCH => {
                return Err(Error::arg(
                    "--global-batch",
                    format!("{g} is more than the planner handles ({MAX_GLOBAL_BATCH})"),
                ))
            }
            _ => {}
        }
        if self.methods.is_empty() {
            return Err(Error::arg("--methods", "no method given"));
        }
        if self.top == 0 {
            return Err(Error::arg("--top", "must be at least 1"));
        }
        if self.sim_candidates == Some(0) {
            return Err(Error::arg("--sim-candidates", "must be at least 1"));
        }
        Ok(())
    }

    /// Nodes needed for N GPUs.
    pub fn nodes(&self) -> u64 {
        self.gpus.div_ceil(self.hardware.gpus_per_node.max(1))
    }
}
