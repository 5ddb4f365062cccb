//! The sections of `runs.md` that read several runs together: the runs by source and by model
//! size, the pairs that differ only in micro-batches per replica, the groups that differ only
//! in data-parallel replicas (weak scaling), the runs measured in bf16 and in FP8, and the
//! configurations published more than once. Each is
//! computed from the runs' results (`runs::by_source`, `runs::by_size`, `runs::pairs`,
//! `runs::weak_scaling`, `runs::precision_pairs`, `runs::repeats`); nothing here is fixed
//! prose.

use super::runs::{pct, plural};
use crate::runs::RunResult;

/// The runs by source: how many meet the goal and which way and how far the tool is off on
/// them, as speed (`runs::by_source`).
pub(super) fn sources_section(s: &mut String, runs: &[RunResult]) {
    s.push_str(
        "\n## By source\n\nThe tool's error on each source's runs as speed (predicted speed / \
         measured speed − 1: positive when the tool says faster, for iteration times and \
         TFLOP/s alike). A source whose runs all lie on one side points at something the runs \
         share — the hardware profile, the software of the time — more than at any one \
         layout.\n\n| source | runs | hardware | within 5% | median speed error | range | \
         predicted faster |\n|---|---|---|---|---|---|---|\n",
    );
    for g in crate::runs::by_source(runs) {
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            g.source,
            g.runs,
            g.hardware.join(", "),
            error_cells(
                g.within_goal,
                g.median_speed_error,
                g.speed_error_range,
                g.faster,
                g.runs
            )
        ));
    }
}

/// How far apart the smallest and the largest band's median speed errors must be to be called a
/// trend with the size: the 5% goal.
const TREND: f64 = 0.05;

/// The runs by their model's size, every source together: which way and how far the tool is
/// off on small models and on large ones (`runs::by_size`).
pub(super) fn sizes_section(s: &mut String, runs: &[RunResult]) {
    let bands = crate::runs::by_size(runs);
    let (Some(small), Some(large)) = (bands.first(), bands.last()) else {
        return;
    };
    let gap = small.median_speed_error - large.median_speed_error;
    let trend = if gap > TREND {
        format!(
            "the tool is the more optimistic on small models, by {:.1} points: an error that \
             follows the size across sources and software points at a cost that weighs more on \
             small models — per kernel, per layer or per micro-batch — that the tool leaves out \
             or under-prices, more than at any one layout",
            100.0 * gap
        )
    } else if gap < -TREND {
        format!(
            "the tool is the more optimistic on large models, by {:.1} points: a cost that \
             grows with the model (its communication, its memory) is what the tool \
             under-prices, more than any one layout",
            -100.0 * gap
        )
    } else {
        "no trend with the size beyond 5 points".to_string()
    };
    s.push_str(&format!(
        "\n## By model size\n\nThe same speed error with every source together, by the \
         model's parameters. The median is {} on the smallest models ({}) and {} on the \
         largest ({}): {trend}.\n\n\
         | model size | runs | sources | hardware | within 5% | median speed error | range | \
         predicted faster |\n|---|---|---|---|---|---|---|---|\n",
        pct(small.median_speed_error),
        small.band,
        pct(large.median_speed_error),
        large.band,
    ));
    for b in &bands {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            b.band,
            b.runs,
            b.sources,
            b.hardware.join(", "),
            error_cells(
                b.within_goal,
                b.median_speed_error,
                b.speed_error_range,
                b.faster,
                b.runs
            )
        ));
    }
}

/// The cells every group table ends with: runs within the goal, the median speed error, its
/// range, and how many the tool predicts faster (`runs::sources`' shared tally).
fn error_cells(
    within_goal: usize,
    median: f64,
    range: (f64, f64),
    faster: usize,
    runs: usize,
) -> String {
    format!(
        "{within_goal} | {} | {} to {} | {faster} of {runs}",
        pct(median),
        pct(range.0),
        pct(range.1)
    )
}

