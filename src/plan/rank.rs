//! Ranking: every candidate's memory and closed-form estimate, the best simulated, ranked by
//! simulated tokens per second.
//!
//! A plan runs as one or more parts ([`plan_part`]; `--shard K/N`) joined by [`merge`](super::merge). Every
//! part prices every candidate in closed form (cheap: 13,000 configurations in about 2 s) and so
//! finds the same best `pool` ([`PlanSpec::sim_candidates`]) the whole plan simulates; part K
//! of N simulates the ones [`Shard::owners`] deals it. The simulations are what takes a plan
//! long (a pipelined candidate walks all its micro-batches), so they are what is split; each
//! is run once, by one part. Merge checks that the parts agree on the counts and the pool and
//! that every pooled candidate was simulated exactly once, then ranks: no simulation, and the
//! plan one run gives, byte for byte. Part 0 carries the rejections. One part
//! ([`Shard::WHOLE`]) is the plan itself. (A split of the candidates instead, each part
//! simulating its own best, was measured 2–3 times slower than one run: the parts' own best
//! hold costly candidates the plan never ranks.)

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::compare::Comparison;
use super::heaviest::map_heaviest_first;
use super::{enumerate, Candidate, PlanSpec, RejectCategory, Rejection};
use crate::config::{Hardware, MethodId, Recompute};
use crate::error::Result;
use crate::evaluate::{Evaluation, SimDepth, SimulateOptions, Training};
use crate::memory;
use crate::shard::Shard;

/// How a ranked configuration's step was simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Simulation {
    /// Every layer and micro-batch, or a shortened copy where the rest was proven to repeat it
    /// exactly: the simulator's own numbers.
    Exact,
    /// Composed from its distinct op programs, each simulated once (the fast path for steps
    /// too large to simulate exactly; within 1–3% of the whole simulation).
    Composed,
}

impl Simulation {
    /// `exact` or `composed`.
    pub fn name(self) -> &'static str {
        match self {
            Simulation::Exact => "exact",
            Simulation::Composed => "composed",
        }
    }
}

/// A feasible configuration with its times and memory (its columns: `report::RANKED`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    /// 1-based rank (by simulated tokens per second).
    pub rank: usize,
    /// The configuration.
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
    /// Whether it fits (always, for a ranked configuration: the ones that do not are
    /// rejected as out of memory).
    pub fits: bool,
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
    /// Idle time on the critical device: `step − compute − exposed` (the pipeline bubble and
    /// waiting for other devices).
    pub bubble_s: f64,
    /// The part of `compute_s` that recomputes the forward (≈: the compute time times the share
    /// of the layers' FLOPs the recomputation adds).
    pub recompute_s: f64,
    /// How the step was simulated.
    pub simulation: Simulation,
    /// The whole run's time and cost, when the plan was given the tokens to train.
    pub training: Option<Training>,
}

