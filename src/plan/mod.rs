//! Capacity planning: the configurations that train a model at a sequence length on N GPUs,
//! ranked by simulated throughput (DESIGN §6, `metp-sim plan`).
//!
//! Input: a [`PlanSpec`] — model, hardware profile, N GPUs, sequence length, global batch,
//! methods. Output: a [`Plan`].
//!
//! 1. **Enumerate.** For every method and every degree p that divides N (dp = N / p replicas;
//!    devices are numbered replica by replica and node by node, so a degree up to the node
//!    size keeps each ring inside a node with data parallelism across nodes, and larger degrees
//!    run the ring across nodes over InfiniBand): recomputation none, selective and full;
//!    micro-batch 1, 2 and 4 where it divides a replica's share of the global batch (the rest
//!    is gradient accumulation; the default global batch is dp, one sequence per replica);
//!    ZeRO stages 0–3; FlashAttention on (and off on request). METP runs with its default
//!    knobs (p head groups, broadcast weights, two receive buffers). The hardware profile's
//!    node count is set to ceil(N / GPUs per node). A ZeRO stage above 0 whose sharding group
//!    is one device (dp = 1 for the methods that shard weights) is the same configuration as
//!    stage 0 and is not enumerated; a recomputation policy that changes neither the memory
//!    inventory nor the step plan of a feasible configuration (METP with FlashAttention
//!    recomputes the attention core anyway: selective = none) is dropped after the policy
//!    before it (both counted in [`Plan::equivalent_skipped`]).
//! 2. **Check.** A degree the model does not allow, a global batch dp does not divide, or a
//!    sequence length that is not a multiple of the method's granule rejects the (method,
//!    degree) pair once, with the reason; every other combination is rejected if its memory
//!    inventory's peak exceeds device memory ([`RejectCategory`]).
//! 3. **Rank.** The closed-form estimate ranks everything that fits; the best
//!    [`PlanSpec::sim_candidates`] of those (default 3 × top) go through the event simulator
//!    ([`sim::simulate_times`], by default extrapolated from 2 and 4 layers — exact to ~10⁻⁵)
//!    and are ranked by simulated tokens per second. Ties, and the order of everything else,
//!    are broken by method (in [`MethodId::ALL`] order), p, dp, recomputation (none, selective,
//!    full), micro-batch, ZeRO stage and FlashAttention (on first), so the same spec gives the
//!    same plan, byte for byte.
//!
//! Depends on `config`, `memory`, `analytic` and `sim`; never on `cli`.

mod sim;

pub use sim::{simulate_times, simulates_whole, SimDepth, SimTimes, EXTRAPOLATION_LAYERS};

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::Serialize;

use crate::analytic;
use crate::config::{Hardware, MethodId, Model, Options, Recompute, Workload, ZeroStage};
use crate::error::{Error, Result};
use crate::memory;
use crate::schedule::{self, StepPlan};
use crate::sim::LinkModel;

/// The most GPUs a plan enumerates over: the simulated graph grows linearly with N (about 0.2 s
/// per candidate per 64 GPUs in release), and beyond this the simulator's memory does too.
pub const MAX_GPUS: u64 = 1024;

/// The largest global batch, in sequences (the closed-form model walks every micro-batch).
pub const MAX_GLOBAL_BATCH: u64 = 1 << 16;

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
#[derive(Debug, Clone)]
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

/// One configuration: method, degree, data parallelism, batch split and memory options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// Method.
    pub method: MethodId,
    /// Degree.
    pub p: u64,
    /// Data-parallel replicas.
    pub dp: u64,
    /// Micro-batch b.
    pub micro_batch: u64,
    /// Micro-batches per replica per step (gradient accumulation).
    pub micro_batches: u64,
    /// Recomputation.
    pub recompute: Recompute,
    /// ZeRO stage (0–3).
    pub zero: u8,
    /// FlashAttention (fused attention kernels).
    pub flash: bool,
}

