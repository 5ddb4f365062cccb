//! Calibration: drive a backend through a plan of measurements, fit a hardware profile's kernel
//! model to what it measured, run METP's units for real and compare them with their prediction
//! (DESIGN §3, §6 `metp-sim calibrate`, `metp-sim run`). It measures, fits (through `fitting`)
//! and compares; the machines it measures are `backend`'s.
//!
//! One path for every backend: a backend measures into a kernel measurement file (written
//! beside the profile), and `fitting::kernel_fit::fit_profile` turns that file and a base
//! profile into the fitted profile; `metp-sim calibrate --fit FILE --base PROFILE` runs only the
//! fit, on a file measured anywhere (the shared H200 file, the CUDA backend's).
//!
//! - [`measure`](mod@measure): the plan of measurements ([`Plan`]) and measuring it into the file format;
//! - [`grid`]: the CUDA backend's plan (messages between every GPU pair, collectives, a budget);
//! - [`budget`]: the time guard a budgeted plan is measured under;
//! - [`profile`]: a backend's base profile (a source on every figure), written atomically;
//! - [`compare`]: predicted against measured, per unit, ring and step;
//! - [`unit_run`]: one unit run and compared with its prediction (`metp-sim run`);
//! - [`repredict`]: a committed CUDA unit run (or `calibrate`'s units) predicted again from a
//!   profile, on a CPU;
//! - [`threshold`]: the overlap-threshold experiment (exposed communication below c* = F/B);
//! - [`gpu_check`]: the GPU check's held-out split, its merged files and its table's inputs.
//!
//! Calibration writes data that the cost model reads; nothing in `cost`, `analytic` or
//! `schedule` calls this module. Depends on `atomic`, `backend`, `config`, `fitting` and
//! `error`; never on `report` or the studies above it (`sweep`, `validate`, `plan`).

pub mod budget;
pub mod compare;
pub mod gpu_check;
pub mod grid;
pub mod measure;
pub mod profile;
pub mod repredict;
pub mod threshold;
pub mod unit_run;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use compare::{compare_unit, UnitComparison};
pub use measure::{default_units, measure, MeasureRun, Plan};
pub use profile::Meta;

use crate::backend::cpu;
use crate::backend::predict::{predict, PredictOptions};
use crate::backend::Backend;
use crate::fitting::kernel_fit::{fit_profile, FitReport};
use crate::fitting::measurements::KernelMeasurements;

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
    /// The profile the measurements are fitted onto (default: [`profile::backend_base`]).
    pub base: Option<Hardware>,
    /// Seconds the whole calibration may take: the measurements at most 65% of it (and at
    /// most the plan's own budget), then the units whose predicted time still fits; `None`:
    /// no limit.
    pub budget_s: Option<f64>,
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
    /// The measurement file written beside it.
    pub measurements_path: PathBuf,
    /// The fit: parameters, errors per kind, link, slowdown.
    pub fit: FitReport,
    /// The raw measurements.
    pub measurements: KernelMeasurements,
    /// Units: predicted (from the fitted profile) against measured.
    pub units: Vec<UnitComparison>,
    /// The profile.
    pub profile: Hardware,
    /// Remarks on the conditions (e.g. the host's load while measuring).
    pub notes: Vec<String>,
}