/// The answer (rendered by `report::plan_table`, `plan_csv`, `plan_json`).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// The fused attention implementation the candidates run (`--attention-kernel`).
    pub attention_kernel: &'static str,
    /// What of the profile's kernel model is a placeholder (`config::attention`).
    pub kernel_placeholder: Option<String>,
    /// The fraction of the calibrated clock a step's GEMMs run at, where the profile has one
    /// (`kernels.gemm.step_clock_fraction`).
    pub gemm_step_clock_fraction: Option<f64>,
    /// How that clock spreads from GPU to GPU (`kernels.gemm.fleet_clock_spread`): each
    /// candidate's GEMMs run at its slowest GPU's clock.
    pub fleet_clock_spread: Option<f64>,
    /// The dtype of every candidate's gradients (`--grad-dtype`).
    pub grad_dtype: &'static str,
    /// The dtype of every candidate's optimizer state (`--optimizer-dtype`).
    pub optimizer_dtype: &'static str,
    /// How every candidate accumulates its gradients (`--grad-accumulation`).
    pub grad_accumulation: &'static str,
    /// Whether tp-sp candidates overlap their collectives with the GEMMs (`--tp-comm-overlap`).
    pub tp_comm_overlap: bool,
    /// Where not the defaults: how every candidate's layers run their memory-bound passes
    /// (`--layer-ops`), how ZeRO-3 candidates' gathered weights become the parameters
    /// (`--zero3-gather`), when ZeRO 1 and 2 candidates all-gather their updated weights
    /// (`--param-gather`).
    pub shown: crate::config::Shown,
    /// GPUs.
    pub gpus: u64,
    /// Nodes (ceil(gpus / gpus_per_node)).
    pub nodes: u64,
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// Sequence length.
    pub seq: u64,
    /// Global batch in sequences, every configuration's.
    pub global_batch: u64,
    /// Whether it is the default (about 4M tokens), not given.
    pub global_batch_default: bool,
    /// The axes the user fixed, in words (empty: none).
    pub constraints: String,
    /// Tokens to train, when given.
    pub tokens: Option<f64>,
    /// Price of one GPU-hour, when given.
    pub gpu_hour_price: Option<f64>,
    /// Methods considered.
    pub methods: Vec<MethodId>,
    /// Causal attention.
    pub causal: bool,
    /// Link model of the simulator, as on the command line: `ideal` or `maxmin`.
    pub link_model: &'static str,
    /// Exact simulation ([`SimDepth::Periodic`], `--full-sim`) or the fast path.
    pub sim_depth: SimDepth,
    /// The model's layers (every one is accounted for, exactly or composed).
    pub sim_layers: Vec<u64>,
    /// Ranked configurations simulated exactly, and composed from their programs.
    pub simulated_exact: usize,
    /// See `simulated_exact`.
    pub simulated_composed: usize,
    /// What separates the best from the next, when there are two.
    pub comparison: Option<Comparison>,
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

impl Ranked {
    /// The row of a simulated candidate (rank set later).
    fn new(candidate: Candidate, e: &Evaluation, spec: &PlanSpec) -> Ranked {
        let m = &e.metrics;
        let analytic = e.analytic_metrics();
        let simulation = match e.simulation.as_ref().map(|s| s.depth) {
            Some(SimDepth::Extrapolate) => Simulation::Composed,
            _ => Simulation::Exact,
        };
        Ranked {
            rank: 0,
            candidate,
            step_time_s: m.step_time_s,
            tokens_per_s: m.tokens_per_s,
            mfu: m.mfu,
            peak_bytes: m.peak_bytes,
            capacity_bytes: m.capacity_bytes,
            headroom_bytes: m.headroom_bytes,
            fits: m.fits,
            headroom_fraction: m.headroom_bytes as f64 / m.capacity_bytes as f64,
            exposed_communication_s: m.exposed_communication_s,
            exposed_share: m.exposed_share,
            compute_s: m.compute_s,
            communication_s: m.communication_s,
            analytic_step_time_s: analytic.step_time_s,
            analytic_tokens_per_s: analytic.tokens_per_s,
            bubble_s: (m.step_time_s - m.compute_s - m.exposed_communication_s).max(0.0),
            recompute_s: m.compute_s * recompute_share(e),
            simulation,
            training: spec
                .tokens
                .and_then(|t| Training::of(t, m.tokens_per_s, spec.gpus, spec.gpu_hour_price)),
        }
    }
}

/// The share of a layer's FLOPs that recomputation adds, against the same workload without it.
fn recompute_share(e: &Evaluation) -> f64 {
    if e.workload.options.recompute == Recompute::None {
        return 0.0;
    }
    let mut w = e.workload.clone().into_workload();
    w.options.recompute = Recompute::None;
    let Ok(w) = w.validate() else {
        return 0.0;
    };
    let (with, without) = (e.plan.layer_flops(), Evaluation::new(w).plan.layer_flops());
    if with > 0.0 && with > without {
        (with - without) / with
    } else {
        0.0
    }
}

/// A configuration that fits, with what screens it (its evaluation is built only for the few
/// that may enter the pool; keeping every one's would hold every stage's inventory of
/// thousands).
pub(super) struct Feasible {
    c: Candidate,
    /// An upper bound on its closed-form tokens per second (from a lower bound on the step:
    /// `analytic::step_lower_bound`), for pruning.
    bound_tokens_per_s: f64,
    /// What its memory and closed form are made of (peak, static, stored and transient bytes;
    /// the prices the closed form composes, to the bit): two configurations of one group that
    /// agree on all of it are the same configuration under another name.
    signature: Vec<u128>,
}

