//! Sweeps: every method × degree × sequence length for one or more models and hardware
//! profiles, evaluated in parallel (rayon), each point's memory from the inventory and its step
//! time from the simulator (or the analytic model), plus the longest sequence per method and
//! degree.
//!
//! Input: a [`SweepSpec`]. Output: [`SweepResult`] rows in a fixed order (the same spec gives the
//! same bytes), delivered to a callback as they complete so that the caller can flush them.
//! Infeasible points are kept and marked (out of memory with `fits: false`, invalid degree).
//! Each point is evaluated through `evaluate`. Depends on `config`, `memory`, `search`,
//! `evaluate`.

use rayon::prelude::*;
use serde::Serialize;

use crate::config::{Hardware, MethodId, Model, Options, Workload};
use crate::evaluate::{Evaluation, SimulateOptions, Timing};
use crate::memory;
use crate::search::{self, MaxSeq};

/// What to sweep.
#[derive(Debug, Clone)]
pub struct SweepSpec {
    /// Models.
    pub models: Vec<Model>,
    /// Hardware profiles.
    pub hardware: Vec<Hardware>,
    /// Methods.
    pub methods: Vec<MethodId>,
    /// Degrees.
    pub degrees: Vec<u64>,
    /// Sequence lengths.
    pub seqs: Vec<u64>,
    /// Micro-batch.
    pub micro_batch: u64,
    /// Options.
    pub options: Options,
    /// How step times are obtained.
    pub timing: Timing,
}

/// Whether a point could be evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// Method.
    pub method: MethodId,
    /// Degree.
    pub p: u64,
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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepResult {
    /// Points, in spec order (model, hardware, method, degree, sequence).
    pub points: Vec<Point>,
    /// Longest sequence per model, hardware, method and degree.
    pub maxseq: Vec<MaxSeqRow>,
}

/// A `maxseq` row with its model and hardware.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MaxSeqRow {
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// The row.
    #[serde(flatten)]
    pub row: MaxSeq,
}

fn workload(
    spec: &SweepSpec,
    m: &Model,
    hw: &Hardware,
    method: MethodId,
    p: u64,
    seq: u64,
) -> Workload {
    Workload {
        model: m.clone(),
        hardware: hw.clone(),
        method,
        p,
        dp: 1,
        outer: crate::config::OuterAxes::default(),
        seq,
        micro_batch: spec.micro_batch,
        micro_batches: 1,
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
    let mut jobs = Vec::new();
    for m in &spec.models {
        for hw in &spec.hardware {
            for &method in &spec.methods {
                for &p in &spec.degrees {
                    for &s in &spec.seqs {
                        jobs.push((m, hw, method, p, s));
                    }
                }
            }
        }
    }
    let points: Vec<Point> = jobs
        .par_iter()
        .map(|&(m, hw, method, p, s)| {
            let pt = evaluate(&workload(spec, m, hw, method, p, s), spec.timing);
            on_point(&pt);
            pt
        })
        .collect();
    let mut maxseq = Vec::new();
    for m in &spec.models {
        for hw in &spec.hardware {
            let template = workload(spec, m, hw, spec.methods[0], spec.degrees[0], 1);
            for row in search::max_seq_grid(&template, &spec.methods, &spec.degrees) {
                maxseq.push(MaxSeqRow {
                    model: m.name.clone(),
                    hardware: hw.name.clone(),
                    row,
                });
            }
        }
    }
    SweepResult { points, maxseq }
}
