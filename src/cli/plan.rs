//! `metp-sim plan`.

use std::path::PathBuf;
use std::sync::Mutex;

use clap::Args;

use super::args::{CausalOrderArg, FormatArg, OnOff, StateArgs};
use super::progress::Progress;
use super::simulate::LinkModelArg;
use crate::config::{
    load_model, parse_amount, parse_count, parse_list, MethodId, Options, Recompute,
};
use crate::error::{Error, Result};
use crate::plan::{self, Constraints, PlanPart, PlanProgress, PlanSpec, SimDepth};
use crate::report;
use crate::shard::{self, Shard, ShardFile};

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
    /// Global batch in sequences, the same for every configuration (default: about 4M tokens
    /// per step, the power of two nearest 2^22 / seq).
    #[arg(long)]
    global_batch: Option<String>,
    /// Methods: a comma-separated list or `all`.
    #[arg(long, alias = "method", default_value = "all")]
    methods: String,
    /// Only these degrees p (a value or a list: 8 or 4,8).
    #[arg(long)]
    p: Option<String>,
    /// Only these context-parallel degrees (tp-sp; a value or a list).
    #[arg(long)]
    cp: Option<String>,
    /// Only these numbers of pipeline stages (a value or a list).
    #[arg(long)]
    pp: Option<String>,
    /// Only these virtual stages per pipeline stage (a value or a list; by default every count
    /// that divides a stage's layers).
    #[arg(long)]
    pp_interleave: Option<String>,
    /// Only these data-parallel degrees (a value or a list).
    #[arg(long)]
    dp: Option<String>,
    /// Only these micro-batch sizes (a value or a list; by default 1, 2, 4).
    #[arg(long)]
    micro_batch: Option<String>,
    /// Only these recomputation policies (none, selective, full; a value or a list).
    #[arg(long)]
    recompute: Option<String>,
    /// Only these ZeRO stages (0-3; a value or a list).
    #[arg(long)]
    zero: Option<String>,
    /// Tokens to train (15T = 15·10^12, 2.5M, 1.5e13): adds each configuration's days and
    /// GPU-hours for the whole run.
    #[arg(long)]
    tokens: Option<String>,
    /// Price of one GPU-hour (with --tokens): adds the cost of the whole run.
    #[arg(long, requires = "tokens")]
    gpu_hour_price: Option<f64>,
    /// How many configurations to list.
    #[arg(long, default_value = "10")]
    top: String,
    /// How many of the analytically best configurations to simulate (default 3 × top).
    #[arg(long)]
    sim_candidates: Option<String>,
    /// Also try unfused attention (FlashAttention off).
    #[arg(long)]
    include_no_flash: bool,
    /// The fused attention implementation the candidates run (the profile's default unless
    /// named; `metp-sim list` shows each profile's); unfused candidates: --include-no-flash.
    #[arg(long, value_name = "NAME")]
    attention_kernel: Option<String>,
    /// Causal attention.
    #[arg(long)]
    causal: bool,
    /// Order of sequence blocks under causal attention (ring, metp).
    #[arg(long, value_enum, default_value = "zigzag")]
    causal_order: CausalOrderArg,
    /// Override the model's dropout setting.
    #[arg(long, value_enum)]
    dropout: Option<OnOff>,
    /// tp-sp candidates overlap each layer's all-gathers and reduce-scatters with the GEMMs
    /// (Megatron-Core's tp_comm_overlap, Transformer Engine's userbuffers); the other methods'
    /// candidates are unchanged.
    #[arg(long)]
    tp_comm_overlap: bool,
    /// Link model for the simulator.
    #[arg(long, value_enum, default_value = "maxmin")]
    link_model: LinkModelArg,
    /// Gradient dtype and optimizer-state placement (sharded keeps ZeRO stages 1–3 among the
    /// candidates, replicated stage 0).
    #[command(flatten)]
    state: StateArgs,
    /// Only method × p × dp (no pipeline stages, interleaving or context parallelism).
    #[arg(long)]
    no_outer_axes: bool,
    /// Simulate every configuration exactly (a shortened copy where the simulator proves the
    /// rest repeats it, else every layer and micro-batch) instead of composing large steps from
    /// their distinct op programs (slower; the two agree within 1–3%: tests/it/compose.rs).
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
    /// Run part K of N (0-based) of the search — every N-th group of candidates — and write
    /// <out>/plan.shard-K-of-N.json; `metp-sim merge <out>` prints what one run would have.
    #[arg(long, value_name = "K/N", requires = "out")]
    shard: Option<String>,
    /// Folder for the shard file (with --shard).
    #[arg(long, requires = "shard")]
    out: Option<PathBuf>,
}

/// The kind of a plan's shard files.
pub const SHARD_KIND: &str = "plan";

