//! `sweep` outputs: every point and the longest sequences, declared once as columns and written
//! as CSV and JSON.

use serde::Serialize;

use super::columns::{self, Column, JsonRow};
use super::memory::maxseq_columns;
use super::to_json;
use crate::sweep::{MaxSeqRow, Point, Status, SweepResult};

fn status(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::OutOfMemory => "out-of-memory",
        Status::Invalid => "invalid",
    }
}

/// The columns of a sweep point (`sweep.csv`, `sweep.json`'s `points`).
pub fn point_columns() -> Vec<Column<Point>> {
    type C = Column<Point>;
    vec![
        C::data("model", |p| p.model.as_str().into()),
        C::data("hardware", |p| p.hardware.as_str().into()),
        C::data("method", |p| p.method.id().into()),
        C::data("p", |p| p.p.into()),
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
    ]
}

/// The columns of a sweep's longest-sequence row: its model and hardware, then `maxseq`'s.
pub fn sweep_maxseq_columns() -> Vec<Column<MaxSeqRow>> {
    type C = Column<MaxSeqRow>;
    let mut v = vec![
        C::data("model", |r| r.model.as_str().into()),
        C::data("hardware", |r| r.hardware.as_str().into()),
    ];
    v.extend(
        maxseq_columns()
            .into_iter()
            .map(|c| c.lift(|r: &MaxSeqRow| &r.row)),
    );
    v
}

/// The CSV header line.
pub fn sweep_csv_header() -> String {
    columns::csv_header(&point_columns())
}

/// One point as a CSV line (with newline).
pub fn sweep_csv_row(p: &Point) -> String {
    columns::csv_row(&point_columns(), p)
}

/// The whole sweep as CSV, in spec order.
pub fn sweep_csv(r: &SweepResult) -> String {
    columns::csv(&point_columns(), &r.points)
}

#[derive(Serialize)]
struct SweepJson<'a> {
    points: Vec<JsonRow<'a, Point>>,
    maxseq: Vec<JsonRow<'a, MaxSeqRow>>,
}

/// The whole sweep as JSON: `{points, maxseq}`.
pub fn sweep_json(r: &SweepResult) -> String {
    let (points, maxseq) = (point_columns(), sweep_maxseq_columns());
    to_json(&SweepJson {
        points: columns::json_rows(&points, &r.points),
        maxseq: columns::json_rows(&maxseq, &r.maxseq),
    })
}
