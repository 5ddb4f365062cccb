//! `calibrate` on a GPU node: the measurement grid ([`super::grid`]) measured into a
//! [`KernelMeasurements`] file written beside the profile (`<profile>.measurements.json`), a
//! profile fitted from it, and the LLaMA-sized units run and compared with the profile's
//! prediction — within a time budget (the measurements take at most 65% of it; a unit whose
//! estimated time does not fit in what is left is skipped, and the report says so).
//!
//! The fit here is the efficiency-table fit of [`crate::calibrate::fit_all`] on the square,
//! unmasked part of the attention measurements; the profile's peak says whether it was read on
//! the GEMM plateau ([`super::runner::plateau_statement`]). `metp-sim calibrate --fit` refits a
//! measurement file with the kernel model. Always built; tested on the mock backend.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{grid, runner};
use crate::calibrate::backend::{AttnBlock, Backend, GemmShape, Pass, SlowdownSample};
use crate::calibrate::compare::compare_unit;
use crate::calibrate::measure::{fit_all, Measurements, Timed};
use crate::calibrate::measurements::KernelMeasurements;
use crate::calibrate::predict::{predict, PredictOptions};
use crate::calibrate::profile::{self, Meta};
use crate::calibrate::{Options, Report};
use crate::error::Result;
use crate::exec::Unit;

/// Where the measurement file of a profile goes: `x.json` → `x.measurements.json`.
pub fn measurements_path(profile: &Path) -> PathBuf {
    let stem = profile
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "profile".into());
    profile.with_file_name(format!("{stem}.measurements.json"))
}

/// The measurements the efficiency-table fit takes: GEMMs, the square unmasked attention
/// calls (forward and backward), copies and element-wise passes (by bytes moved: twice the
/// buffer), messages between GPUs 0 and 1 (or their one-GPU emulation), slowdown samples.
pub fn fit_input(m: &KernelMeasurements) -> Measurements {
    let mut attention = Vec::new();
    for a in &m.attention {
        if a.causal || a.q() != a.kv() {
            continue;
        }
        let blk = AttnBlock {
            b: a.b as usize,
            c: a.q() as usize,
            heads: a.heads as usize,
            d: a.d() as usize,
        };
        attention.push(Timed {
            what: (blk, Pass::Forward),
            seconds: a.fwd_s,
        });
        if let Some(b) = a.bwd_s {
            attention.push(Timed {
                what: (blk, Pass::Backward),
                seconds: b,
            });
        }
    }
    Measurements {
        gemm: m
            .gemm
            .iter()
            .map(|g| Timed {
                what: GemmShape::new(g.m as usize, g.n as usize, g.k as usize),
                seconds: g.s,
            })
            .collect(),
        attention,
        elementwise: m
            .copy
            .iter()
            .filter_map(|c| {
                c.mul_s.map(|s| Timed {
                    what: 2 * c.bytes,
                    seconds: s,
                })
            })
            .collect(),
        copies: m
            .copy
            .iter()
            .filter_map(|c| {
                c.copy_s.map(|s| Timed {
                    what: 2 * c.bytes,
                    seconds: s,
                })
            })
            .collect(),
        transfers: m
            .p2p
            .iter()
            .filter(|p| (p.from, p.to) == (0, 1) || p.from == p.to)
            .map(|p| Timed {
                what: p.bytes,
                seconds: p.s,
            })
            .collect(),
        slowdown: m
            .overlap
            .iter()
            .map(|o| SlowdownSample {
                alone_s: o.alone_s,
                with_transfer_s: o.with_traffic_s,
            })
            .collect(),
    }
}

