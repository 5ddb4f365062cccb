//! `simulate` outputs: the simulated step beside the closed-form estimate (table, JSON, CSV), and
//! its trace and timeline files.

use std::path::Path;

use serde::Serialize;

use super::columns::{self, Column};
use super::table::{fmt_bytes, Table};
use super::{timeline_spans, to_json, write_atomic};
use crate::error::Result;
use crate::evaluate::{Evaluation, Metrics, Training};
use crate::plot;
use crate::sim::{self, DeviceStats};

#[derive(Serialize)]
struct AnalyticJson {
    step_time_s: f64,
    peak_bytes: u128,
    exposed_communication_s: f64,
    tokens_per_s: f64,
    mfu: f64,
}

#[derive(Serialize)]
struct StageJson {
    stage: u32,
    layers: u64,
    compute_s: Option<f64>,
    communication_s: Option<f64>,
    exposed_communication_s: Option<f64>,
    bubble_s: Option<f64>,
    peak_bytes: u128,
    headroom_bytes: u128,
    fits: bool,
    simulated_memory_high_water_bytes: Option<u128>,
}

#[derive(Serialize)]
struct SimulateJson<'a> {
    model: &'a str,
    hardware: &'a str,
    attention_kernel: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_placeholder: Option<String>,
    /// The fraction of the calibrated clock a step's GEMMs run at, where the profile has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    gemm_step_clock_fraction: Option<f64>,
    /// The share of that clock the job's slowest GPU holds, where the profile has a fleet clock
    /// spread (`kernels.gemm.fleet_clock_spread`; a step's GEMMs run at it).
    #[serde(skip_serializing_if = "Option::is_none")]
    job_clock_fraction: Option<f64>,
    method: &'a str,
    p: u64,
    dp: u64,
    pp: u64,
    pp_interleave: u64,
    cp: u64,
    simulated_devices: Option<u32>,
    cluster_devices: u64,
    seq: u64,
    micro_batch: u64,
    micro_batches: u64,
    #[serde(flatten)]
    state: super::memory::TrainingState,
    link_model: &'a str,
    step_time_s: f64,
    compute_s: f64,
    communication_s: f64,
    exposed_communication_s: f64,
    exposed_share: f64,
    overlap_efficiency: f64,
    peak_bytes: u128,
    capacity_bytes: u128,
    headroom_bytes: u128,
    fits: bool,
    simulated_memory_high_water_bytes: Option<u128>,
    tokens_per_s: f64,
    mfu: f64,
    /// What the MFU counts (`evaluate::FlopConvention::TOOL`).
    mfu_convention: String,
    analytic: AnalyticJson,
    tasks: Option<u64>,
    events: Option<u64>,
    /// What a shortened simulation left out (the rest proven to repeat it exactly).
    #[serde(skip_serializing_if = "Option::is_none")]
    shortened: Option<crate::sim::Shortened>,
    /// When the step was composed from its distinct op programs: how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    composed: Option<crate::sim::Composition>,
    /// The whole run at this throughput, with `--tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    training: Option<Training>,
    stages: Vec<StageJson>,
    devices: &'a [DeviceStats],
}

/// Per pipeline stage: its inventory, and its simulated times when the whole step ran.
fn stage_rows(e: &Evaluation) -> Vec<StageJson> {
    let run = e.simulation.as_ref().and_then(|s| s.run.as_ref());
    let times = run.map(|r| r.stages()).unwrap_or_default();
    e.stages
        .iter()
        .map(|inv| {
            let t = times.iter().find(|t| t.stage == inv.stage);
            StageJson {
                stage: inv.stage,
                layers: inv.layers,
                compute_s: t.map(|t| t.compute_s),
                communication_s: t.map(|t| t.communication_s),
                exposed_communication_s: t.map(|t| t.exposed_communication_s),
                bubble_s: t.map(|t| t.bubble_s),
                peak_bytes: inv.peak_bytes,
                headroom_bytes: inv.capacity_bytes.saturating_sub(inv.peak_bytes),
                fits: inv.fits,
                simulated_memory_high_water_bytes: t.map(|t| t.memory_high_water_bytes),
            }
        })
        .collect()
}

/// JSON for `metp-sim simulate` (DESIGN §8 fields, `fits` and the capacity among them).
pub fn simulate_json(e: &Evaluation) -> String {
    simulate_json_with(e, None)
}