fn recompute_index(r: Recompute) -> u8 {
    match r {
        Recompute::None => 0,
        Recompute::Selective => 1,
        Recompute::Full => 2,
    }
}

fn zero_stage(z: u8) -> ZeroStage {
    match z {
        0 => ZeroStage::Zero0,
        1 => ZeroStage::Zero1,
        2 => ZeroStage::Zero2,
        _ => ZeroStage::Zero3,
    }
}

fn zero_number(z: ZeroStage) -> u8 {
    match z {
        ZeroStage::Zero0 => 0,
        ZeroStage::Zero1 => 1,
        ZeroStage::Zero2 => 2,
        ZeroStage::Zero3 => 3,
    }
}

impl Candidate {
    /// The tie-break key: method, p, dp, recomputation, micro-batch, ZeRO, flash on first.
    pub fn key(&self) -> (MethodId, u64, u64, u8, u64, u8, bool) {
        (
            self.method,
            self.p,
            self.dp,
            recompute_index(self.recompute),
            self.micro_batch,
            self.zero,
            !self.flash,
        )
    }

    /// The workload of this candidate.
    pub fn workload(&self, spec: &PlanSpec, hardware: &Hardware) -> Workload {
        Workload {
            model: spec.model.clone(),
            hardware: hardware.clone(),
            method: self.method,
            p: self.p,
            dp: self.dp,
            seq: spec.seq,
            micro_batch: self.micro_batch,
            micro_batches: self.micro_batches,
            options: Options {
                flash: self.flash,
                recompute: self.recompute,
                zero: Some(zero_stage(self.zero)),
                ..spec.options
            },
        }
    }

    /// `metp p=8 dp=1 b=1×1 recompute=none zero=0` (and `no-flash` when off).
    pub fn label(&self) -> String {
        format!(
            "{} p={} dp={} b={}×{} recompute={} zero={}{}",
            self.method,
            self.p,
            self.dp,
            self.micro_batch,
            self.micro_batches,
            recompute_name(self.recompute),
            self.zero,
            if self.flash { "" } else { " no-flash" }
        )
    }
}

/// `none`, `selective` or `full`.
pub fn recompute_name(r: Recompute) -> &'static str {
    match r {
        Recompute::None => "none",
        Recompute::Selective => "selective",
        Recompute::Full => "full",
    }
}

/// Why a configuration was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectCategory {
    /// The memory inventory's peak exceeds device memory.
    OutOfMemory,
    /// The sequence length is not a multiple of the method's granule at this degree.
    SeqMultiple,
    /// The global batch is not a multiple of dp.
    GlobalBatch,
    /// The model does not allow this degree for this method (heads, widths not divisible, …).
    InvalidDegree,
    /// Any other reason the workload cannot be built, estimated or simulated.
    Invalid,
}

impl RejectCategory {
    /// Kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            RejectCategory::OutOfMemory => "out-of-memory",
            RejectCategory::SeqMultiple => "seq-multiple",
            RejectCategory::GlobalBatch => "global-batch",
            RejectCategory::InvalidDegree => "invalid-degree",
            RejectCategory::Invalid => "invalid",
        }
    }
}

/// A rejected configuration. Rejections of a (method, degree) pair as a whole (degree, global
/// batch, sequence granule) leave the per-combination fields empty.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    /// Method.
    pub method: MethodId,
    /// Degree.
    pub p: u64,
    /// Data-parallel replicas.
    pub dp: u64,
    /// Micro-batch.
    pub micro_batch: Option<u64>,
    /// Micro-batches per replica.
    pub micro_batches: Option<u64>,
    /// Recomputation.
    pub recompute: Option<Recompute>,
    /// ZeRO stage.
    pub zero: Option<u8>,
    /// FlashAttention.
    pub flash: Option<bool>,
    /// Category.
    pub category: RejectCategory,
    /// The reason, in words.
    pub reason: String,
    /// Peak bytes per device, when the inventory could be built.
    pub peak_bytes: Option<u128>,
}

