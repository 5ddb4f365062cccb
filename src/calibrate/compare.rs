//! Predicted against measured: runs a unit on a backend and sets the measured time, per unit
//! and per ring step, beside the profile's prediction.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::backend::predict::{predict, PredictOptions, Prediction};
use crate::backend::repeat::median;
use crate::backend::unit::device::{Phase, StepTime};
use crate::backend::unit::{GpuMemory, RunReport, RunSpec};
use crate::backend::Backend;
use crate::config::Hardware;
use crate::error::Result;

/// One ring (phase) of a unit: predicted and measured sums over its steps on the critical
/// device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseComparison {
    /// Ring.
    pub phase: Phase,
    /// Steps.
    pub steps: usize,
    /// Predicted seconds (sum of step durations).
    pub predicted_s: f64,
    /// Measured seconds (sum of step durations).
    pub measured_s: f64,
    /// Measured seconds the device waited after computing (sum).
    pub measured_wait_s: f64,
    /// `(predicted − measured) / measured`.
    pub rel_error: f64,
}

/// One step, predicted and measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepComparison {
    /// Ring.
    pub phase: Phase,
    /// Head group or 0.
    pub group: u32,
    /// Step.
    pub step: u32,
    /// Predicted duration.
    pub predicted_s: f64,
    /// Measured duration.
    pub measured_s: f64,
    /// Measured wait after the compute.
    pub measured_wait_s: f64,
}

/// A unit, predicted and measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnitComparison {
    /// What ran.
    pub spec: RunSpec,
    /// Largest relative error against the f64 reference (of the median run).
    pub max_rel_error: f64,
    /// Relative error of each output and gradient.
    pub errors: BTreeMap<String, f64>,
    /// Measured high-water mark (the backend's measure: `RunReport::measured_peak_bytes`).
    pub measured_peak_bytes: u64,
    /// High-water mark of the tracked buffers (`RunReport::tracked_peak_bytes`).
    pub tracked_peak_bytes: u64,
    /// The memory inventory's peak for this unit (METP; `memory::unit`).
    pub inventory_peak_bytes: Option<u64>,
    /// Runs timed.
    pub runs: usize,
    /// Median wall time over the runs.
    pub measured_time_s: f64,
    /// Every run's wall time.
    pub run_times_s: Vec<f64>,
    /// The prediction.
    pub predicted: Prediction,
    /// `(predicted − measured) / measured`.
    pub rel_error: f64,
    /// Per ring.
    pub phases: Vec<PhaseComparison>,
    /// Per step of the critical device.
    pub steps: Vec<StepComparison>,
    /// The GPUs' own view of their memory during the chosen run (CUDA backend).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_memory: Vec<GpuMemory>,
}

fn rel(pred: f64, meas: f64) -> f64 {
    if meas > 0.0 {
        (pred - meas) / meas
    } else {
        f64::INFINITY
    }
}

/// Runs `spec` `runs` times on `backend` (after one untimed warm-up run when `runs > 1`) and
/// compares the median run with the prediction from `hw`.
pub fn compare_unit(
    backend: &mut dyn Backend,
    spec: &RunSpec,
    hw: &Hardware,
    opts: PredictOptions,
    runs: usize,
) -> Result<UnitComparison> {
    backend.support().check(backend.name(), spec)?;
    let opts = PredictOptions {
        forward_only: opts.forward_only || backend.forward_only(),
        ..opts
    };
    let predicted = predict(spec, hw, opts);
    if runs > 1 {
        backend.run_unit(spec)?;
    }
    let mut reports: Vec<RunReport> = Vec::new();
    for _ in 0..runs.max(1) {
        reports.push(backend.run_unit(spec)?);
    }
    let mut times: Vec<f64> = reports.iter().map(|r| r.measured_time_s).collect();
    let run_times_s = times.clone();
    let med = median(&mut times);
    let chosen = reports
        .iter()
        .min_by(|a, b| {
            (a.measured_time_s - med)
                .abs()
                .total_cmp(&(b.measured_time_s - med).abs())
        })
        .cloned()
        .expect("at least one run");
    Ok(compare_report(&chosen, predicted, run_times_s, med))
}

/// Compares one run report (time `measured_time_s`) with a prediction.
pub fn compare_report(
    r: &RunReport,
    predicted: Prediction,
    run_times_s: Vec<f64>,
    measured_time_s: f64,
) -> UnitComparison {
    let measured_steps: &[StepTime] = r
        .devices
        .iter()
        .find(|d| d.rank == predicted.critical_device)
        .map(|d| d.steps.as_slice())
        .unwrap_or(&[]);
    let mut steps = Vec::new();
    let mut phases: BTreeMap<String, PhaseComparison> = BTreeMap::new();
    for ps in &predicted.steps {
        let Some(ms) = measured_steps
            .iter()
            .find(|m| m.phase == ps.phase && m.group == ps.group && m.step == ps.step)
        else {
            continue;
        };
        steps.push(StepComparison {
            phase: ps.phase,
            group: ps.group,
            step: ps.step,
            predicted_s: ps.duration_s,
            measured_s: ms.duration_s(),
            measured_wait_s: ms.wait_s(),
        });
        let e = phases
            .entry(format!("{:?}", ps.phase))
            .or_insert(PhaseComparison {
                phase: ps.phase,
                steps: 0,
                predicted_s: 0.0,
                measured_s: 0.0,
                measured_wait_s: 0.0,
                rel_error: 0.0,
            });
        e.steps += 1;
        e.predicted_s += ps.duration_s;
        e.measured_s += ms.duration_s();
        e.measured_wait_s += ms.wait_s();
    }
    let mut phases: Vec<PhaseComparison> = phases.into_values().collect();
    for p in &mut phases {
        p.rel_error = rel(p.predicted_s, p.measured_s);
    }
    phases.sort_by_key(|p| p.phase as u8);
    UnitComparison {
        spec: r.spec,
        max_rel_error: r.max_rel_error,
        errors: r.errors.clone(),
        measured_peak_bytes: r.measured_peak_bytes,
        tracked_peak_bytes: r.tracked_peak_bytes,
        inventory_peak_bytes: r.inventory_peak_bytes,
        runs: run_times_s.len(),
        measured_time_s,
        run_times_s,
        rel_error: rel(predicted.time_s, measured_time_s),
        predicted,
        phases,
        steps,
        gpu_memory: r.gpu_memory.clone(),
    }
}
