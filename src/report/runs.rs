//! The published-runs report (`validate --runs`): `runs.md`, `runs.json` and the plot of
//! predicted against measured step time with the y = x line and ±5% / ±10% bands.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::table::fmt_bytes;
use super::{to_json, write_atomic};
use crate::error::Result;
use crate::plot::{self, AxisFormat, Chart, Series, SeriesStyle};
use crate::runs::{Quantity, RunResult, RunTiming, GOAL};

/// The plot's file stem.
pub const PLOT_STEM: &str = "runs-predicted-vs-measured";

#[derive(Serialize)]
struct RunsJson<'a> {
    goal: f64,
    timing: RunTiming,
    mfu_convention: String,
    within_goal: usize,
    within_tolerance: usize,
    runs: &'a [RunResult],
    /// Runs that differ only in micro-batches per replica, their steps split (`runs::pairs`).
    pairs: Vec<crate::runs::Pair>,
    /// Runs that differ only in data-parallel replicas, their step growth measured and
    /// predicted (`runs::weak_scaling`).
    weak_scaling: Vec<crate::runs::WeakScaling>,
    /// Runs measured in bf16 and in FP8 on the same layout, their speed-ups measured and
    /// predicted (`runs::precision_pairs`; absent when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    precision_pairs: Vec<crate::runs::PrecisionPair>,
    /// Configurations published by more than one source, their measured steps side by side
    /// (`runs::repeats`; absent when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    repeats: Vec<crate::runs::Repeated>,
    /// The runs grouped by source, with the tool's speed error on them (`runs::by_source`).
    sources: Vec<crate::runs::SourceSummary>,
    /// The runs grouped by their model's size, every source together (`runs::by_size`).
    sizes: Vec<crate::runs::SizeSummary>,
    /// The runs by memory verdict (`runs::fit_summary`).
    memory: crate::runs::FitSummary,
}

/// `runs.json`: every run's prediction, error, breakdown and configurations, and the pairs of
/// runs that differ only in micro-batches per replica.
pub fn runs_json(runs: &[RunResult], timing: RunTiming) -> String {
    to_json(&RunsJson {
        goal: GOAL,
        timing,
        mfu_convention: crate::evaluate::mfu_convention_with(any_fp8(runs)),
        within_goal: runs.iter().filter(|r| r.within_goal).count(),
        within_tolerance: runs.iter().filter(|r| r.within_tolerance).count(),
        runs,
        pairs: crate::runs::pairs(runs),
        weak_scaling: crate::runs::weak_scaling(runs),
        precision_pairs: crate::runs::precision_pairs(runs),
        repeats: crate::runs::repeats(runs),
        sources: crate::runs::by_source(runs),
        sizes: crate::runs::by_size(runs),
        memory: crate::runs::fit_summary(runs),
    })
}

/// A figure in its quantity's usual precision.
fn fig(q: Quantity, v: f64) -> String {
    match q {
        Quantity::IterationS => format!("{v:.2} s"),
        Quantity::TflopsPerGpu => format!("{v:.0} TFLOP/s"),
        Quantity::Mfu => format!("{:.1}% MFU", 100.0 * v),
        Quantity::TokensPerSPerGpu => format!("{v:.0} tokens/s"),
    }
}

/// `n` and the noun, singular for one.
pub(super) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub(super) fn pct(x: f64) -> String {
    format!("{:+.1}%", 100.0 * x)
}

/// The paper's short name: its text up to the first comma (`Korthikanti et al. 2022`).
pub fn paper_short(paper: &str) -> &str {
    paper.split(',').next().unwrap_or(paper).trim()
}

fn verdict(r: &RunResult) -> String {
    if r.within_goal {
        "within 5%".into()
    } else if r.within_tolerance {
        format!("off (tolerance {:.0}%)", 100.0 * r.tolerance)
    } else {
        format!("OUT of its {:.0}% tolerance", 100.0 * r.tolerance)
    }
}

/// The summary table (README's published-runs table is this table).
pub fn runs_table(runs: &[RunResult]) -> String {
    let mut s = String::from(
        "| run | GPUs | layout | measured | predicted | error | closed form | memory | verdict |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        s.push_str(&format!(
            "| [{}](#{}) | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.title,
            r.id,
            r.gpus,
            r.layout,
            fig(r.quantity, r.measured),
            fig(r.quantity, r.predicted),
            pct(r.error),
            pct(r.analytic_error),
            if r.fits {
                format!("{} fits", fmt_bytes(r.peak_bytes))
            } else {
                format!(
                    "{} > {}",
                    fmt_bytes(r.peak_bytes),
                    fmt_bytes(r.capacity_bytes)
                )
            },
            verdict(r)
        ));
    }
    s
}

