//! `sweep` outputs: every point and the longest sequences, declared once as columns and written
//! as CSV and JSON.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::columns::{self, Column, JsonRow};
use super::memory::maxseq_columns;
use super::table::Table;
use super::{to_json, write_atomic};
use crate::config::{MethodId, OuterAxes};
use crate::error::Result;
use crate::sweep::{MaxSeqRow, Point, Status, SweepResult, SweepSpec};

fn status(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::OutOfMemory => "out-of-memory",
        Status::Invalid => "invalid",
    }
}

/// The columns of a sweep point (`sweep.csv`, `sweep.json`'s `points`); `cp`, `pp` and
/// `interleave` after `p` when the sweep has outer axes (`SweepSpec::varies_outer`), so a sweep
/// of the methods alone writes the columns it always did.
pub fn point_columns(outer: bool) -> Vec<Column<Point>> {
    type C = Column<Point>;
    let mut v = vec![
        C::data("model", |p| p.model.as_str().into()),
        C::data("hardware", |p| p.hardware.as_str().into()),
        C::data("method", |p| p.method.id().into()),
        C::data("p", |p| p.p.into()),
    ];
    if outer {
        v.extend([
            C::data("cp", |p| p.outer.cp.into()),
            C::data("pp", |p| p.outer.pp.into()),
            C::data("interleave", |p| p.outer.interleave.into()),
        ]);
    }
    v.extend([
        C::data("seq", |p| p.seq.into()),
        C::data("status", |p| status(p.status).into()),
        C::data("fits", |p| p.fits.into()),
        C::data("reason", |p| p.reason.clone().into()),
        C::data("peak_bytes", |p| p.peak_bytes.into()),
        C::data("capacity_bytes", |p| p.capacity_bytes.into()),
        C::data("step_time_s", |p| p.step_time_s.into()),
        C::data("compute_s", |p| p.compute_s.into()),
        C::data("communication_s", |p| p.communication_s.into()),
        C::data("exposed_communication_s", |p| {
            p.exposed_communication_s.into()
        }),
        C::data("exposed_share", |p| p.exposed_share.into()),
        C::data("tokens_per_s", |p| p.tokens_per_s.into()),
        C::data("mfu", |p| p.mfu.into()),
        C::data("analytic_step_time_s", |p| p.analytic_step_time_s.into()),
    ]);
    v
}

/// The columns of a sweep's longest-sequence row: its model and hardware, then `maxseq`'s, with
/// `cp`, `pp` and `interleave` after `p` when the sweep has outer axes.
pub fn sweep_maxseq_columns(outer: bool) -> Vec<Column<MaxSeqRow>> {
    type C = Column<MaxSeqRow>;
    let mut v = vec![
        C::data("model", |r| r.model.as_str().into()),
        C::data("hardware", |r| r.hardware.as_str().into()),
    ];
    for c in maxseq_columns() {
        let after_p = c.key == "p";
        v.push(c.lift(|r: &MaxSeqRow| &r.row));
        if outer && after_p {
            v.extend([
                C::data("cp", |r| r.outer.cp.into()),
                C::data("pp", |r| r.outer.pp.into()),
                C::data("interleave", |r| r.outer.interleave.into()),
            ]);
        }
    }
    v
}

/// The CSV header line.
pub fn sweep_csv_header(spec: &SweepSpec) -> String {
    columns::csv_header(&point_columns(spec.varies_outer()))
}

/// One point as a CSV line (with newline).
pub fn sweep_csv_row(spec: &SweepSpec, p: &Point) -> String {
    columns::csv_row(&point_columns(spec.varies_outer()), p)
}

/// The whole sweep as CSV, in spec order.
pub fn sweep_csv(r: &SweepResult, spec: &SweepSpec) -> String {
    columns::csv(&point_columns(spec.varies_outer()), &r.points)
}

#[derive(Serialize)]
struct SweepJson<'a> {
    profiles: Vec<ProfileJson<'a>>,
    points: Vec<JsonRow<'a, Point>>,
    maxseq: Vec<JsonRow<'a, MaxSeqRow>>,
}

/// What each profile of a sweep ran its attention with.
#[derive(Serialize)]
struct ProfileJson<'a> {
    hardware: &'a str,
    attention_kernel: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_placeholder: Option<String>,
}

/// The attention implementation the sweep's options run on `hw`, and its placeholder note.
fn attention_of(spec: &SweepSpec, hw: &crate::config::Hardware) -> (&'static str, Option<String>) {
    let k = spec.options.attention_kernel(hw);
    (k.id(), hw.kernels.placeholder_note(k))
}

/// The whole sweep as JSON: `{profiles: [{hardware, attention_kernel}], points, maxseq}`.
pub fn sweep_json(r: &SweepResult, spec: &SweepSpec) -> String {
    let outer = spec.varies_outer();
    let (points, maxseq) = (point_columns(outer), sweep_maxseq_columns(outer));
    to_json(&SweepJson {
        profiles: spec
            .hardware
            .iter()
            .map(|hw| {
                let (attention_kernel, kernel_placeholder) = attention_of(spec, hw);
                ProfileJson {
                    hardware: &hw.name,
                    attention_kernel,
                    kernel_placeholder,
                }
            })
            .collect(),
        points: columns::json_rows(&points, &r.points),
        maxseq: columns::json_rows(&maxseq, &r.maxseq),
    })
}

