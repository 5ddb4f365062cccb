//! `plan` outputs: the ranked configurations and the rejections, each declared once as columns
//! and rendered as a table, CSV (the ranked rows) and JSON.

use std::collections::BTreeMap;

use serde::Serialize;

use super::columns::{self, Column, JsonRow};
use super::simulate::eng;
use super::table::fmt_bytes;
use super::{fmt_tokens, to_json};
use crate::config::MethodId;
use crate::evaluate::SimDepth;
use crate::plan::{recompute_name, Plan, Ranked, RejectCategory, Rejection};

fn time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// Days, as `3.2 d` or `14 h`.
fn days(d: f64) -> String {
    if d >= 1.0 {
        format!("{d:.1} d")
    } else {
        format!("{:.1} h", d * 24.0)
    }
}

/// The ranked configurations; the table shows the whole run's days, GPU-hours and cost only
/// when the plan was given the tokens (and the price).
pub fn ranked_columns_for(p: &Plan) -> Vec<Column<Ranked>> {
    ranked_columns_with(p.tokens.is_some(), p.gpu_hour_price.is_some())
}

/// The ranked configurations (every column in CSV and JSON; the training ones in the table
/// only when given).
pub fn ranked_columns() -> Vec<Column<Ranked>> {
    ranked_columns_with(false, false)
}

fn ranked_columns_with(training: bool, price: bool) -> Vec<Column<Ranked>> {
    type C = Column<Ranked>;
    let days_col = |key,
                    header: &'static str,
                    get: fn(&Ranked) -> Option<f64>,
                    show: fn(f64) -> String,
                    shown: bool| {
        if shown {
            C::shown(
                key,
                header,
                true,
                move |r| get(r).into(),
                move |r| get(r).map_or_else(|| "-".into(), show),
            )
        } else {
            C::data(key, move |r| get(r).into())
        }
    };
    let mut cols = vec![
        C::plain("rank", "rank", true, |r| r.rank.into()),
        C::plain("method", "method", false, |r| {
            r.candidate.method.id().into()
        }),
        C::plain("p", "p", true, |r| r.candidate.p.into()),
        C::plain("cp", "cp", true, |r| r.candidate.outer.cp.into()),
        C::plain("pp", "pp", true, |r| r.candidate.outer.pp.into()),
        C::plain("interleave", "v", true, |r| {
            r.candidate.outer.interleave.into()
        }),
        C::plain("dp", "dp", true, |r| r.candidate.dp.into()),
        C::plain("micro_batch", "b", true, |r| r.candidate.micro_batch.into()),
        C::plain("micro_batches", "µbatches", true, |r| {
            r.candidate.micro_batches.into()
        }),
        C::plain("recompute", "recompute", false, |r| {
            recompute_name(r.candidate.recompute).into()
        }),
        C::plain("zero", "zero", true, |r| r.candidate.zero.into()),
        C::shown(
            "flash",
            "flash",
            false,
            |r| r.candidate.flash.into(),
            |r| if r.candidate.flash { "on" } else { "off" }.into(),
        ),
        C::shown(
            "step_time_s",
            "step time",
            true,
            |r| r.step_time_s.into(),
            |r| time(r.step_time_s),
        ),
        C::shown(
            "tokens_per_s",
            "tokens/s",
            true,
            |r| r.tokens_per_s.into(),
            |r| format!("{:.0}", r.tokens_per_s),
        ),
        C::shown("mfu", "MFU", true, |r| r.mfu.into(), |r| pct(r.mfu)),
        C::shown(
            "peak_bytes",
            "peak",
            true,
            |r| r.peak_bytes.into(),
            |r| fmt_bytes(r.peak_bytes),
        ),
        C::data("capacity_bytes", |r| r.capacity_bytes.into()),
        C::data("fits", |r| r.fits.into()),
        C::shown(
            "headroom_bytes",
            "headroom",
            true,
            |r| r.headroom_bytes.into(),
            |r| fmt_bytes(r.headroom_bytes),
        ),
        C::shown(
            "headroom_fraction",
            "of mem",
            true,
            |r| r.headroom_fraction.into(),
            |r| pct(r.headroom_fraction),
        ),
        C::shown(
            "exposed_communication_s",
            "exposed comm",
            true,
            |r| r.exposed_communication_s.into(),
            |r| time(r.exposed_communication_s),
        ),
        C::shown(
            "exposed_share",
            "of step",
            true,
            |r| r.exposed_share.into(),
            |r| pct(r.exposed_share),
        ),
        C::shown(
            "simulation",
            "sim",
            false,
            |r| r.simulation.name().into(),
            |r| {
                match r.simulation {
                    crate::plan::Simulation::Exact => "=",
                    crate::plan::Simulation::Composed => "≈",
                }
                .into()
            },
        ),
        C::data("compute_s", |r| r.compute_s.into()),
        C::data("communication_s", |r| r.communication_s.into()),
        C::data("bubble_s", |r| r.bubble_s.into()),
        C::data("recompute_s", |r| r.recompute_s.into()),
        C::data("analytic_step_time_s", |r| r.analytic_step_time_s.into()),
        C::data("analytic_tokens_per_s", |r| r.analytic_tokens_per_s.into()),
    ];
    cols.push(days_col(
        "train_days",
        "days",
        |r| r.training.map(|t| t.days),
        days,
        training,
    ));
    cols.push(days_col(
        "gpu_hours",
        "GPU-hours",
        |r| r.training.map(|t| t.gpu_hours),
        eng,
        training,
    ));
    cols.push(days_col(
        "cost",
        "cost",
        |r| r.training.and_then(|t| t.cost),
        eng,
        price,
    ));
    cols
}