/// What a plan shard holds: the study, how the whole is rendered, and the part's results.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct PlanShard {
    /// The study.
    pub spec: PlanSpec,
    /// `--format`.
    pub format: String,
    /// `--max-rejected`.
    pub max_rejected: usize,
    /// This part's results.
    pub part: PlanPart,
}

fn render(p: &mut plan::Plan, format: FormatArg, max_rejected: usize) -> String {
    match format {
        FormatArg::Json => {
            p.truncate_rejected(max_rejected);
            report::plan_json(p)
        }
        FormatArg::Csv => report::plan_csv(p),
        FormatArg::Table => report::plan_table(p),
    }
}

fn format_name(f: FormatArg) -> &'static str {
    match f {
        FormatArg::Json => "json",
        FormatArg::Csv => "csv",
        FormatArg::Table => "table",
    }
}

/// The plan joined from its parts (`metp-sim merge`; envelopes checked as one set, in part
/// order), rendered as the unsharded command would. Each part is checked as it is read: the
/// study it embeds through the checks of the files and flags it came from, the fingerprint
/// against that study, the same study and rendering as part 0, and its results
/// (`plan::check_part`); one part's text is held at a time.
pub fn render_merged(files: &[(PathBuf, shard::Envelope)]) -> Result<String> {
    let mut first: Option<PlanShard> = None;
    let mut parts = Vec::with_capacity(files.len());
    for (path, envelope) in files {
        let shard: PlanShard = shard::read_data(path, envelope)?;
        match &first {
            None => {
                plan::check_spec(&shard.spec, path, "data.spec")?;
                if !["json", "csv", "table"].contains(&shard.format.as_str()) {
                    return Err(Error::InvalidField {
                        path: path.clone(),
                        field: "data.format".into(),
                        message: format!("'{}' is not json, csv or table", shard.format),
                    });
                }
            }
            Some(f)
                if shard.spec != f.spec
                    || shard.format != f.format
                    || shard.max_rejected != f.max_rejected =>
            {
                return Err(Error::Merge {
                    message: format!(
                        "{}: holds another plan or rendering than part 0",
                        path.display()
                    ),
                })
            }
            Some(_) => {}
        }
        envelope.check_study(path, &crate::atomic::to_json(&shard.spec))?;
        plan::check_part(&shard.spec, envelope.shard, &shard.part, path, "data.part")?;
        let PlanShard {
            spec,
            format,
            max_rejected,
            part,
        } = shard;
        parts.push(part);
        if first.is_none() {
            first = Some(PlanShard {
                spec,
                format,
                max_rejected,
                part: PlanPart {
                    evaluated: 0,
                    equivalent_skipped: 0,
                    feasible: 0,
                    pool: Vec::new(),
                    rejected: Vec::new(),
                    simulated: Vec::new(),
                },
            });
        }
    }
    let Some(first) = first else {
        return Err(Error::arg("merge", "no shard files given"));
    };
    let format = match first.format.as_str() {
        "json" => FormatArg::Json,
        "csv" => FormatArg::Csv,
        _ => FormatArg::Table,
    };
    let mut p = plan::merge(&first.spec, parts)?;
    Ok(render(&mut p, format, first.max_rejected))
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
    let list =
        |flag: &str, v: &Option<String>| v.as_deref().map(|t| parse_list(flag, t)).transpose();
    let constraints = Constraints {
        p: list("--p", &a.p)?,
        cp: list("--cp", &a.cp)?,
        pp: list("--pp", &a.pp)?,
        interleave: list("--pp-interleave", &a.pp_interleave)?,
        dp: list("--dp", &a.dp)?,
        micro_batch: list("--micro-batch", &a.micro_batch)?,
        recompute: a
            .recompute
            .as_deref()
            .map(|t| parse_recompute_list("--recompute", t))
            .transpose()?,
        zero: a
            .zero
            .as_deref()
            .map(|t| {
                t.split(',')
                    .map(|z| match z.trim() {
                        "0" => Ok(0u8),
                        "1" => Ok(1),
                        "2" => Ok(2),
                        "3" => Ok(3),
                        other => Err(Error::arg(
                            "--zero",
                            format!("'{other}': ZeRO stages are 0, 1, 2 and 3"),
                        )),
                    })
                    .collect::<Result<Vec<u8>>>()
            })
            .transpose()?,
    };
    let tokens = a
        .tokens
        .as_deref()
        .map(|t| parse_amount("--tokens", t))
        .transpose()?;
    let model = load_model(&a.model)?;
    let hardware = super::args::load_scaled(&a.hw, &a.scale)?;
    let mut s = PlanSpec::new(model, hardware, gpus, seq);
    s.constraints = constraints;
    s.tokens = tokens;
    s.gpu_hour_price = a.gpu_hour_price;
    s.global_batch = global_batch;
    s.methods = methods;
    s.top = top;
    s.sim_candidates = sim_candidates;
    s.include_no_flash = a.include_no_flash;
    s.outer_axes = !a.no_outer_axes;
    let attention = super::args::attention_choice(a.attention_kernel.as_deref(), true, false)
        .map_err(|e| match e {
            Error::InvalidArgument { .. } if a.attention_kernel.as_deref() == Some("unfused") => {
                Error::arg(
                    "--attention-kernel",
                    "plan ranks fused candidates; add unfused ones with --include-no-flash",
                )
            }
            e => e,
        })?;
    s.options = Options {
        attention,
        causal: a.causal,
        causal_zigzag: matches!(a.causal_order, CausalOrderArg::Zigzag),
        dropout: a.dropout.map(|d| matches!(d, OnOff::On)),
        tp_comm_overlap: a.tp_comm_overlap,
        ..Options::default()
    };
    a.state.apply(&mut s.options)?;
    super::args::check_attention(&s.options, [&s.hardware])?;
    s.link_model = a.link_model.into();
    s.sim_depth = if a.full_sim {
        SimDepth::Periodic
    } else {
        SimDepth::Extrapolate
    };
    Ok(s)
}