/// Writes `sweep.csv`, `sweep.json` (atomically, in spec order) and the plots in `exts` to
/// `out`; returns the plots written.
pub fn write_sweep(
    out: &Path,
    result: &SweepResult,
    spec: &SweepSpec,
    exts: &[&str],
) -> Result<Vec<PathBuf>> {
    write_atomic(&out.join("sweep.csv"), sweep_csv(result, spec).as_bytes())?;
    write_atomic(&out.join("sweep.json"), sweep_json(result, spec).as_bytes())?;
    super::sweep_plots::write(result, spec, out, exts)
}

/// Most sequence lengths the printed summary shows as columns: a longer sweep shows this many,
/// evenly spaced from the first to the last (every point is in `sweep.csv`).
pub const TABLE_MAX_LENGTHS: usize = 12;

/// The lengths of `seqs` the summary shows: all of them, or [`TABLE_MAX_LENGTHS`] evenly spaced
/// from the first to the last.
fn shown_lengths(seqs: &[u64]) -> Vec<u64> {
    let n = seqs.len();
    if n <= TABLE_MAX_LENGTHS {
        return seqs.to_vec();
    }
    let last = TABLE_MAX_LENGTHS - 1;
    let mut v: Vec<u64> = (0..TABLE_MAX_LENGTHS)
        .map(|i| seqs[i * (n - 1) / last])
        .collect();
    v.dedup();
    v
}

/// The human summary of a sweep: per model and hardware, step time by method, degree and
/// length (`OOM` where it does not fit; at most [`TABLE_MAX_LENGTHS`] lengths), then the files
/// written. Linear in the points: each is looked up once, by its place.
pub fn sweep_table(r: &SweepResult, spec: &SweepSpec, out: &Path, plots: &[PathBuf]) -> String {
    use std::collections::HashMap;
    type Key<'a> = (&'a str, &'a str, MethodId, u64, OuterAxes);
    let mut points: HashMap<(Key, u64), &Point> = HashMap::with_capacity(r.points.len());
    for x in &r.points {
        points.insert(
            (
                (
                    x.model.as_str(),
                    x.hardware.as_str(),
                    x.method,
                    x.p,
                    x.outer,
                ),
                x.seq,
            ),
            x,
        );
    }
    let maxseq: HashMap<Key, Option<u64>> = r
        .maxseq
        .iter()
        .map(|x| {
            (
                (
                    x.model.as_str(),
                    x.hardware.as_str(),
                    x.row.method,
                    x.row.p,
                    x.outer,
                ),
                x.row.max_seq,
            )
        })
        .collect();
    let seqs = shown_lengths(&spec.seqs);
    let mut s = String::new();
    for m in &spec.models {
        for hw in &spec.hardware {
            let batch = spec.micro_batches.map_or(String::new(), |mb| {
                format!(
                    ", global batch {} ({mb} micro-batch(es) of {})",
                    mb * spec.micro_batch,
                    spec.micro_batch
                )
            });
            let (attention, placeholder) = attention_of(spec, hw);
            s.push_str(&format!(
                "{} on {}{batch} — step time per sequence length (OOM: does not fit; -: \
                 invalid)\nattention: {attention}\n",
                m.name, hw.name
            ));
            if let Some(p) = placeholder {
                s.push_str(&format!("placeholder kernel figures: {p}\n"));
            }
            if seqs.len() < spec.seqs.len() {
                s.push_str(&format!(
                    "{} of the {} lengths shown, evenly spaced; every point is in sweep.csv\n",
                    seqs.len(),
                    spec.seqs.len()
                ));
            }
            s.push('\n');
            let outer_cols = spec.varies_outer();
            let mut header = vec!["method".to_string(), "p".into()];
            if outer_cols {
                header.extend(["cp".into(), "pp".into(), "v".into()]);
            }
            header.push("max_seq".into());
            header.extend(seqs.iter().map(|&q| super::fmt_tokens(q)));
            let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
            let mut right = vec![false];
            right.extend(header[1..].iter().map(|_| true));
            let mut t = Table::new(&hdr, &right);
            for &method in &spec.methods {
                for &p in &spec.degrees {
                    for &outer in &spec.outer {
                        let key = (m.name.as_str(), hw.name.as_str(), method, p, outer);
                        let max = maxseq
                            .get(&key)
                            .copied()
                            .flatten()
                            .map(super::fmt_tokens)
                            .unwrap_or_else(|| "-".into());
                        let mut row = vec![method.id().to_string(), p.to_string()];
                        if outer_cols {
                            row.extend([
                                outer.cp.to_string(),
                                outer.pp.to_string(),
                                outer.interleave.to_string(),
                            ]);
                        }
                        row.push(max);
                        for &q in &seqs {
                            row.push(match points.get(&(key, q)) {
                                Some(x) if x.status == Status::Ok => {
                                    format!("{:.3} s", x.step_time_s.unwrap_or(0.0))
                                }
                                Some(x) if x.status == Status::OutOfMemory => "OOM".into(),
                                _ => "-".into(),
                            });
                        }
                        t.row(row);
                    }
                }
            }
            s.push_str(&t.render());
            s.push('\n');
        }
    }
    s.push_str(&format!("wrote {}/sweep.csv, sweep.json", out.display()));
    for p in plots {
        if let Some(n) = p.file_name() {
            s.push_str(&format!(", {}", n.to_string_lossy()));
        }
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_sweeps_show_evenly_spaced_lengths_from_first_to_last() {
        let few: Vec<u64> = (1..=5).collect();
        assert_eq!(shown_lengths(&few), few);
        let many: Vec<u64> = (1..=99_984).collect();
        let shown = shown_lengths(&many);
        assert_eq!(shown.len(), TABLE_MAX_LENGTHS);
        assert_eq!(shown[0], 1);
        assert_eq!(*shown.last().unwrap(), 99_984);
        assert!(shown.windows(2).all(|w| w[0] < w[1]));
    }
}
