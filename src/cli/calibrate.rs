//! `metp-sim calibrate`: measure, fit and write a hardware profile, then run METP's units and
//! report predicted against measured; or, with `--fit FILE --base PROFILE --out NEW`, only fit
//! a profile's kernel model to a measurement file.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;

use super::link::{BackendArg, LinkArgs, OutFormat};
use crate::calibrate::cpu::CpuBackend;
use crate::calibrate::profile::{default_path, host_name, today};
use crate::calibrate::{self, Backend, FitReport, Options, Plan, Report};
use crate::error::{Error, Result};
use crate::exec::Unit;
use crate::report::{to_json, Table};

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Fit only: a kernel measurement file (the shared H200 format) to fit `--base`'s kernel
    /// model to; nothing is measured. Needs --base and --out.
    #[arg(long, requires_all = ["base", "out"])]
    fit: Option<PathBuf>,
    /// The profile the measurements are fitted onto (name or path). Without --fit: default
    /// the backend's own base (CPU: a virtual-device model; CUDA: hgx-h200's kernel model).
    #[arg(long)]
    base: Option<String>,
    /// What to measure.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendArg,
    /// Where to write the profile (default hardware-profiles/calibrated/<host>-<backend>.json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Overwrite an existing profile.
    #[arg(long)]
    force: bool,
    /// Short measurements and small units (seconds; for CI and debug builds).
    #[arg(long)]
    quick: bool,
    /// Devices measured at once and used by the units (CPU: threads; CUDA: GPUs, or virtual
    /// devices on one GPU).
    #[arg(long, default_value = "2")]
    devices: usize,
    /// Timed runs per unit (median; default 1 with --quick, else 3).
    #[arg(long)]
    runs: Option<usize>,
    #[command(flatten)]
    link: LinkArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: OutFormat,
}

pub fn run(a: CalibrateArgs) -> Result<String> {
    if let (Some(file), Some(base), Some(out)) = (&a.fit, &a.base, &a.out) {
        let r = calibrate::fit_file(file, base, out, a.force)?;
        return Ok(match a.format {
            OutFormat::Json => to_json(&r),
            OutFormat::Table => fit_table(&r, out),
        });
    }
    if a.devices == 0 {
        return Err(Error::arg("--devices", "must be positive"));
    }
    let link = a.link.link()?;
    let host = host_name();
    let backend_name = match a.backend {
        BackendArg::Cpu => "cpu",
        BackendArg::Cuda => "cuda",
    };
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| default_path(&host, backend_name));
    // Refuse before building a backend or measuring anything.
    calibrate::profile::ensure_writable(&out, a.force)?;
    let mut backend: Box<dyn Backend> = match a.backend {
        BackendArg::Cpu => Box::new(CpuBackend::new(a.devices, link, a.quick)?),
        BackendArg::Cuda => {
            if link.is_some() {
                return Err(Error::arg(
                    "--link-bandwidth",
                    "the link throttle exists only on the cpu backend",
                ));
            }
            calibrate::cuda::open(a.devices, a.quick)?
        }
    };
    let units = calibrate::measure::default_units_for(backend.name(), a.devices, a.quick);
    let plan = Plan::for_units(units, a.quick, link);
    let opts = Options {
        quick: a.quick,
        out,
        force: a.force,
        host,
        date: today(),
        unit_runs: a.runs.unwrap_or(if a.quick { 1 } else { 3 }).max(1),
        base: a
            .base
            .as_deref()
            .map(crate::config::load_hardware)
            .transpose()?,
    };
    let verbose = std::io::stderr().is_terminal();
    let mut progress = |msg: &str| {
        if verbose {
            eprintln!("calibrate: {msg}");
        }
    };
    let load_before = calibrate::cpu::load_average();
    let mut report = calibrate::calibrate(backend.as_mut(), &plan, &opts, &mut progress)?;
    if let (Some(before), Some(after)) = (load_before, calibrate::cpu::load_average()) {
        let cores = calibrate::cpu::cores();
        report.notes.push(format!(
            "host load average {before:.2} before, {after:.2} after, on {cores} cores"
        ));
        if a.backend == BackendArg::Cpu && before.max(after) > cores as f64 * 0.75 {
            report.notes.push(
                "other processes were using the cores: CPU timings, and so the unit errors, \
                 are unreliable — calibrate on a quiet machine"
                    .into(),
            );
        }
    }
    Ok(match a.format {
        OutFormat::Json => to_json(&report),
        OutFormat::Table => table(&report),
    })
}