/// The pairs of runs that differ only in micro-batches per replica: measured and predicted
/// step split into a cost per micro-batch and a rest (`runs::pairs`).
pub(super) fn pairs_section(s: &mut String, runs: &[RunResult]) {
    let pairs = crate::runs::pairs(runs);
    if pairs.is_empty() {
        return;
    }
    s.push_str(
        "\n## Runs that differ only in micro-batches per replica\n\n\
         Each GPU does the same work per micro-batch in both runs of a pair (the same layout \
         inside a data-parallel replica, more replicas sharing the same global batch), so two \
         step times split into a cost per micro-batch and a rest of the step (pipeline fill and \
         drain, the last gradient synchronisation, the optimizer): step = micro-batches × per \
         micro-batch + rest. The predicted split is shown part by part (the parts add up to it).\n",
    );
    for p in &pairs {
        let (ma, mb) = p.micro_batches;
        s.push_str(&format!(
            "\n**[{}](#{}) ({ma} micro-batches per replica) and [{}](#{}) ({mb})**: per-GPU \
             throughput {} measured, {} predicted.\n\n\
             | | per micro-batch | rest of the step |\n|---|---|---|\n\
             | measured | {:.3} s | {:.3} s |\n| predicted | {:.3} s | {:.3} s |\n",
            p.more,
            p.more,
            p.fewer,
            p.fewer,
            pct(p.measured_throughput_change),
            pct(p.predicted_throughput_change),
            p.measured.per_micro_batch_s,
            p.measured.rest_s,
            p.predicted.per_micro_batch_s,
            p.predicted.rest_s,
        ));
        for x in &p.predicted_parts {
            s.push_str(&format!(
                "| — {} | {:.3} s | {:.3} s |\n",
                x.part, x.split.per_micro_batch_s, x.split.rest_s
            ));
        }
        let per = p.predicted.per_micro_batch_s / p.measured.per_micro_batch_s - 1.0;
        let rest = p.predicted.rest_s - p.measured.rest_s;
        s.push_str(&format!(
            "\nThe predicted cost per micro-batch is {:.0}% {} than measured and the rest of \
             the step {:.2} s {}: {}.\n",
            100.0 * per.abs(),
            if per < 0.0 { "cheaper" } else { "dearer" },
            rest.abs(),
            if rest > 0.0 { "longer" } else { "shorter" },
            pair_verdict(per, rest, p),
        ));
    }
}

/// The groups of runs that differ only in data-parallel replicas: the step's growth from the
/// fewest GPUs to the most, measured and predicted, and which way they differ
/// (`runs::weak_scaling`).
pub(super) fn scaling_section(s: &mut String, runs: &[RunResult]) {
    let groups = crate::runs::weak_scaling(runs);
    if groups.is_empty() {
        return;
    }
    let (follows, missing, over) = crate::runs::scaling::tally(&groups);
    s.push_str(&format!(
        "\n## Runs that differ only in data-parallel replicas (weak scaling)\n\n\
         Each GPU does the same work in every run of a group (one source; the same layout \
         inside a replica, sequence and micro-batches per replica; more replicas), so on an \
         ideal cluster the step would not grow; what it grows by from the fewest GPUs to the \
         most is the cost of scaling out, the line a planner extrapolates along. **{} groups: \
         the prediction follows the measured growth in {follows} (within {:.1}% of the \
         step); in {missing} the measured step grows more — a cost growing with the number of \
         GPUs that the prediction leaves out; in {over} the predicted step grows more.** Step \
         times at the fewest and the most GPUs; throughput per GPU at the most against the \
         fewest.\n\n\
         | runs | GPUs | measured step | predicted step | per-GPU throughput, measured | \
         predicted | |\n|---|---|---|---|---|---|---|\n",
        groups.len(),
        100.0 * crate::runs::scaling::FOLLOWS,
    ));
    for g in &groups {
        let (a, b) = (&g.points[0], &g.points[g.points.len() - 1]);
        let ids = g
            .points
            .iter()
            .map(|p| format!("[{}](#{})", p.gpus, p.id))
            .collect::<Vec<_>>()
            .join(", ");
        s.push_str(&format!(
            "| {}: {} on {}, {} per replica | {ids} | {:.3} → {:.3} s | \
             {:.3} → {:.3} s | {} | {} | {} |\n",
            g.source,
            g.model,
            g.hardware,
            plural(g.micro_batches, "micro-batch", "micro-batches"),
            a.measured_step_s,
            b.measured_step_s,
            a.predicted_step_s,
            b.predicted_step_s,
            pct(g.measured_throughput_change),
            pct(g.predicted_throughput_change),
            g.kind().label(),
        ));
    }
    s.push('\n');
    for g in groups.iter().filter(|g| !g.follows) {
        s.push_str(&format!(
            "- {}, {} on {}: {}.\n",
            g.source,
            g.model,
            g.hardware,
            g.verdict()
        ));
    }
}

