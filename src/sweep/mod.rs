//! Sweeps: every method × degree × outer axes (context-parallel ranks × pipeline stages) ×
//! sequence length for one or more models and hardware profiles, evaluated in parallel
//! (rayon), each point's memory from the inventory and its step time from the simulator (or
//! the analytic model), plus the longest sequence per method, degree and outer axes.
//!
//! Input: a [`SweepSpec`]. Output: [`SweepResult`] rows in a fixed order (the same spec gives the
//! same bytes), delivered to a callback as they complete so that the caller can flush them.
//! Infeasible points are kept and marked (out of memory with `fits: false`, invalid degree or
//! outer axes). Each point is evaluated through `evaluate`.
//!
//! A sweep splits over machines ([`run_shard`]: part K of N takes the points
//! [`Shard::owners`] deals it, a shuffled round-robin over the canonical order; part 0 also
//! the longest sequences) and [`merge`] puts the parts' points
//! back in that order — the [`SweepResult`] one run would have given, so the same rendering
//! writes the same bytes. Depends on `config`, `memory`, `search`, `evaluate`, `shard` and
//! `error`; never on `plan`, `validate`, `report` or `cli`.

mod check;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::config::{Hardware, MethodId, Model, Options, OuterAxes, Workload};
use crate::error::{Error, Result};
use crate::evaluate::{Evaluation, SimulateOptions, Timing};
use crate::memory;
use crate::search::{self, MaxSeq};
use crate::shard::Shard;

pub use check::{check_part, check_spec};

/// What to sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSpec {
    /// Models.
    pub models: Vec<Model>,
    /// Hardware profiles.
    pub hardware: Vec<Hardware>,
    /// Methods.
    pub methods: Vec<MethodId>,
    /// Degrees.
    pub degrees: Vec<u64>,
    /// Outer axes (context-parallel ranks × pipeline stages, one interleave), in sweep order;
    /// `[OuterAxes::default()]` for a sweep of the methods alone.
    pub outer: Vec<OuterAxes>,
    /// Sequence lengths.
    pub seqs: Vec<u64>,
    /// Micro-batch.
    pub micro_batch: u64,
    /// Micro-batches per step (`--global-batch` / b; one replica); `None`: one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_batches: Option<u64>,
    /// Options.
    pub options: Options,
    /// How step times are obtained.
    pub timing: Timing,
}

impl SweepSpec {
    /// Whether any point has outer axes (cp, pp or interleave above 1): its outputs then carry
    /// `cp`, `pp` and `interleave` columns, which a sweep of the methods alone leaves out.
    pub fn varies_outer(&self) -> bool {
        self.outer.iter().any(|o| *o != OuterAxes::default())
    }

    /// Points, in canonical order: model, hardware, method, degree, outer axes, sequence.
    pub fn points(&self) -> usize {
        self.models.len()
            * self.hardware.len()
            * self.methods.len()
            * self.degrees.len()
            * self.outer.len()
            * self.seqs.len()
    }
}

/// Whether a point could be evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Fits and was timed.
    Ok,
    /// Valid but the peak exceeds device memory (not timed).
    OutOfMemory,
    /// The method cannot run this configuration (degree, divisibility, devices).
    Invalid,
}

/// One evaluated point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// Method.
    pub method: MethodId,
    /// Degree.
    pub p: u64,
    /// Context-parallel ranks, pipeline stages and interleave.
    pub outer: OuterAxes,
    /// Sequence length.
    pub seq: u64,
    /// Status.
    pub status: Status,
    /// Whether the peak fits in device memory (`None` for an invalid configuration).
    pub fits: Option<bool>,
    /// Why a point is not `ok`.
    pub reason: Option<String>,
    /// Peak bytes per device (valid points).
    pub peak_bytes: Option<u128>,
    /// Device memory.
    pub capacity_bytes: u128,
    /// Step time (simulated, or analytic with `--engine analytic`).
    pub step_time_s: Option<f64>,
    /// Compute busy time on the critical device.
    pub compute_s: Option<f64>,
    /// Communication busy time on the critical device.
    pub communication_s: Option<f64>,
    /// Exposed communication on the critical device.
    pub exposed_communication_s: Option<f64>,
    /// Exposed communication as a share of the step.
    pub exposed_share: Option<f64>,
    /// Tokens per second.
    pub tokens_per_s: Option<f64>,
    /// Model FLOPs utilisation.
    pub mfu: Option<f64>,
    /// The analytic model's step time.
    pub analytic_step_time_s: Option<f64>,
}