/// The rejections (JSON).
pub fn rejected_columns() -> Vec<Column<Rejection>> {
    type C = Column<Rejection>;
    vec![
        C::data("method", |r| r.method.id().into()),
        C::data("p", |r| r.p.into()),
        C::data("cp", |r| r.outer.cp.into()),
        C::data("pp", |r| r.outer.pp.into()),
        C::data("interleave", |r| r.outer.interleave.into()),
        C::data("dp", |r| r.dp.into()),
        C::data("micro_batch", |r| r.micro_batch.into()),
        C::data("micro_batches", |r| r.micro_batches.into()),
        C::data("recompute", |r| r.recompute.map(recompute_name).into()),
        C::data("zero", |r| r.zero.into()),
        C::data("flash", |r| r.flash.into()),
        C::data("category", |r| r.category.name().into()),
        C::data("reason", |r| r.reason.as_str().into()),
        C::data("peak_bytes", |r| r.peak_bytes.into()),
        C::data("capacity_bytes", |r| r.capacity_bytes.into()),
        C::data("fits", |r| r.fits.into()),
    ]
}

#[derive(Serialize)]
struct PlanJson<'a> {
    model: &'a str,
    hardware: &'a str,
    attention_kernel: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_placeholder: &'a Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gemm_step_clock_fraction: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet_clock_spread: Option<f64>,
    grad_dtype: &'static str,
    optimizer_dtype: &'static str,
    grad_accumulation: &'static str,
    tp_comm_overlap: bool,
    #[serde(flatten)]
    shown: crate::config::Shown,
    gpus: u64,
    nodes: u64,
    gpus_per_node: u64,
    seq: u64,
    global_batch: u64,
    global_batch_default: bool,
    constraints: &'a str,
    tokens: Option<f64>,
    gpu_hour_price: Option<f64>,
    methods: &'a [MethodId],
    causal: bool,
    link_model: &'a str,
    sim_depth: SimDepth,
    sim_layers: &'a [u64],
    simulated_exact: usize,
    simulated_composed: usize,
    comparison: &'a Option<crate::plan::Comparison>,
    evaluated: usize,
    equivalent_skipped: usize,
    feasible: usize,
    simulated: usize,
    ranked: Vec<JsonRow<'a, Ranked>>,
    rejected_by_reason: &'a BTreeMap<&'static str, usize>,
    rejected_total: usize,
    rejected: Vec<JsonRow<'a, Rejection>>,
    rejected_omitted: usize,
    message: &'a Option<String>,
}