pub fn run(a: PlanArgs) -> Result<String> {
    let shard = a
        .shard
        .as_deref()
        .map(|t| Shard::parse("--shard", t))
        .transpose()?;
    let s = spec(&a)?;
    if let (Some(shard), Some(out)) = (shard, &a.out) {
        crate::atomic::check_output_dir(out)?;
        let part = with_progress(&format!("plan shard {shard}"), |on| {
            plan::plan_part_with(&s, shard, on)
        })?;
        let summary = format!(
            "plan shard {shard}: {} configurations evaluated, {} fit, {} of the best {} simulated",
            part.evaluated,
            part.feasible,
            part.simulated.len(),
            part.pool.len()
        );
        let study = crate::atomic::to_json(&s);
        let file = ShardFile::new(
            SHARD_KIND,
            shard,
            &study,
            shard::unsharded_command(std::env::args().skip(1)),
            PlanShard {
                spec: s,
                format: format_name(a.format).into(),
                max_rejected: a.max_rejected,
                part,
            },
        );
        let path = file.write(out)?;
        return Ok(format!("{summary}; wrote {}\n", path.display()));
    }
    let mut p = with_progress("plan", |on| plan::plan_with(&s, on))?;
    Ok(render(&mut p, a.format, a.max_rejected))
}

/// Runs `f` with a progress callback: a bar per phase on a terminal, and the estimated time
/// of a phase that will take long (`progress::Progress`), on stderr.
fn with_progress<T>(what: &str, f: impl FnOnce(&(dyn Fn(PlanProgress) + Sync)) -> T) -> T {
    let current: Mutex<Option<Progress>> = Mutex::new(None);
    let on = |e: PlanProgress| {
        let Ok(mut cur) = current.lock() else { return };
        let next = match e {
            PlanProgress::Evaluating(n) => Some(Progress::new(
                &format!("{what}: closed form"),
                "configurations",
                n as u64,
            )),
            // Weighed by what each will cost the simulator: they differ 25-fold, and the
            // costliest run first.
            PlanProgress::Simulating { simulations, cost } => Some(Progress::weighted(
                &format!("{what}: simulation of the best"),
                "simulations",
                simulations as u64,
                cost,
            )),
            PlanProgress::Evaluated => {
                if let Some(p) = cur.as_ref() {
                    p.tick(String::new);
                }
                None
            }
            PlanProgress::Simulated { cost } => {
                if let Some(p) = cur.as_ref() {
                    p.tick_cost(cost, String::new);
                }
                None
            }
        };
        if let Some(next) = next {
            if let Some(p) = cur.take() {
                p.finish();
            }
            *cur = Some(next);
        }
    };
    let out = f(&on);
    if let Ok(mut cur) = current.lock() {
        if let Some(p) = cur.take() {
            p.finish();
        }
    }
    out
}

/// `none,selective,full` into policies, each once, in that order.
fn parse_recompute_list(flag: &str, text: &str) -> Result<Vec<Recompute>> {
    let mut out = Vec::new();
    for item in text.split(',') {
        let r = match item.trim() {
            "none" => Recompute::None,
            "selective" => Recompute::Selective,
            "full" => Recompute::Full,
            other => {
                return Err(Error::arg(
                    flag,
                    format!("'{other}': the policies are none, selective and full"),
                ))
            }
        };
        if !out.contains(&r) {
            out.push(r);
        }
    }
    Ok(out)
}
