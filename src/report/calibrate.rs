//! `run` and `calibrate` outputs: a unit's measured against predicted memory and time, and a
//! calibration's fitted figures and unit comparisons.

use super::table::Table;
use crate::calibrate::unit_run::UnitRun;
use crate::calibrate::Report;

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
    s.push_str(&format!("\npredicted from: {}\n", o.predicted_from));
    for n in &o.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

/// Human table for `metp-sim calibrate`: fitted figures, then each unit and ring predicted
/// against measured.
pub fn calibration_table(r: &Report) -> String {
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
        ],
        &[false, true, true, true, true],
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