/// JSON for `metp-sim plan`.
pub fn plan_json(p: &Plan) -> String {
    let (ranked, rejected) = (ranked_columns_for(p), rejected_columns());
    to_json(&PlanJson {
        model: &p.model,
        hardware: &p.hardware,
        attention_kernel: p.attention_kernel,
        kernel_placeholder: &p.kernel_placeholder,
        gemm_step_clock_fraction: p.gemm_step_clock_fraction,
        fleet_clock_spread: p.fleet_clock_spread,
        grad_dtype: p.grad_dtype,
        optimizer_dtype: p.optimizer_dtype,
        grad_accumulation: p.grad_accumulation,
        tp_comm_overlap: p.tp_comm_overlap,
        shown: p.shown,
        gpus: p.gpus,
        nodes: p.nodes,
        gpus_per_node: p.gpus_per_node,
        seq: p.seq,
        global_batch: p.global_batch,
        global_batch_default: p.global_batch_default,
        constraints: &p.constraints,
        tokens: p.tokens,
        gpu_hour_price: p.gpu_hour_price,
        methods: &p.methods,
        causal: p.causal,
        link_model: p.link_model,
        sim_depth: p.sim_depth,
        sim_layers: &p.sim_layers,
        simulated_exact: p.simulated_exact,
        simulated_composed: p.simulated_composed,
        comparison: &p.comparison,
        evaluated: p.evaluated,
        equivalent_skipped: p.equivalent_skipped,
        feasible: p.feasible,
        simulated: p.simulated,
        ranked: columns::json_rows(&ranked, &p.ranked),
        rejected_by_reason: &p.rejected_by_reason,
        rejected_total: p.rejected_total,
        rejected: columns::json_rows(&rejected, &p.rejected),
        rejected_omitted: p.rejected_omitted,
        message: &p.message,
    })
}

/// CSV for `metp-sim plan`: the ranked configurations.
pub fn plan_csv(p: &Plan) -> String {
    columns::csv(&ranked_columns_for(p), &p.ranked)
}

fn header(p: &Plan) -> String {
    let batch = if p.global_batch_default {
        format!(
            "global batch {} (the default: about {} tokens per step; --global-batch sets it)",
            p.global_batch,
            fmt_tokens(p.global_batch.saturating_mul(p.seq))
        )
    } else {
        format!("global batch {}", p.global_batch)
    };
    let fixed = if p.constraints.is_empty() {
        String::new()
    } else {
        format!(", fixed: {}", p.constraints)
    };
    let link = if p.link_model == "ideal" {
        "ideal"
    } else {
        "max-min fair"
    };
    let how = match (p.simulated_exact, p.simulated_composed) {
        (_, 0) => "exactly (sim =)".to_string(),
        (0, _) => "each composed from its distinct op programs (sim ≈, within 1–3% of --full-sim)"
            .to_string(),
        (e, c) => format!(
            "{e} exactly (sim =), {c} composed from their distinct op programs (sim ≈, within \
             1–3% of --full-sim)"
        ),
    };
    let simulated = if p.simulated > 0 {
        format!(
            "; the {} best by the analytic model simulated ({link} links), {how}",
            p.simulated
        )
    } else {
        String::new()
    };
    let training = match (p.tokens, p.gpu_hour_price) {
        (Some(t), Some(price)) => format!(
            "time to train {} tokens: days, GPU-hours and cost at {price} per GPU-hour\n",
            eng(t)
        ),
        (Some(t), None) => format!("time to train {} tokens: days and GPU-hours\n", eng(t)),
        _ => String::new(),
    };
    let clock = p.gemm_step_clock_fraction.map_or(String::new(), |f| {
        format!(
            "GEMMs in a step: at {f:.4} of the calibrated clock (the profile's \
             kernels.gemm.step_clock_fraction)\n"
        )
    });
    let spread = p.fleet_clock_spread.map_or(String::new(), |f| {
        format!(
            "GEMMs at the slowest GPU's clock: clocks spread {:.2}% from GPU to \
             GPU (the profile's kernels.gemm.fleet_clock_spread), and the slowest of N GPUs \
             holds 1 − spread × E[max of N standard normals] of the step clock\n",
            f * 100.0
        )
    });
    let placeholder = p.kernel_placeholder.as_ref().map_or(String::new(), |t| {
        format!("placeholder kernel figures: {t}\n")
    });
    let overlap = if p.tp_comm_overlap {
        "tp-sp candidates overlap their all-gathers and reduce-scatters with the GEMMs where \
         their ranks share a node (--tp-comm-overlap)\n"
    } else {
        ""
    };
    format!(
        "plan: {} on {} GPU(s) of {} ({} node(s) × {}), s = {}{}, {batch}{fixed}\n\
         attention: {}{}\n{clock}{spread}{placeholder}{overlap}\
         training state: {} gradients{}, {} optimizer state (each row's ZeRO stage places it){}\n\
         {} configurations evaluated ({} more skipped as equivalent), {} fit, {} \
         rejected{simulated}\n{training}",
        p.model,
        p.gpus,
        p.hardware,
        p.nodes,
        p.gpus_per_node,
        fmt_tokens(p.seq),
        if p.causal { ", causal" } else { "" },
        p.attention_kernel,
        if p.ranked.iter().any(|r| !r.candidate.flash) {
            " (unfused candidates: unfused)"
        } else {
            ""
        },
        p.grad_dtype,
        if p.grad_accumulation == crate::config::GradAccumulation::Separate.id() {
            " accumulated in a separate pass"
        } else {
            ""
        },
        p.optimizer_dtype,
        // The software's layer passes and ZeRO-3 gathers, where not the defaults.
        [
            p.shown
                .layer_ops
                .map(|o| format!("; {o} layer ops (METP candidates refused)")),
            p.shown
                .zero3_gather
                .map(|z| format!("; ZeRO-3 gathers {z}")),
            p.shown
                .param_gather
                .map(|g| format!("; ZeRO 1-2 candidates' updated weights gathered {g}")),
            p.shown
                .grad_buffer
                .map(|g| format!("; ZeRO 0-1 candidates' gradients allocated {g}")),
            p.shown
                .linear_dtype
                .map(|d| format!("; {d} linear layers (METP candidates refused)")),
        ]
        .into_iter()
        .flatten()
        .collect::<String>(),
        p.evaluated,
        p.equivalent_skipped,
        p.feasible,
        p.rejected_total,
    )
}

