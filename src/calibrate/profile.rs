//! The calibrated hardware profile: the base a backend's measurements are fitted onto (a
//! source on every figure), written atomically, never over an existing file without `--force`.

use std::path::{Path, PathBuf};

use crate::backend::unit::device::Link;
use crate::config::{
    AttentionModel, Figure, GemmModel, Gpu, Hardware, HostModel, InterNode, InterNodeKind,
    IntraNode, IntraNodeKind, KernelModel, MemoryModel, Reserved,
};
use crate::error::{Error, Result};
use crate::fitting::measurements::KernelMeasurements;

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

/// The kernel model a CPU virtual device starts from before its fit: one thread is one "SM"
/// that runs one tile after another (`sm_count` 1, one block per SM), with 8-wide tiles and
/// blocks (the scale of nalgebra's micro-kernels, so that padding to a tile costs little), no
/// host/device split (a kernel is a function call: host times 0) and no extra passes. The
/// rates and fixed times are starting values the fit replaces.
fn cpu_kernels(fig: &dyn Fn(f64, &str) -> Figure) -> KernelModel {
    let start = "starting value, replaced by the fit";
    let attention = |mma: f64| AttentionModel {
        block_q: fig(8.0, "CPU: 8 queries per block"),
        block_k: fig(8.0, "CPU: 8 keys per block"),
        ctas_per_sm: fig(1.0, "CPU: one block at a time per virtual device"),
        mma_fraction: fig(mma, start),
        tile_s: fig(1e-7, start),
        call_s: fig(1e-6, start),
        extra_bytes_per_element: fig(0.0, "CPU: no extra passes modelled"),
        isolated_extra_s: fig(
            0.0,
            "CPU: times are the kernels' own (no host/device split)",
        ),
        solo_fraction: None,
        max_splits: None,
        tiles: vec![],
    };
    KernelModel {
        host: HostModel {
            op_s: fig(
                0.0,
                "CPU: a kernel is a function call; no host issues ahead of it",
            ),
            isolated_gap_s: fig(0.0, "CPU: times are the kernels' own"),
            isolated_floor_s: fig(0.0, "CPU: times are the kernels' own"),
        },
        memory: MemoryModel {
            latency_s: fig(1e-7, start),
            elementwise_fraction: fig(0.5, start),
        },
        gemm: GemmModel {
            tile: fig(8.0, "CPU: 8-row tiles (8x16, 16x8, 8x8)"),
            k_step: fig(8.0, "CPU: k in steps of 8"),
            mma_fraction: fig(0.5, start),
            tile_s: fig(1e-7, start),
            call_s: fig(1e-6, start),
            power_fraction: None,
            power_time_s: None,
            stream_k: None,
            step_clock_fraction: None,
            fleet_clock_spread: None,
            job_clock_fraction: None,
            fp8: None,
        },
        attention_fwd: attention(0.3),
        attention_bwd: attention(0.3),
        attention: None,
        placeholder: None,
    }
}

