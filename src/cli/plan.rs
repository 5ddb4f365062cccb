//! `metp-sim plan`.

use clap::Args;

use super::args::{CausalOrderArg, FormatArg, OnOff};
use super::simulate::LinkModelArg;
use crate::config::{load_model, parse_count, MethodId, Options};
use crate::error::Result;
use crate::plan::{self, PlanSpec, SimDepth};
use crate::report;

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
    /// What-if: multiply a profile figure when loading it, KEY=FACTOR (as for simulate).
    #[arg(long, value_name = "KEY=FACTOR")]
    scale: Vec<String>,
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
    let hardware = super::args::load_scaled(&a.hw, &a.scale)?;
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
            report::plan_json(&p)
        }
        FormatArg::Csv => report::plan_csv(&p),
        FormatArg::Table => report::plan_table(&p),
    })
}
