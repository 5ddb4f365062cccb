//! One unit executed on a backend and compared with its prediction — what `metp-sim run`
//! reports (DESIGN §8): the error against the f64 reference, measured and predicted memory and
//! time, per ring. The prediction uses a given hardware profile or, without one, a profile
//! measured on the fly on the same backend from the unit's own kernels and messages.

use std::collections::BTreeMap;

use serde::Serialize;

use super::compare::{compare_unit, PhaseComparison, StepComparison};
use super::{measure_profile, Backend, Plan, PredictOptions};
use crate::backend::cpu::{cores, load_average};
use crate::backend::unit::device::Link;
use crate::backend::unit::{GpuMemory, RunSpec};
use crate::config::{ExecMethod, Hardware, Unit, UnitShape, WeightExchange};
use crate::error::{Error, Result};

/// Where the prediction's hardware profile comes from.
#[derive(Debug, Clone)]
pub enum ProfileSource {
    /// A profile file (`--hw`): its name and contents.
    Given {
        /// As the user named it.
        name: String,
        /// The profile.
        hardware: Box<Hardware>,
    },
    /// Measured now, on the backend, from the unit's own kernels and messages.
    OnTheFly,
}

/// DESIGN §8's `run` fields and the per-ring comparison.
#[derive(Debug, Clone, Serialize)]
pub struct UnitRun {
    /// Backend name.
    pub backend: &'static str,
    /// Which unit.
    pub unit: Unit,
    /// How it is parallelised.
    pub method: ExecMethod,
    /// Sizes.
    pub shape: UnitShape,
    /// Causal attention.
    pub causal: bool,
    /// Fused attention.
    pub flash: bool,
    /// METP receive buffers.
    pub recv_buffers: u64,
    /// METP weight exchange.
    pub weight_exchange: WeightExchange,
    /// CPU link throttle.
    pub link: Option<Link>,
    /// Largest relative error against the f64 reference.
    pub max_rel_error: f64,
    /// Relative error per output and gradient.
    pub errors: BTreeMap<String, f64>,
    /// Largest measured high-water mark over the devices (CPU: the runtime's tracked
    /// allocations; CUDA: the driver's count, each device's memory pool's high-water mark).
    pub measured_peak_bytes: u64,
    /// Largest high-water mark of the tracked buffers over the devices (the tally the unit
    /// inventory predicts byte for byte; equal to `measured_peak_bytes` on the CPU).
    pub tracked_peak_bytes: u64,
    /// The unit inventory's peak (`memory::unit`); `None` for TP.
    pub predicted_peak_bytes: Option<u64>,
    /// Measured time (median run).
    pub measured_time_s: f64,
    /// Predicted time.
    pub predicted_time_s: f64,
    /// `(predicted − measured) / measured`.
    pub time_rel_error: f64,
    /// Predicted compute time.
    pub predicted_compute_s: f64,
    /// Predicted exposed communication.
    pub predicted_exposed_communication_s: f64,
    /// Where the prediction's profile came from, in words.
    pub predicted_from: String,
    /// Per ring, predicted against measured.
    pub phases: Vec<PhaseComparison>,
    /// The GPUs' own view of their memory during the chosen run (CUDA backend).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_memory: Vec<GpuMemory>,
    /// Remarks on the conditions.
    pub notes: Vec<String>,
    /// Every ring step of the slowest device, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepComparison>>,
}

/// A note when other processes share the CPU cores (measured times are then unreliable), for
/// the load averages seen.
pub fn cpu_load_note(loads: &[f64]) -> Option<String> {
    let cores = cores();
    let load = loads.iter().copied().fold(0.0, f64::max);
    (load > 0.75 * cores as f64).then(|| {
        format!(
            "host load average {load:.2} on {cores} cores: other processes share the cores, so \
             measured times (and the prediction's error) are unreliable"
        )
    })
}

/// Runs `spec` `runs` times on `backend` (the median run) and compares it with the prediction
/// from `profile`; `steps` keeps every ring step of the slowest device.
pub fn run_unit(
    backend: &mut dyn Backend,
    spec: &RunSpec,
    profile: &ProfileSource,
    runs: usize,
    steps: bool,
) -> Result<UnitRun> {
    if runs == 0 {
        return Err(Error::arg("--runs", "must be positive"));
    }
    backend.support().check(backend.name(), spec)?;
    // Before anything runs: the f64 reference (and the CPU runtime) on the host.
    crate::backend::unit::cost::check_host_cost(spec)?;
    let p = spec.shape.p;
    let mut notes = vec![
        "predicted_peak_bytes is the memory inventory's figure for this unit (memory::unit: the \
         largest set of tensors one device holds at once); null for tp, whose runtime has no \
         inventory yet"
            .to_string(),
    ];
    let (hw, opts, from) = match profile {
        ProfileSource::Given { name, hardware } => {
            let opts = PredictOptions {
                link: spec.link,
                compute_scale: backend.compute_scale(p, hardware.gpus_per_node as usize),
                transfer_scale: backend.transfer_scale(p),
                runtime: backend.runtime(),
                ..Default::default()
            };
            if opts.compute_scale != 1.0 {
                notes.push(format!(
                    "compute times scaled by {:.3}: {p} devices share the {} backend's compute \
                     ({} cores here); the profile was measured with {} devices at once",
                    opts.compute_scale,
                    backend.name(),
                    cores(),
                    hardware.gpus_per_node
                ));
            }
            (
                (**hardware).clone(),
                opts,
                format!("hardware profile {name}"),
            )
        }
        ProfileSource::OnTheFly => {
            let plan = Plan::for_units(vec![*spec], true, spec.link);
            let hw = measure_profile(backend, &plan)?;
            let from = format!(
                "profile measured on the fly on the {} backend: this unit's own kernels and \
                 messages ({} GEMM shapes, {} attention blocks, {} message sizes, {} devices at \
                 once)",
                backend.name(),
                plan.gemms.len(),
                plan.attention.len(),
                plan.transfer_bytes.len(),
                backend.devices()
            );
            let opts = PredictOptions {
                compute_scale: backend.compute_scale(p, backend.devices()),
                transfer_scale: backend.transfer_scale(p),
                runtime: backend.runtime(),
                ..Default::default()
            };
            (hw, opts, from)
        }
    };
    let cmp = compare_unit(backend, spec, &hw, opts, runs)?;
    if backend.name() == "cpu" {
        if let Some(note) = load_average().and_then(|l| cpu_load_note(&[l])) {
            notes.push(note);
        }
    }
    Ok(UnitRun {
        backend: backend.name(),
        unit: spec.unit,
        method: spec.method,
        shape: spec.shape,
        causal: spec.causal,
        flash: spec.fused,
        recv_buffers: spec.metp.recv_buffers,
        weight_exchange: spec.metp.weight_exchange,
        link: spec.link,
        max_rel_error: cmp.max_rel_error,
        errors: cmp.errors.clone(),
        measured_peak_bytes: cmp.measured_peak_bytes,
        tracked_peak_bytes: cmp.tracked_peak_bytes,
        predicted_peak_bytes: cmp.inventory_peak_bytes,
        measured_time_s: cmp.measured_time_s,
        predicted_time_s: cmp.predicted.time_s,
        time_rel_error: cmp.rel_error,
        predicted_compute_s: cmp.predicted.compute_s,
        predicted_exposed_communication_s: cmp.predicted.exposed_communication_s,
        predicted_from: from,
        phases: cmp.phases.clone(),
        gpu_memory: cmp.gpu_memory.clone(),
        notes,
        steps: steps.then(|| cmp.steps.clone()),
    })
}