/// `runs.md`: the summary, the plot, and a section per run.
pub fn runs_markdown(runs: &[RunResult], timing: RunTiming, exts: &[&str]) -> String {
    let ext = if exts.contains(&"png") { "png" } else { "svg" };
    let n = runs.len();
    let goal = runs.iter().filter(|r| r.within_goal).count();
    let tol = runs.iter().filter(|r| r.within_tolerance).count();
    let mut s = format!(
        "# Published training runs, predicted by metp-sim\n\n\
         Generated by `metp-sim validate --runs` from the run files in `runs/`; regenerating \
         gives the same bytes. Each run file states the layout its paper gives, the figure it \
         measured and the knobs it leaves unstated with the values tried. The run's own \
         configuration is {}; every configuration tried is also priced in closed form. A \
         TFLOP/s or MFU figure is predicted in the paper's own FLOP convention. Error = \
         predicted / measured − 1 (for an iteration time, positive is slower than measured; \
         for TFLOP/s or MFU, positive is faster).\n\n\
         **{goal} of {n} runs are within the 5% goal; {tol} of {n} within their own \
         tolerance.** {} The tool's own {}.\n\n",
        timing.words(),
        fit_sentence(&crate::runs::fit_summary(runs)),
        crate::evaluate::mfu_convention_with(any_fp8(runs)),
    );
    s.push_str(&runs_table(runs));
    s.push_str(&format!(
        "\n![predicted against measured step time]({PLOT_STEM}.{ext})\n"
    ));
    super::runs_groups::sources_section(&mut s, runs);
    super::runs_groups::sizes_section(&mut s, runs);
    super::runs_groups::pairs_section(&mut s, runs);
    super::runs_groups::scaling_section(&mut s, runs);
    super::runs_groups::precision_section(&mut s, runs);
    super::runs_groups::repeats_section(&mut s, runs);
    for r in runs {
        section(&mut s, r);
    }
    s
}

