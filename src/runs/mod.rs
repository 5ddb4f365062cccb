//! Published training runs as the test of record: each run file (`runs/*.json`, [`file`])
//! states a layout a paper ran and the figure it measured; [`evaluate`] predicts that figure
//! with the tool and says how far off it is, over the knobs the paper leaves unstated, and
//! which part of the step a gap points at ([`breakdown`]).
//!
//! Every configuration a run tries is priced in closed form (the analytic twin); the run's own
//! configuration is also simulated exactly (max-min links; a shortened copy where the engine
//! proves the rest repeats it, else the whole step — not `plan`'s composed fast path, which is
//! within 1-2.5% and would move a figure of record) unless [`RunTiming::Analytic`] is asked
//! for. A TFLOP/s or MFU figure
//! is compared in the paper's own FLOP convention (`evaluate::FlopConvention`), an iteration
//! time as seconds. Depends on `config`, `cost`, `evaluate`, `schedule`, `sim` and `error`; never
//! on `report` or `cli`.

pub mod breakdown;
pub mod file;
pub mod fit;
pub mod invalid;
pub mod knobs;
pub mod pairs;
pub mod peak;
pub mod precision;
pub mod repeats;
pub mod scaling;
pub mod sources;

use serde::Serialize;

pub use breakdown::{Breakdown, Suspect};
pub use file::{load, load_dir, Quantity, Run, RunFile};
pub use fit::{fit_summary, FitSummary};
pub use knobs::{Knob, Knobs};
pub use pairs::{pairs, Pair, PartSplit, Split};
pub use peak::PeakParts;
pub use precision::{precision_pairs, PrecisionPair};
pub use repeats::{repeats, Repeat, Repeated};
pub use scaling::{weak_scaling, ScalingPoint, ScalingVerdict, WeakScaling};
pub use sources::{by_size, by_source, speed_error, SizeSummary, SourceSummary};

use crate::config::{
    CpComm, GradSync, LinearDtype, Options, OuterAxes, PipeP2p, Runtime, ValidWorkload, Workload,
};
use crate::error::{Error, Result};
use crate::evaluate::{step_flops, Evaluation, FlopConvention, SimDepth, SimulateOptions};
use crate::schedule::{Devices, StepTimes};
use crate::sim::{LinkModel, TraceScope};

/// The goal every run is held to in the report (a run's own tolerance may be wider, with its
/// reason).
pub const GOAL: f64 = 0.05;

/// How the run's own configuration is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunTiming {
    /// The event simulator with max-min fair links, extrapolated in layers and micro-batches
    /// where the model is deep (the closed form is kept beside it).
    Simulated,
    /// The closed form only (the analytic twin; fast, for tests in debug builds).
    Analytic,
    /// Asked to be simulated, but the exact simulation is beyond the simulator's task bound:
    /// composed from the step's distinct op programs instead (`plan`'s fast path), which a
    /// run's result says so that a reader knows it is not the exact figure.
    Composed,
}

impl RunTiming {
    /// Words for reports.
    pub fn words(self) -> &'static str {
        match self {
            RunTiming::Simulated => {
                "simulated exactly (max-min fair links; repeating layers or pipeline rounds left \
                 out only where proven to repeat)"
            }
            RunTiming::Analytic => "closed form (the analytic twin)",
            RunTiming::Composed => {
                "composed from its distinct op programs (the exact simulation is beyond the \
                 simulator's task bound; the composition is plan's fast path, within 1-2.5% of \
                 the exact simulation where both run)"
            }
        }
    }
}

/// One configuration of a run (its own, or another combination of the unstated knobs' values),
/// priced in closed form.
#[derive(Debug, Clone, Serialize)]
pub struct Configuration {
    /// The knobs' values.
    pub knobs: Knobs,
    /// The unstated knobs' values as text.
    pub label: String,
    /// Why the tool cannot run it (`None`: it can).
    pub invalid: Option<String>,
    /// Closed-form step time.
    pub step_time_s: Option<f64>,
    /// The published quantity predicted from it.
    pub predicted: Option<f64>,
    /// `predicted / measured − 1`.
    pub error: Option<f64>,
    /// Peak memory of the critical device.
    pub peak_bytes: Option<u128>,
    /// Whether it fits in device memory.
    pub fits: Option<bool>,
}

