//! `collectives` and `calibrate --fit-links` outputs: nccl-tests' table predicted on a profile
//! (and measured beside it), and the link figures fitted to logs.

use super::table::Table;
use crate::nccl_tests::fit::LinkFitReport;
use crate::nccl_tests::Report;

fn title(r: &Report) -> String {
    let mut s = format!(
        "{} on {} — {} node{} × {} GPUs = {} ranks, busbw = algbw × {:.4} (nccl-tests' factor), {}\n",
        r.op,
        r.hardware,
        r.nodes,
        if r.nodes == 1 { "" } else { "s" },
        r.gpus_per_node,
        r.ranks,
        r.bus_factor,
        r.library
    );
    if let Some(l) = &r.log {
        s.push_str(&format!("measured: {l} (out-of-place)\n"));
    }
    s
}

/// The table: nccl-tests' columns predicted, with the measured ones and the error beside them
/// when a log was compared.
pub fn collectives_table(r: &Report) -> String {
    let measured = r.log.is_some();
    let mut header = vec![
        "size (B)",
        "count",
        "type",
        "algo/proto",
        "time (us)",
        "algbw",
        "busbw",
    ];
    if measured {
        header.extend(["meas time", "meas algbw", "meas busbw", "error"]);
    }
    let right: Vec<bool> = header
        .iter()
        .map(|h| !matches!(*h, "type" | "algo/proto"))
        .collect();
    let mut t = Table::new(&header, &right);
    let opt = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
    for row in &r.rows {
        let mut cells = vec![
            row.size_bytes.to_string(),
            row.count.to_string(),
            row.dtype.clone(),
            format!("{}/{}", row.algorithm, row.protocol),
            format!("{:.2}", row.predicted_time_us),
            format!("{:.2}", row.predicted_algbw_gb_s),
            format!("{:.2}", row.predicted_busbw_gb_s),
        ];
        if measured {
            cells.extend([
                opt(row.measured_time_us, 2),
                opt(row.measured_algbw_gb_s, 2),
                opt(row.measured_busbw_gb_s, 2),
                row.busbw_error
                    .map_or("-".into(), |e| format!("{:+.1}%", 100.0 * e)),
            ]);
        }
        t.row(cells);
    }
    let mut s = title(r);
    s.push('\n');
    s.push_str(&t.render());
    if let Some(v) = &r.verdict {
        s.push_str(&format!("\n{}\n", v.text));
    }
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

/// The rows as CSV (the JSON rows' fields).
pub fn collectives_csv(r: &Report) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record([
        "size_bytes",
        "count",
        "type",
        "algorithm",
        "protocol",
        "predicted_time_us",
        "predicted_algbw_gb_s",
        "predicted_busbw_gb_s",
        "measured_time_us",
        "measured_algbw_gb_s",
        "measured_busbw_gb_s",
        "busbw_error",
    ]);
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| x.to_string());
    for row in &r.rows {
        let _ = w.write_record([
            row.size_bytes.to_string(),
            row.count.to_string(),
            row.dtype.clone(),
            row.algorithm.to_string(),
            row.protocol.to_string(),
            row.predicted_time_us.to_string(),
            row.predicted_algbw_gb_s.to_string(),
            row.predicted_busbw_gb_s.to_string(),
            opt(row.measured_time_us),
            opt(row.measured_algbw_gb_s),
            opt(row.measured_busbw_gb_s),
            opt(row.busbw_error),
        ]);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// `calibrate --fit-links`: the fitted figures and each log's error before and after.
pub fn link_fit_table(r: &LinkFitReport) -> String {
    let mut s = format!("wrote {} ({})\n\n", r.out, r.profile);
    let mut t = Table::new(
        &["figure", "base", "fitted", "change"],
        &[false, true, true, true],
    );
    for f in &r.figures {
        t.row(vec![
            f.field.clone(),
            format!("{:.4e}", f.base),
            format!("{:.4e}", f.fitted),
            format!("{:+.1}%", 100.0 * (f.fitted / f.base - 1.0)),
        ]);
    }
    s.push_str(&t.render());
    s.push('\n');
    let mut t = Table::new(
        &[
            "log",
            "op",
            "ranks",
            "bounded by",
            "rows",
            "error before",
            "error after",
        ],
        &[false, false, true, false, true, true, true],
    );
    for l in &r.logs {
        t.row(vec![
            l.log.clone(),
            l.op.to_string(),
            format!("{}×{}", l.nodes, l.gpus_per_node),
            format!("{:?}", l.bounded_by).to_lowercase(),
            l.rows.to_string(),
            format!("{:.1}%", 100.0 * l.median_error_before),
            format!("{:.1}%", 100.0 * l.median_error_after),
        ]);
    }
    s.push_str(&t.render());
    s.push_str(
        "error: median |predicted/measured − 1| of busbw over the log's sizes from 64 MiB\n",
    );
    for n in &r.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}