/// Every run trained on its hardware: how many the memory model lets fit, and which it does
/// not, by kind (the runs' own memory lines give the parts).
fn fit_sentence(f: &crate::runs::FitSummary) -> String {
    let list = |ids: &[String]| {
        ids.iter()
            .map(|id| format!("[{id}](#{id})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = format!(
        "Memory: every run trained on its hardware; by the tool's model {} of {} fit with the \
         profile's allocator headroom",
        f.fit, f.runs
    );
    if !f.fit_with_less_headroom.is_empty() {
        s.push_str(&format!(
            "; {} only with less headroom than the profile assumes ({})",
            f.fit_with_less_headroom.len(),
            list(&f.fit_with_less_headroom)
        ));
    }
    if !f.tensors_exceed_memory.is_empty() {
        s.push_str(&format!(
            "; for {} the tensors the model counts exceed device memory, which the runs \
             disprove ({})",
            f.tensors_exceed_memory.len(),
            list(&f.tensors_exceed_memory)
        ));
    }
    s.push('.');
    s
}

/// The memory line of a run: the peak, whether it fits, and its parts — the tensors the
/// schedule holds and the profile's reserve, with the allocator headroom the run could have
/// had and still fit.
fn memory_line(r: &RunResult) -> String {
    let m = &r.peak;
    let mut s = format!(
        "- Memory: peak {} of {} per device ({}): weights, gradients and optimizer state {} + \
         stored activations {} ({} layers in flight × {} per layer, and any embedding and head \
         inputs) + largest transient {} + the profile's reserve {} (CUDA context {}, NCCL {}, \
         allocator headroom {} = {:.0}% of device memory, an assumption).",
        fmt_bytes(r.peak_bytes),
        fmt_bytes(r.capacity_bytes),
        if r.fits {
            "fits"
        } else {
            "does not fit by the tool's memory model"
        },
        fmt_bytes(m.static_bytes),
        fmt_bytes(m.stored_bytes),
        m.in_flight_layers,
        fmt_bytes(m.activation_bytes_per_layer),
        fmt_bytes(m.transient_bytes),
        fmt_bytes(r.reserved_bytes),
        fmt_bytes(m.cuda_context_bytes),
        fmt_bytes(m.nccl_bytes),
        fmt_bytes(m.allocator_headroom_bytes),
        100.0 * m.allocator_headroom_fraction,
    );
    match (r.fits, m.headroom_fraction_that_fits) {
        (true, _) => {}
        (false, Some(f)) => s.push_str(&format!(
            " The run ran: its tensors ({}), context and NCCL buffers fit with {} to spare, so \
             the allocator headroom decides — the run fits by the model with at most {:.1}% of \
             device memory for it.",
            fmt_bytes(m.tensor_bytes()),
            fmt_bytes(m.spare_without_headroom_bytes()),
            100.0 * f
        )),
        (false, None) => {
            s.push_str(&format!(
                " The run ran, but its tensors ({}) with the context and NCCL buffers alone \
                 exceed device memory: the model counts tensors the run did not hold.",
                fmt_bytes(m.tensor_bytes())
            ));
            if let (Some(with), Some(without)) = (
                m.activation_bytes_per_layer_that_fits(true),
                m.activation_bytes_per_layer_that_fits(false),
            ) {
                s.push_str(&format!(
                    " Everything else as counted, it would fit with the profile's headroom at \
                     {} of stored activations per layer in flight ({:.0}% of the model's {}), \
                     with no headroom at {} ({:.0}%).",
                    fmt_bytes(with),
                    100.0 * with as f64 / m.activation_bytes_per_layer.max(1) as f64,
                    fmt_bytes(m.activation_bytes_per_layer),
                    fmt_bytes(without),
                    100.0 * without as f64 / m.activation_bytes_per_layer.max(1) as f64,
                ));
            }
        }
    }
    s.push('\n');
    s
}

fn section(s: &mut String, r: &RunResult) {
    s.push_str(&format!("\n## {}\n\n**{}**\n\n", r.id, r.title));
    s.push_str(&format!(
        "- Source: {}, {}, {}.{}\n",
        r.source.paper,
        r.source.table,
        r.source.row,
        if r.source.notes.is_empty() {
            String::new()
        } else {
            format!(" {}", r.source.notes)
        }
    ));
    s.push_str(&format!(
        "- Model {} on {} ({} GPUs): {}.\n",
        r.model, r.hardware, r.gpus, r.layout
    ));
    s.push_str(&format!(
        "- Measured: {}{}. Predicted: {} ({}), {} step {:.3} s against {:.3} s measured{}; closed \
         form {} ({}).\n",
        fig(r.quantity, r.measured),
        r.flop_convention
            .as_ref()
            .map(|c| format!(" (FLOPs counted as: {c})"))
            .unwrap_or_default(),
        fig(r.quantity, r.predicted),
        pct(r.error),
        if r.tool_faster { "faster:" } else { "slower:" },
        r.predicted_step_s,
        r.measured_step_s,
        match r.quantity {
            Quantity::IterationS => "",
            Quantity::TokensPerSPerGpu => " (implied by the figure)",
            Quantity::TflopsPerGpu | Quantity::Mfu => " (implied by the figure and the convention)",
        },
        fig(r.quantity, r.analytic_predicted),
        pct(r.analytic_error),
    ));
    if r.timing == RunTiming::Composed {
        s.push_str(&format!("- Timed: {}.\n", r.timing.words()));
    }
    s.push_str(&memory_line(r));
    s.push_str(&format!(
        "- Verdict: {}{}.\n\n{}\n",
        verdict(r),
        if r.tolerance_why.is_empty() {
            String::new()
        } else {
            format!(" — {}", r.tolerance_why.trim_end_matches('.'))
        },
        r.explanation
    ));
    if !r.unstated.is_empty() {
        s.push_str("\n| unstated knob | tried | chosen | why |\n|---|---|---|---|\n");
        for u in &r.unstated {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                u.knob,
                u.tried.join(", "),
                u.chosen,
                u.why
            ));
        }
    }
    if r.configurations.len() > 1 {
        s.push_str(
            "\n| configuration (closed form) | step | predicted | error | peak | fits |\n\
             |---|---|---|---|---|---|\n",
        );
        // The configurations the tool runs, then one row per reason it refuses the others
        // for (`runs::invalid`; runs.json keeps every configuration).
        for c in &r.configurations {
            match &c.invalid {
                Some(_) => {}
                None => s.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} |\n",
                    c.label,
                    c.step_time_s.map_or("-".into(), |t| format!("{t:.3} s")),
                    c.predicted.map_or("-".into(), |v| fig(r.quantity, v)),
                    c.error.map_or("-".into(), pct),
                    c.peak_bytes.map_or("-".into(), fmt_bytes),
                    match c.fits {
                        Some(true) => "yes",
                        _ => "no",
                    }
                )),
            }
        }
        for g in &r.spread.invalid {
            s.push_str(&format!(
                "| {} | - | - | - | - | {} |\n",
                g.describe(),
                g.reason
            ));
        }
        let sp = &r.spread;
        s.push_str(&format!(
            "\nSpread over the unstated knobs: {} of {} configurations valid, {} fit; errors {}; \
             the fastest that fits: {}.\n",
            sp.valid,
            r.configurations.len(),
            sp.fitting,
            sp.error_range
                .map_or("-".into(), |(a, b)| format!("{} to {}", pct(a), pct(b))),
            sp.fastest_fitting
                .as_ref()
                .map_or("none".into(), |(l, e)| format!("{l} ({})", pct(*e))),
        ));
    }
}