/// The same, with the whole run's time and cost (`--tokens`): `training`.
pub fn simulate_json_with(e: &Evaluation, training: Option<Training>) -> String {
    let w = &e.workload;
    let m = &e.metrics;
    let a = e.analytic_metrics();
    let run = e.simulation.as_ref().and_then(|s| s.run.as_ref());
    to_json(&SimulateJson {
        model: &w.model.name,
        hardware: &w.hardware.name,
        attention_kernel: super::attention_kernel(w),
        kernel_placeholder: super::placeholder(w),
        gemm_step_clock_fraction: w
            .hardware
            .kernels
            .gemm
            .step_clock_fraction
            .as_ref()
            .map(|f| f.value),
        job_clock_fraction: w.hardware.kernels.gemm.job_clock_fraction,
        method: w.method.id(),
        p: w.p,
        dp: w.dp,
        pp: w.outer.pp,
        pp_interleave: w.outer.interleave,
        cp: w.outer.cp,
        simulated_devices: run.map(|r| r.devices),
        cluster_devices: w.devices(),
        seq: w.seq,
        micro_batch: w.micro_batch,
        micro_batches: w.micro_batches,
        state: super::memory::TrainingState::of(w),
        link_model: e.simulation.as_ref().map_or("none", |s| s.link.id()),
        step_time_s: m.step_time_s,
        compute_s: m.compute_s,
        communication_s: m.communication_s,
        exposed_communication_s: m.exposed_communication_s,
        exposed_share: m.exposed_share,
        overlap_efficiency: m.overlap_efficiency,
        peak_bytes: m.peak_bytes,
        capacity_bytes: m.capacity_bytes,
        headroom_bytes: m.headroom_bytes,
        fits: m.fits,
        simulated_memory_high_water_bytes: run.map(|r| r.result.max_memory_high_water_bytes()),
        tokens_per_s: m.tokens_per_s,
        mfu: m.mfu,
        mfu_convention: crate::evaluate::mfu_convention_with(fp8(w)),
        analytic: AnalyticJson {
            step_time_s: a.step_time_s,
            peak_bytes: a.peak_bytes,
            exposed_communication_s: a.exposed_communication_s,
            tokens_per_s: a.tokens_per_s,
            mfu: a.mfu,
        },
        tasks: run.map(|r| r.result.tasks),
        events: run.map(|r| r.result.events),
        shortened: run.and_then(|r| r.shortened),
        composed: run.and_then(|r| r.composed),
        training,
        stages: stage_rows(e),
        devices: run.map_or(&[], |r| &r.result.devices),
    })
}