/// The fitted parameters and the errors per kind.
fn fit_text(f: &FitReport) -> String {
    let mut t = Table::new(
        &["parameter", "base", "fitted", "how"],
        &[false, true, true, false],
    );
    for p in &f.params {
        t.row(vec![
            p.field.clone(),
            format!("{:.4e}", p.base),
            format!("{:.4e}", p.value),
            format!("{:?}", p.status).to_lowercase(),
        ]);
    }
    let mut s = t.render();
    let mut k = Table::new(
        &["kind", "kernels", "median |error|", "largest |error|"],
        &[false, true, true, true],
    );
    for e in &f.errors {
        k.row(vec![
            e.kind.name().to_string(),
            e.samples.to_string(),
            format!("{:.1}%", 100.0 * e.median_abs_error),
            format!("{:.1}%", 100.0 * e.max_abs_error),
        ]);
    }
    s.push('\n');
    s.push_str(&k.render());
    if let Some(l) = &f.link {
        s.push_str(&format!(
            "\nlink {:.4e} B/s, latency {:.3e} s (r² {:.4})\n",
            l.bytes_per_s, l.latency_s, l.r2
        ));
    }
    if let Some(sd) = f.slowdown_fraction {
        s.push_str(&format!("compute slowdown under a transfer {sd:.3}\n"));
    }
    s
}

fn fit_table(f: &FitReport, out: &std::path::Path) -> String {
    format!(
        "profile '{}' fitted and written to {}\n\n{}",
        f.profile.name,
        out.display(),
        fit_text(f)
    )
}

fn table(r: &Report) -> String {
    let mut s = format!(
        "calibrated {} profile written to {} (measurements: {})\ndevice: {}\n\n",
        r.backend,
        r.profile_path.display(),
        r.measurements_path.display(),
        r.device
    );
    s.push_str(&fit_text(&r.fit));
    s.push('\n');
    let mut t = Table::new(
        &[
            "unit / ring",
            "predicted_s",
            "measured_s",
            "error",
            "max_rel_error",
        ],
        &[false, true, true, true, true],
    );
    for u in &r.units {
        let name = format!(
            "{} {} p={} s={} h={}",
            u.spec.method.id(),
            match u.spec.unit {
                Unit::Attention => "attention",
                Unit::Mlp => "mlp",
            },
            u.spec.shape.p,
            u.spec.shape.s,
            u.spec.shape.h
        );
        t.row(vec![
            name,
            format!("{:.6}", u.predicted.time_s),
            format!("{:.6}", u.measured_time_s),
            format!("{:+.1}%", 100.0 * u.rel_error),
            format!("{:.2e}", u.max_rel_error),
        ]);
        for p in &u.phases {
            t.row(vec![
                format!("  {:?} ({} steps)", p.phase, p.steps),
                format!("{:.6}", p.predicted_s),
                format!("{:.6}", p.measured_s),
                format!("{:+.1}%", 100.0 * p.rel_error),
                String::new(),
            ]);
        }
    }
    s.push_str(&t.render());
    let worst = r
        .units
        .iter()
        .map(|u| u.rel_error.abs())
        .fold(0.0, f64::max);
    s.push_str(&format!(
        "\nlargest unit error {:.1}% (goal on CPU: within 10%){}\n",
        100.0 * worst,
        if worst <= 0.10 { "" } else { " — not met" }
    ));
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}
