//! `run`, `calibrate`, `kernels` and `gpu-check table` outputs: a unit's measured against
//! predicted memory and time, a calibration's fit and unit comparisons, kernels priced against
//! measured times, the GPU check's closing table.

use std::path::Path;

use super::table::Table;
use crate::backend::Timing;
use crate::calibrate::gpu_check::UnitRow;
use crate::calibrate::unit_run::UnitRun;
use crate::calibrate::Report;
use crate::fitting::kernel_fit::FitReport;
use crate::fitting::price::{KindErrors, Priced};

/// Human table for `metp-sim run`.
pub fn unit_run_table(o: &UnitRun) -> String {
    let sh = o.shape;
    let mut s = format!(
        "{} {} {} on the {} backend — p = {}, b = {}, s = {}, h = {}, a = {}, f = {}{}{}\n\n",
        o.method.id(),
        o.unit.id(),
        if o.flash { "fused" } else { "unfused" },
        o.backend,
        sh.p,
        sh.b,
        sh.s,
        sh.h,
        sh.a,
        sh.f,
        if o.causal { ", causal" } else { "" },
        match o.link {
            Some(l) => format!(
                ", link {:.3e} B/s + {:.3e} s",
                l.bandwidth_bytes_per_s, l.latency_s
            ),
            None => String::new(),
        }
    );
    let mut t = Table::new(&["field", "value"], &[false, true]);
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
    for (k, v) in [
        ("max_rel_error", format!("{:.3e}", o.max_rel_error)),
        ("measured_peak_bytes", o.measured_peak_bytes.to_string()),
        ("tracked_peak_bytes", o.tracked_peak_bytes.to_string()),
        ("predicted_peak_bytes", opt(o.predicted_peak_bytes)),
        ("measured_time_s", format!("{:.6}", o.measured_time_s)),
        ("predicted_time_s", format!("{:.6}", o.predicted_time_s)),
        (
            "time_rel_error",
            format!("{:+.1}%", 100.0 * o.time_rel_error),
        ),
    ] {
        t.row(vec![k.to_string(), v]);
    }
    s.push_str(&t.render());
    if !o.phases.is_empty() {
        s.push('\n');
        let mut t = Table::new(
            &[
                "ring",
                "steps",
                "predicted_s",
                "measured_s",
                "waited_s",
                "error",
            ],
            &[false, true, true, true, true, true],
        );
        for p in &o.phases {
            t.row(vec![
                format!("{:?}", p.phase),
                p.steps.to_string(),
                format!("{:.6}", p.predicted_s),
                format!("{:.6}", p.measured_s),
                format!("{:.6}", p.measured_wait_s),
                format!("{:+.1}%", 100.0 * p.rel_error),
            ]);
        }
        s.push_str(&t.render());
    }
    for g in &o.gpu_memory {
        s.push_str(&format!(
            "\nGPU {} ({} virtual devices): tracked high-water {} B, allocator high-water {}, \
             in use before {} B, after {} B (cuMemGetInfo)",
            g.gpu,
            g.virtual_devices,
            g.tracked_high_bytes,
            g.allocator_high_bytes
                .map(|b| format!("{b} B"))
                .unwrap_or_else(|| "-".into()),
            g.used_before_bytes,
            g.used_after_bytes
        ));
    }
    s.push_str(&format!("\npredicted from: {}\n", o.predicted_from));
    for n in &o.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

/// Median and largest |error| per kernel kind (the fit's, or a `kernels --compare`'s).
fn kind_errors_table(errors: &[KindErrors]) -> String {
    let mut k = Table::new(
        &["kind", "kernels", "median |error|", "largest |error|"],
        &[false, true, true, true],
    );
    for e in errors {
        k.row(vec![
            e.kind.name().to_string(),
            e.samples.to_string(),
            format!("{:.1}%", 100.0 * e.median_abs_error),
            format!("{:.1}%", 100.0 * e.max_abs_error),
        ]);
    }
    k.render()
}

/// The fitted parameters, the errors per kernel kind, the link and the slowdown.
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
    s.push('\n');
    s.push_str(&kind_errors_table(&f.errors));
    if let Some(l) = &f.link {
        s.push_str(&format!(
            "\nlink {:.4e} B/s, latency {:.3e} s (r² {:.4})\n",
            l.bytes_per_s, l.latency_s, l.r2
        ));
    }
    if let Some(sd) = f.slowdown_fraction {
        s.push_str(&format!("compute slowdown under a transfer {sd:.3}\n"));
    }
    for k in &f.sessions {
        s.push_str(&format!(
            "measurement session {}: its {} GEMMs ran at {:.3}× the first session's clock{} \
             (the profile is the first's; errors above price each session at its own)\n",
            k.session,
            k.gemm_samples,
            k.rate_factor,
            if k.at_edge {
                ", at the edge of the range searched: NOT determined by the data"
            } else {
                ""
            }
        ));
    }
    s
}

