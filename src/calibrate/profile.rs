//! The calibrated hardware profile: built from the fits with a source on every figure, and
//! written atomically, never over an existing file without `--force`.

use std::path::{Path, PathBuf};

use super::fit::Fits;
use super::measure::Measurements;
use crate::config::{
    Efficiency, EfficiencyTable, Figure, Gpu, Hardware, InterNode, InterNodeKind, IntraNode,
    IntraNodeKind, Reserved,
};
use crate::error::{Error, Result};
use crate::exec::device::Link;

/// Who calibrated what, where and when: goes into every `source`.
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    /// Backend name (`cpu`, `cuda`, `mock`).
    pub backend: String,
    /// Host name.
    pub host: String,
    /// Date (UTC, YYYY-MM-DD).
    pub date: String,
    /// What was measured, in words.
    pub device: String,
    /// Devices measured at once.
    pub devices: usize,
    /// The CPU link throttle, if any.
    pub link: Option<Link>,
    /// Device memory in bytes.
    pub memory_bytes: u64,
}

impl Meta {
    /// `calibrated by metp-sim calibrate --backend B on HOST DATE: what`.
    pub fn source(&self, what: &str) -> String {
        format!(
            "calibrated by metp-sim calibrate --backend {} on {} {}: {what}",
            self.backend, self.host, self.date
        )
    }
}

fn range(points: &[(f64, f64)]) -> String {
    match (points.first(), points.last()) {
        (Some(a), Some(b)) => format!("{} points, sizes {:.3e} to {:.3e}", points.len(), a.0, b.0),
        _ => "no points".into(),
    }
}

