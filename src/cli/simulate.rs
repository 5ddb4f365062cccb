//! `metp-sim simulate`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::args::{single_degree, CommonArgs, OuterArgs};
use crate::config::{parse_amount, parse_count, MethodId, Workload};
use crate::error::{Error, Result};
use crate::evaluate::{Evaluation, SimDepth, SimulateOptions, Training};
use crate::report::{self, Format};
use crate::sim::{LinkModel, TraceScope};

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
    /// Record every device in --trace and --timeline even when the step is large (by default
    /// a step of more than 2^20 spans records device 0 alone).
    #[arg(long)]
    trace_all_devices: bool,
    /// The fast path, as plan runs it: exact where the step is small, else composed from its
    /// distinct op programs, each simulated once (within 1–3% of --full-sim; milliseconds for a
    /// 16,384-GPU step). No trace.
    #[arg(long, conflicts_with_all = ["trace", "timeline", "full_sim"])]
    extrapolate: bool,
    /// Simulate every layer and micro-batch. By default a step whose layers (or steady
    /// pipeline rounds) repeat is simulated short and the rest proven to repeat it exactly: the
    /// same numbers, faster.
    #[arg(long)]
    full_sim: bool,
    /// Tokens to train (15T = 15·10^12, 2.5M, 1.5e13): adds the days and GPU-hours of the
    /// whole run at the simulated throughput.
    #[arg(long)]
    tokens: Option<String>,
    /// Price of one GPU-hour (with --tokens): adds the cost of the whole run.
    #[arg(long, requires = "tokens")]
    gpu_hour_price: Option<f64>,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    outer: OuterArgs,
}

/// Builds the workload of `simulate`.
pub fn workload(
    common: &CommonArgs,
    outer: &OuterArgs,
    method: MethodId,
    p: u64,
    seq: u64,
    global_batch: Option<&str>,
) -> Result<Workload> {
    let axes = outer.axes()?;
    let mut w = common.workload(method, p, seq)?;
    w.outer = axes;
    outer.apply(&mut w.options)?;
    super::args::apply_global_batch(&mut w, global_batch)?;
    Ok(w)
}

pub fn run(a: SimulateArgs) -> Result<String> {
    let method = MethodId::parse("--method", &a.method)?;
    let p = single_degree(&a.p)?;
    let seq = parse_count("--seq", &a.seq)?;
    if let Some(ms) = a.timeline_ms {
        if !(ms.is_finite() && ms > 0.0) {
            return Err(Error::arg(
                "--timeline-ms",
                format!("must be a positive number of milliseconds, got {ms}"),
            ));
        }
    }
    // Outputs are checked before the simulation, not after it.
    for path in a.trace.iter().chain(&a.timeline) {
        crate::atomic::check_output_file(path)?;
    }
    let tokens = a
        .tokens
        .as_deref()
        .map(|t| parse_amount("--tokens", t))
        .transpose()?;
    if let Some(t) = tokens.filter(|&t| t > 1e18) {
        return Err(Error::arg("--tokens", format!("{t}: at most 1e18 tokens")));
    }
    if let Some(price) = a.gpu_hour_price {
        if !(price.is_finite() && (0.0..=1e6).contains(&price)) {
            return Err(Error::arg(
                "--gpu-hour-price",
                format!("{price}: must be a price from 0 to 1e6 per GPU-hour"),
            ));
        }
    }
    let w = workload(
        &a.common,
        &a.outer,
        method,
        p,
        seq,
        a.global_batch.as_deref(),
    )?
    .validate()?;
    // Now that the model and profile are read: neither output may replace one of them.
    for path in a.trace.iter().chain(&a.timeline) {
        crate::atomic::check_not_input(path)?;
    }
    crate::atomic::check_distinct_outputs(
        &a.trace
            .iter()
            .map(|p| ("--trace", p.as_path()))
            .chain(a.timeline.iter().map(|p| ("--timeline", p.as_path())))
            .collect::<Vec<_>>(),
    )?;
    let trace = match (
        a.trace.is_some() || a.timeline.is_some(),
        a.trace_all_devices,
    ) {
        (false, _) => TraceScope::Off,
        (true, false) => TraceScope::Auto,
        (true, true) => TraceScope::AllDevices,
    };
    let e = Evaluation::new(w).simulate(SimulateOptions {
        link: a.link_model.into(),
        depth: if a.extrapolate {
            SimDepth::Extrapolate
        } else if a.full_sim {
            SimDepth::Full
        } else {
            SimDepth::Periodic
        },
        trace,
        devices: crate::schedule::Devices::Distinct,
    })?;
    e.check()?;
    if let Some(path) = &a.trace {
        report::write_trace(path, &e)?;
    }
    if let Some(path) = &a.timeline {
        report::write_timeline(path, &e, a.timeline_ms)?;
    }
    let training = tokens.and_then(|t| {
        Training::of(
            t,
            e.metrics.tokens_per_s,
            e.workload.devices(),
            a.gpu_hour_price,
        )
    });
    Ok(match a.common.format.into() {
        Format::Json => report::simulate_json_with(&e, training),
        Format::Table => report::simulate_table_with(&e, training),
        Format::Csv => report::simulate_csv(&e),
    })
}
