//! Flags shared by `run` and `calibrate`: backend choice, CPU link throttle, output format.

use clap::{Args, ValueEnum};

use crate::backend::unit::device::Link;
use crate::config::limits::{LINK_THROTTLE, MAX_RUNS, MAX_VIRTUAL_DEVICES};
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// Threads on this machine's CPU, one per virtual device (no GPU needed).
    Cpu,
    /// CUDA GPUs (a build with --features cuda). With p GPUs and NCCL, device i runs on GPU i
    /// with NCCL send/recv between them — a path not yet run on more than one GPU (the
    /// committed runs had one H200; scripts/gpu-check.sh --gpus N is its test); else the p
    /// devices share GPU 0.
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutFormat {
    Table,
    Json,
}

/// The CPU link throttle.
#[derive(Debug, Args)]
pub struct LinkArgs {
    /// CPU backend: throttle every link between two virtual devices to this many bytes per
    /// second per direction (e.g. 4e6).
    #[arg(long)]
    pub link_bandwidth: Option<f64>,
    /// CPU backend: seconds added to every message (needs --link-bandwidth; default 0).
    #[arg(long)]
    pub link_latency: Option<f64>,
}

impl LinkArgs {
    pub fn link(&self) -> Result<Option<Link>> {
        match (self.link_bandwidth, self.link_latency) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(Error::arg(
                "--link-latency",
                "needs --link-bandwidth (the throttle has both)",
            )),
            (Some(bw), lat) => {
                let (min_bw, max_lat) = LINK_THROTTLE;
                if !(bw.is_finite() && bw >= min_bw) {
                    return Err(Error::arg(
                        "--link-bandwidth",
                        format!(
                            "must be at least {min_bw:e} bytes per second (slower links never \
                             finish a unit), got {bw}"
                        ),
                    ));
                }
                let lat = lat.unwrap_or(0.0);
                if !(lat.is_finite() && (0.0..=max_lat).contains(&lat)) {
                    return Err(Error::arg(
                        "--link-latency",
                        format!("must be from 0 to {max_lat} s, got {lat}"),
                    ));
                }
                Ok(Some(Link {
                    bandwidth_bytes_per_s: bw,
                    latency_s: lat,
                }))
            }
        }
    }
}

/// Checks `--runs`: 1 to [`MAX_RUNS`] (the same rule for `run` and `calibrate`).
pub fn check_runs(runs: usize) -> Result<usize> {
    if runs == 0 || runs as u64 > MAX_RUNS {
        return Err(Error::arg(
            "--runs",
            format!("must be from 1 to {MAX_RUNS}, got {runs}"),
        ));
    }
    Ok(runs)
}

/// Checks a count of virtual devices (`run --p`, `calibrate --devices`): 1 to
/// [`MAX_VIRTUAL_DEVICES`], one thread each.
pub fn check_devices(flag: &str, devices: usize) -> Result<usize> {
    if devices == 0 || devices as u64 > MAX_VIRTUAL_DEVICES {
        return Err(Error::arg(
            flag,
            format!("must be from 1 to {MAX_VIRTUAL_DEVICES} virtual devices, got {devices}"),
        ));
    }
    Ok(devices)
}