/// All results of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepResult {
    /// Points, in spec order (model, hardware, method, degree, sequence).
    pub points: Vec<Point>,
    /// Longest sequence per model, hardware, method, degree and outer axes.
    pub maxseq: Vec<MaxSeqRow>,
}

/// A `maxseq` row with its model, hardware and outer axes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MaxSeqRow {
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// Context-parallel ranks, pipeline stages and interleave.
    pub outer: OuterAxes,
    /// The row (nested, not flattened: a flattened struct cannot carry u128 byte counts
    /// through serde).
    pub row: MaxSeq,
}

fn workload(
    spec: &SweepSpec,
    m: &Model,
    hw: &Hardware,
    method: MethodId,
    p: u64,
    outer: OuterAxes,
    seq: u64,
) -> Workload {
    Workload {
        model: m.clone(),
        hardware: hw.clone(),
        method,
        p,
        dp: 1,
        outer,
        seq,
        micro_batch: spec.micro_batch,
        micro_batches: spec.micro_batches.unwrap_or(1),
        options: spec.options,
    }
}

/// Evaluates one workload: invalid (with the reason), out of memory (peak against capacity, not
/// timed), or timed through the one evaluation path.
pub fn evaluate(w: &Workload, timing: Timing) -> Point {
    let mut pt = Point {
        model: w.model.name.clone(),
        hardware: w.hardware.name.clone(),
        method: w.method,
        p: w.p,
        outer: w.outer,
        seq: w.seq,
        status: Status::Ok,
        fits: None,
        reason: None,
        peak_bytes: None,
        capacity_bytes: w.hardware.memory_bytes(),
        step_time_s: None,
        compute_s: None,
        communication_s: None,
        exposed_communication_s: None,
        exposed_share: None,
        tokens_per_s: None,
        mfu: None,
        analytic_step_time_s: None,
    };
    let valid = match w.clone().validate() {
        Ok(v) => v,
        Err(e) => {
            pt.status = Status::Invalid;
            pt.reason = Some(e.to_string());
            return pt;
        }
    };
    let stages = memory::stage_inventories(&valid);
    let inventory = &stages[memory::critical_stage(&stages)];
    pt.peak_bytes = Some(inventory.peak_bytes);
    pt.fits = Some(inventory.fits);
    if !inventory.fits {
        pt.status = Status::OutOfMemory;
        pt.reason = Some(format!(
            "does not fit: peak {:.1} GiB > {:.1} GiB",
            inventory.peak_bytes as f64 / (1u64 << 30) as f64,
            inventory.capacity_bytes as f64 / (1u64 << 30) as f64
        ));
        return pt;
    }
    let evaluation = Evaluation::with_stages(valid, stages);
    let evaluation = match timing {
        Timing::Analytic => evaluation,
        Timing::Simulated(link) => match evaluation.simulate(SimulateOptions::full(link)) {
            Ok(e) => e,
            Err(e) => {
                pt.status = Status::Invalid;
                pt.reason = Some(e.to_string());
                return pt;
            }
        },
    };
    if let Err(e) = evaluation.check() {
        pt.status = Status::Invalid;
        pt.reason = Some(e.to_string());
        return pt;
    }
    let m = &evaluation.metrics;
    pt.analytic_step_time_s = Some(evaluation.estimate.step_time_s);
    pt.step_time_s = Some(m.step_time_s);
    pt.compute_s = Some(m.compute_s);
    pt.communication_s = Some(m.communication_s);
    pt.exposed_communication_s = Some(m.exposed_communication_s);
    pt.exposed_share = Some(m.exposed_share);
    pt.tokens_per_s = Some(m.tokens_per_s);
    pt.mfu = Some(m.mfu);
    pt
}

/// Runs a sweep; `on_point` is called (from worker threads, in completion order) with each point
/// as soon as it is done.
pub fn run(spec: &SweepSpec, on_point: &(dyn Fn(&Point) + Sync)) -> SweepResult {
    run_shard(spec, Shard::WHOLE, on_point)
}