impl Rejection {
    fn pair(method: MethodId, p: u64, dp: u64, category: RejectCategory, reason: String) -> Self {
        Rejection {
            method,
            p,
            dp,
            micro_batch: None,
            micro_batches: None,
            recompute: None,
            zero: None,
            flash: None,
            category,
            reason,
            peak_bytes: None,
        }
    }

    fn of(c: &Candidate, category: RejectCategory, reason: String, peak: Option<u128>) -> Self {
        Rejection {
            method: c.method,
            p: c.p,
            dp: c.dp,
            micro_batch: Some(c.micro_batch),
            micro_batches: Some(c.micro_batches),
            recompute: Some(c.recompute),
            zero: Some(c.zero),
            flash: Some(c.flash),
            category,
            reason,
            peak_bytes: peak,
        }
    }

    /// `metp p=8 dp=1 …` as far as the rejection names it.
    pub fn label(&self) -> String {
        match (
            self.micro_batch,
            self.micro_batches,
            self.recompute,
            self.zero,
        ) {
            (Some(b), Some(n), Some(r), Some(z)) => Candidate {
                method: self.method,
                p: self.p,
                dp: self.dp,
                micro_batch: b,
                micro_batches: n,
                recompute: r,
                zero: z,
                flash: self.flash.unwrap_or(true),
            }
            .label(),
            _ => format!("{} p={} dp={}", self.method, self.p, self.dp),
        }
    }

    /// Output order: by category, out-of-memory nearest misses first, then the tie-break key.
    fn sort_key(&self) -> impl Ord {
        (
            self.category,
            self.peak_bytes.unwrap_or(0),
            self.method,
            self.p,
            self.dp,
            self.recompute.map(recompute_index),
            self.micro_batch,
            self.zero,
            self.flash.map(|f| !f),
        )
    }
}

/// A feasible configuration with its times and memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranked {
    /// 1-based rank (by simulated tokens per second).
    pub rank: usize,
    /// The configuration.
    #[serde(flatten)]
    pub candidate: Candidate,
    /// Simulated step time.
    pub step_time_s: f64,
    /// Tokens per second over all N GPUs (simulated).
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation (simulated).
    pub mfu: f64,
    /// Peak bytes per device (memory inventory).
    pub peak_bytes: u128,
    /// Device memory.
    pub capacity_bytes: u128,
    /// `capacity − peak`.
    pub headroom_bytes: u128,
    /// Headroom as a share of device memory.
    pub headroom_fraction: f64,
    /// Exposed communication on the critical device (simulated).
    pub exposed_communication_s: f64,
    /// Exposed communication as a share of the step.
    pub exposed_share: f64,
    /// Compute busy time on the critical device (simulated).
    pub compute_s: f64,
    /// Communication busy time on the critical device (simulated).
    pub communication_s: f64,
    /// The closed-form model's step time.
    pub analytic_step_time_s: f64,
    /// The closed-form model's tokens per second.
    pub analytic_tokens_per_s: f64,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// GPUs.
    pub gpus: u64,
    /// Nodes (ceil(gpus / gpus_per_node)).
    pub nodes: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// Sequence length.
    pub seq: u64,
    /// Global batch in sequences; `None`: dp, one sequence per replica.
    pub global_batch: Option<u64>,
    /// Methods considered.
    pub methods: Vec<MethodId>,
    /// Causal attention.
    pub causal: bool,
    /// Link model of the simulator, as on the command line: `ideal` or `maxmin`.
    pub link_model: &'static str,
    /// Whole-model simulation or extrapolation.
    pub sim_depth: SimDepth,
    /// Layers simulated: the model's, or the two of the extrapolation.
    pub sim_layers: Vec<u64>,
    /// Combinations whose memory inventory was built (after the pair checks).
    pub evaluated: usize,
    /// Combinations left out because an earlier one (in tie-break order) is the same
    /// configuration: a ZeRO stage > 0 over a one-device group, or a recomputation policy that
    /// changes neither the tensors nor the step plan (METP with FlashAttention: selective =
    /// none).
    pub equivalent_skipped: usize,
    /// Combinations that fit.
    pub feasible: usize,
    /// Feasible combinations run through the simulator.
    pub simulated: usize,
    /// The best `top`, by simulated tokens per second.
    pub ranked: Vec<Ranked>,
    /// Rejections per category (entries, not combinations: a pair-level rejection is one).
    pub rejected_by_reason: BTreeMap<&'static str, usize>,
    /// All rejections.
    pub rejected_total: usize,
    /// Rejections, ordered by category (nearest out-of-memory misses first); possibly
    /// truncated ([`Plan::truncate_rejected`]).
    pub rejected: Vec<Rejection>,
    /// Rejections left out of `rejected`.
    pub rejected_omitted: usize,
    /// Why the list is empty, when it is.
    pub message: Option<String>,
}

