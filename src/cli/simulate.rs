//! `metp-sim simulate`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::args::{single_degree, CommonArgs};
use crate::config::{parse_count, MethodId, Workload};
use crate::error::{Error, Result};
use crate::report::{self, fmt_bytes, Format, Table};
use crate::sim::{self, LinkModel};
use crate::{analytic, plot};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LinkModelArg {
    /// No contention: every flow gets its narrowest link's full bandwidth.
    Ideal,
    /// Flows sharing a link share it max-min fairly.
    Maxmin,
}

impl From<LinkModelArg> for LinkModel {
    fn from(l: LinkModelArg) -> LinkModel {
        match l {
            LinkModelArg::Ideal => LinkModel::Ideal,
            LinkModelArg::Maxmin => LinkModel::MaxMin,
        }
    }
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Method: metp, tp, tp-sp, ulysses, ring or rsa.
    #[arg(long, default_value = "metp")]
    method: String,
    /// Parallel degree p.
    #[arg(long, default_value = "8")]
    p: String,
    /// Sequence length (4k = 4096).
    #[arg(long, default_value = "32k")]
    seq: String,
    /// Global batch in sequences (default: one micro-batch per data-parallel replica).
    #[arg(long)]
    global_batch: Option<String>,
    /// Link model.
    #[arg(long, value_enum, default_value = "maxmin")]
    link_model: LinkModelArg,
    /// Write a Chrome trace (open in Perfetto or chrome://tracing).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write a timeline picture (.svg or .png).
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// Limit the timeline to the first this-many milliseconds.
    #[arg(long)]
    timeline_ms: Option<f64>,
    #[command(flatten)]
    common: CommonArgs,
}

/// Builds the workload of `simulate` (shared with `overlap`).
pub fn workload(
    common: &CommonArgs,
    method: MethodId,
    p: u64,
    seq: u64,
    global_batch: Option<&str>,
) -> Result<Workload> {
    let mut w = common.workload(method, p, seq)?;
    if let Some(g) = global_batch {
        let g = parse_count("--global-batch", g)?;
        let per = w.dp * w.micro_batch;
        if g % per != 0 {
            return Err(Error::arg(
                "--global-batch",
                format!("{g} is not a multiple of dp × micro-batch = {per}"),
            ));
        }
        w.micro_batches = g / per;
    }
    Ok(w)
}

#[derive(Serialize)]
struct AnalyticJson {
    step_time_s: f64,
    peak_bytes: u128,
    exposed_communication_s: f64,
}

#[derive(Serialize)]
struct SimulateJson<'a> {
    model: &'a str,
    hardware: &'a str,
    method: &'a str,
    p: u64,
    dp: u64,
    seq: u64,
    micro_batch: u64,
    micro_batches: u64,
    link_model: &'a str,
    step_time_s: f64,
    compute_s: f64,
    communication_s: f64,
    exposed_communication_s: f64,
    overlap_efficiency: f64,
    peak_bytes: u128,
    simulated_memory_high_water_bytes: u128,
    tokens_per_s: f64,
    mfu: f64,
    analytic: AnalyticJson,
    tasks: u64,
    events: u64,
    devices: &'a [sim::DeviceStats],
}