/// What the unstated knobs do to the prediction.
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    /// Configurations the tool can run.
    pub valid: usize,
    /// Of those, the ones that fit in memory.
    pub fitting: usize,
    /// Smallest and largest error over the valid configurations (closed form).
    pub error_range: Option<(f64, f64)>,
    /// The fastest configuration that fits, and its error (closed form).
    pub fastest_fitting: Option<(String, f64)>,
    /// The configurations the tool cannot run, one group per reason ([`invalid`]).
    pub invalid: Vec<invalid::InvalidGroup>,
}

/// An unstated knob as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct UnstatedKnob {
    /// The knob.
    pub knob: &'static str,
    /// Values tried.
    pub tried: Vec<String>,
    /// The run's value.
    pub chosen: String,
    /// Why.
    pub why: String,
}

/// One run, predicted.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// File stem.
    pub id: String,
    /// Title.
    pub title: String,
    /// Where it is published.
    pub source: file::Source,
    /// Model name.
    pub model: String,
    /// The model's parameters (`config::Model::total_params`: layers, embeddings and head).
    pub params: u64,
    /// Profile name.
    pub hardware: String,
    /// GPUs.
    pub gpus: u64,
    /// The layout as one line.
    pub layout: String,
    /// The layout inside one data-parallel replica (the layout without the data-parallel
    /// degree and the micro-batches per replica, with the model, profile and sequence): runs
    /// that share it differ only in how many micro-batches each replica runs ([`pairs`]).
    pub replica_layout: String,
    /// Micro-batches per data-parallel replica.
    pub micro_batches: u64,
    /// The dtype of its layers' linear GEMMs (left out of JSON when bf16).
    #[serde(skip_serializing_if = "LinearDtype::is_bf16")]
    pub linear_dtype: LinearDtype,
    /// What it shares with a twin in the other dtype ([`precision`]; not serialized).
    #[serde(skip)]
    pub precision_twin: String,
    /// What was measured.
    pub quantity: Quantity,
    /// The published figure.
    pub measured: f64,
    /// The paper's FLOP convention, in words (TFLOP/s and MFU figures).
    pub flop_convention: Option<String>,
    /// How the prediction was timed.
    pub timing: RunTiming,
    /// The predicted figure, in the paper's quantity and convention.
    pub predicted: f64,
    /// `predicted / measured − 1`.
    pub error: f64,
    /// Whether the tool predicts a faster step than measured.
    pub tool_faster: bool,
    /// The run's tolerance.
    pub tolerance: f64,
    /// Why it is wider than the goal.
    pub tolerance_why: String,
    /// `|error| <= tolerance`.
    pub within_tolerance: bool,
    /// `|error| <= GOAL`.
    pub within_goal: bool,
    /// Predicted step time.
    pub predicted_step_s: f64,
    /// Of it, the compute of the critical device (kernels, slowed where communication runs
    /// beside them).
    pub predicted_compute_s: f64,
    /// The measured step time (published, or implied by the figure and the convention).
    pub measured_step_s: f64,
    /// The closed form's figure for the same configuration.
    pub analytic_predicted: f64,
    /// Its error.
    pub analytic_error: f64,
    /// Peak memory of the critical device.
    pub peak_bytes: u128,
    /// Device memory.
    pub capacity_bytes: u128,
    /// Of the peak, what the profile reserves (CUDA context, NCCL buffers, allocator
    /// headroom): the part that is an assumption rather than a tensor.
    pub reserved_bytes: u128,
    /// Whether the run fits by the tool's memory model.
    pub fits: bool,
    /// The peak, part by part.
    pub peak: PeakParts,
    /// Where the predicted step goes.
    pub breakdown: Breakdown,
    /// The parts the gap could be a plausible error of.
    pub suspects: Vec<Suspect>,
    /// The gap and its suspects in one paragraph.
    pub explanation: String,
    /// The knobs the paper does not state.
    pub unstated: Vec<UnstatedKnob>,
    /// Every configuration tried, the run's own first.
    pub configurations: Vec<Configuration>,
    /// Over the configurations.
    pub spread: Spread,
}

