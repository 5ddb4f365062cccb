//! Calibration: measure a machine's kernels and links, fit a hardware profile, run METP's
//! units for real and report predicted against measured (DESIGN §3, §6 `metp-sim calibrate`).
//!
//! - [`backend`]: the [`Backend`] trait — GEMM, fused attention block, element-wise kernel,
//!   point-to-point message, compute slowdown under a transfer, and whole units;
//! - [`cpu`]: the CPU backend (always built), on the virtual devices of `crate::exec`, whose
//!   links are the exec channels, optionally throttled;
//! - [`mock`]: exact synthetic numbers, for tests of the fitting;
//! - [`cuda`]: cuBLAS/NVRTC/NCCL behind the cargo feature `cuda` (a stub that returns a clear
//!   error otherwise);
//! - [`measure`]: the plan of measurements, measuring, fitting everything;
//! - [`measurements`]: kernel and link measurements as a file (the shared H200 format, extended);
//! - [`fit`]: efficiency tables, least-squares link fit, slowdown;
//! - [`profile`]: the calibrated profile (a source on every figure), written atomically;
//! - [`predict`]: a unit's time from a profile, ring step by ring step;
//! - [`compare`]: predicted against measured, per unit, ring and step;
//! - [`threshold`]: the overlap-threshold experiment (exposed communication below c* = F/B).
//!
//! Calibration writes data that the cost model reads; nothing in `cost`, `analytic` or
//! `schedule` calls this module. Depends on `config`, `cost`, `exec`, `report`.

pub mod backend;
pub mod compare;
pub mod cpu;
pub mod cuda;
pub mod fit;
pub mod measure;
pub mod measurements;
pub mod mock;
pub mod predict;
pub mod profile;
pub mod threshold;

use std::path::PathBuf;

use serde::Serialize;

pub use backend::{AttnBlock, AttnCall, Backend, GemmShape, Pass, SlowdownSample};
pub use compare::{compare_unit, UnitComparison};
pub use measure::{default_units, fit_all, measure, Measurements, Plan};
pub use predict::{predict, PredictOptions, Prediction};
pub use profile::{Fits, Meta};

use crate::config::Hardware;
use crate::error::Result;

/// What `calibrate` is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Short measurements and small units (seconds, for CI).
    pub quick: bool,
    /// Where the profile goes.
    pub out: PathBuf,
    /// Overwrite an existing profile.
    pub force: bool,
    /// Host name for the sources.
    pub host: String,
    /// Date for the sources.
    pub date: String,
    /// Timed runs per unit (median taken).
    pub unit_runs: usize,
}

/// What a calibration produced.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Backend.
    pub backend: String,
    /// What was measured.
    pub device: String,
    /// Host.
    pub host: String,
    /// Date.
    pub date: String,
    /// The profile written.
    pub profile_path: PathBuf,
    /// The fitted figures.
    pub fits: Fits,
    /// The raw measurements.
    pub measurements: Measurements,
    /// Units: predicted (from the fitted profile) against measured.
    pub units: Vec<UnitComparison>,
    /// The profile.
    pub profile: Hardware,
    /// Remarks on the conditions (e.g. the host's load while measuring).
    pub notes: Vec<String>,
}

/// Measures, fits, writes the profile (atomically; refused before measuring if it exists and
/// `force` is off), then runs the plan's units and compares them with the fitted profile.
pub fn calibrate(
    backend: &mut dyn Backend,
    plan: &Plan,
    opts: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Report> {
    profile::ensure_writable(&opts.out, opts.force)?;
    let m = measure(backend, plan, progress)?;
    let fits = fit_all(&m)?;
    let meta = Meta {
        backend: backend.name().to_string(),
        host: opts.host.clone(),
        date: opts.date.clone(),
        device: backend.device(),
        devices: backend.devices(),
        link: backend.link(),
        memory_bytes: backend.memory_bytes(),
    };
    let hw = profile::build(&meta, &fits, &m);
    profile::write(&opts.out, &hw, opts.force)?;
    progress(&format!("profile written to {}", opts.out.display()));
    let mut units = Vec::new();
    for spec in &plan.units {
        progress(&format!(
            "running {} {} (p = {}, s = {})",
            spec.method.id(),
            match spec.unit {
                crate::exec::Unit::Attention => "attention",
                crate::exec::Unit::Mlp => "mlp",
            },
            spec.shape.p,
            spec.shape.s
        ));
        let popts = PredictOptions {
            compute_scale: backend.compute_scale(spec.shape.p, backend.devices()),
            transfer_scale: backend.transfer_scale(spec.shape.p),
            ..PredictOptions::default()
        };
        units.push(compare_unit(backend, spec, &hw, popts, opts.unit_runs)?);
    }
    Ok(Report {
        backend: meta.backend,
        device: meta.device,
        host: meta.host,
        date: meta.date,
        profile_path: opts.out.clone(),
        fits,
        measurements: m,
        units,
        profile: hw,
        notes: vec![],
    })
}
