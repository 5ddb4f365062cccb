//! `metp-sim calibrate`: measure, fit and write a hardware profile, then run METP's units and
//! report predicted against measured; or, with `--fit FILE --base PROFILE --out NEW`, only fit
//! a profile's kernel model to a measurement file.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;

use super::link::{check_devices, check_runs, BackendArg, LinkArgs, OutFormat};
use crate::backend::cpu::CpuBackend;
use crate::backend::Backend;
use crate::calibrate::profile::{default_path, host_name, today};
use crate::calibrate::{self, Options, Plan};
use crate::error::{Error, Result};
use crate::report;

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Fit only: a kernel measurement file (the shared H200 format) to fit `--base`'s kernel
    /// model to; nothing is measured. Needs --base and --out.
    #[arg(long, requires_all = ["base", "out"])]
    fit: Option<PathBuf>,
    /// Fit only: nccl-tests / rccl-tests logs (`PATH`, or `OP=PATH` when the log names no
    /// test) to fit `--base`'s link figures to (intra-node link, NVLS, point-to-point rate,
    /// NICs and their latencies); writes --out with sources naming the logs.
    #[arg(long, num_args = 1.., value_name = "LOG", requires_all = ["base", "out"], conflicts_with = "fit")]
    fit_links: Vec<String>,
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
    /// CUDA: seconds the whole calibration may take (measurements at most 65% of it, then the
    /// units that still fit; default 150, 40 with --quick).
    #[arg(long, conflicts_with = "fit")]
    budget_s: Option<f64>,
    #[command(flatten)]
    link: LinkArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: OutFormat,
}

pub fn run(a: CalibrateArgs) -> Result<String> {
    if let (false, Some(base), Some(out)) = (a.fit_links.is_empty(), &a.base, &a.out) {
        let r = crate::nccl_tests::fit::fit_links(&a.fit_links, base, out, a.force)?;
        return Ok(match a.format {
            OutFormat::Json => report::to_json(&r),
            OutFormat::Table => report::link_fit_table(&r),
        });
    }
    if let (Some(file), Some(base), Some(out)) = (&a.fit, &a.base, &a.out) {
        let r = calibrate::fit_file(file, base, out, a.force)?;
        return Ok(match a.format {
            OutFormat::Json => report::to_json(&r),
            OutFormat::Table => report::fit_table(&r, out),
        });
    }
    check_devices("--devices", a.devices)?;
    if a.backend == BackendArg::Cpu {
        // The CPU backend measures its units' own kernels, sized by --devices: a unit whose
        // f64 reference would not fit on the host (or take hours) means measurements that
        // would not either — refused before the backend starts or anything is measured.
        for u in &calibrate::default_units(a.devices, a.quick) {
            crate::backend::unit::cost::check_host_cost(u)?;
        }
    }
    let runs = a.runs.map(check_runs).transpose()?;
    let budget_s =
        match (a.backend, a.budget_s) {
            (BackendArg::Cpu, Some(_)) => return Err(Error::arg(
                "--budget-s",
                "the time budget exists only on the cuda backend (the cpu backend's measurements \
                 take seconds)",
            )),
            (BackendArg::Cpu, None) => None,
            (BackendArg::Cuda, b) => {
                let b = b.unwrap_or(if a.quick { 40.0 } else { 150.0 });
                if !(b.is_finite() && b > 0.0) {
                    return Err(Error::arg(
                        "--budget-s",
                        "must be a positive number of seconds",
                    ));
                }
                Some(b)
            }
        };
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
            crate::backend::cuda::open(a.devices, a.quick)?
        }
    };
    let plan = match a.backend {
        BackendArg::Cpu => {
            Plan::for_units(calibrate::default_units(a.devices, a.quick), a.quick, link)
        }
        BackendArg::Cuda => calibrate::grid::measurement_plan(a.devices, a.quick),
    };

    let opts = Options {
        quick: a.quick,
        out,
        force: a.force,
        host,
        date: today(),
        unit_runs: runs.unwrap_or(if a.quick { 1 } else { 3 }),
        base: a
            .base
            .as_deref()
            .map(crate::config::load_hardware)
            .transpose()?,
        budget_s,
    };
    // The profile written must not replace --base (read above).
    crate::atomic::check_not_input(&opts.out)?;
    // A GPU calibration always logs its progress (with the elapsed time): its log is the
    // record of a short, rare run on a GPU machine.
    let verbose = std::io::stderr().is_terminal() || a.backend == BackendArg::Cuda;
    let t0 = std::time::Instant::now();
    let mut progress = |msg: &str| {
        if verbose {
            eprintln!("calibrate [{:.1} s]: {msg}", t0.elapsed().as_secs_f64());
        }
    };
    let result = calibrate::calibrate(backend.as_mut(), &plan, &opts, &mut progress)?;
    Ok(match a.format {
        OutFormat::Json => report::to_json(&result),
        OutFormat::Table => report::calibration_table(&result),
    })
}