/// Builds a complete, valid profile from the fits.
pub fn build(meta: &Meta, fits: &Fits, m: &Measurements) -> Hardware {
    let fig = |value: f64, what: String| Figure {
        value,
        source: meta.source(&what),
    };
    let link_desc = match meta.link {
        Some(l) => format!(
            " through the exec channels throttled to {:.4e} B/s and {:.3e} s per message",
            l.bandwidth_bytes_per_s, l.latency_s
        ),
        None => " through the exec channels (unthrottled)".into(),
    };
    let name = format!("{}-{}", meta.host, meta.backend);
    Hardware {
        name: name.clone(),
        description: format!(
            "{} ({} devices measured at once), calibrated on {}",
            meta.device, meta.devices, meta.date
        ),
        gpus_per_node: meta.devices.max(1) as u64,
        nodes: 1,
        gpu: Gpu {
            model: meta.device.clone(),
            memory_bytes: fig(
                meta.memory_bytes as f64,
                "memory of one device as the backend reports it (CPU: MemTotal of the host)".into(),
            ),
            peak_bf16_flops_per_s: fig(
                fits.gemm.peak,
                format!(
                    "best rate over the GEMM and attention-block measurements ({}; {} devices at \
                     once), used as the peak every efficiency fraction refers to",
                    range(&fits.gemm.points),
                    meta.devices
                ),
            ),
            hbm_bytes_per_s: fig(
                fits.elementwise.peak,
                format!(
                    "best rate of a device-local buffer copy over {} sizes (bytes moved = 4 per \
                     bf16 element, read and write); plain copies are priced at this rate",
                    m.copies.len()
                ),
            ),
            kernel_launch_s: fig(
                0.0,
                "set to 0: the per-call overhead of small kernels is inside the measured \
                 efficiency tables"
                    .into(),
            ),
        },
        efficiency: Efficiency {
            gemm: EfficiencyTable {
                source: meta.source(&format!(
                    "GEMM time per call (median), size = 2mnk FLOPs, fraction = rate / peak ({})",
                    range(&fits.gemm.points)
                )),
                points: fits.gemm.points.clone(),
            },
            attention: EfficiencyTable {
                source: meta.source(&format!(
                    "fused attention block of a METP ring step, forward (4·b·c²·heads·d FLOPs) \
                     and backward (counted as 2.5 × forward), time per call (median), fraction = \
                     rate / peak ({})",
                    range(&fits.attention.points)
                )),
                points: fits.attention.points.clone(),
            },
            elementwise: EfficiencyTable {
                source: meta.source(&format!(
                    "element-wise GeLU kernel, size = bytes moved, fraction = rate / \
                     hbm_bytes_per_s ({})",
                    range(&fits.elementwise.points)
                )),
                points: fits.elementwise.points.clone(),
            },
        },
        intra_node: IntraNode {
            kind: IntraNodeKind::Nvswitch,
            bytes_per_s_per_direction: fig(
                fits.link.bytes_per_s,
                format!(
                    "1/slope of a least-squares fit t = α + bytes/B over {} ping-pong messages \
                     between two devices{link_desc} (r² = {:.4}); kind 'nvswitch' = every pair \
                     has its own full-duplex link",
                    m.transfers.len(),
                    fits.link.r2
                ),
            ),
            p2p_latency_s: fig(
                fits.link.latency_s,
                format!(
                    "intercept of the same fit (raw {:.3e} s, clamped at 0)",
                    fits.link.raw_intercept_s
                ),
            ),
            collective_latency_s: fig(
                fits.link.latency_s,
                "not measured: set to the point-to-point latency (collectives are rings of \
                 point-to-point messages here)"
                    .into(),
            ),
        },
        inter_node: InterNode {
            kind: InterNodeKind::IbHdr,
            nics_per_node: 1,
            bytes_per_s_per_nic: fig(
                fits.link.bytes_per_s,
                "not applicable (one host): set to the intra-node link".into(),
            ),
            latency_s: fig(
                fits.link.latency_s,
                "not applicable (one host): set to the intra-node latency".into(),
            ),
        },
        reserved: Reserved {
            cuda_context_bytes: fig(
                0.0,
                "not measured: 0 (no CUDA context on this backend or not measured)".into(),
            ),
            nccl_bytes: fig(0.0, "not measured: 0".into()),
            allocator_headroom_fraction: fig(0.0, "not measured: 0".into()),
        },
        overlap_compute_slowdown_fraction: fig(
            fits.slowdown_fraction,
            format!(
                "GEMM time with a stream of messages arriving at its device over GEMM time alone, \
                 minus 1 (median of {} samples, clamped to [0, 0.95])",
                m.slowdown.len()
            ),
        ),
    }
}

/// Fails with [`Error::Exists`] when `path` exists and `force` is off (checked before any
/// measurement, so that a long calibration does not end in a refusal).
pub fn ensure_writable(path: &Path, force: bool) -> Result<()> {
    if path.exists() && !force {
        return Err(Error::Exists {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Validates and writes the profile as pretty JSON, atomically (temporary file + rename).
pub fn write(path: &Path, hw: &Hardware, force: bool) -> Result<()> {
    ensure_writable(path, force)?;
    hw.validate(path)?;
    crate::atomic::write_atomic(path, crate::atomic::to_json(hw).as_bytes())
}

/// The default output: `hardware-profiles/calibrated/<host>-<backend>.json`.
pub fn default_path(host: &str, backend: &str) -> PathBuf {
    PathBuf::from("hardware-profiles")
        .join("calibrated")
        .join(format!("{host}-{backend}.json"))
}

/// This machine's host name, reduced to `[A-Za-z0-9._-]` (for file names).
pub fn host_name() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let clean: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if clean.is_empty() {
        "unknown-host".into()
    } else {
        clean
    }
}

/// Today's date in UTC, `YYYY-MM-DD` (civil-from-days, H. Hinnant's algorithm).
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    date_of(secs / 86_400)
}

/// `YYYY-MM-DD` of a day count since 1970-01-01.
pub fn date_of(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calib_dates_are_civil() {
        assert_eq!(date_of(0), "1970-01-01");
        assert_eq!(date_of(19_723), "2024-01-01");
        assert_eq!(date_of(20_787), "2026-11-30");
    }
}