/// A screened configuration priced in closed form (the first ranking).
struct Priced {
    c: Candidate,
    analytic_tokens_per_s: f64,
}

pub(super) enum Outcome {
    Feasible(Box<Feasible>),
    Rejected(Rejection),
}

pub(super) fn gib(b: u128) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// One candidate screened: invalid, out of memory, or feasible with a bound on its
/// throughput (no walk of its pipeline yet).
pub(super) fn evaluate(c: Candidate, spec: &PlanSpec, hw: &Hardware) -> Outcome {
    let reject =
        |category, reason: String, mem| Outcome::Rejected(Rejection::of(&c, category, reason, mem));
    let w = match c.workload(spec, hw).validate() {
        Ok(w) => w,
        Err(e) => return reject(RejectCategory::Invalid, e.to_string(), None),
    };
    // The critical stage's inventory only: every stage's is built for the few that are priced.
    let inv = &memory::inventory(&w);
    if !inv.fits {
        return Outcome::Rejected(out_of_memory(&c, inv));
    }
    let screen = crate::evaluate::screen(&w);
    let bound = screen.step_lower_bound_s;
    let tokens = w.tokens_per_step() as f64;
    let mut signature = vec![
        inv.peak_bytes,
        inv.static_bytes,
        inv.stored_bytes,
        inv.transient_peak_bytes,
    ];
    signature.extend(screen.fingerprint.iter().map(|&x| u128::from(x)));
    Outcome::Feasible(Box::new(Feasible {
        c,
        bound_tokens_per_s: if bound > 0.0 {
            tokens / bound
        } else {
            f64::INFINITY
        },
        signature,
    }))
}

/// The out-of-memory rejection of `c`, whose critical stage is `inv`.
fn out_of_memory(c: &Candidate, inv: &memory::Inventory) -> Rejection {
    let reason = format!(
        "does not fit: peak {:.2} GiB > capacity {:.2} GiB (static {:.2}, stored {:.2}, \
         transient {:.2}, reserved {:.2} GiB)",
        gib(inv.peak_bytes),
        gib(inv.capacity_bytes),
        gib(inv.static_bytes),
        gib(inv.stored_bytes),
        gib(inv.transient_peak_bytes),
        gib(inv.reserved_bytes),
    );
    Rejection::of(
        c,
        RejectCategory::OutOfMemory,
        reason,
        Some((inv.peak_bytes, inv.capacity_bytes)),
    )
}

/// A candidate's evaluation in closed form, or why it is rejected.
fn evaluation(
    c: Candidate,
    spec: &PlanSpec,
    hw: &Hardware,
) -> std::result::Result<Evaluation, Box<Rejection>> {
    let w = match c.workload(spec, hw).validate() {
        Ok(w) => w,
        Err(e) => {
            return Err(Box::new(Rejection::of(
                &c,
                RejectCategory::Invalid,
                e.to_string(),
                None,
            )))
        }
    };
    let stages = memory::stage_inventories(&w);
    let inv = &stages[memory::critical_stage(&stages)];
    if !inv.fits {
        return Err(Box::new(out_of_memory(&c, inv)));
    }
    let evaluation = Evaluation::with_stages(w, stages);
    if let Err(e) = evaluation.check() {
        return Err(Box::new(Rejection::of(
            &c,
            RejectCategory::Invalid,
            e.to_string(),
            Some((
                evaluation.inventory.peak_bytes,
                evaluation.inventory.capacity_bytes,
            )),
        )));
    }
    Ok(evaluation)
}

/// What one part of a plan found (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanPart {
    /// Candidates whose memory inventory was built (the whole plan's, in every part).
    pub evaluated: usize,
    /// Candidates skipped as equivalent (the whole plan's).
    pub equivalent_skipped: usize,
    /// Candidates that fit (the whole plan's).
    pub feasible: usize,
    /// The pool: the best by the closed form, in that order (the whole plan's).
    pub pool: Vec<Candidate>,
    /// Rejections (part 0 only; the others leave them to it), unsorted.
    pub rejected: Vec<Rejection>,
    /// This part's share of the pool, simulated.
    pub simulated: Vec<Simulated>,
}

