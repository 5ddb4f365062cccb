//! `metp-sim plan`.

use clap::Args;

use super::args::{CausalOrderArg, FormatArg, OnOff};
use super::fmt_tokens;
use super::simulate::LinkModelArg;
use crate::config::{load_hardware, load_model, parse_count, MethodId, Options};
use crate::error::Result;
use crate::plan::{self, Plan, PlanSpec, RejectCategory, SimDepth};
use crate::report::{self, fmt_bytes, Table};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Model: a name in models/ or a path to a JSON file.
    #[arg(long, default_value = "llama2-7b")]
    model: String,
    /// Hardware profile: a name in hardware-profiles/ or a path to a JSON file; the node count
    /// is set to ceil(GPUs / GPUs per node).
    #[arg(long, default_value = "dgx-a100-80gb")]
    hw: String,
    /// GPUs to plan for (any N ≥ 1).
    #[arg(long)]
    gpus: String,
    /// Sequence length (4k = 4096).
    #[arg(long)]
    seq: String,
    /// Global batch in sequences (default: dp, one sequence per data-parallel replica).
    #[arg(long)]
    global_batch: Option<String>,
    /// Methods: a comma-separated list or `all`.
    #[arg(long, alias = "method", default_value = "all")]
    methods: String,
    /// How many configurations to list.
    #[arg(long, default_value = "10")]
    top: String,
    /// How many of the analytically best configurations to simulate (default 3 × top).
    #[arg(long)]
    sim_candidates: Option<String>,
    /// Also try unfused attention (FlashAttention off).
    #[arg(long)]
    include_no_flash: bool,
    /// Causal attention.
    #[arg(long)]
    causal: bool,
    /// Order of sequence blocks under causal attention (ring, metp).
    #[arg(long, value_enum, default_value = "zigzag")]
    causal_order: CausalOrderArg,
    /// Override the model's dropout setting.
    #[arg(long, value_enum)]
    dropout: Option<OnOff>,
    /// Link model for the simulator.
    #[arg(long, value_enum, default_value = "maxmin")]
    link_model: LinkModelArg,
    /// Simulate every layer instead of extrapolating from 2 and 4 layers (slower; the two
    /// agree to ~1e-5).
    #[arg(long)]
    full_sim: bool,
    /// Rejections to list in JSON (the counts are always complete).
    #[arg(long, default_value = "50")]
    max_rejected: usize,
    /// Output format (csv: the ranked configurations only).
    #[arg(long, value_enum, default_value = "table")]
    format: FormatArg,
}

fn spec(a: &PlanArgs) -> Result<PlanSpec> {
    // Flags first, so that a malformed flag is reported before any file is read.
    let gpus = parse_count("--gpus", &a.gpus)?;
    let seq = parse_count("--seq", &a.seq)?;
    let methods = MethodId::parse_list("--methods", &a.methods)?;
    let top = parse_count("--top", &a.top)? as usize;
    let global_batch = a
        .global_batch
        .as_deref()
        .map(|g| parse_count("--global-batch", g))
        .transpose()?;
    let sim_candidates = a
        .sim_candidates
        .as_deref()
        .map(|n| parse_count("--sim-candidates", n).map(|n| n as usize))
        .transpose()?;
    let model = load_model(&a.model)?;
    let hardware = load_hardware(&a.hw)?;
    let mut s = PlanSpec::new(model, hardware, gpus, seq);
    s.global_batch = global_batch;
    s.methods = methods;
    s.top = top;
    s.sim_candidates = sim_candidates;
    s.include_no_flash = a.include_no_flash;
    s.options = Options {
        causal: a.causal,
        causal_zigzag: matches!(a.causal_order, CausalOrderArg::Zigzag),
        dropout: a.dropout.map(|d| matches!(d, OnOff::On)),
        ..Options::default()
    };
    s.link_model = a.link_model.into();
    s.sim_depth = if a.full_sim {
        SimDepth::Full
    } else {
        SimDepth::Extrapolate
    };
    Ok(s)
}

pub fn run(a: PlanArgs) -> Result<String> {
    let s = spec(&a)?;
    let mut p = plan::plan(&s)?;
    Ok(match a.format {
        FormatArg::Json => {
            p.truncate_rejected(a.max_rejected);
            report::to_json(&p)
        }
        FormatArg::Csv => csv(&p),
        FormatArg::Table => table(&p),
    })
}