pub fn run(a: SimulateArgs) -> Result<String> {
    let method = MethodId::parse("--method", &a.method)?;
    let p = single_degree(&a.p)?;
    let seq = parse_count("--seq", &a.seq)?;
    let w = workload(&a.common, method, p, seq, a.global_batch.as_deref())?;
    let est = analytic::estimate(&w)?;
    let want_trace = a.trace.is_some() || a.timeline.is_some();
    let s = sim::simulate_workload(&w, a.link_model.into(), want_trace)?;
    if let (Some(path), Some(trace)) = (&a.trace, &s.result.trace) {
        report::write_atomic(path, sim::chrome_trace_json(trace, s.devices).as_bytes())?;
    }
    if let (Some(path), Some(trace)) = (&a.timeline, &s.result.trace) {
        let spans = report::timeline_spans(trace, a.timeline_ms.map(|ms| ms / 1e3));
        let opts = plot::TimelineOptions {
            window_s: a.timeline_ms.map(|ms| (0.0, ms / 1e3)),
            ..Default::default()
        };
        let title = format!(
            "{} — {} on {}, p = {}, s = {}",
            w.method, w.model.name, w.hardware.name, w.p, w.seq
        );
        plot::write_timeline_with(&title, &spans, &opts, path)?;
    }
    let link = match a.link_model {
        LinkModelArg::Ideal => "ideal",
        LinkModelArg::Maxmin => "maxmin",
    };
    let crit = s.critical();
    let tokens = (w.seq * w.micro_batch * w.micro_batches * w.dp) as f64;
    let step = s.result.step_time_s;
    let mfu = analytic::model_flops(&w)
        / (step * w.hardware.gpu.peak_bf16_flops_per_s.value * (w.p * w.dp) as f64);
    let overlap_eff = if crit.comm_busy_s > 0.0 {
        1.0 - crit.exposed_comm_s / crit.comm_busy_s
    } else {
        1.0
    };
    let j = SimulateJson {
        model: &w.model.name,
        hardware: &w.hardware.name,
        method: w.method.id(),
        p: w.p,
        dp: w.dp,
        seq: w.seq,
        micro_batch: w.micro_batch,
        micro_batches: w.micro_batches,
        link_model: link,
        step_time_s: step,
        compute_s: crit.compute_busy_s,
        communication_s: crit.comm_busy_s,
        exposed_communication_s: crit.exposed_comm_s,
        overlap_efficiency: overlap_eff,
        peak_bytes: s.inventory_peak_bytes,
        simulated_memory_high_water_bytes: s.result.max_memory_high_water_bytes(),
        tokens_per_s: tokens / step,
        mfu,
        analytic: AnalyticJson {
            step_time_s: est.step_time_s,
            peak_bytes: est.peak_bytes,
            exposed_communication_s: est.exposed_communication_s,
        },
        tasks: s.result.tasks,
        events: s.result.events,
        devices: &s.result.devices,
    };
    Ok(match a.common.format.into() {
        Format::Json => report::to_json(&j),
        Format::Table | Format::Csv => {
            let mut t = Table::new(&["quantity", "simulated", "analytic"], &[false, true, true]);
            let ms = |x: f64| format!("{:.3} ms", x * 1e3);
            t.row(vec!["step time".into(), ms(step), ms(est.step_time_s)]);
            t.row(vec![
                "compute (critical device)".into(),
                ms(crit.compute_busy_s),
                ms(est.compute_s),
            ]);
            t.row(vec![
                "communication".into(),
                ms(crit.comm_busy_s),
                ms(est.communication_s),
            ]);
            t.row(vec![
                "exposed communication".into(),
                ms(crit.exposed_comm_s),
                ms(est.exposed_communication_s),
            ]);
            t.row(vec![
                "overlap efficiency".into(),
                format!("{:.1}%", 100.0 * overlap_eff),
                format!("{:.1}%", 100.0 * est.overlap_efficiency),
            ]);
            t.row(vec![
                "tokens/s".into(),
                format!("{:.0}", tokens / step),
                format!("{:.0}", est.tokens_per_s),
            ]);
            t.row(vec![
                "MFU".into(),
                format!("{:.1}%", 100.0 * mfu),
                format!("{:.1}%", 100.0 * est.mfu),
            ]);
            t.row(vec![
                "peak memory per device".into(),
                fmt_bytes(s.result.max_memory_high_water_bytes()),
                fmt_bytes(est.peak_bytes),
            ]);
            format!(
                "{} on {} — {}, p = {}, dp = {}, s = {}, b = {} × {} micro-batches, {} links\n\n{}{} tasks, {} events\n",
                w.method, w.hardware.name, w.model.name, w.p, w.dp, w.seq, w.micro_batch, w.micro_batches, link,
                t.render(), s.result.tasks, s.result.events
            )
        }
    })
}