/// A pooled candidate through the simulator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Simulated {
    /// The configuration.
    pub candidate: Candidate,
    /// The simulated row, or the rejection when the simulation failed.
    pub outcome: std::result::Result<Ranked, Rejection>,
}

/// Plans: enumerate, check memory, rank analytically, simulate the best, rank by simulation.
pub fn plan(spec: &PlanSpec) -> Result<Plan> {
    plan_with(spec, &|_| {})
}

/// [`plan`], telling `on_progress` where it is (a progress bar and a time estimate).
pub fn plan_with(spec: &PlanSpec, on_progress: &(dyn Fn(PlanProgress) + Sync)) -> Result<Plan> {
    let part = plan_part_with(spec, Shard::WHOLE, on_progress)?;
    super::merge(spec, vec![part])
}

/// Where a plan is: each phase announced with its items, then each item as it is done (from
/// worker threads, in completion order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanProgress {
    /// The closed form of this many candidates starts.
    Evaluating(usize),
    /// One candidate's memory and closed form done.
    Evaluated,
    /// The best start through the simulator, costliest first.
    Simulating {
        /// How many.
        simulations: usize,
        /// What they will cost, in all, in tasks (`Evaluation::simulation_cost`).
        cost: u64,
    },
    /// One simulation done.
    Simulated {
        /// What it was expected to cost (its share of the phase's work).
        cost: u64,
    },
}

/// A pooled candidate before its simulation: its closed form and what the simulation will
/// cost.
struct Prepared {
    c: Candidate,
    evaluation: std::result::Result<Evaluation, Box<Rejection>>,
    cost: u64,
}

/// How many of the analytically best a plan simulates.
pub(super) fn pool_size(spec: &PlanSpec) -> usize {
    spec.sim_candidates.unwrap_or(3 * spec.top).max(spec.top)
}

/// The hardware every candidate runs on: the profile with ceil(N / GPUs per node) nodes.
pub(super) fn plan_hardware(spec: &PlanSpec) -> Hardware {
    let mut hw = spec.hardware.clone();
    hw.nodes = spec.nodes();
    hw
}

/// The `pool` best of `feasible` by closed-form tokens per second (ties by key), priced in
/// closed form in the order of their bounds — best bound first, in batches over the threads —
/// until no bound left can beat the pool's worst: the same pool as pricing every one, for a
/// fraction of the walks. Also the ones whose closed form the tool may not report (rejected as
/// invalid).
fn price_the_best(
    mut feasible: Vec<Feasible>,
    spec: &PlanSpec,
    hw: &Hardware,
    pool: usize,
) -> (Vec<Priced>, Vec<Rejection>) {
    feasible.sort_by(|a, b| {
        b.bound_tokens_per_s
            .total_cmp(&a.bound_tokens_per_s)
            .then_with(|| a.c.key().cmp(&b.c.key()))
    });
    let batch = 8 * rayon::current_num_threads().max(1);
    let mut best: Vec<Priced> = Vec::new();
    let mut invalid = Vec::new();
    let mut next = 0;
    while next < feasible.len() {
        // The pool is full and nothing left can beat its worst.
        if best.len() >= pool
            && feasible[next].bound_tokens_per_s < best[pool - 1].analytic_tokens_per_s
        {
            break;
        }
        let end = (next + batch).min(feasible.len());
        let priced: Vec<std::result::Result<Priced, Box<Rejection>>> = feasible[next..end]
            .par_iter()
            .map(|f| {
                evaluation(f.c, spec, hw).map(|e| Priced {
                    c: f.c,
                    analytic_tokens_per_s: e.metrics.tokens_per_s,
                })
            })
            .collect();
        for p in priced {
            match p {
                Ok(p) => best.push(p),
                Err(r) => invalid.push(*r),
            }
        }
        best.sort_by(|a, b| {
            b.analytic_tokens_per_s
                .total_cmp(&a.analytic_tokens_per_s)
                .then_with(|| a.c.key().cmp(&b.c.key()))
        });
        best.truncate(pool);
        next = end;
    }
    (best, invalid)
}

