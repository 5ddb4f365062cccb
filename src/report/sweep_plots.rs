//! The plots a sweep writes: memory per device, step time, throughput and exposed-communication
//! share against sequence length (one file per degree, one line per method), and the longest
//! sequence against degree.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::config::{MethodId, OuterAxes};
use crate::error::Result;
use crate::plot::{self, AxisFormat, Chart, Series};
use crate::sweep::{Point, Status, SweepResult, SweepSpec};

type Metric = fn(&Point) -> Option<f64>;

/// How many plot files [`write`] draws for `pairs` (models × profiles), `degrees` and `outer`
/// (cp × pp) combinations: four charts per degree and outer axes, one longest-sequence chart
/// per outer axes, in one (SVG) or two (and PNG) formats.
pub fn plot_files(pairs: usize, degrees: usize, outer: usize, svg_only: bool) -> u64 {
    let per_pair = (degrees as u64)
        .saturating_mul(outer as u64)
        .saturating_mul(4)
        .saturating_add(outer as u64);
    (pairs as u64)
        .saturating_mul(per_pair)
        .saturating_mul(if svg_only { 1 } else { 2 })
}

/// Writes the sweep's plots in every format of `exts`; returns the files written. The charts
/// are built in order and drawn in parallel (rasterising and compressing a PNG is most of a
/// short sweep's time); the list of files keeps the order.
pub fn write(r: &SweepResult, spec: &SweepSpec, out: &Path, exts: &[&str]) -> Result<Vec<PathBuf>> {
    use rayon::prelude::*;
    let mut jobs: Vec<(std::sync::Arc<Chart>, PathBuf)> = Vec::new();
    let multi = spec.models.len() * spec.hardware.len() > 1;
    for m in &spec.models {
        for hw in &spec.hardware {
            let dir = if multi {
                out.join(super::joined_slug([m.name.as_str(), hw.name.as_str()]))
            } else {
                out.to_path_buf()
            };
            // Each curve's points, gathered once (a lookup per curve would make the plots
            // quadratic in a large sweep).
            let mut curves: HashMap<(MethodId, u64, OuterAxes), Vec<&Point>> = HashMap::new();
            for x in r
                .points
                .iter()
                .filter(|x| x.model == m.name && x.hardware == hw.name)
            {
                curves.entry((x.method, x.p, x.outer)).or_default().push(x);
            }
            let capacity = hw.memory_bytes() as f64;
            let charts: [(&str, &str, AxisFormat, bool, Metric, bool); 4] = [
                (
                    "memory",
                    "peak memory per device",
                    AxisFormat::Bytes,
                    true,
                    |p| p.peak_bytes.map(|b| b as f64),
                    true,
                ),
                (
                    "step-time",
                    "step time",
                    AxisFormat::Seconds,
                    true,
                    |p| p.step_time_s,
                    false,
                ),
                (
                    "tokens-per-s",
                    "throughput (tokens/s, all devices)",
                    AxisFormat::TokensPerSecond,
                    true,
                    |p| p.tokens_per_s,
                    false,
                ),
                (
                    "exposed-comm",
                    "exposed communication (share of step)",
                    AxisFormat::Percent,
                    false,
                    |p| p.exposed_share,
                    false,
                ),
            ];
            for (&p, &outer) in spec
                .degrees
                .iter()
                .flat_map(|p| spec.outer.iter().map(move |o| (p, o)))
            {
                for (file, ylabel, yfmt, ylog, metric, is_memory) in charts {
                    let mut chart = Chart::new(
                        format!(
                            "{} — {}, {}{} on {}",
                            ylabel,
                            m.name,
                            format_p(p),
                            format_outer(outer),
                            hw.name
                        ),
                        "sequence length (tokens)",
                        ylabel,
                    )
                    .with_formats(AxisFormat::Tokens, yfmt)
                    .with_log(true, ylog);
                    if is_memory {
                        chart = chart.with_reference(
                            capacity,
                            format!("device memory {}", super::fmt_bytes(hw.memory_bytes())),
                        );
                        chart.infeasible_label = Some("invalid degree".into());
                    } else {
                        chart.infeasible_label = Some("out of memory or invalid".into());
                    }
                    for &method in &spec.methods {
                        let mut points = Vec::new();
                        let mut bad = Vec::new();
                        for pt in curves.get(&(method, p, outer)).into_iter().flatten() {
                            let show = if is_memory {
                                pt.status != Status::Invalid
                            } else {
                                pt.status == Status::Ok
                            };
                            match (show, metric(pt)) {
                                (true, Some(v)) if v > 0.0 || !ylog => {
                                    points.push((pt.seq as f64, v))
                                }
                                _ => bad.push(pt.seq as f64),
                            }
                        }
                        chart = chart
                            .with_series(Series::new(method.id(), points).with_infeasible(bad));
                    }
                    let chart = std::sync::Arc::new(chart);
                    for ext in exts {
                        let path = dir.join(format!("{file}-p{p}{}.{ext}", outer_suffix(outer)));
                        jobs.push((chart.clone(), path));
                    }
                }
            }
            for &outer in &spec.outer {
                let rows: Vec<(&str, u64, Option<u64>)> = r
                    .maxseq
                    .iter()
                    .filter(|x| x.model == m.name && x.hardware == hw.name && x.outer == outer)
                    .map(|x| (x.row.method.id(), x.row.p, x.row.max_seq))
                    .collect();
                let chart = plot::max_seq_chart(
                    format!(
                        "longest sequence that fits — {}{} on {}",
                        m.name,
                        format_outer(outer).replacen(", ", " with ", 1),
                        hw.name
                    ),
                    rows,
                );
                let chart = std::sync::Arc::new(chart);
                for ext in exts {
                    let path = dir.join(format!("maxseq{}.{ext}", outer_suffix(outer)));
                    jobs.push((chart.clone(), path));
                }
            }
        }
    }
    jobs.par_iter()
        .map(|(chart, path)| plot::write_chart(chart, path))
        .collect::<Result<Vec<()>>>()?;
    Ok(jobs.into_iter().map(|(_, path)| path).collect())
}

fn format_p(p: u64) -> String {
    format!("p = {p}")
}

/// `, cp = 2, pp = 4, v = 2`, each axis only where it is above 1 (nothing for a sweep of the
/// methods alone, whose titles stay as they were).
fn format_outer(o: OuterAxes) -> String {
    let mut s = String::new();
    for (name, v) in [("cp", o.cp), ("pp", o.pp), ("v", o.interleave)] {
        if v > 1 {
            s.push_str(&format!(", {name} = {v}"));
        }
    }
    s
}

/// `-cp2-pp4-v2` in file names, likewise.
fn outer_suffix(o: OuterAxes) -> String {
    let mut s = String::new();
    for (name, v) in [("cp", o.cp), ("pp", o.pp), ("v", o.interleave)] {
        if v > 1 {
            s.push_str(&format!("-{name}{v}"));
        }
    }
    s
}