/// Which side of a pair's split is off, in words.
fn pair_verdict(per: f64, rest_s: f64, p: &crate::runs::Pair) -> String {
    let m = p.micro_batches.0 as f64;
    // Share of the larger step's error that each side carries.
    let per_s = per * p.measured.per_micro_batch_s * m;
    format!(
        "at {} micro-batches per replica {:+.2} s of the step's error comes from the cost per \
         micro-batch and {:+.2} s from the rest (positive: the prediction is longer)",
        p.micro_batches.0, per_s, rest_s
    )
}

/// The runs measured in bf16 and in FP8 on the same layout: the speed-up measured and predicted
/// (`runs::precision_pairs`).
pub(super) fn precision_section(s: &mut String, runs: &[RunResult]) {
    let twins = crate::runs::precision_pairs(runs);
    if twins.is_empty() {
        return;
    }
    let (lo, median, hi) = crate::runs::precision::error_spread(&twins);
    let less = twins.iter().filter(|p| p.error() < 0.0).count();
    s.push_str(&format!(
        "\n## FP8 against bf16\n\nRuns measured in both precisions of their linear layers on \
         the same layout and GPUs: whatever the prediction gets wrong in both cancels in the \
         ratio of their steps, which tests what FP8 changes on its own (the FP8 GEMMs, the casts \
         that feed them, the FP8 gathers). {} pairs; predicted / measured speed-up {} in the \
         median ({} to {}); the predicted gain is the smaller in {less} of them.\n\n\
         | bf16 run | FP8 run | GPUs | measured speed-up | predicted | predicted / measured |\n\
         |---|---|---|---|---|---|\n",
        twins.len(),
        pct(median),
        pct(lo),
        pct(hi),
    ));
    for p in &twins {
        s.push_str(&format!(
            "| [{}](#{}) | [{}](#{}) | {} | {:.3}× | {:.3}× | {} |\n",
            p.bf16,
            p.bf16,
            p.fp8,
            p.fp8,
            p.gpus,
            p.measured_speedup,
            p.predicted_speedup,
            pct(p.error()),
        ));
    }
}

/// The configurations more than one source published: their measured steps side by side, the
/// tool's one prediction beside them (`runs::repeats`).
pub(super) fn repeats_section(s: &mut String, runs: &[RunResult]) {
    let groups = crate::runs::repeats(runs);
    if groups.is_empty() {
        return;
    }
    let (lo, median, hi) = crate::runs::repeats::spread_summary(&groups);
    let priced_alike = groups
        .iter()
        .filter(|g| g.predicted_spread() < 1e-9)
        .count();
    s.push_str(&format!(
        "\n## The same configuration published more than once\n\nRuns of one configuration \
         (model, profile, layout with every knob and dtype, GPUs) that more than one source \
         published — a benchmark's successive releases, or two of a vendor's tables. The tool \
         prices {priced_alike} of these {} configurations alike in every source; what their \
         measured steps differ by is what a publication of one configuration varies by (the \
         software release, the cluster, the day), the floor under the 5% goal: {} apart in the \
         median ({} to {}).\n\n\
         | configuration | GPUs | measured steps (source) | apart | predicted |\n\
         |---|---|---|---|---|\n",
        groups.len(),
        pct(median),
        pct(lo),
        pct(hi),
    ));
    for g in &groups {
        let measured: Vec<String> = g
            .runs
            .iter()
            .map(|r| format!("[{:.2} s](#{}) ({})", r.measured_step_s, r.id, r.source))
            .collect();
        let predicted: Vec<String> = {
            let mut p: Vec<String> = Vec::new();
            for r in &g.runs {
                let v = format!("{:.2} s", r.predicted_step_s);
                if !p.contains(&v) {
                    p.push(v);
                }
            }
            p
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            g.configuration,
            g.gpus,
            measured.join(", "),
            pct(g.measured_spread()),
            predicted.join(", "),
        ));
    }
}