/// The workload of configuration `k` of `run`.
pub fn workload(run: &Run, k: &Knobs) -> Result<Workload> {
    let f = &run.file;
    let invalid = |message: String| Error::InvalidConfig {
        method: f.method.id().to_string(),
        p: f.p,
        message,
    };
    let per = f.dp * k.micro_batch;
    if !f.global_batch.is_multiple_of(per) {
        return Err(invalid(format!(
            "the global batch {} is not a multiple of dp × micro-batch = {per}",
            f.global_batch
        )));
    }
    Ok(Workload {
        model: run.model.clone(),
        hardware: run.hardware.clone(),
        method: f.method,
        p: f.p,
        dp: f.dp,
        outer: OuterAxes {
            pp: f.pp,
            interleave: k.interleave,
            cp: f.cp,
        },
        seq: f.seq,
        micro_batch: k.micro_batch,
        micro_batches: f.global_batch / per,
        options: Options {
            flash: k.attention_kernel.is_fused(),
            attention: Some(k.attention_kernel),
            recompute: k.recompute,
            zero: Some(knobs::zero_stage(k.zero)),
            grad_dtype: k.grad_dtype,
            optimizer_dtype: f.optimizer_dtype,
            grad_accumulation: f.grad_accumulation,
            tp_comm_overlap: f.tp_comm_overlap,
            linear_dtype: f.linear_dtype,
            causal: f.causal,
            runtime: Runtime {
                pp_round: k.pp_round,
                pp_p2p: f.pp_p2p,
                grad_sync: f.grad_sync,
                cp_comm: f.cp_comm,
                layer_ops: k.layer_ops,
                zero3_gather: f.zero3_gather,
                param_gather: f.param_gather,
                cross_entropy: f.cross_entropy,
                grad_buffer: f.grad_buffer,
            },
            ..Options::default()
        },
    })
}

/// The FLOP convention configuration `k` counts the published figure with.
fn convention(run: &Run, k: &Knobs) -> Option<FlopConvention> {
    let fl = run.file.measured.flops.as_ref()?;
    Some(FlopConvention {
        attention: k.flop_attention.unwrap_or(fl.attention),
        recomputation: fl.recomputation,
    })
}

/// The published quantity of a step of `w` taking `step_s`.
fn figure(run: &Run, k: &Knobs, w: &Workload, step_s: f64) -> f64 {
    let gpus = run.gpus() as f64;
    match (run.file.measured.quantity, convention(run, k)) {
        (Quantity::TokensPerSPerGpu, _) => {
            run.file.global_batch as f64 * run.file.seq as f64 / gpus / step_s
        }
        (Quantity::IterationS, _) | (_, None) => step_s,
        (Quantity::TflopsPerGpu, Some(c)) => step_flops(w, c) / step_s / gpus / 1e12,
        (Quantity::Mfu, Some(c)) => step_flops(w, c) / step_s / gpus / w.peak_flops_per_s(),
    }
}

/// The step time the published figure stands for under configuration `k`'s convention.
fn measured_step(run: &Run, k: &Knobs, w: &Workload) -> f64 {
    let v = run.file.measured.value;
    // figure() is inversely proportional to the step time: figure(t) = figure(1) / t.
    match run.file.measured.quantity {
        Quantity::IterationS => v,
        _ => figure(run, k, w, 1.0) / v,
    }
}

fn price(run: &Run, k: &Knobs) -> Configuration {
    let label = k.describe(&run.unstated_knobs());
    let w = workload(run, k).and_then(Workload::validate);
    match w {
        Err(e) => Configuration {
            knobs: k.clone(),
            label,
            invalid: Some(e.to_string()),
            step_time_s: None,
            predicted: None,
            error: None,
            peak_bytes: None,
            fits: None,
        },
        Ok(w) => {
            let e = Evaluation::new(w);
            let t = e.estimate.step_time_s;
            let predicted = figure(run, k, &e.workload, t);
            Configuration {
                knobs: k.clone(),
                label,
                invalid: None,
                step_time_s: Some(t),
                predicted: Some(predicted),
                error: Some(predicted / run.file.measured.value - 1.0),
                peak_bytes: Some(e.inventory.peak_bytes),
                fits: Some(e.inventory.fits),
            }
        }
    }
}