/// The columns of `simulate --format csv`: the JSON's top-level figures under the same keys,
/// the closed-form ones prefixed `analytic_` (the per-stage and per-device figures are in the
/// JSON only).
fn simulate_columns() -> Vec<Column<Evaluation>> {
    type C = Column<Evaluation>;
    fn run(e: &Evaluation) -> Option<&crate::sim::WorkloadSim> {
        e.simulation.as_ref().and_then(|s| s.run.as_ref())
    }
    vec![
        C::data("model", |e| e.workload.model.name.clone().into()),
        C::data("hardware", |e| e.workload.hardware.name.clone().into()),
        C::data("attention_kernel", |e| {
            super::attention_kernel(&e.workload).into()
        }),
        C::data("kernel_placeholder", |e| {
            super::placeholder(&e.workload).into()
        }),
        C::data("method", |e| e.workload.method.id().into()),
        C::data("p", |e| e.workload.p.into()),
        C::data("dp", |e| e.workload.dp.into()),
        C::data("pp", |e| e.workload.outer.pp.into()),
        C::data("pp_interleave", |e| e.workload.outer.interleave.into()),
        C::data("cp", |e| e.workload.outer.cp.into()),
        C::data("simulated_devices", |e| {
            run(e).map(|r| u64::from(r.devices)).into()
        }),
        C::data("cluster_devices", |e| e.workload.devices().into()),
        C::data("seq", |e| e.workload.seq.into()),
        C::data("micro_batch", |e| e.workload.micro_batch.into()),
        C::data("micro_batches", |e| e.workload.micro_batches.into()),
        C::data("link_model", |e| {
            e.simulation.as_ref().map_or("none", |s| s.link.id()).into()
        }),
        C::data("step_time_s", |e| e.metrics.step_time_s.into()),
        C::data("compute_s", |e| e.metrics.compute_s.into()),
        C::data("communication_s", |e| e.metrics.communication_s.into()),
        C::data("exposed_communication_s", |e| {
            e.metrics.exposed_communication_s.into()
        }),
        C::data("exposed_share", |e| e.metrics.exposed_share.into()),
        C::data("overlap_efficiency", |e| {
            e.metrics.overlap_efficiency.into()
        }),
        C::data("peak_bytes", |e| e.metrics.peak_bytes.into()),
        C::data("capacity_bytes", |e| e.metrics.capacity_bytes.into()),
        C::data("headroom_bytes", |e| e.metrics.headroom_bytes.into()),
        C::data("fits", |e| e.metrics.fits.into()),
        C::data("simulated_memory_high_water_bytes", |e| {
            run(e)
                .map(|r| r.result.max_memory_high_water_bytes())
                .into()
        }),
        C::data("tokens_per_s", |e| e.metrics.tokens_per_s.into()),
        C::data("mfu", |e| e.metrics.mfu.into()),
        C::data("analytic_step_time_s", |e| {
            e.analytic_metrics().step_time_s.into()
        }),
        C::data("analytic_peak_bytes", |e| {
            e.analytic_metrics().peak_bytes.into()
        }),
        C::data("analytic_exposed_communication_s", |e| {
            e.analytic_metrics().exposed_communication_s.into()
        }),
        C::data("analytic_tokens_per_s", |e| {
            e.analytic_metrics().tokens_per_s.into()
        }),
        C::data("analytic_mfu", |e| e.analytic_metrics().mfu.into()),
        C::data("tasks", |e| run(e).map(|r| r.result.tasks).into()),
        C::data("events", |e| run(e).map(|r| r.result.events).into()),
    ]
}

/// CSV for `metp-sim simulate`: a header and one row, the step's figures (numbers as the JSON
/// writes them, unformatted).
pub fn simulate_csv(e: &Evaluation) -> String {
    let columns = simulate_columns();
    let mut s = columns::csv_header(&columns);
    s.push_str(&columns::csv_row(&columns, e));
    s
}

/// One line on memory: `fits: peak … of …` or `does not fit: peak … > capacity …` (every
/// command says so when a configuration does not fit, DESIGN §8).
pub fn fits_line(m: &Metrics) -> String {
    if m.fits {
        format!(
            "fits: peak {} of {} per device ({} headroom)",
            fmt_bytes(m.peak_bytes),
            fmt_bytes(m.capacity_bytes),
            fmt_bytes(m.headroom_bytes)
        )
    } else {
        format!(
            "does not fit: peak {} per device > capacity {} (the times above assume the memory \
             were there)",
            fmt_bytes(m.peak_bytes),
            fmt_bytes(m.capacity_bytes)
        )
    }
}

/// Human table for `metp-sim simulate`: simulated and closed-form side by side, then whether
/// it fits.
pub fn simulate_table(e: &Evaluation) -> String {
    simulate_table_with(e, None)
}

/// The whole run's time and cost in one line: `time to train 15T tokens: 51.3 days, 4.2 M
/// GPU-hours, 8.4 M at 2 per GPU-hour`.
pub fn training_line(t: &Training, gpus: u64) -> String {
    let cost = t
        .cost
        .map_or(String::new(), |c| format!(", cost {}", eng(c)));
    format!(
        "time to train {} tokens at this throughput on {gpus} GPUs: {:.1} days, {} GPU-hours{cost}\n",
        eng(t.tokens),
        t.days,
        eng(t.gpu_hours)
    )
}

/// `1.23 M`, `15.00 T`: a count in decimal units.
pub fn eng(x: f64) -> String {
    let (v, unit) = if x >= 1e12 {
        (x / 1e12, " T")
    } else if x >= 1e9 {
        (x / 1e9, " G")
    } else if x >= 1e6 {
        (x / 1e6, " M")
    } else if x >= 1e3 {
        (x / 1e3, " k")
    } else {
        (x, "")
    };
    format!("{v:.2}{unit}")
}