/// Measures the grid, writes the measurement file and the profile, runs the units; `budget_s`
/// bounds the whole of it (see the module docs).
pub fn calibrate(
    backend: &mut dyn Backend,
    opts: &Options,
    budget_s: f64,
    progress: &mut dyn FnMut(&str),
) -> Result<Report> {
    let start = Instant::now();
    profile::ensure_writable(&opts.out, opts.force)?;
    let mpath = measurements_path(&opts.out);
    profile::ensure_writable(&mpath, opts.force)?;
    let mut g = grid::measurement_grid(opts.quick);
    g.budget_s = g.budget_s.min(0.65 * budget_s);
    let run = runner::measure(backend, &g, opts.quick, &opts.date, progress)?;
    crate::atomic::write_atomic(&mpath, run.measurements.to_json().as_bytes())?;
    progress(&format!("measurements written to {}", mpath.display()));
    let m = fit_input(&run.measurements);
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
    let mut hw = profile::build(&meta, &fits, &m);
    let plateau = runner::plateau_statement(&run.measurements, 0.05);
    hw.gpu.peak_bf16_flops_per_s.source = format!(
        "{}; {plateau} (measurements: {})",
        hw.gpu.peak_bf16_flops_per_s.source,
        mpath
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    profile::write(&opts.out, &hw, opts.force)?;
    progress(&format!("profile written to {}", opts.out.display()));

    let mut notes = vec![
        format!(
            "{} measurements in {:.1} s written to {} ({} GEMMs, {} attention calls, {} copy \
             sizes, {} messages, {} collectives, {} slowdown samples)",
            run.measurements.gemm.len()
                + run.measurements.attention.len()
                + run.measurements.copy.len()
                + run.measurements.p2p.len()
                + run.measurements.collectives.len()
                + run.measurements.overlap.len(),
            run.elapsed_s,
            mpath.display(),
            run.measurements.gemm.len(),
            run.measurements.attention.len(),
            run.measurements.copy.len(),
            run.measurements.p2p.len(),
            run.measurements.collectives.len(),
            run.measurements.overlap.len()
        ),
        format!("peak: {plateau}"),
    ];
    if !run.skipped.is_empty() {
        notes.push(format!("{} measurements left out:", run.skipped.len()));
        notes.extend(run.skipped.iter().take(30).map(|s| format!("  {s}")));
        if run.skipped.len() > 30 {
            notes.push(format!("  … and {} more", run.skipped.len() - 30));
        }
    }

    let units = grid::units(backend.devices(), opts.quick);
    if units.is_empty() {
        notes.push(format!(
            "no units run: neither LLaMA-2 layer's heads and MLP width divide by {} devices",
            backend.devices()
        ));
    }
    let mut compared = Vec::new();
    for spec in &units {
        let popts = PredictOptions {
            compute_scale: backend.compute_scale(spec.shape.p, backend.devices()),
            transfer_scale: backend.transfer_scale(spec.shape.p),
            ..PredictOptions::default()
        };
        let name = format!(
            "{} {} p={} s={} h={}",
            spec.method.id(),
            match spec.unit {
                Unit::Attention => "attention",
                Unit::Mlp => "mlp",
            },
            spec.shape.p,
            spec.shape.s,
            spec.shape.h
        );
        // Runs + one warm-up at the predicted time, with a factor 3 of headroom for the
        // prediction and the reference check.
        let est = 3.0 * (opts.unit_runs as f64 + 1.0) * predict(spec, &hw, popts).time_s + 2.0;
        let left = budget_s - start.elapsed().as_secs_f64();
        if est > left {
            notes.push(format!(
                "unit skipped for time: {name} (estimated {est:.1} s, {left:.1} s left)"
            ));
            continue;
        }
        progress(&format!("running {name}"));
        compared.push(compare_unit(backend, spec, &hw, popts, opts.unit_runs)?);
    }
    notes.push(format!(
        "calibration took {:.1} s of a {budget_s:.0} s budget",
        start.elapsed().as_secs_f64()
    ));
    Ok(Report {
        backend: meta.backend,
        device: meta.device,
        host: meta.host,
        date: meta.date,
        profile_path: opts.out.clone(),
        fits,
        measurements: m,
        units: compared,
        profile: hw,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::mock::MockBackend;

    #[test]
    fn calib_measurement_file_goes_beside_the_profile() {
        assert_eq!(
            measurements_path(Path::new("out/h200-cuda.json")),
            PathBuf::from("out/h200-cuda.measurements.json")
        );
    }

    #[test]
    fn calib_gpu_flow_writes_measurements_profile_and_units_on_the_mock() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("mock.json");
        let opts = Options {
            quick: true,
            out: out.clone(),
            force: false,
            host: "test".into(),
            date: "2026-11-30".into(),
            unit_runs: 1,
        };
        let mut b = MockBackend::new(MockBackend::truth_profile());
        // The mock's measurements take no real time; its "times" follow a small profile.
        let r = calibrate(&mut b, &opts, 1e9, &mut |_| {}).unwrap();
        let m = KernelMeasurements::read(&measurements_path(&out)).unwrap();
        assert!(!m.gemm.is_empty() && !m.attention.is_empty() && !m.copy.is_empty());
        assert!(out.exists());
        assert!(r
            .profile
            .gpu
            .peak_bf16_flops_per_s
            .source
            .contains("plateau"));
        assert_eq!(r.units.len(), grid::units(b.devices(), true).len());
        // A second run refuses to overwrite either file.
        assert!(calibrate(&mut b, &opts, 1e9, &mut |_| {}).is_err());
    }
}
