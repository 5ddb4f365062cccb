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
/// The most virtual stages per pipeline stage the planner tries (Megatron's interleaved 1F1B:
/// every count that divides the layers of a stage, up to this).
pub const MAX_INTERLEAVE: u64 = 16;
/// Micro-batch sizes tried.
pub const MICRO_BATCHES: [u64; 3] = [1, 2, 4];
/// Tokens per step the default global batch aims at (about 4M, as GPT-3, LLaMA 2 and their
/// peers train; LLaMA 3 405B used 16M): [`PlanSpec::global_batch_or_default`].
pub const DEFAULT_BATCH_TOKENS: u64 = 1 << 22;

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
    /// Sequences per step over all replicas, shared by every configuration; `None`: the
    /// default, about [`DEFAULT_BATCH_TOKENS`] tokens ([`PlanSpec::global_batch_or_default`]).
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
    /// Axes the user fixed: each restricts the search to its values.
    #[serde(default)]
    pub constraints: Constraints,
    /// Tokens to train, for the time and cost of the whole run.
    #[serde(default)]
    pub tokens: Option<f64>,
    /// Price of one GPU-hour, for the cost of the whole run.
    #[serde(default)]
    pub gpu_hour_price: Option<f64>,
}

/// Values the user fixed for the axes of the search (`--p 8`, `--pp 8,16`, …); `None`: the
/// planner's own range.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Constraints {
    /// Degrees p.
    pub p: Option<Vec<u64>>,
    /// Context-parallel ranks (tp-sp).
    pub cp: Option<Vec<u64>>,
    /// Pipeline stages.
    pub pp: Option<Vec<u64>>,
    /// Virtual stages per pipeline stage.
    pub interleave: Option<Vec<u64>>,
    /// Data-parallel replicas.
    pub dp: Option<Vec<u64>>,
    /// Micro-batch sizes.
    pub micro_batch: Option<Vec<u64>>,
    /// Recomputation policies.
    pub recompute: Option<Vec<Recompute>>,
    /// ZeRO stages.
    pub zero: Option<Vec<u8>>,
}

impl Constraints {
    /// Whether `x` is allowed by `list` (any value without one).
    pub fn allows<T: PartialEq>(list: &Option<Vec<T>>, x: &T) -> bool {
        list.as_ref().is_none_or(|l| l.contains(x))
    }

    /// `--p 8 --pp 16` as text (the axes fixed), for headers; empty when none is.
    pub fn describe(&self) -> String {
        fn list<T: std::fmt::Display>(name: &str, l: &Option<Vec<T>>) -> Option<String> {
            l.as_ref().map(|v| {
                let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
                format!("{name} {}", items.join(","))
            })
        }
        let rec = self.recompute.as_ref().map(|v| {
            let items: Vec<&str> = v.iter().map(|&r| super::recompute_name(r)).collect();
            format!("recompute {}", items.join(","))
        });
        [
            list("p", &self.p),
            list("cp", &self.cp),
            list("pp", &self.pp),
            list("v", &self.interleave),
            list("dp", &self.dp),
            list("b", &self.micro_batch),
            rec,
            list("zero", &self.zero),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    }
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
            constraints: Constraints::default(),
            tokens: None,
            gpu_hour_price: None,
        }
    }

    /// The global batch every configuration trains, in sequences: the one given, or about
    /// [`DEFAULT_BATCH_TOKENS`] tokens — the power of two nearest 2^22 / s, at least 1.
    pub fn global_batch_or_default(&self) -> u64 {
        self.global_batch
            .unwrap_or_else(|| default_global_batch(self.seq))
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
        // The overlap is a tp-sp schedule; asked for without a tp-sp candidate it would change
        // nothing while the header said it did.
        if self.options.tp_comm_overlap && !self.methods.contains(&MethodId::TpSp) {
            return Err(Error::arg(
                "--tp-comm-overlap",
                "overlaps tp-sp's collectives, and --methods has no tp-sp",
            ));
        }
        // FP8 on a profile without FP8 tensor cores would refuse every candidate one by one.
        if let Some(why) = self.hardware.refuses(self.options.linear_dtype) {
            return Err(Error::arg("--linear-dtype", why));
        }
        if self.top == 0 {
            return Err(Error::arg("--top", "must be at least 1"));
        }
        if self.sim_candidates == Some(0) {
            return Err(Error::arg("--sim-candidates", "must be at least 1"));
        }
        let c = &self.constraints;
        for (flag, list) in [
            ("--p", &c.p),
            ("--cp", &c.cp),
            ("--pp", &c.pp),
            ("--dp", &c.dp),
            ("--pp-interleave", &c.interleave),
            ("--micro-batch", &c.micro_batch),
        ] {
            let Some(list) = list else { continue };
            if list.is_empty() {
                return Err(Error::arg(flag, "no value given"));
            }
            if let Some(x) = list.iter().find(|&&x| x == 0) {
                return Err(Error::arg(flag, format!("{x}: must be at least 1")));
            }
            // The axes that split the GPUs must divide them.
            if matches!(flag, "--p" | "--cp" | "--pp" | "--dp") {
                if let Some(x) = list.iter().find(|&&x| !self.gpus.is_multiple_of(x)) {
                    return Err(Error::arg(
                        flag,
                        format!("{x} does not divide the {} GPUs", self.gpus),
                    ));
                }
            }
        }
        if let Some(z) = c.zero.as_ref().and_then(|l| l.iter().find(|&&z| z > 3)) {
            return Err(Error::arg("--zero", format!("{z}: ZeRO stages are 0 to 3")));
        }
        if let Some(t) = self.tokens {
            if !(t.is_finite() && t > 0.0 && t <= 1e18) {
                return Err(Error::arg(
                    "--tokens",
                    format!("{t}: must be a positive count of at most 1e18"),
                ));
            }
        }
        if let Some(price) = self.gpu_hour_price {
            if !(price.is_finite() && (0.0..=1e6).contains(&price)) {
                return Err(Error::arg(
                    "--gpu-hour-price",
                    format!("{price}: must be a price from 0 to 1e6 per GPU-hour"),
                ));
            }
        }
        Ok(())
    }

    /// Nodes needed for N GPUs.
    pub fn nodes(&self) -> u64 {
        self.gpus.div_ceil(self.hardware.gpus_per_node.max(1))
    }
}

/// About [`DEFAULT_BATCH_TOKENS`] tokens of sequences of `seq` tokens: the power of two nearest
/// 2^22 / s (on a log scale), at least 1.
pub fn default_global_batch(seq: u64) -> u64 {
    let seq = seq.max(1) as f64;
    let exp = (DEFAULT_BATCH_TOKENS as f64 / seq).log2().round();
    if exp <= 0.0 {
        1
    } else {
        1u64 << (exp as u32).min(16)
    }
}