/// Measures, writes the measurements beside the profile, fits, writes the profile (both
/// atomically; refused before measuring if either exists and `force` is off), then runs the
/// plan's units and compares them with the fitted profile — within `opts.budget_s` if given
/// (a unit whose predicted runs do not fit in what is left is skipped, and the notes say so).
pub fn calibrate(
    backend: &mut dyn Backend,
    plan: &Plan,
    opts: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Report> {
    let start = std::time::Instant::now();
    let m_path = profile::measurements_path(&opts.out);
    profile::ensure_writable(&opts.out, opts.force)?;
    profile::ensure_writable(&m_path, opts.force)?;
    let load_before = cpu::load_average();
    let mut plan = plan.clone();
    if let (Some(total), Some(b)) = (opts.budget_s, plan.budget.as_mut()) {
        b.seconds = b.seconds.min(0.65 * total);
    }
    let run = measure(backend, &plan, &opts.date, progress)?;
    let m = run.measurements;
    let meta = Meta {
        backend: backend.name().to_string(),
        host: opts.host.clone(),
        date: opts.date.clone(),
        device: backend.device(),
        devices: backend.devices(),
        link: backend.link(),
        memory_bytes: backend.memory_bytes(),
    };
    let base = match &opts.base {
        Some(b) => b.clone(),
        None => profile::backend_base(&meta, &m)?,
    };
    let mut fit = fit_profile(&m, &base, &|what| meta.source(what))?;
    // Whether the GEMM sizes reached the rate's plateau decides how far the fitted rate holds.
    let plateau = m.gemm_plateau(0.05);
    let mma = &mut fit.profile.kernels.gemm.mma_fraction;
    mma.source = format!("{}; GEMM sizes: {plateau}", mma.source);
    crate::atomic::write_atomic(&m_path, m.to_json().as_bytes())?;
    profile::write(&opts.out, &fit.profile, opts.force)?;
    progress(&format!(
        "measurements written to {}, profile to {}",
        m_path.display(),
        opts.out.display()
    ));
    let hw = fit.profile.clone();
    let mut notes = vec![
        format!(
            "{} measurements in {:.1} s ({} GEMMs, {} attention calls, {} copy sizes, {} \
             messages, {} collectives, {} slowdown samples)",
            m.gemm.len()
                + m.attention.len()
                + m.copy.len()
                + m.p2p.len()
                + m.collectives.len()
                + m.overlap.len(),
            run.elapsed_s,
            m.gemm.len(),
            m.attention.len(),
            m.copy.len(),
            m.p2p.len(),
            m.collectives.len(),
            m.overlap.len()
        ),
        format!("GEMM sizes: {plateau}"),
    ];
    if !run.skipped.is_empty() {
        notes.push(format!("{} measurements left out:", run.skipped.len()));
        notes.extend(run.skipped.iter().take(30).map(|s| format!("  {s}")));
        if run.skipped.len() > 30 {
            notes.push(format!("  … and {} more", run.skipped.len() - 30));
        }
    }
    if plan.units.is_empty() {
        notes.push(format!(
            "no units run: none of the plan's units suits {} devices",
            backend.devices()
        ));
    }
    let mut units = Vec::new();
    for spec in &plan.units {
        let name = format!(
            "{} {} p={} s={} h={}",
            spec.method.id(),
            spec.unit.id(),
            spec.shape.p,
            spec.shape.s,
            spec.shape.h
        );
        // A unit whose f64 reference would not fit on the host (or take hours) is skipped,
        // and the notes say so: the measurements and the fit stand without it.
        if let Err(e) = crate::backend::unit::cost::check_host_cost(spec) {
            notes.push(format!("unit skipped: {e}"));
            continue;
        }
        let popts = PredictOptions {
            compute_scale: backend.compute_scale(spec.shape.p, backend.devices()),
            transfer_scale: backend.transfer_scale(spec.shape.p),
            runtime: backend.runtime(),
            ..PredictOptions::default()
        };
        if let Some(total) = opts.budget_s {
            // The timed runs and one warm-up at the predicted time, with a factor 3 of headroom
            // for the prediction and the reference check.
            let est = 3.0 * (opts.unit_runs as f64 + 1.0) * predict(spec, &hw, popts).time_s + 2.0;
            let left = total - start.elapsed().as_secs_f64();
            if est > left {
                notes.push(format!(
                    "unit skipped for time: {name} (estimated {est:.1} s, {left:.1} s left)"
                ));
                continue;
            }
        }
        progress(&format!("running {name}"));
        units.push(compare_unit(backend, spec, &hw, popts, opts.unit_runs)?);
    }
    notes.extend(load_notes(backend.name(), load_before, cpu::load_average()));
    if let Some(total) = opts.budget_s {
        notes.push(format!(
            "calibration took {:.1} s of a {total:.0} s budget",
            start.elapsed().as_secs_f64()
        ));
    }
    Ok(Report {
        backend: meta.backend,
        device: meta.device,
        host: meta.host,
        date: meta.date,
        profile_path: opts.out.clone(),
        measurements_path: m_path,
        fit,
        measurements: m,
        units,
        profile: hw,
        notes,
    })
}

/// `metp-sim calibrate --fit`: fits `base`'s kernel model to the measurement file at
/// `measurements` and writes the result to `out` (atomically; refused if it exists and `force`
/// is off). Every changed figure's source names the command, the file and the base.
pub fn fit_file(
    measurements: &Path,
    base_name: &str,
    out: &Path,
    force: bool,
) -> Result<FitReport> {
    profile::ensure_writable(out, force)?;
    let m = KernelMeasurements::read(measurements)?;
    let base = crate::config::load_hardware(base_name)?;
    // The profile written must replace neither input (--out = --base or = --fit).
    crate::atomic::check_not_input(out)?;
    m.check_against(&base, measurements)?;
    let label = format!(
        "fitted by metp-sim calibrate --fit {} --base {}",
        measurements.display(),
        base_name
    );
    let fit = fit_profile(&m, &base, &|what| format!("{label}: {what}"))?;
    profile::write(out, &fit.profile, force)?;
    Ok(fit)
}

/// A profile measured on the fly on `backend` by `plan` and fitted onto its base profile,
/// nothing written (what `run` predicts with when no `--hw` is given).
pub fn measure_profile(backend: &mut dyn Backend, plan: &Plan) -> Result<Hardware> {
    let date = profile::today();
    let m = measure(backend, plan, &date, &mut |_| {})?.measurements;
    let meta = Meta {
        backend: backend.name().to_string(),
        host: profile::host_name(),
        date,
        device: backend.device(),
        devices: backend.devices(),
        link: backend.link(),
        memory_bytes: backend.memory_bytes(),
    };
    let base = profile::backend_base(&meta, &m)?;
    Ok(fit_profile(&m, &base, &|what| meta.source(what))?.profile)
}

/// The host's load average before and after a calibration and, on the CPU backend, a warning
/// when other processes were using the cores.
fn load_notes(backend: &str, before: Option<f64>, after: Option<f64>) -> Vec<String> {
    let (Some(before), Some(after)) = (before, after) else {
        return Vec::new();
    };
    let cores = cpu::cores();
    let mut notes = vec![format!(
        "host load average {before:.2} before, {after:.2} after, on {cores} cores"
    )];
    if backend == "cpu" && before.max(after) > cores as f64 * 0.75 {
        notes.push(
            "other processes were using the cores: CPU timings, and so the unit errors, are \
             unreliable — calibrate on a quiet machine"
                .into(),
        );
    }
    notes
}