/// Human table for `metp-sim calibrate --fit`: the profile written and its fit.
pub fn fit_table(f: &FitReport, out: &Path) -> String {
    format!(
        "profile '{}' fitted and written to {}\n\n{}",
        f.profile.name,
        out.display(),
        fit_text(f)
    )
}

/// Human table for `metp-sim calibrate`: the fit, then each unit and ring predicted against
/// measured.
pub fn calibration_table(r: &Report) -> String {
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
            "peak_bytes (inventory)",
        ],
        &[false, true, true, true, true, true],
    );
    for u in &r.units {
        let name = format!(
            "{} {} p={} s={} h={}",
            u.spec.method.id(),
            u.spec.unit.id(),
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

/// A kernel's call shape in one short phrase, from its JSON object.
fn shape_text(o: &serde_json::Value) -> String {
    let g = |k: &str| o[k].as_u64().unwrap_or(0);
    match o["op"].as_str().unwrap_or("") {
        "gemm" => {
            let dims = format!("{}x{}x{}", g("m"), g("n"), g("k"));
            let batch = if g("batch") > 1 {
                format!("{}x ", g("batch"))
            } else {
                String::new()
            };
            let dtype = o["dtype"]
                .as_str()
                .map_or(String::new(), |d| format!(" {d}"));
            format!("{batch}{dims}{dtype}")
        }
        "attention" => format!(
            "{} b={} h={} q={} kv={} d={}{}",
            o["pass"].as_str().unwrap_or(""),
            g("batch"),
            g("heads"),
            g("q_tokens"),
            g("kv_tokens"),
            g("head_dim"),
            if o["causal"].as_bool() == Some(true) {
                " causal"
            } else {
                ""
            }
        ),
        _ => format!("{} B", g("bytes")),
    }
}

/// Human table for `metp-sim kernels`: each kernel priced (and, with `compare`, its measured
/// time and error), then the errors per kind.
pub fn kernels_table(hw: &str, p: &Priced, compare: bool) -> String {
    let mut head = vec!["#", "op", "shape", "predicted_s", "device_s", "step_s"];
    if compare {
        head.extend(["measured_s", "error"]);
    }
    let mut right = vec![true, false, false, true, true, true];
    if compare {
        right.extend([true, true]);
    }
    let mut t = Table::new(&head, &right);
    for (i, o) in p.kernels.iter().enumerate() {
        let f = |k: &str| o[k].as_f64().map_or(String::new(), |v| format!("{v:.4e}"));
        let mut row = vec![
            i.to_string(),
            o["op"].as_str().unwrap_or("").to_string(),
            shape_text(o),
            f("predicted_s"),
            f("device_s"),
            f("step_s"),
        ];
        if compare {
            row.push(f("measured_s"));
            row.push(
                o["error"]
                    .as_f64()
                    .map_or(String::new(), |e| format!("{:+.1}%", 100.0 * e)),
            );
        }
        t.row(row);
    }
    let mut s = format!(
        "kernels priced with {hw} (predicted_s: {}; step_s: inside a training step)\n\n",
        match p.timing {
            Timing::Isolated => "an isolated call, launch gap included",
            Timing::Device => "the device time alone",
        }
    );
    s.push_str(&t.render());
    if compare && !p.by_kind.is_empty() {
        s.push('\n');
        s.push_str(&kind_errors_table(&p.by_kind));
    }
    if compare && !p.by_session.is_empty() {
        let mut t = Table::new(
            &[
                "GEMMs of session",
                "kernels",
                "priced at clock",
                "median error",
                "median |error|",
                "largest |error|",
            ],
            &[true, true, true, true, true, true],
        );
        for e in &p.by_session {
            t.row(vec![
                e.session.to_string(),
                e.samples.to_string(),
                format!("{:.3}×", e.rate_factor),
                format!("{:+.1}%", 100.0 * e.median_error),
                format!("{:.1}%", 100.0 * e.median_abs_error),
                format!("{:.1}%", 100.0 * e.max_abs_error),
            ]);
        }
        s.push_str(
            "\nthe file joins measurement sessions whose GEMMs ran at different clocks; the \
             profile is one clock (`calibrate --fit` fits one factor per later session and \
             prints it; `--session-clock K=FACTOR` prices session K at it):\n\n",
        );
        s.push_str(&t.render());
    }
    s
}

/// The closing table of the GPU check: kernel kinds (goal: median ≤ 5%, none over 15%) and
/// units (goal: time within 10%, METP's tracked buffers equal to the inventory; the measured
/// peak shown against it), with a verdict per row.
pub fn gpu_check_table(kinds: &[KindErrors], units: &[UnitRow], notes: &[String]) -> String {
    let mut s = String::new();
    let mut t = Table::new(
        &[
            "kernel kind (held out)",
            "n",
            "median |error|",
            "largest |error|",
            "goal ≤5% / ≤15%",
        ],
        &[false, true, true, true, false],
    );
    for k in kinds {
        let ok = k.median_abs_error <= 0.05 && k.max_abs_error <= 0.15;
        t.row(vec![
            k.kind.name().to_string(),
            k.samples.to_string(),
            format!("{:.1}%", 100.0 * k.median_abs_error),
            format!("{:.1}%", 100.0 * k.max_abs_error),
            // A goal is met by samples, never by their absence.
            match (k.samples, ok) {
                (0, _) => "no samples",
                (_, true) => "met",
                (_, false) => "NOT met",
            }
            .into(),
        ]);
    }
    if kinds.is_empty() {
        t.row(vec![
            "(no held-out comparison)".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
    }
    s.push_str(&t.render());
    s.push('\n');
    let mut t = Table::new(
        &[
            "unit",
            "predicted_s",
            "measured_s",
            "time error",
            "measured peak B",
            "vs inventory",
            "tracked peak B",
            "inventory peak B",
            "max_rel_error",
            "goal: ≤10%, tracked = inventory",
        ],
        &[false, true, true, true, true, true, true, true, true, false],
    );
    for u in units {
        let err = if u.measured_s > 0.0 {
            (u.predicted_s - u.measured_s) / u.measured_s
        } else {
            f64::INFINITY
        };
        // The design property: the tracked buffers are the inventory, byte for byte. What the
        // driver measured beside them (messages in flight, outputs handed out, the allocator's
        // rounding) is shown as its difference from the inventory.
        let tracked = u.tracked_bytes.unwrap_or(u.measured_bytes);
        let mem_ok = u.inventory_bytes.is_none_or(|i| i == tracked);
        let verdict = match (err.abs() <= 0.10, mem_ok) {
            (true, true) => "met",
            (false, true) => "time NOT met",
            (true, false) => "memory NOT equal",
            (false, false) => "time and memory NOT met",
        };
        t.row(vec![
            u.name.clone(),
            format!("{:.6}", u.predicted_s),
            format!("{:.6}", u.measured_s),
            format!("{:+.1}%", 100.0 * err),
            u.measured_bytes.to_string(),
            match u.inventory_bytes {
                Some(i) if i > 0 => {
                    format!(
                        "{:+.1}%",
                        100.0 * (u.measured_bytes as f64 / i as f64 - 1.0)
                    )
                }
                _ => "-".into(),
            },
            tracked.to_string(),
            u.inventory_bytes
                .map(|b| b.to_string())
                .unwrap_or_else(|| "-".into()),
            format!("{:.2e}", u.max_rel_error),
            verdict.into(),
        ]);
    }
    if units.is_empty() {
        let mut row = vec!["(no unit ran)".to_string()];
        row.extend(std::iter::repeat_n("-".to_string(), 9));
        t.row(row);
    }
    s.push_str(&t.render());
    for n in notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::KernelKind;

    #[test]
    fn calib_gpu_table_gives_verdicts() {
        let kinds = vec![
            KindErrors {
                kind: KernelKind::Gemm,
                samples: 10,
                median_abs_error: 0.02,
                max_abs_error: 0.08,
            },
            KindErrors {
                kind: KernelKind::AttentionBwd,
                samples: 4,
                median_abs_error: 0.07,
                max_abs_error: 0.3,
            },
        ];
        let units = vec![
            UnitRow {
                name: "metp attention p=4".into(),
                predicted_s: 1.05,
                measured_s: 1.0,
                measured_bytes: 106,
                tracked_bytes: Some(100),
                inventory_bytes: Some(100),
                max_rel_error: 3e-3,
            },
            UnitRow {
                name: "metp mlp p=4".into(),
                predicted_s: 1.0,
                measured_s: 1.0,
                measured_bytes: 100,
                tracked_bytes: Some(101),
                inventory_bytes: Some(100),
                max_rel_error: 3e-3,
            },
        ];
        let t = gpu_check_table(&kinds, &units, &["n".into()]);
        assert!(t.contains("gemm") && t.contains("2.0%") && t.contains("8.0%"));
        assert!(t
            .lines()
            .any(|l| l.contains("attention bwd") && l.ends_with("NOT met")));
        assert!(t.contains("+5.0%"));
        // The driver's 6% above the inventory is shown; the verdict is the tally's.
        assert!(t
            .lines()
            .any(|l| l.contains("metp attention") && l.contains("+6.0%") && l.ends_with(" met")));
        assert!(t
            .lines()
            .any(|l| l.contains("metp mlp") && l.ends_with("memory NOT equal")));
    }
}
