//! `metp-sim calibrate`: measure, fit and write a hardware profile, then run METP's units and
//! report predicted against measured.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;

use super::link::{BackendArg, LinkArgs, OutFormat};
use crate::calibrate::cpu::CpuBackend;
use crate::calibrate::profile::{default_path, host_name, today};
use crate::calibrate::{self, Backend, Options, Plan, Report};
use crate::error::{Error, Result};
use crate::exec::Unit;
use crate::report::{to_json, Table};

#[derive(Debug, Args)]
pub struct CalibrateArgs {
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
    /// CUDA: seconds the whole calibration may take (measurements at most 65% of it, then the
    /// units that still fit; default 150, 40 with --quick).
    #[arg(long)]
    budget_s: Option<f64>,
    #[command(flatten)]
    link: LinkArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: OutFormat,
}

pub fn run(a: CalibrateArgs) -> Result<String> {
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
    let opts = Options {
        quick: a.quick,
        out,
        force: a.force,
        host,
        date: today(),
        unit_runs: a.runs.unwrap_or(if a.quick { 1 } else { 3 }).max(1),
    };
    // A GPU calibration always logs its progress (with the elapsed time): its log is the
    // record of a short, rare run on a GPU machine.
    let verbose = std::io::stderr().is_terminal() || a.backend == BackendArg::Cuda;
    let t0 = std::time::Instant::now();
    let mut progress = |msg: &str| {
        if verbose {
            eprintln!("calibrate [{:.1} s]: {msg}", t0.elapsed().as_secs_f64());
        }
    };
    let load_before = calibrate::cpu::load_average();
    let mut report = if a.backend == BackendArg::Cuda {
        let budget = a.budget_s.unwrap_or(if a.quick { 40.0 } else { 150.0 });
        if !(budget.is_finite() && budget > 0.0) {
            return Err(Error::arg(
                "--budget-s",
                "must be a positive number of seconds",
            ));
        }
        calibrate::cuda::flow::calibrate(backend.as_mut(), &opts, budget, &mut progress)?
    } else {
        let units = calibrate::measure::default_units_for(backend.name(), a.devices, a.quick);
        let plan = Plan::for_units(units, a.quick, link);
        calibrate::calibrate(backend.as_mut(), &plan, &opts, &mut progress)?
    };
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

fn table(r: &Report) -> String {
    let f = &r.fits;
    let mut s = format!(
        "calibrated {} profile written to {}\ndevice: {}\n\n",
        r.backend,
        r.profile_path.display(),
        r.device
    );
    s.push_str(&format!(
        "peak (best GEMM / attention block)  {:.4e} FLOP/s\n\
         element-wise (best)                 {:.4e} B/s\n\
         link                                {:.4e} B/s, latency {:.3e} s (r² {:.4})\n\
         compute slowdown under a transfer   {:.3}\n",
        f.gemm.peak,
        f.elementwise.peak,
        f.link.bytes_per_s,
        f.link.latency_s,
        f.link.r2,
        f.slowdown_fraction
    ));
    let pts = |v: &[(f64, f64)]| {
        v.iter()
            .map(|(x, y)| format!("{x:.2e}:{y:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    s.push_str(&format!("gemm efficiency        {}\n", pts(&f.gemm.points)));
    s.push_str(&format!(
        "attention efficiency   {}\n",
        pts(&f.attention.points)
    ));
    s.push_str(&format!(
        "elementwise efficiency {}\n\n",
        pts(&f.elementwise.points)
    ));
    let mut t = Table::new(
        &[
            "unit / ring",
            "predicted_s",
            "measured_s",
            "error",
            "max_rel_error",
            "peak_bytes (inventory)",
        ],
        &[false, true, true, true, true, true],
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
            match u.inventory_peak_bytes {
                Some(i) => format!("{} ({i})", u.measured_peak_bytes),
                None => format!("{} (-)", u.measured_peak_bytes),
            },
        ]);
        for p in &u.phases {
            t.row(vec![
                format!("  {:?} ({} steps)", p.phase, p.steps),
                format!("{:.6}", p.predicted_s),
                format!("{:.6}", p.measured_s),
                format!("{:+.1}%", 100.0 * p.rel_error),
                String::new(),
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
        "\nlargest unit error {:.1}% (goal: within 10%){}\n",
        100.0 * worst,
        if worst <= 0.10 { "" } else { " — not met" }
    ));
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}
