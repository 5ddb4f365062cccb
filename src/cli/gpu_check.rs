//! `metp-sim gpu-check`: the steps of `scripts/gpu-check.sh` that are not measurements —
//! `split` (a measurement file into a fit part and a held-out part, every n-th entry of each
//! kind held out), `merge` (files of one device as one) and `table` (the closing table: held-out kernel errors per kind, units
//! predicted against measured).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::calibrate::gpu_check;
use crate::error::Result;
use crate::fitting::measurements::KernelMeasurements;

#[derive(Debug, Args)]
pub struct GpuCheckArgs {
    #[command(subcommand)]
    command: GpuCheckCommand,
}

#[derive(Debug, Subcommand)]
enum GpuCheckCommand {
    /// Split a measurement file: every n-th entry of each kind to --held-out, the rest to --fit.
    Split {
        /// The measurement file (`calibrate` writes `<profile>.measurements.json`).
        #[arg(long)]
        input: PathBuf,
        /// Hold out every n-th entry of each kind.
        #[arg(long, default_value = "4")]
        every: usize,
        /// Where the fit part goes.
        #[arg(long)]
        fit: PathBuf,
        /// Where the held-out part goes.
        #[arg(long)]
        held_out: PathBuf,
    },
    /// Merge measurement files of one device (e.g. the shared H200 file and a PyTorch run)
    /// into one, their entries in order.
    Merge {
        /// The files, in order.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Where the merged file goes.
        #[arg(long)]
        out: PathBuf,
    },
    /// The closing table from `kernels --compare --format json` and `calibrate`/`run --format
    /// json` outputs (missing files are reported as such).
    Table {
        /// Output of `metp-sim kernels --hw FITTED --input HELD_OUT --compare --format json`.
        #[arg(long)]
        compare: Option<PathBuf>,
        /// Outputs of `calibrate --format json` or `run --format json`.
        #[arg(long = "units")]
        units: Vec<PathBuf>,
    },
}

fn read_json(path: &std::path::Path) -> Result<serde_json::Value> {
    crate::config::read_json(path)
}

pub fn run(a: GpuCheckArgs) -> Result<String> {
    match a.command {
        GpuCheckCommand::Split {
            input,
            every,
            fit,
            held_out,
        } => {
            let m = KernelMeasurements::read(&input)?;
            // Both outputs checked before either is written: neither the input (read above:
            // `atomic::check_output_file` knows it) nor each other.
            crate::atomic::check_output_file(&fit)?;
            crate::atomic::check_output_file(&held_out)?;
            crate::atomic::check_distinct_outputs(&[("--fit", &fit), ("--held-out", &held_out)])?;
            let (f, h) = gpu_check::split(&m, every)?;
            crate::atomic::write_atomic(&fit, f.to_json().as_bytes())?;
            crate::atomic::write_atomic(&held_out, h.to_json().as_bytes())?;
            let count = |m: &KernelMeasurements| {
                m.gemm.len()
                    + m.attention.len()
                    + m.copy.len()
                    + m.p2p.len()
                    + m.collectives.len()
                    + m.overlap.len()
            };
            Ok(format!(
                "{} entries to fit ({}), {} held out ({}): every {every}th of each kind\n",
                count(&f),
                fit.display(),
                count(&h),
                held_out.display()
            ))
        }
        GpuCheckCommand::Merge { inputs, out } => {
            let files = inputs
                .iter()
                .map(|p| KernelMeasurements::read(p))
                .collect::<Result<Vec<_>>>()?;
            // Not one of the inputs (read above).
            crate::atomic::check_output_file(&out)?;
            let m = KernelMeasurements::merge(&files)?;
            crate::atomic::write_atomic(&out, m.to_json().as_bytes())?;
            Ok(format!(
                "{} GEMMs, {} attention calls, {} copy sizes from {} files to {}\n",
                m.gemm.len(),
                m.attention.len(),
                m.copy.len(),
                files.len(),
                out.display()
            ))
        }
        GpuCheckCommand::Table { compare, units } => {
            let mut notes = Vec::new();
            let kinds = match &compare {
                Some(p) => match read_json(p) {
                    Ok(v) => match gpu_check::held_out_errors(&v) {
                        Ok(k) => k,
                        Err(e) => {
                            notes.push(format!("{}: {e}", p.display()));
                            vec![]
                        }
                    },
                    Err(e) => {
                        notes.push(format!("held-out comparison unavailable: {e}"));
                        vec![]
                    }
                },
                None => vec![],
            };
            let mut rows = Vec::new();
            for p in &units {
                match read_json(p) {
                    Ok(v) => match gpu_check::unit_rows(&v) {
                        Ok(Some(r)) => rows.extend(r),
                        Ok(None) => notes.push(format!("{}: no unit results in it", p.display())),
                        Err(e) => notes.push(format!("{}: {e}", p.display())),
                    },
                    Err(e) => notes.push(format!("unit results unavailable: {e}")),
                }
            }
            Ok(crate::report::gpu_check_table(&kinds, &rows, &notes))
        }
    }
}
