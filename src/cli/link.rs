//! Flags shared by `run` and `calibrate`: backend choice, CPU link throttle, output format.

use clap::{Args, ValueEnum};

use crate::error::{Error, Result};
use crate::exec::device::Link;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    Cpu,
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
                if !(bw.is_finite() && bw > 0.0) {
                    return Err(Error::arg(
                        "--link-bandwidth",
                        format!("must be a positive number of bytes per second, got {bw}"),
                    ));
                }
                let lat = lat.unwrap_or(0.0);
                if !(lat.is_finite() && lat >= 0.0) {
                    return Err(Error::arg(
                        "--link-latency",
                        format!("must be a non-negative number of seconds, got {lat}"),
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
