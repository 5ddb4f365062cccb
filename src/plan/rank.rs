//! Ranking: every candidate's memory and closed-form estimate, the best simulated, ranked by
//! simulated tokens per second.
//!
//! A plan runs as one or more parts ([`plan_part`]; `--shard K/N`) joined by [`merge`]. Every
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

use super::{enumerate, Candidate, PlanSpec, RejectCategory, Rejection};
use crate::config::{Hardware, MethodId};
use crate::error::{Error, Result};
use crate::evaluate::{
    simulates_whole, Evaluation, SimDepth, SimulateOptions, EXTRAPOLATION_LAYERS,
};
use crate::memory;
use crate::shard::Shard;
use crate::sim::LinkModel;

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

impl Ranked {
    /// The row of a simulated candidate (rank set later).
    fn new(candidate: Candidate, e: &Evaluation) -> Ranked {
        let m = &e.metrics;
        let analytic = e.analytic_metrics();
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
        }
    }
}

/// A configuration that fits, with its evaluation (closed form; simulated later if it is
/// among the best).
pub(super) struct Feasible {
    c: Candidate,
    evaluation: Evaluation,
    /// Closed-form tokens per second (the first ranking).
    analytic_tokens_per_s: f64,
}

pub(super) enum Outcome {
    Feasible(Box<Feasible>),
    Rejected(Rejection),
}

pub(super) fn gib(b: u128) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// One candidate through the evaluation path: invalid, out of memory, or evaluated in closed
/// form.
pub(super) fn evaluate(c: Candidate, spec: &PlanSpec, hw: &Hardware) -> Outcome {
    let w = match c.workload(spec, hw).validate() {
        Ok(w) => w,
        Err(e) => {
            return Outcome::Rejected(Rejection::of(
                &c,
                RejectCategory::Invalid,
                e.to_string(),
                None,
            ))
        }
    };
    let stages = memory::stage_inventories(&w);
    let inv = &stages[memory::critical_stage(&stages)];
    if !inv.fits {
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
        return Outcome::Rejected(Rejection::of(
            &c,
            RejectCategory::OutOfMemory,
            reason,
            Some((inv.peak_bytes, inv.capacity_bytes)),
        ));
    }
    let evaluation = Evaluation::with_stages(w, stages);
    if let Err(e) = evaluation.check() {
        return Outcome::Rejected(Rejection::of(
            &c,
            RejectCategory::Invalid,
            e.to_string(),
            Some((
                evaluation.inventory.peak_bytes,
                evaluation.inventory.capacity_bytes,
            )),
        ));
    }
    Outcome::Feasible(Box::new(Feasible {
        c,
        analytic_tokens_per_s: evaluation.metrics.tokens_per_s,
        evaluation,
    }))
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
    merge(spec, vec![part])
}

/// Where a plan is: each phase announced with its items, then each item as it is done (from
/// worker threads, in completion order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanProgress {
    /// The closed form of this many candidates starts.
    Evaluating(usize),
    /// One candidate's memory and closed form done.
    Evaluated,
    /// This many of the best start through the simulator.
    Simulating(usize),
    /// One simulation done.
    Simulated,
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

/// Part `shard` of a plan (module docs): every candidate in closed form, this part's share of
/// the best simulated.
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
        let same = members.iter().any(|&i| {
            let g = &feasible[i];
            g.evaluation.inventory.tensors == f.evaluation.inventory.tensors
                && g.evaluation.plan == f.evaluation.plan
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
        b.analytic_tokens_per_s
            .total_cmp(&a.analytic_tokens_per_s)
            .then_with(|| a.c.key().cmp(&b.c.key()))
    });
    feasible.truncate(pool_size(spec));
    let pool: Vec<Candidate> = feasible.iter().map(|f| f.c).collect();
    let owners = Shard::owners(shard.count, feasible.len());
    let mine: Vec<Feasible> = feasible
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
    on_progress(PlanProgress::Simulating(mine.len()));
    let simulated: Vec<Simulated> = mine
        .into_par_iter()
        .map(|f| {
            let peak = f.evaluation.inventory.peak_bytes;
            let capacity = f.evaluation.inventory.capacity_bytes;
            let c = f.c;
            let outcome = match f.evaluation.simulate(opts) {
                Ok(e) => Ok(Ranked::new(c, &e)),
                Err(e) => Err(Rejection::of(
                    &c,
                    RejectCategory::Invalid,
                    format!("simulation failed: {e}"),
                    Some((peak, capacity)),
                )),
            };
            on_progress(PlanProgress::Simulated);
            Simulated {
                candidate: c,
                outcome,
            }
        })
        .collect();
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

/// Joins the parts of a plan (all N of them, in part order) into the plan one run would have
/// given (module docs); no simulation. Parts that disagree on the counts or the pool, or do not
/// simulate every pooled candidate exactly once, are refused in one line.
pub fn merge(spec: &PlanSpec, parts: Vec<PlanPart>) -> Result<Plan> {
    let hw = plan_hardware(spec);
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Err(Error::Merge {
            message: "no parts to merge".into(),
        });
    };
    let (evaluated, equivalent_skipped, n_feasible) =
        (first.evaluated, first.equivalent_skipped, first.feasible);
    let pool = first.pool.clone();
    let mut rejected = first.rejected;
    let mut simulated = first.simulated;
    for (k, part) in parts.enumerate() {
        if (part.evaluated, part.equivalent_skipped, part.feasible)
            != (evaluated, equivalent_skipped, n_feasible)
            || part.pool != pool
        {
            return Err(Error::Merge {
                message: format!(
                    "part {} found other candidates than part 0 (evaluated {} vs {}, feasible                      {} vs {}, or another pool): not parts of one plan",
                    k + 1,
                    part.evaluated,
                    evaluated,
                    part.feasible,
                    n_feasible
                ),
            });
        }
        rejected.extend(part.rejected);
        simulated.extend(part.simulated);
    }
    let mut got: Vec<_> = simulated.iter().map(|s| s.candidate.key()).collect();
    got.sort();
    let mut want: Vec<_> = pool.iter().map(|c| c.key()).collect();
    want.sort();
    if got != want {
        return Err(Error::Merge {
            message: format!(
                "the parts simulated {} configurations, but the plan's best by the closed form                  are {} others or in another number",
                got.len(),
                want.len()
            ),
        });
    }
    let mut ranked = Vec::new();
    for s in simulated {
        match s.outcome {
            Ok(r) => ranked.push(r),
            Err(r) => rejected.push(r),
        }
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
    let attention = spec.options.attention_kernel(&hw);
    Ok(Plan {
        model: spec.model.name.clone(),
        hardware: hw.name.clone(),
        attention_kernel: attention.id(),
        kernel_placeholder: hw.kernels.placeholder_note(attention),
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
        evaluated,
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