impl Plan {
    /// Keeps the first `max` rejections (the counts stay).
    pub fn truncate_rejected(&mut self, max: usize) {
        if self.rejected.len() > max {
            self.rejected_omitted += self.rejected.len() - max;
            self.rejected.truncate(max);
        }
    }
}

struct Feasible {
    c: Candidate,
    inv: memory::Inventory,
    plan: StepPlan,
    est: analytic::Estimate,
}

enum Outcome {
    Feasible(Box<Feasible>),
    Rejected(Rejection),
}

fn gib(b: u128) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn evaluate(c: Candidate, spec: &PlanSpec, hw: &Hardware) -> Outcome {
    let w = c.workload(spec, hw);
    let inv = match memory::inventory(&w) {
        Ok(inv) => inv,
        Err(e) => {
            return Outcome::Rejected(Rejection::of(
                &c,
                RejectCategory::Invalid,
                e.to_string(),
                None,
            ))
        }
    };
    if !inv.fits {
        let reason = format!(
            "out of memory: peak {:.2} GiB > capacity {:.2} GiB (static {:.2}, stored {:.2}, \
             transient {:.2}, reserved {:.2} GiB)",
            gib(inv.peak_bytes),
            gib(inv.capacity_bytes),
            gib(inv.static_bytes),
            gib(inv.stored_bytes),
            gib(inv.transient_peak_bytes),
            gib(inv.reserved_bytes),
        );
        return Outcome::Rejected(Rejection::of(
            &c,
            RejectCategory::OutOfMemory,
            reason,
            Some(inv.peak_bytes),
        ));
    }
    match schedule::plan(&w) {
        Ok(plan) => {
            let est = analytic::price(&w, &plan, inv.peak_bytes);
            Outcome::Feasible(Box::new(Feasible { c, inv, plan, est }))
        }
        Err(e) => Outcome::Rejected(Rejection::of(
            &c,
            RejectCategory::Invalid,
            e.to_string(),
            Some(inv.peak_bytes),
        )),
    }
}