/// Human table for `metp-sim simulate`, with the whole run's time and cost (`--tokens`).
pub fn simulate_table_with(e: &Evaluation, training: Option<Training>) -> String {
    let w = &e.workload;
    let s = &e.metrics;
    let a = e.analytic_metrics();
    let run = e.simulation.as_ref().and_then(|s| s.run.as_ref());
    let mut t = Table::new(&["quantity", "simulated", "analytic"], &[false, true, true]);
    let ms = |x: f64| format!("{:.3} ms", x * 1e3);
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let rows: [(&str, String, String); 7] = [
        ("step time", ms(s.step_time_s), ms(a.step_time_s)),
        (
            "compute (critical device)",
            ms(s.compute_s),
            ms(a.compute_s),
        ),
        (
            "communication",
            ms(s.communication_s),
            ms(a.communication_s),
        ),
        (
            "exposed communication",
            ms(s.exposed_communication_s),
            ms(a.exposed_communication_s),
        ),
        (
            "overlap efficiency",
            pct(s.overlap_efficiency),
            pct(a.overlap_efficiency),
        ),
        (
            "tokens/s",
            format!("{:.0}", s.tokens_per_s),
            format!("{:.0}", a.tokens_per_s),
        ),
        ("MFU", pct(s.mfu), pct(a.mfu)),
    ];
    for (q, x, y) in rows {
        t.row(vec![q.into(), x, y]);
    }
    t.row(vec![
        "peak memory per device".into(),
        run.map(|r| fmt_bytes(r.result.max_memory_high_water_bytes()))
            .unwrap_or_else(|| "-".into()),
        fmt_bytes(a.peak_bytes),
    ]);
    let link = e.simulation.as_ref().map_or("no", |s| s.link.id());
    let mut counts = run
        .map(|r| {
            let reduced = if r.devices < r.cluster_devices {
                format!(
                    " on {} simulated devices standing for {} (one per distinct program)",
                    r.devices, r.cluster_devices
                )
            } else {
                String::new()
            };
            let short = r.shortened.map_or(String::new(), |x| {
                format!(
                    "{}; the others repeat them exactly (proven periodic; --full-sim runs them \
                     all)\n",
                    x.describe()
                )
            });
            match r.composed {
                Some(c) => format!(
                    "composed from {} distinct op programs, each simulated once ({} tasks, {} \
                     events{reduced}), for the {} ops of the step's 1F1B orders{}; within 1–3% of \
                     --full-sim\n",
                    c.programs,
                    r.result.tasks,
                    r.result.events,
                    c.ops,
                    if c.extrapolated > 0 {
                        format!(
                            " ({} program(s) extrapolated in their layers from two shorter runs)",
                            c.extrapolated
                        )
                    } else {
                        String::new()
                    }
                ),
                None => format!(
                    "{} tasks, {} events{reduced}\n{short}",
                    r.result.tasks, r.result.events
                ),
            }
        })
        .unwrap_or_default();
    if let Some(d) = run.and_then(|r| r.trace_device) {
        counts.push_str(&format!(
            "trace and timeline: device {d} only (the step has more than 2^20 spans over all \
             devices; --trace-all-devices records every one)\n"
        ));
    }

    if let Some(t) = &training {
        counts.push_str(&training_line(t, w.devices()));
    }
    let stages = if w.outer.pp > 1 {
        stage_table(e)
    } else {
        String::new()
    };
    format!(
        "{} on {} — {}, {}, s = {}, b = {} × {} micro-batches, {} links\n{}\n{}{}{}\n{}{}\n",
        w.method,
        w.hardware.name,
        w.model.name,
        axes_text(w),
        w.seq,
        w.micro_batch,
        w.micro_batches,
        link,
        super::attention_header(w),
        t.render(),
        stages,
        fits_line(s),
        counts,
        crate::evaluate::mfu_convention_with(fp8(w))
    )
}