/// What separates the best configuration from the next, in words.
fn comparison(p: &Plan) -> String {
    let Some(c) = &p.comparison else {
        return String::new();
    };
    let (b, n) = c.step_s;
    let mut out = format!(
        "best vs next: rank 1 takes {} per step, rank 2 {} ({:+.1}%); per step, rank 2 spends",
        time(b),
        time(n),
        100.0 * (n / b - 1.0)
    );
    let parts: Vec<String> = c
        .parts
        .iter()
        .map(|x| {
            format!(
                " {} {} on {} ({} vs {})",
                if x.gap_s() >= 0.0 { "+" } else { "−" },
                time(x.gap_s().abs()),
                x.name,
                time(x.next_s),
                time(x.best_s)
            )
        })
        .collect();
    out.push_str(&parts.join(","));
    let (hb, hn) = c.headroom_bytes;
    out.push_str(&format!(
        "; memory headroom {} vs {} for rank 1. The largest difference: {}.\n",
        fmt_bytes(hn),
        fmt_bytes(hb),
        c.largest().name
    ));
    out
}

/// Human table for `metp-sim plan`: the ranked configurations, then the rejection counts by
/// category with up to three examples each (nearest misses first for those that do not fit).
pub fn plan_table(p: &Plan) -> String {
    let mut out = header(p);
    out.push('\n');
    if let Some(m) = &p.message {
        out.push_str(m);
        out.push_str("\n\n");
    }
    if !p.ranked.is_empty() {
        out.push_str(&columns::table(&ranked_columns_for(p), &p.ranked));
        let fp8 = p.shown.linear_dtype.is_some();
        out.push_str(&format!(
            "{}\n\n",
            crate::evaluate::mfu_convention_with(fp8)
        ));
        let cmp = comparison(p);
        if !cmp.is_empty() {
            out.push_str(&cmp);
            out.push('\n');
        }
    }
    if p.rejected_total == 0 {
        out.push_str("rejected: none\n");
        return out;
    }
    out.push_str(&format!("rejected: {}\n", p.rejected_total));
    for (name, count) in &p.rejected_by_reason {
        out.push_str(&format!("  {name}: {count}\n"));
        for r in p
            .rejected
            .iter()
            .filter(|r| r.category.name() == *name)
            .take(3)
        {
            let reason = match r.category {
                RejectCategory::OutOfMemory => r
                    .reason
                    .split(" (static")
                    .next()
                    .unwrap_or(&r.reason)
                    .to_string(),
                _ => r.reason.clone(),
            };
            out.push_str(&format!("    {}: {reason}\n", r.label()));
        }
    }
    out
}