/// The plot: predicted against measured step time, log axes, a series per paper.
pub fn runs_chart(runs: &[RunResult]) -> Chart {
    let mut chart = Chart::new(
        "Published runs: predicted against measured step time",
        "measured step time (published, or implied by the TFLOP/s and the paper's FLOP convention)",
        "predicted step time",
    )
    .with_formats(AxisFormat::Seconds, AxisFormat::Seconds)
    .with_log10();
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for r in runs {
        for v in [r.measured_step_s, r.predicted_step_s] {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if lo.is_finite() && hi > 0.0 {
        let (a, b) = (lo / 1.25, hi * 1.25);
        chart = chart.with_series(
            Series::new("y = x", vec![(a, a), (b, b)]).with_style(SeriesStyle::Reference),
        );
        for (name, f) in [("±5%", 0.05), ("±10%", 0.10)] {
            for sign in [1.0, -1.0] {
                let k = 1.0 + sign * f;
                chart = chart.with_series(
                    Series::new(name, vec![(a, a * k), (b, b * k)])
                        .with_style(SeriesStyle::ReferenceDashed),
                );
            }
        }
    }
    for (p, members) in crate::runs::sources::group_by(runs, |r| paper_short(&r.source.paper)) {
        let points = members
            .iter()
            .map(|r| (r.measured_step_s, r.predicted_step_s))
            .collect();
        chart = chart.with_series(Series::new(p, points).with_style(SeriesStyle::Markers));
    }
    chart.with_note(format!(
        "{} runs; the dashed lines are ±5% and ±10% of the measured time",
        runs.len()
    ))
}

/// Writes `runs.json`, `runs.md` and the plot (every format of `exts`) into `out`.
pub fn write_runs(
    out: &Path,
    runs: &[RunResult],
    timing: RunTiming,
    exts: &[&str],
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let chart = runs_chart(runs);
    for ext in exts {
        let path = out.join(format!("{PLOT_STEM}.{ext}"));
        plot::write_chart(&chart, &path)?;
        written.push(path);
    }
    for (name, text) in [
        ("runs.json", runs_json(runs, timing)),
        ("runs.md", runs_markdown(runs, timing, exts)),
    ] {
        let path = out.join(name);
        write_atomic(&path, text.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

/// The lines `validate --runs` prints: one per run, then what was written.
pub fn runs_summary(runs: &[RunResult], out: &Path) -> String {
    let mut s = String::new();
    for r in runs {
        s.push_str(&format!(
            "{}: measured {}, predicted {} ({}) — {}\n",
            r.id,
            fig(r.quantity, r.measured),
            fig(r.quantity, r.predicted),
            pct(r.error),
            verdict(r)
        ));
    }
    let groups = crate::runs::weak_scaling(runs);
    if !groups.is_empty() {
        let (follows, missing, over) = crate::runs::scaling::tally(&groups);
        s.push_str(&format!(
            "weak scaling: of {} groups that differ only in replicas, the prediction follows the \
             measured growth of the step in {follows}, misses a cost of scale in {missing}, \
             charges more in {over}\n",
            groups.len(),
        ));
    }
    let twins = crate::runs::precision_pairs(runs);
    if !twins.is_empty() {
        let (lo, median, hi) = crate::runs::precision::error_spread(&twins);
        s.push_str(&format!(
            "FP8 against bf16: {} pairs on the same layout; predicted / measured speed-up {} in \
             the median ({} to {})\n",
            twins.len(),
            pct(median),
            pct(lo),
            pct(hi),
        ));
    }
    let repeated = crate::runs::repeats(runs);
    if !repeated.is_empty() {
        let (lo, median, hi) = crate::runs::repeats::spread_summary(&repeated);
        s.push_str(&format!(
            "published more than once: {} configurations; their measured steps lie {} apart in \
             the median ({} to {})\n",
            repeated.len(),
            pct(median),
            pct(lo),
            pct(hi),
        ));
    }
    s.push_str(&format!(
        "{} of {} within 5%; wrote {}/runs.md, runs.json and {PLOT_STEM} plots\n",
        runs.iter().filter(|r| r.within_goal).count(),
        runs.len(),
        out.display()
    ));
    s
}

/// Whether any run's linear layers ran FP8 (what the MFU convention's words depend on).
fn any_fp8(runs: &[RunResult]) -> bool {
    runs.iter().any(|r| !r.linear_dtype.is_bf16())
}