/// Part `shard` of a plan (module docs): every candidate screened (memory and a bound on its
/// closed form), the best priced in closed form, this part's share of them simulated.
pub fn plan_part(spec: &PlanSpec, shard: Shard) -> Result<PlanPart> {
    plan_part_with(spec, shard, &|_| {})
}

/// [`plan_part`] with progress ([`plan_with`]).
pub fn plan_part_with(
    spec: &PlanSpec,
    shard: Shard,
    on_progress: &(dyn Fn(PlanProgress) + Sync),
) -> Result<PlanPart> {
    let (candidates, mut rejected, equivalent_skipped) = enumerate(spec)?;
    let hw = plan_hardware(spec);
    on_progress(PlanProgress::Evaluating(candidates.len()));
    let outcomes: Vec<Outcome> = candidates
        .par_iter()
        .map(|&c| {
            // Screening is the bulk of a large plan's time: the progress bar counts it.
            let o = evaluate(c, spec, &hw);
            on_progress(PlanProgress::Evaluated);
            o
        })
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
        let group = (c.method, c.p, c.outer, c.dp, c.micro_batch, c.zero, c.flash);
        let members = groups.entry(group).or_default();
        let same = members
            .iter()
            .any(|&i| feasible[i].signature == f.signature);
        if same {
            equivalent_skipped += 1;
        } else {
            members.push(feasible.len());
            feasible.push(f);
        }
    }
    let n_feasible = feasible.len();
    let (priced, invalid) = price_the_best(feasible, spec, &hw, pool_size(spec));
    rejected.extend(invalid);
    let pool: Vec<Candidate> = priced.iter().map(|f| f.c).collect();
    let owners = Shard::owners(shard.count, priced.len());
    let mine: Vec<Priced> = priced
        .into_iter()
        .zip(owners)
        .filter(|(_, o)| *o == shard.index)
        .map(|(f, _)| f)
        .collect();
    let opts = SimulateOptions {
        link: spec.link_model,
        depth: spec.sim_depth,
        trace: crate::sim::TraceScope::Off,
        devices: crate::evaluate::Devices::Distinct,
    };
    // Each one's closed form, and what its simulation will cost (the tasks the simulator's path
    // lowers, known before it runs): the simulations start costliest first over the threads
    // (they differ 25-fold: a 128-device causal ring over 64 replicas against a small
    // pipelined step), the progress is weighed by it, and the rows come back in pool order.
    let prepared: Vec<Prepared> = mine
        .into_par_iter()
        .map(|f| {
            let evaluation = evaluation(f.c, spec, &hw);
            let cost = evaluation
                .as_ref()
                .map_or(1, |e| e.simulation_cost(opts).max(1));
            Prepared {
                c: f.c,
                evaluation,
                cost,
            }
        })
        .collect();
    on_progress(PlanProgress::Simulating {
        simulations: prepared.len(),
        cost: prepared.iter().map(|p| p.cost).fold(0, u64::saturating_add),
    });
    let simulated: Vec<Simulated> = map_heaviest_first(
        prepared,
        |p| p.cost,
        |p| {
            let c = p.c;
            let outcome = match p.evaluation {
                Err(r) => Err(*r),
                Ok(e) => {
                    let (peak, capacity) = (e.inventory.peak_bytes, e.inventory.capacity_bytes);
                    match e.simulate(opts) {
                        Ok(e) => Ok(Ranked::new(c, &e, spec)),
                        Err(e) => Err(Rejection::of(
                            &c,
                            RejectCategory::Invalid,
                            format!("simulation failed: {e}"),
                            Some((peak, capacity)),
                        )),
                    }
                }
            };
            on_progress(PlanProgress::Simulated { cost: p.cost });
            Simulated {
                candidate: c,
                outcome,
            }
        },
    );
    if shard.index != 0 {
        rejected.clear();
    }
    Ok(PlanPart {
        evaluated: candidates.len(),
        equivalent_skipped,
        feasible: n_feasible,
        pool,
        rejected,
        simulated,
    })
}