/// The enumeration of step 1 and the pair-level checks of step 2: the combinations to evaluate,
/// the pair-level rejections, and the number of ZeRO stages skipped as equivalent to 0.
pub fn enumerate(spec: &PlanSpec) -> Result<(Vec<Candidate>, Vec<Rejection>, usize)> {
    spec.check()?;
    let n = spec.gpus;
    let mut out = Vec::new();
    let mut rejected = Vec::new();
    let mut skipped = 0;
    let flashes: &[bool] = if spec.include_no_flash {
        &[true, false]
    } else {
        &[true]
    };
    for &method in &spec.methods {
        for p in (1..=n).filter(|p| n.is_multiple_of(*p)) {
            let dp = n / p;
            if let Err(reason) = memory::check_degree(method, &spec.model, p, &spec.options) {
                rejected.push(Rejection::pair(
                    method,
                    p,
                    dp,
                    RejectCategory::InvalidDegree,
                    reason,
                ));
                continue;
            }
            let share = match spec.global_batch {
                None => 1,
                Some(g) if g.is_multiple_of(dp) => g / dp,
                Some(g) => {
                    rejected.push(Rejection::pair(
                        method,
                        p,
                        dp,
                        RejectCategory::GlobalBatch,
                        format!("global batch {g} is not a multiple of dp = {dp}"),
                    ));
                    continue;
                }
            };
            for &flash in flashes {
                let options = Options {
                    flash,
                    ..spec.options
                };
                let multiple = memory::seq_multiple(method, &spec.model, p, &options);
                if !spec.seq.is_multiple_of(multiple) {
                    let mut r = Rejection::pair(
                        method,
                        p,
                        dp,
                        RejectCategory::SeqMultiple,
                        format!(
                            "sequence length {} is not a multiple of {multiple} ({method} at \
                             p = {p})",
                            spec.seq
                        ),
                    );
                    if spec.include_no_flash {
                        r.flash = Some(flash);
                    }
                    rejected.push(r);
                    continue;
                }
                // The group ZeRO shards over (memory::params): the dp replicas for the methods
                // that shard weights, all p·dp devices for those that replicate them.
                let zero_group = if method.shards_weights() { dp } else { dp * p };
                for recompute in RECOMPUTE {
                    for b in MICRO_BATCHES
                        .into_iter()
                        .filter(|b| share.is_multiple_of(*b))
                    {
                        for z in ZERO {
                            if z != ZeroStage::Zero0 && zero_group == 1 {
                                skipped += 1;
                                continue;
                            }
                            out.push(Candidate {
                                method,
                                p,
                                dp,
                                micro_batch: b,
                                micro_batches: share / b,
                                recompute,
                                zero: zero_number(z),
                                flash,
                            });
                        }
                    }
                }
            }
        }
    }
    Ok((out, rejected, skipped))
}