fn ms(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn header(p: &Plan) -> String {
    let batch = match p.global_batch {
        Some(g) => format!("global batch {g}"),
        None => "global batch = dp (one sequence per replica)".into(),
    };
    let sim = if p.sim_layers.len() == 2 {
        format!(
            "{} layers simulated and extrapolated",
            p.sim_layers
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        )
    } else {
        "every layer simulated".into()
    };
    let link = if p.link_model == "ideal" {
        "ideal"
    } else {
        "max-min fair"
    };
    let simulated = if p.simulated > 0 {
        format!(
            "; the {} best by the analytic model simulated ({link} links, {sim})",
            p.simulated
        )
    } else {
        String::new()
    };
    format!(
        "plan: {} on {} GPU(s) of {} ({} node(s) × {}), s = {}{}, {batch}\n\
         {} configurations evaluated ({} more skipped as equivalent), {} fit, {} \
         rejected{simulated}\n",
        p.model,
        p.gpus,
        p.hardware,
        p.nodes,
        p.gpus_per_node,
        fmt_tokens(p.seq),
        if p.causal { ", causal" } else { "" },
        p.evaluated,
        p.equivalent_skipped,
        p.feasible,
        p.rejected_total,
    )
}

fn table(p: &Plan) -> String {
    let mut out = header(p);
    out.push('\n');
    if let Some(m) = &p.message {
        out.push_str(m);
        out.push_str("\n\n");
    }
    if !p.ranked.is_empty() {
        let mut t = Table::new(
            &[
                "rank",
                "method",
                "p",
                "dp",
                "b",
                "µbatches",
                "recompute",
                "zero",
                "flash",
                "step time",
                "tokens/s",
                "MFU",
                "peak",
                "headroom",
                "of mem",
                "exposed comm",
                "of step",
            ],
            &[
                true, false, true, true, true, true, false, true, false, true, true, true, true,
                true, true, true, true,
            ],
        );
        for r in &p.ranked {
            let c = &r.candidate;
            t.row(vec![
                r.rank.to_string(),
                c.method.to_string(),
                c.p.to_string(),
                c.dp.to_string(),
                c.micro_batch.to_string(),
                c.micro_batches.to_string(),
                plan::recompute_name(c.recompute).into(),
                c.zero.to_string(),
                if c.flash { "on" } else { "off" }.into(),
                ms(r.step_time_s),
                format!("{:.0}", r.tokens_per_s),
                pct(r.mfu),
                fmt_bytes(r.peak_bytes),
                fmt_bytes(r.headroom_bytes),
                pct(r.headroom_fraction),
                ms(r.exposed_communication_s),
                pct(r.exposed_share),
            ]);
        }
        out.push_str(&t.render());
        out.push('\n');
    }
    out.push_str(&rejections(p));
    out
}

/// The rejection counts by category, each with up to three examples (nearest misses first for
/// out-of-memory).
fn rejections(p: &Plan) -> String {
    if p.rejected_total == 0 {
        return "rejected: none\n".into();
    }
    let mut out = format!("rejected: {}\n", p.rejected_total);
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

/// CSV: the ranked configurations (writing to memory cannot fail).
fn csv(p: &Plan) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record([
        "rank",
        "method",
        "p",
        "dp",
        "micro_batch",
        "micro_batches",
        "recompute",
        "zero",
        "flash",
        "step_time_s",
        "tokens_per_s",
        "mfu",
        "peak_bytes",
        "headroom_bytes",
        "headroom_fraction",
        "exposed_communication_s",
        "exposed_share",
    ]);
    for r in &p.ranked {
        let c = &r.candidate;
        let _ = w.write_record([
            r.rank.to_string(),
            c.method.to_string(),
            c.p.to_string(),
            c.dp.to_string(),
            c.micro_batch.to_string(),
            c.micro_batches.to_string(),
            plan::recompute_name(c.recompute).to_string(),
            c.zero.to_string(),
            c.flash.to_string(),
            r.step_time_s.to_string(),
            r.tokens_per_s.to_string(),
            r.mfu.to_string(),
            r.peak_bytes.to_string(),
            r.headroom_bytes.to_string(),
            r.headroom_fraction.to_string(),
            r.exposed_communication_s.to_string(),
            r.exposed_share.to_string(),
        ]);
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}
