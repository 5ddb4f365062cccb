//! Sweeps: every method × degree × sequence length for one or more models and hardware
//! profiles, evaluated in parallel (rayon), each point's memory from the inventory and its step
//! time from the simulator (or the analytic model), plus the longest sequence per method and
//! degree.
//!
//! Input: a [`SweepSpec`]. Output: [`SweepResult`] rows in a fixed order (the same spec gives the
//! same bytes), delivered to a callback as they complete so that the caller can flush them.
//! Infeasible points are kept and marked (out of memory, invalid degree). Depends on `config`,
//! `memory`, `search`, `analytic`, `sim`.

use rayon::prelude::*;
use serde::Serialize;

use crate::analytic;
use crate::config::{Hardware, MethodId, Model, Options, Workload};
use crate::memory;
use crate::search::{self, MaxSeq};
use crate::sim::{self, LinkModel};

/// How step times are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The discrete-event simulator with this link model (the analytic estimate is reported
    /// beside it).
    Simulate(LinkModel),
    /// The closed-form model only.
    Analytic,
}

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
    /// Engine.
    pub engine: Engine,
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
        seq,
        micro_batch: spec.micro_batch,
        micro_batches: 1,
        options: spec.options,
    }
}

/// Evaluates one workload.
pub fn evaluate(w: &Workload, engine: Engine) -> Point {
    let mut pt = Point {
        model: w.model.name.clone(),
        hardware: w.hardware.name.clone(),
        method: w.method,
        p: w.p,
        seq: w.seq,
        status: Status::Ok,
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
    let inv = match memory::inventory(w) {
        Ok(inv) => inv,
        Err(e) => {
            pt.status = Status::Invalid;
            pt.reason = Some(e.to_string());
            return pt;
        }
    };
    pt.peak_bytes = Some(inv.peak_bytes);
    if !inv.fits {
        pt.status = Status::OutOfMemory;
        pt.reason = Some(format!(
            "peak {:.1} GiB > {:.1} GiB",
            inv.peak_bytes as f64 / (1u64 << 30) as f64,
            inv.capacity_bytes as f64 / (1u64 << 30) as f64
        ));
        return pt;
    }
    let est = match analytic::estimate(w) {
        Ok(e) => e,
        Err(e) => {
            pt.status = Status::Invalid;
            pt.reason = Some(e.to_string());
            return pt;
        }
    };
    pt.analytic_step_time_s = Some(est.step_time_s);
    let (step, compute, comm, exposed) = match engine {
        Engine::Analytic => (
            est.step_time_s,
            est.compute_s,
            est.communication_s,
            est.exposed_communication_s,
        ),
        Engine::Simulate(link) => match sim::simulate_workload(w, link, false) {
            Ok(r) => {
                let crit = r.critical();
                (
                    r.result.step_time_s,
                    crit.compute_busy_s,
                    crit.comm_busy_s,
                    crit.exposed_comm_s,
                )
            }
            Err(e) => {
                pt.status = Status::Invalid;
                pt.reason = Some(e.to_string());
                return pt;
            }
        },
    };
    let tokens = (w.seq * w.micro_batch * w.micro_batches * w.dp) as f64;
    pt.step_time_s = Some(step);
    pt.compute_s = Some(compute);
    pt.communication_s = Some(comm);
    pt.exposed_communication_s = Some(exposed);
    pt.exposed_share = Some(exposed / step);
    pt.tokens_per_s = Some(tokens / step);
    pt.mfu = Some(
        analytic::model_flops(w)
            / (step * w.hardware.gpu.peak_bf16_flops_per_s.value * (w.p * w.dp) as f64),
    );
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
            let pt = evaluate(&workload(spec, m, hw, method, p, s), spec.engine);
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