/// The profile a backend's measurements are fitted onto: the machine's memory, and for the CPU
/// and mock backends [`cpu_kernels`] with twice the best measured GEMM rate as the peak (so
/// every fitted fraction stays below 1); for GPU backends the kernel model of the bundled `hgx-h200`
/// profile as the starting point (pass `--base` for another GPU). Links and slowdown are
/// placeholders the fit replaces from the file's messages and overlap samples.
pub fn backend_base(meta: &Meta, m: &KernelMeasurements) -> Result<Hardware> {
    let fig = |value: f64, what: &str| Figure {
        value,
        source: meta.source(what),
    };
    let gpu_like = !matches!(meta.backend.as_str(), "cpu" | "mock");
    let best_rate = m
        .gemm
        .iter()
        .map(|g| 2.0 * g.m as f64 * g.n as f64 * g.k as f64 / g.s)
        .fold(0.0, f64::max);
    let best_copy = m
        .copy
        .iter()
        .filter_map(|c| c.copy_s.or(c.mul_s).map(|t| 2.0 * c.bytes as f64 / t))
        .fold(0.0, f64::max);
    let (kernels, peak, fp8_peak, sm_count) = if gpu_like {
        let h200 = crate::config::load_hardware("hgx-h200")?;
        let mut k = h200.kernels.clone();
        let prior = |f: &mut Figure| {
            f.source = meta.source(&format!(
                "starting value from hardware-profiles/hgx-h200.json ({})",
                f.source
            ))
        };
        for f in [
            &mut k.host.op_s,
            &mut k.host.isolated_gap_s,
            &mut k.host.isolated_floor_s,
            &mut k.memory.latency_s,
            &mut k.memory.elementwise_fraction,
            &mut k.gemm.tile,
            &mut k.gemm.k_step,
            &mut k.gemm.mma_fraction,
            &mut k.gemm.tile_s,
            &mut k.gemm.call_s,
        ] {
            prior(f);
        }
        for f in [
            &mut k.gemm.power_fraction,
            &mut k.gemm.power_time_s,
            &mut k.gemm.stream_k,
        ]
        .into_iter()
        .flatten()
        {
            prior(f);
        }
        if let Some(f8) = &mut k.gemm.fp8 {
            prior(&mut f8.mma_fraction);
            if let Some(p) = &mut f8.power_fraction {
                prior(p);
            }
        }
        for a in [&mut k.attention_fwd, &mut k.attention_bwd] {
            for f in [&mut a.solo_fraction, &mut a.max_splits]
                .into_iter()
                .flatten()
            {
                prior(f);
            }
            for t in &mut a.tiles {
                for f in [
                    &mut t.block_q,
                    &mut t.block_k,
                    &mut t.ctas_per_sm,
                    &mut t.mma_fraction,
                    &mut t.solo_fraction,
                ] {
                    prior(f);
                }
                for f in [&mut t.split_block_q, &mut t.split_block_k]
                    .into_iter()
                    .flatten()
                {
                    prior(f);
                }
            }
        }
        for a in [&mut k.attention_fwd, &mut k.attention_bwd] {
            for f in [
                &mut a.block_q,
                &mut a.block_k,
                &mut a.ctas_per_sm,
                &mut a.mma_fraction,
                &mut a.tile_s,
                &mut a.call_s,
                &mut a.extra_bytes_per_element,
                &mut a.isolated_extra_s,
            ] {
                prior(f);
            }
        }
        let mut peak = h200.gpu.peak_bf16_flops_per_s;
        prior(&mut peak);
        let mut sm = h200.gpu.sm_count;
        prior(&mut sm);
        let mut fp8_peak = h200.gpu.peak_fp8_flops_per_s;
        if let Some(f) = &mut fp8_peak {
            prior(f);
        }
        (k, peak, fp8_peak, sm)
    } else {
        (
            cpu_kernels(&fig),
            fig(
                if best_rate > 0.0 {
                    2.0 * best_rate
                } else {
                    1e9
                },
                &format!(
                    "twice the best rate over the {} GEMM measurements ({} devices at once): \
                     the reference every mma_fraction refers to, above any rate a tile's \
                     k-loop reaches (the measured rates include fixed costs)",
                    m.gemm.len(),
                    meta.devices
                ),
            ),
            None,
            fig(1.0, "one virtual device runs one tile at a time"),
        )
    };
    let link_desc = match meta.link {
        Some(l) => format!(
            " through the exec channels throttled to {:.4e} B/s and {:.3e} s per message",
            l.bandwidth_bytes_per_s, l.latency_s
        ),
        None => " through the exec channels (unthrottled)".into(),
    };
    let placeholder = format!("placeholder until the fit of the messages{link_desc}");
    let name = format!("{}-{}", meta.host, meta.backend);
    Ok(Hardware {
        name,
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
                "memory of one device as the backend reports it (CPU: MemTotal of the host)",
            ),
            peak_bf16_flops_per_s: peak,
            // GPU backends start from hgx-h200's, FP8 included (not measured here); the CPU
            // and mock backends have none.
            peak_fp8_flops_per_s: fp8_peak,
            hbm_bytes_per_s: fig(
                if best_copy > 0.0 { best_copy } else { 1e10 },
                "best copy or element-wise rate (bytes read + written per second); the fit \
                 replaces it",
            ),
            sm_count,
        },
        kernels,
        intra_node: IntraNode {
            kind: IntraNodeKind::Nvswitch,
            bytes_per_s_per_direction: fig(
                meta.link.map_or(1e10, |l| l.bandwidth_bytes_per_s),
                &placeholder,
            ),
            link_bytes_per_s_per_direction: None,
            p2p_latency_s: fig(meta.link.map_or(1e-6, |l| l.latency_s), &placeholder),
            collective_latency_s: fig(
                meta.link.map_or(1e-6, |l| l.latency_s),
                "not measured: set to the point-to-point latency (collectives are rings of \
                 point-to-point messages here)",
            ),
        },
        inter_node: InterNode {
            kind: InterNodeKind::IbHdr,
            nics_per_node: 1,
            bytes_per_s_per_nic: fig(
                meta.link.map_or(1e10, |l| l.bandwidth_bytes_per_s),
                "not applicable (one host): set to the intra-node link's starting value",
            ),
            latency_s: fig(
                meta.link.map_or(1e-6, |l| l.latency_s),
                "not applicable (one host): set to the intra-node latency's starting value",
            ),
            wiring: Default::default(),
            spine: None,
        },
        reserved: Reserved {
            cuda_context_bytes: fig(
                0.0,
                "not measured: 0 (no CUDA context on this backend or not measured)",
            ),
            nccl_bytes: fig(0.0, "not measured: 0"),
            allocator_headroom_fraction: fig(0.0, "not measured: 0"),
        },
        overlap_compute_slowdown_fraction: fig(
            0.0,
            "placeholder until the fit of the overlap samples",
        ),
        collectives: Vec::new(),
        collective_library: None,
    })
}

/// The measurement file written beside a profile: `<stem>.measurements.json`.
pub fn measurements_path(profile: &Path) -> PathBuf {
    let stem = profile
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "profile".into());
    profile.with_file_name(format!("{stem}.measurements.json"))
}

/// Fails with [`Error::Exists`] when `path` exists and `force` is off (checked before any
/// measurement, so that a long calibration does not end in a refusal).
pub fn ensure_writable(path: &Path, force: bool) -> Result<()> {
    crate::atomic::check_output_file(path)?;
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
