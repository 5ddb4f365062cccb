//! `sweep` outputs: CSV and JSON.

use super::to_json;
use crate::sweep::{Point, Status, SweepResult};

const HEADER: [&str; 17] = [
    "model",
    "hardware",
    "method",
    "p",
    "seq",
    "status",
    "reason",
    "peak_bytes",
    "capacity_bytes",
    "step_time_s",
    "compute_s",
    "communication_s",
    "exposed_communication_s",
    "exposed_share",
    "tokens_per_s",
    "mfu",
    "analytic_step_time_s",
];

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn status(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::OutOfMemory => "out-of-memory",
        Status::Invalid => "invalid",
    }
}

/// The CSV header line.
pub fn sweep_csv_header() -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(HEADER);
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// One point as a CSV line (with newline).
pub fn sweep_csv_row(p: &Point) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record([
        p.model.clone(),
        p.hardware.clone(),
        p.method.id().to_string(),
        p.p.to_string(),
        p.seq.to_string(),
        status(p.status).to_string(),
        p.reason.clone().unwrap_or_default(),
        opt(p.peak_bytes),
        p.capacity_bytes.to_string(),
        opt(p.step_time_s),
        opt(p.compute_s),
        opt(p.communication_s),
        opt(p.exposed_communication_s),
        opt(p.exposed_share),
        opt(p.tokens_per_s),
        opt(p.mfu),
        opt(p.analytic_step_time_s),
    ]);
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// The whole sweep as CSV, in spec order.
pub fn sweep_csv(r: &SweepResult) -> String {
    let mut s = sweep_csv_header();
    for p in &r.points {
        s.push_str(&sweep_csv_row(p));
    }
    s
}

/// The whole sweep as JSON: `{points, maxseq}`.
pub fn sweep_json(r: &SweepResult) -> String {
    to_json(r)
}