/// The points of a sweep in canonical order (model, hardware, method, degree, outer axes,
/// sequence).
fn jobs(spec: &SweepSpec) -> Vec<(&Model, &Hardware, MethodId, u64, OuterAxes, u64)> {
    let mut jobs = Vec::with_capacity(spec.points());
    for m in &spec.models {
        for hw in &spec.hardware {
            for &method in &spec.methods {
                for &p in &spec.degrees {
                    for &outer in &spec.outer {
                        for &s in &spec.seqs {
                            jobs.push((m, hw, method, p, outer, s));
                        }
                    }
                }
            }
        }
    }
    jobs
}

/// Part `shard` of a sweep (module docs): its points in canonical order, and the longest
/// sequences in part 0 only (the whole sweep's for [`Shard::WHOLE`]).
pub fn run_shard(
    spec: &SweepSpec,
    shard: Shard,
    on_point: &(dyn Fn(&Point) + Sync),
) -> SweepResult {
    let all = jobs(spec);
    let owners = Shard::owners(shard.count, all.len());
    let jobs: Vec<_> = all
        .into_iter()
        .zip(owners)
        .filter(|(_, o)| *o == shard.index)
        .map(|(j, _)| j)
        .collect();
    let points: Vec<Point> = jobs
        .par_iter()
        .map(|&(m, hw, method, p, outer, s)| {
            let pt = evaluate(&workload(spec, m, hw, method, p, outer, s), spec.timing);
            on_point(&pt);
            pt
        })
        .collect();
    let maxseq = if shard.index == 0 {
        maxseq_rows(spec)
    } else {
        Vec::new()
    };
    SweepResult { points, maxseq }
}

/// The longest sequence per model, profile, outer axes, method and degree, in that order.
fn maxseq_rows(spec: &SweepSpec) -> Vec<MaxSeqRow> {
    let mut maxseq = Vec::new();
    for m in &spec.models {
        for hw in &spec.hardware {
            for &outer in &spec.outer {
                let template = workload(spec, m, hw, spec.methods[0], spec.degrees[0], outer, 1);
                for row in search::max_seq_grid(&template, &spec.methods, &spec.degrees) {
                    maxseq.push(MaxSeqRow {
                        model: m.name.clone(),
                        hardware: hw.name.clone(),
                        outer,
                        row,
                    });
                }
            }
        }
    }
    maxseq
}

/// Joins the parts of a sweep split N ways (`parts[k]` is part k's result) into the result one
/// run would have given: point i is the next point of its owner ([`Shard::owners`]). Refuses
/// parts whose points are not the ones their place says (one line).
pub fn merge(spec: &SweepSpec, parts: Vec<SweepResult>) -> Result<SweepResult> {
    let n = parts.len() as u64;
    let jobs = jobs(spec);
    for (k, part) in parts.iter().enumerate() {
        let want = Shard {
            index: k as u64,
            count: n,
        }
        .len_of(jobs.len());
        if part.points.len() != want {
            return Err(Error::Merge {
                message: format!(
                    "shard {k}/{n} holds {} points, but its part of this sweep has {want}",
                    part.points.len()
                ),
            });
        }
    }
    let mut iters: Vec<_> = parts.iter().map(|p| p.points.iter()).collect();
    let mut points = Vec::with_capacity(jobs.len());
    let owners = Shard::owners(n, jobs.len());
    for (i, &(m, hw, method, p, outer, seq)) in jobs.iter().enumerate() {
        let k = owners[i] as usize;
        let pt = iters[k].next().cloned();
        match pt {
            Some(pt)
                if pt.model == m.name
                    && pt.hardware == hw.name
                    && pt.method == method
                    && pt.p == p
                    && pt.outer == outer
                    && pt.seq == seq =>
            {
                points.push(pt)
            }
            _ => {
                return Err(Error::Merge {
                    message: format!(
                        "shard {k}/{n} does not hold point {i} of the sweep ({method} p={p}                          s={seq} on {} / {}) where it should",
                        m.name, hw.name
                    ),
                })
            }
        }
    }
    let maxseq = parts
        .into_iter()
        .next()
        .map(|p| p.maxseq)
        .unwrap_or_default();
    Ok(SweepResult { points, maxseq })
}