fn spread(configs: &[Configuration], knobs: &[(knobs::Knob, Vec<String>)]) -> Spread {
    let valid: Vec<&Configuration> = configs.iter().filter(|c| c.invalid.is_none()).collect();
    let errors: Vec<f64> = valid.iter().filter_map(|c| c.error).collect();
    let error_range = (!errors.is_empty()).then(|| {
        (
            errors.iter().copied().fold(f64::INFINITY, f64::min),
            errors.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        )
    });
    let fitting: Vec<&&Configuration> = valid.iter().filter(|c| c.fits == Some(true)).collect();
    let fastest_fitting = fitting
        .iter()
        .filter_map(|c| Some((c, c.step_time_s?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .and_then(|(c, _)| Some((c.label.clone(), c.error?)));
    Spread {
        valid: valid.len(),
        fitting: fitting.len(),
        error_range,
        fastest_fitting,
        invalid: invalid::group(configs, knobs),
    }
}

/// `tp-sp: TP 8 × PP 8 (v 3) × DP 1; b 1 × 64; s 2048; selective; ZeRO 0; unfused, causal`:
/// the run's own layout in one line (b = micro-batch × micro-batches per replica).
fn layout(run: &Run, w: &ValidWorkload) -> String {
    layout_with(run, w, true, true)
}

/// [`layout`] inside one replica: without the data-parallel degree and the micro-batches per
/// replica, with the model, profile and sequence.
fn replica_layout(run: &Run, w: &ValidWorkload) -> String {
    format!(
        "{} on {}: {}",
        run.model.name,
        run.hardware.name,
        layout_with(run, w, false, true)
    )
}

/// What a run shares with its twin in the other precision of the linear layers ([`precision`]):
/// model, profile and the whole layout but the dtype.
fn precision_twin(run: &Run, w: &ValidWorkload) -> String {
    format!(
        "{} on {}: {}",
        run.model.name,
        run.hardware.name,
        layout_with(run, w, true, false)
    )
}

/// The layout in one line: with the data-parallel degree and the micro-batches per replica
/// where `replicas`, with the linear layers' dtype (where not bf16) where `dtype`.
fn layout_with(run: &Run, w: &ValidWorkload, replicas: bool, dtype: bool) -> String {
    let f = &run.file;
    let k = run.chosen();
    let mut s = format!("{}: TP {}", f.method.id(), f.p);
    if f.cp > 1 {
        s.push_str(&format!(" × CP {}", f.cp));
    }
    if f.pp > 1 {
        s.push_str(&format!(" × PP {}", f.pp));
        if k.interleave > 1 {
            s.push_str(&format!(" (v {})", k.interleave));
        }
    }
    let (dp, count) = if replicas {
        (format!(" × DP {}", f.dp), format!(" × {}", w.micro_batches))
    } else {
        (String::new(), String::new())
    };
    s.push_str(&format!(
        "{dp}; b {}{count}; s {}; recompute {}; ZeRO {}, {} grads{}{}; {}{}",
        k.micro_batch,
        f.seq,
        knobs::recompute_id(k.recompute),
        k.zero,
        k.grad_dtype.id(),
        if f.grad_accumulation.is_default() {
            ""
        } else {
            " accumulated in a separate pass"
        },
        // Said where it is not the usual fp32 state, as the schedule options below are.
        if f.optimizer_dtype.is_default() {
            String::new()
        } else {
            format!(", {} optimizer state", f.optimizer_dtype.id())
        },
        k.attention_kernel,
        if f.causal { ", causal" } else { "" }
    ));
    if let Some(n) = k.pp_round {
        s.push_str(&format!("; {n} micro-batches per round"));
    }
    if dtype && !f.linear_dtype.is_bf16() {
        s.push_str(&format!("; {} linear layers", f.linear_dtype.id()));
    }
    // What the software did, where it shows: exchanges with a pipeline, the gradient
    // synchronisation with data-parallel replicas.
    if f.cp > 1 && f.cp_comm != CpComm::default() {
        s.push_str(&format!("; CP by {}", f.cp_comm.id()));
    }
    if f.tp_comm_overlap {
        s.push_str("; TP comm overlapped");
    }
    if let Some(o) = k.layer_ops.shown() {
        s.push_str(&format!("; {o} layer ops"));
    }
    if let Some(z) = f.zero3_gather.shown() {
        s.push_str(&format!("; ZeRO-3 gathers {z}"));
    }
    if let Some(g) = f.param_gather.shown() {
        s.push_str(&format!("; weights gathered {g}"));
    }
    if let Some(c) = f.cross_entropy.shown() {
        s.push_str(&format!("; {c} cross-entropy"));
    }
    if let Some(g) = f.grad_buffer.shown() {
        s.push_str(&format!("; gradients allocated {g}"));
    }
    if f.pp > 1 && f.pp_p2p != PipeP2p::default() {
        s.push_str(&format!("; {} p2p", f.pp_p2p.id()));
    }
    if (f.dp > 1 || !replicas) && f.grad_sync != GradSync::default() {
        s.push_str(&format!("; grad sync {}", f.grad_sync.id()));
    }
    s
}

/// Predicts run `run` (module docs): every configuration in closed form, the run's own also
/// simulated when `timing` says so.
pub fn evaluate(run: &Run, timing: RunTiming) -> Result<RunResult> {
    let context = |e: Error| Error::Parse {
        path: run.path.clone(),
        message: format!("the run's own configuration: {e}"),
    };
    let configurations: Vec<Configuration> =
        run.configurations.iter().map(|k| price(run, k)).collect();
    let k = run.chosen();
    let w = workload(run, k)
        .and_then(Workload::validate)
        .map_err(context)?;
    let mut e = Evaluation::new(w);
    let mut timing = timing;
    if timing == RunTiming::Simulated {
        let opts = |depth| SimulateOptions {
            link: LinkModel::MaxMin,
            depth,
            trace: TraceScope::Off,
            devices: Devices::Distinct,
        };
        // Exact: shortened where the rounds are proven to repeat, else the whole step (the
        // fast path's composition is within 1-2.5% — it would move a published run's
        // prediction by more than rounding: 1.2% on Llama 3's 128k run, whose every-micro-batch
        // gradient traffic shares links with the CP rings). A step too large for that is
        // composed, as `plan` and `simulate --extrapolate` do, and the result says so: one
        // large run file must not stop the whole report.
        e = match e.clone().simulate(opts(SimDepth::Periodic)) {
            Ok(simulated) => simulated,
            Err(Error::TooLarge { .. }) if e.workload.options.runtime.composable() => {
                timing = RunTiming::Composed;
                e.simulate(opts(SimDepth::Extrapolate)).map_err(context)?
            }
            Err(err) => return Err(context(err)),
        };
    }
    e.check().map_err(context)?;
    let times: StepTimes = e.simulation.as_ref().map_or(e.estimate, |s| s.times);
    let w = &e.workload;
    let measured = run.file.measured.value;
    let predicted = figure(run, k, w, times.step_time_s);
    let error = predicted / measured - 1.0;
    let analytic_predicted = figure(run, k, w, e.estimate.step_time_s);
    let measured_step_s = measured_step(run, k, w);
    let b = breakdown::breakdown(w, &e.plan, &times);
    let gap_s = measured_step_s - times.step_time_s;
    let f = &run.file;
    // Each unstated knob with the values it tries, as text: the report's column and the
    // order the refused configurations' groups name values in.
    let tried: Vec<(knobs::Knob, Vec<String>)> = f
        .unstated
        .iter()
        .map(|u| (u.knob, u.tried.iter().map(value_text).collect()))
        .collect();
    let unstated = f
        .unstated
        .iter()
        .zip(&tried)
        .map(|(u, (_, values))| UnstatedKnob {
            knob: u.knob.id(),
            tried: values.clone(),
            chosen: k.value_text(u.knob),
            why: u.why.clone(),
        })
        .collect();
    Ok(RunResult {
        id: run.id.clone(),
        title: f.title.clone(),
        source: f.source.clone(),
        model: run.model.name.clone(),
        params: run.model.total_params(),
        hardware: run.hardware.name.clone(),
        gpus: run.gpus(),
        layout: layout(run, w),
        replica_layout: replica_layout(run, w),
        micro_batches: w.micro_batches,
        linear_dtype: f.linear_dtype,
        precision_twin: precision_twin(run, w),
        quantity: f.measured.quantity,
        measured,
        flop_convention: convention(run, k).map(|c| c.words()),
        timing,
        predicted,
        error,
        tool_faster: times.step_time_s < measured_step_s,
        tolerance: f.tolerance,
        tolerance_why: f.tolerance_why.clone(),
        within_tolerance: error.abs() <= f.tolerance,
        within_goal: error.abs() <= GOAL,
        predicted_step_s: times.step_time_s,
        predicted_compute_s: times.compute_s,
        measured_step_s,
        analytic_predicted,
        analytic_error: analytic_predicted / measured - 1.0,
        peak_bytes: e.inventory.peak_bytes,
        capacity_bytes: e.inventory.capacity_bytes,
        reserved_bytes: e.inventory.reserved_bytes,
        fits: e.inventory.fits,
        peak: PeakParts::of(&e),
        suspects: breakdown::suspects(&b, gap_s),
        explanation: breakdown::explain(&b, gap_s, times.step_time_s),
        breakdown: b,
        unstated,
        spread: spread(&configurations, &tried),
        configurations,
    })
}

/// A tried value as text (strings without quotes).
fn value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Every run of `runs`, predicted, in order.
pub fn evaluate_all(runs: &[Run], timing: RunTiming) -> Result<Vec<RunResult>> {
    runs.iter().map(|r| evaluate(r, timing)).collect()
}