/// Plans: enumerate, check memory, rank analytically, simulate the best, rank by simulation.
pub fn plan(spec: &PlanSpec) -> Result<Plan> {
    let (candidates, mut rejected, equivalent_skipped) = enumerate(spec)?;
    let mut hw = spec.hardware.clone();
    hw.nodes = spec.nodes();
    let outcomes: Vec<Outcome> = candidates
        .par_iter()
        .map(|&c| evaluate(c, spec, &hw))
        .collect();
    let mut fits = Vec::new();
    for o in outcomes {
        match o {
            Outcome::Feasible(f) => fits.push(*f),
            Outcome::Rejected(r) => rejected.push(r),
        }
    }
    // A recomputation policy the method does not act on (METP recomputes Q, K, V and, with
    // FlashAttention, the attention core anyway) gives the same tensors and the same step plan
    // as the policy before it: keep the first only.
    fits.sort_by_key(|f| f.c.key());
    let mut feasible: Vec<Feasible> = Vec::with_capacity(fits.len());
    let mut groups: BTreeMap<_, Vec<usize>> = BTreeMap::new();
    let mut equivalent_skipped = equivalent_skipped;
    for f in fits {
        let c = &f.c;
        let group = (c.method, c.p, c.dp, c.micro_batch, c.zero, c.flash);
        let members = groups.entry(group).or_default();
        let same = members.iter().any(|&i| {
            let g = &feasible[i];
            g.inv.tensors == f.inv.tensors && g.plan == f.plan
        });
        if same {
            equivalent_skipped += 1;
        } else {
            members.push(feasible.len());
            feasible.push(f);
        }
    }
    let n_feasible = feasible.len();
    feasible.sort_by(|a, b| {
        b.est
            .tokens_per_s
            .total_cmp(&a.est.tokens_per_s)
            .then_with(|| a.c.key().cmp(&b.c.key()))
    });
    let pool = spec.sim_candidates.unwrap_or(3 * spec.top).max(spec.top);
    feasible.truncate(pool);
    let simulated: Vec<_> = feasible
        .par_iter()
        .map(|f| {
            let w = f.c.workload(spec, &hw);
            (f, simulate_times(&w, spec.link_model, spec.sim_depth))
        })
        .collect();
    let mut ranked = Vec::new();
    for (f, times) in simulated {
        let (c, inv, est) = (&f.c, &f.inv, &f.est);
        let t = match times {
            Ok(t) => t,
            Err(e) => {
                rejected.push(Rejection::of(
                    c,
                    RejectCategory::Invalid,
                    format!("simulation failed: {e}"),
                    Some(inv.peak_bytes),
                ));
                continue;
            }
        };
        let w = c.workload(spec, &hw);
        let tokens = (w.seq * w.micro_batch * w.micro_batches * w.dp) as f64;
        let step = t.step_time_s;
        let headroom = inv.capacity_bytes.saturating_sub(inv.peak_bytes);
        ranked.push(Ranked {
            rank: 0,
            candidate: *c,
            step_time_s: step,
            tokens_per_s: tokens / step,
            mfu: analytic::model_flops(&w)
                / (step * hw.gpu.peak_bf16_flops_per_s.value * (w.p * w.dp) as f64),
            peak_bytes: inv.peak_bytes,
            capacity_bytes: inv.capacity_bytes,
            headroom_bytes: headroom,
            headroom_fraction: headroom as f64 / inv.capacity_bytes as f64,
            exposed_communication_s: t.exposed_communication_s,
            exposed_share: t.exposed_communication_s / step,
            compute_s: t.compute_s,
            communication_s: t.communication_s,
            analytic_step_time_s: est.step_time_s,
            analytic_tokens_per_s: est.tokens_per_s,
        });
    }
    let n_simulated = ranked.len();
    ranked.sort_by(|a, b| {
        b.tokens_per_s
            .total_cmp(&a.tokens_per_s)
            .then_with(|| a.candidate.key().cmp(&b.candidate.key()))
    });
    ranked.truncate(spec.top);
    for (i, r) in ranked.iter_mut().enumerate() {
        r.rank = i + 1;
    }
    rejected.sort_by_key(|r| r.sort_key());
    let mut by_reason = BTreeMap::new();
    for r in &rejected {
        *by_reason.entry(r.category.name()).or_insert(0) += 1;
    }
    let message = if n_feasible == 0 {
        Some(format!(
            "no configuration of {} fits {} GPU(s) of {} at s = {}: all {} rejected (reasons \
             below); try more GPUs or a shorter sequence",
            spec.model.name,
            spec.gpus,
            hw.name,
            spec.seq,
            rejected.len()
        ))
    } else if ranked.is_empty() {
        Some("every simulated configuration failed in the simulator (reasons below)".into())
    } else {
        None
    };
    let whole = simulates_whole(spec.model.layers, spec.sim_depth);
    let (sim_depth, sim_layers) = if whole {
        (SimDepth::Full, vec![spec.model.layers])
    } else {
        (
            SimDepth::Extrapolate,
            vec![EXTRAPOLATION_LAYERS.0, EXTRAPOLATION_LAYERS.1],
        )
    };
    Ok(Plan {
        model: spec.model.name.clone(),
        hardware: hw.name.clone(),
        gpus: spec.gpus,
        nodes: hw.nodes,
        gpus_per_node: hw.gpus_per_node,
        seq: spec.seq,
        global_batch: spec.global_batch,
        methods: spec.methods.clone(),
        causal: spec.options.causal,
        link_model: match spec.link_model {
            LinkModel::Ideal => "ideal",
            LinkModel::MaxMin => "maxmin",
        },
        sim_depth,
        sim_layers,
        evaluated: candidates.len(),
        equivalent_skipped,
        feasible: n_feasible,
        simulated: n_simulated,
        ranked,
        rejected_total: rejected.len(),
        rejected_by_reason: by_reason,
        rejected,
        rejected_omitted: 0,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_hardware, load_model};

    fn spec(model: &str, gpus: u64, seq: u64) -> PlanSpec {
        PlanSpec::new(
            load_model(model).unwrap(),
            load_hardware("dgx-a100-80gb").unwrap(),
            gpus,
            seq,
        )
    }

    #[test]
    fn enumeration_covers_divisors_stages_and_batch_splits() {
        let mut s = spec("llama2-7b", 8, 32768);
        s.methods = vec![MethodId::Metp, MethodId::Ring];
        let (cands, rejected, skipped) = enumerate(&s).unwrap();
        assert!(rejected.is_empty(), "{rejected:?}");
        let mut degrees: Vec<u64> = cands.iter().map(|c| c.p).collect();
        degrees.sort();
        degrees.dedup();
        assert_eq!(degrees, [1, 2, 4, 8]);
        // Default global batch = dp: one sequence per replica, micro-batch 1.
        assert!(cands
            .iter()
            .all(|c| c.micro_batch == 1 && c.micro_batches == 1 && c.p * c.dp == 8));
        // METP at p = 8 (dp = 1) shards over a one-device ZeRO group: stage 0 only (3 skipped
        // per recompute policy); ring replicates weights, so ZeRO shards over its 8 devices.
        let stages = |m: MethodId, p: u64| {
            let mut z: Vec<u8> = cands
                .iter()
                .filter(|c| c.method == m && c.p == p)
                .map(|c| c.zero)
                .collect();
            z.sort();
            z.dedup();
            z
        };
        assert_eq!(stages(MethodId::Metp, 8), [0]);
        assert_eq!(stages(MethodId::Metp, 4), [0, 1, 2, 3]);
        assert_eq!(stages(MethodId::Ring, 8), [0, 1, 2, 3]);
        assert_eq!(skipped, 3 * RECOMPUTE.len());
        // 2 methods × 4 degrees × 3 policies × 4 stages, less the skipped.
        assert_eq!(cands.len(), 2 * 4 * 3 * 4 - skipped);
    }

    /// The planner sits below the command line (DESIGN §3).
    #[test]
    fn does_not_depend_on_the_cli() {
        for (file, src) in [
            ("mod.rs", include_str!("mod.rs")),
            ("sim.rs", include_str!("sim.rs")),
        ] {
            // The code above the tests only.
            let code = src.split("#[cfg(test)]").next().unwrap_or(src);
            for path in ["crate::cli", "metp_sim::cli", "clap::"] {
                let hit = code
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .any(|l| l.contains(path));
                assert!(!hit, "src/plan/{file} uses {path}");
            }
        }
    }

    #[test]
    fn flash_off_only_on_request() {
        let mut s = spec("llama2-7b", 2, 4096);
        assert!(enumerate(&s).unwrap().0.iter().all(|c| c.flash));
        s.include_no_flash = true;
        assert!(enumerate(&s).unwrap().0.iter().any(|c| !c.flash));
    }

    /// A small plan end to end: METP's selective recomputation (a no-op with FlashAttention) is
    /// folded into `none`, and the list is ordered by tokens/s, then by the tie-break key.
    #[test]
    fn ranks_by_tokens_then_key_without_equivalent_duplicates() {
        let mut s = spec("gpt3-1.3b", 4, 16384);
        s.methods = vec![MethodId::Metp, MethodId::TpSp];
        s.top = 100;
        s.sim_candidates = Some(100);
        let p = plan(&s).unwrap();
        assert!(p.feasible > 0 && p.ranked.len() == p.feasible.min(100));
        assert!(p.equivalent_skipped > 0);
        assert!(
            !p.ranked.iter().any(|r| r.candidate.method == MethodId::Metp
                && r.candidate.recompute == Recompute::Selective)
        );
        for w in p.ranked.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            assert!(
                a.tokens_per_s > b.tokens_per_s
                    || (a.tokens_per_s == b.tokens_per_s && a.candidate.key() < b.candidate.key())
            );
            assert_eq!(a.rank + 1, b.rank);
        }
        assert!(p
            .ranked
            .iter()
            .all(|r| r.peak_bytes + r.headroom_bytes == r.capacity_bytes));
    }
}