/// `p = 8, cp = 2, pp = 4 (interleave 2), dp = 16`, the outer axes only when used.
pub fn axes_text(w: &crate::config::Workload) -> String {
    let mut s = format!("p = {}", w.p);
    if w.options.tp_comm_overlap {
        s.push_str(" (TP communication overlapped)");
    }
    if w.outer.cp > 1 {
        s.push_str(&format!(", cp = {}", w.outer.cp));
        if w.options.runtime.cp_comm == crate::config::CpComm::AllGather {
            s.push_str(" (K/V all-gathered)");
        }
    }
    if w.outer.pp > 1 {
        s.push_str(&format!(", pp = {}", w.outer.pp));
        if w.outer.interleave > 1 {
            s.push_str(&format!(" (interleave {}", w.outer.interleave));
            if let Some(n) = w.options.runtime.pp_round {
                s.push_str(&format!(", rounds of {n}"));
            }
            s.push(')');
        }
        if w.options.runtime.pp_p2p != crate::config::PipeP2p::Async {
            s.push_str(&format!(", {} p2p", w.options.runtime.pp_p2p.id()));
        }
    }
    s.push_str(&format!(", dp = {}", w.dp));
    if w.options.runtime.grad_sync == crate::config::GradSync::AfterBackward {
        s.push_str(" (grad sync after the backward)");
    }
    if let Some(z) = w.options.runtime.zero3_gather.shown() {
        if w.zero_stage() == crate::config::ZeroStage::Zero3 {
            s.push_str(&format!(", ZeRO-3 gathers {z}"));
        }
    }
    if let Some(o) = w.options.runtime.layer_ops.shown() {
        s.push_str(&format!(", {o} layer ops"));
    }
    if let Some(g) = w.options.runtime.param_gather.shown() {
        s.push_str(&format!(
            ", updated weights gathered {g} (in the first forward)"
        ));
    }
    if let Some(c) = w.options.runtime.cross_entropy.shown() {
        s.push_str(&format!(", {c} cross-entropy"));
    }
    if let Some(g) = w.options.runtime.grad_buffer.shown() {
        s.push_str(&format!(", gradients allocated {g}"));
    }
    s
}

/// The per-stage table of a pipelined step: layers, simulated compute, bubble and exposed
/// communication of the stage's busiest device, and its memory.
fn stage_table(e: &Evaluation) -> String {
    let ms = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.3} ms", x * 1e3));
    let mut t = Table::new(
        &[
            "stage",
            "layers",
            "compute",
            "bubble",
            "exposed comm",
            "peak memory",
            "headroom",
        ],
        &[true, true, true, true, true, true, true],
    );
    for r in stage_rows(e) {
        t.row(vec![
            r.stage.to_string(),
            r.layers.to_string(),
            ms(r.compute_s),
            ms(r.bubble_s),
            ms(r.exposed_communication_s),
            fmt_bytes(r.peak_bytes),
            if r.fits {
                fmt_bytes(r.headroom_bytes)
            } else {
                "does not fit".into()
            },
        ]);
    }
    let mut out = format!(
        "\nper pipeline stage (its busiest simulated device)\n{}",
        t.render()
    );
    if let Some(n) = e.workload.uneven_layers_note() {
        out.push_str(&n);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// Writes the simulated step's Chrome trace (Perfetto, chrome://tracing); nothing without a
/// trace.
pub fn write_trace(path: &Path, e: &Evaluation) -> Result<()> {
    let Some(run) = e.simulation.as_ref().and_then(|s| s.run.as_ref()) else {
        return Ok(());
    };
    let Some(trace) = &run.result.trace else {
        return Ok(());
    };
    write_atomic(path, sim::chrome_trace_json(trace, run.devices).as_bytes())
}

/// Writes the simulated step's timeline picture (.svg or .png), the first `window_ms`
/// milliseconds when given; nothing without a trace.
pub fn write_timeline(path: &Path, e: &Evaluation, window_ms: Option<f64>) -> Result<()> {
    let Some(trace) = e
        .simulation
        .as_ref()
        .and_then(|s| s.run.as_ref())
        .and_then(|r| r.result.trace.as_ref())
    else {
        return Ok(());
    };
    let w = &e.workload;
    let spans = timeline_spans(trace, window_ms.map(|ms| ms / 1e3));
    let opts = plot::TimelineOptions {
        window_s: window_ms.map(|ms| (0.0, ms / 1e3)),
        ..Default::default()
    };
    let title = format!(
        "{} — {} on {}, p = {}, s = {}",
        w.method, w.model.name, w.hardware.name, w.p, w.seq
    );
    plot::write_timeline_with(&title, &spans, &opts, path)
}

/// Whether `w`'s linear layers run FP8 (what the MFU's peak depends on).
fn fp8(w: &crate::config::Workload) -> bool {
    w.options.linear_dtype == crate::config::LinearDtype::Fp8
}
