//! `metp-sim sweep`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use clap::{Args, ValueEnum};

use super::args::{distinct, names, BatchArgs, CommonArgs, OuterArgs};
use super::progress::Progress;
use super::simulate::LinkModelArg;
use crate::atomic::OutputFolder;
use crate::config::{
    limits, load_model, parse_count, parse_list, parse_seq_spec, MethodId, OuterAxes,
};
use crate::error::{Error, Result};
use crate::evaluate::Timing;
use crate::report::{self, Format};
use crate::shard::{self, Shard, ShardFile};
use crate::sweep::{self, Point, SweepResult, SweepSpec};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum EngineArg {
    /// The discrete-event simulator (the analytic estimate is reported beside it).
    Sim,
    /// The closed-form model only.
    Analytic,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Sequence lengths: 4k..512k (doubling), 4k..64k:+4k (linear) or 4k,6k,100000.
    #[arg(long, default_value = "4k..512k")]
    seq: String,
    /// Methods: a comma-separated list or `all`.
    #[arg(long, alias = "method", default_value = "all")]
    methods: String,
    /// Degrees, comma-separated.
    #[arg(long, default_value = "1,2,4,8")]
    p: String,
    /// How step times are obtained.
    #[arg(long, value_enum, default_value = "sim")]
    engine: EngineArg,
    /// Link model for the simulator.
    #[arg(long, value_enum, default_value = "maxmin")]
    link_model: LinkModelArg,
    /// Output folder (default reports/<model>-<hardware>/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write SVG plots only (no PNG).
    #[arg(long)]
    svg_only: bool,
    /// Run part K of N (0-based) of the sweep — points K, K+N, … — and write only
    /// <out>/sweep.shard-K-of-N.json; `metp-sim merge <out>` writes what one run would have.
    #[arg(long, value_name = "K/N")]
    shard: Option<String>,
    #[command(flatten)]
    batch: BatchArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    outer: OuterArgs,
}

/// What a sweep shard holds: the study and the part's results, and how the whole is rendered
/// (`metp-sim merge`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct SweepShard {
    /// The study.
    pub spec: SweepSpec,
    /// The output folder of the unsharded command (where the part wrote; `merge` writes where
    /// its own command line says, never where a file says).
    pub out: PathBuf,
    /// `--svg-only`.
    pub svg_only: bool,
    /// This part's points (and, in part 0, the longest sequences).
    pub result: SweepResult,
}

/// The kind of a sweep's shard files.
pub const SHARD_KIND: &str = "sweep";

pub fn run(a: SweepArgs) -> Result<String> {
    let methods = MethodId::parse_list("--methods", &a.methods)?;
    let degrees = parse_list("--p", &a.p)?;
    let pps = parse_list("--pp", &a.outer.pp)?;
    let cps = parse_list("--cp", &a.outer.cp)?;
    let interleave = parse_count("--pp-interleave", &a.outer.pp_interleave)?;
    let shard = a
        .shard
        .as_deref()
        .map(|t| Shard::parse("--shard", t))
        .transpose()?;
    let seqs = parse_seq_spec("--seq", &a.seq)?;
    let model_names = names("--model", &a.common.model)?;
    let hw_names = names("--hw", &a.common.hw)?;
    let format: Format = a.common.format.into();
    if let (Some(shard), Format::Json | Format::Csv) = (shard, format) {
        return Err(Error::arg(
            "--format",
            format!(
                "a shard ({shard}) prints only which part it wrote; `metp-sim merge` writes the \
                 whole sweep's sweep.csv and sweep.json"
            ),
        ));
    }
    if a.common.dp.trim() != "1" {
        return Err(Error::arg(
            "--dp",
            "sweep runs one data-parallel replica (dp = 1); use simulate or plan for dp > 1",
        ));
    }
    // Counted before anything is loaded or evaluated.
    let total = [
        model_names.len(),
        hw_names.len(),
        methods.len(),
        degrees.len(),
        cps.len(),
        pps.len(),
        seqs.len(),
    ]
    .iter()
    .try_fold(1u64, |acc, &n| acc.checked_mul(n as u64))
    .unwrap_or(u64::MAX);
    if total > limits::MAX_SWEEP_POINTS {
        return Err(Error::arg(
            "--seq",
            format!(
                "the sweep has {total} points (models × profiles × methods × degrees × cp × pp \
                 × lengths), more than {}; sweep fewer lengths or degrees",
                limits::MAX_SWEEP_POINTS
            ),
        ));
    }
    // The plots, counted likewise (a sharded sweep's merge draws them).
    let plots = report::sweep_plot_files(
        model_names.len() * hw_names.len(),
        degrees.len(),
        cps.len() * pps.len(),
        a.svg_only,
    );
    check_plots(plots)?;
    let models = model_names
        .iter()
        .map(|m| load_model(m))
        .collect::<Result<Vec<_>>>()?;
    let mut hardware = hw_names
        .iter()
        .map(|h| a.common.hardware(h))
        .collect::<Result<Vec<_>>>()?;
    if let Some(n) = a.common.nodes {
        for hw in &mut hardware {
            hw.set_nodes(n)?;
        }
    }
    distinct("--model", models.iter().map(|m| m.name.as_str()))?;
    distinct("--hw", hardware.iter().map(|h| h.name.as_str()))?;
    // Options and micro-batch only (the profiles and models are the lists above).
    let micro_batch = parse_count("--micro-batch", &a.common.micro_batch)?;
    // A sweep runs one replica (dp = 1): the global batch is its micro-batches × b.
    let micro_batches = match a.batch.global_batch.as_deref() {
        None => None,
        Some(g) => {
            let g = parse_count("--global-batch", g)?;
            if g % micro_batch != 0 {
                return Err(Error::arg(
                    "--global-batch",
                    format!("{g} is not a multiple of the micro-batch {micro_batch} (dp = 1)"),
                ));
            }
            Some(g / micro_batch)
        }
    };
    let mut options = a.common.options()?;
    a.outer.apply(&mut options)?;
    super::args::check_attention(&options, &hardware)?;
    // Context-parallel ranks outermost, then pipeline stages (the planner's order).
    let outer = cps
        .iter()
        .flat_map(|&cp| pps.iter().map(move |&pp| OuterAxes { pp, interleave, cp }))
        .collect();
    let spec = SweepSpec {
        models,
        hardware,
        methods,
        degrees,
        outer,
        seqs,
        micro_batch,
        micro_batches,
        options,
        timing: match a.engine {
            EngineArg::Sim => Timing::Simulated(a.link_model.into()),
            EngineArg::Analytic => Timing::Analytic,
        },
    };
    let out = a.out.clone().unwrap_or_else(|| {
        let name = if model_names.len() == 1 && hw_names.len() == 1 {
            report::joined_slug([model_names[0], hw_names[0]])
        } else {
            "sweep".into()
        };
        PathBuf::from("reports").join(name)
    });
    if let Some(shard) = shard {
        return run_shard(&spec, shard, out, a.svg_only);
    }
    // The folder is this run's until it finishes: a second sweep into it is refused, and its
    // manifest says `running` until the last file is written (atomic::OutputFolder).
    let mut folder = OutputFolder::open(&out)?;

    // Rows are appended to a partial file as they complete, so an interrupted sweep keeps what
    // it computed; the final files are written atomically in spec order.
    let partial_path = out.join("sweep.csv.partial");
    // A new file, never through a link left at that name (it would truncate the target).
    crate::atomic::check_not_input(&partial_path)?;
    let _ = std::fs::remove_file(&partial_path);
    let partial = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&partial_path)
        .map_err(|source| Error::Io {
            path: partial_path.clone(),
            source,
        })?;
    let partial = Mutex::new(std::io::BufWriter::new(partial));
    if let Ok(mut f) = partial.lock() {
        let _ = f.write_all(report::sweep_csv_header(&spec).as_bytes());
    }
    let progress = Progress::new("sweep", "points", total);
    let on_point = |pt: &Point| {
        if let Ok(mut f) = partial.lock() {
            let _ = f.write_all(report::sweep_csv_row(&spec, pt).as_bytes());
            let _ = f.flush();
        }
        progress.tick(|| format!("{} p={} s={}", pt.method, pt.p, pt.seq));
    };
    let result = sweep::run(&spec, &on_point);
    progress.finish();
    drop(partial);
    let exts: &[&str] = if a.svg_only {
        &["svg"]
    } else {
        &["svg", "png"]
    };
    let plots = report::write_sweep(&out, &result, &spec, exts)?;
    let _ = std::fs::remove_file(&partial_path);
    for f in ["sweep.csv", "sweep.json"] {
        folder.wrote(&out.join(f));
    }
    for p in &plots {
        folder.wrote(p);
    }
    folder.finish()?;
    // The files are written whatever the format; the format is what is printed.
    Ok(match format {
        Format::Table => report::sweep_table(&result, &spec, &out, &plots),
        Format::Json => report::sweep_json(&result, &spec),
        Format::Csv => report::sweep_csv(&result, &spec),
    })
}

/// Reads the parts of a sweep whose envelopes were checked as one set (in part order),
/// checking each as it is read: the study it embeds through the checks of the files and flags
/// it came from, the fingerprint against that study, the same study and rendering as part 0,
/// its points and longest sequences (`sweep::check_part`). Returns the unsharded command, part
/// 0 (its result left empty) and every part's result; one part's text is held at a time.
pub fn read_parts(
    files: &[(PathBuf, shard::Envelope)],
) -> Result<(Vec<String>, SweepShard, Vec<SweepResult>)> {
    let mut first: Option<SweepShard> = None;
    let mut results = Vec::with_capacity(files.len());
    for (path, envelope) in files {
        let mut part: SweepShard = shard::read_data(path, envelope)?;
        match &first {
            None => sweep::check_spec(&part.spec, path, "data.spec")?,
            Some(f) if part.spec != f.spec || part.svg_only != f.svg_only => {
                return Err(Error::Merge {
                    message: format!(
                        "{}: holds another study or rendering than part 0",
                        path.display()
                    ),
                })
            }
            Some(_) => {}
        }
        envelope.check_study(path, &crate::atomic::to_json(&part.spec))?;
        if first.is_none() {
            let sp = &part.spec;
            check_plots(report::sweep_plot_files(
                sp.models.len() * sp.hardware.len(),
                sp.degrees.len(),
                sp.outer.len(),
                part.svg_only,
            ))?;
        }
        sweep::check_part(
            &part.spec,
            envelope.shard,
            &part.result,
            path,
            "data.result",
        )?;
        let empty = SweepResult {
            points: Vec::new(),
            maxseq: Vec::new(),
        };
        results.push(std::mem::replace(&mut part.result, empty));
        if first.is_none() {
            first = Some(part);
        }
    }
    let command = files[0].1.command.clone();
    match first {
        Some(first) => Ok((command, first, results)),
        None => Err(Error::arg("merge", "no shard files given")),
    }
}

/// Refuses a sweep that would draw more than [`limits::MAX_SWEEP_PLOTS`] plot files.
fn check_plots(plots: u64) -> Result<()> {
    if plots > limits::MAX_SWEEP_PLOTS {
        return Err(Error::arg(
            "--p",
            format!(
                "the sweep would draw {plots} plot files (models × profiles × (degrees × cp × pp \
                 × 4 charts + cp × pp) × formats), more than {}; sweep fewer models, profiles \
                 or degrees, or pass --svg-only",
                limits::MAX_SWEEP_PLOTS
            ),
        ));
    }
    Ok(())
}

/// Writes the whole sweep's files from its joined result, into a folder held as
/// `command` would have held it (`metp-sim merge`): the same calls as an unsharded run.
pub fn write_merged(
    command: Vec<String>,
    s: &SweepShard,
    result: &SweepResult,
    out: &std::path::Path,
) -> Result<String> {
    let mut folder = OutputFolder::open_as(out, command)?;
    let exts: &[&str] = if s.svg_only {
        &["svg"]
    } else {
        &["svg", "png"]
    };
    let plots = report::write_sweep(out, result, &s.spec, exts)?;
    for f in ["sweep.csv", "sweep.json"] {
        folder.wrote(&out.join(f));
    }
    for p in &plots {
        folder.wrote(p);
    }
    folder.finish()?;
    Ok(report::sweep_table(result, &s.spec, out, &plots))
}

/// Part `shard` of the sweep: its points, written as `<out>/sweep.shard-K-of-N.json` (no folder
/// lock or manifest: the parts share the folder; merge writes the manifest).
fn run_shard(spec: &SweepSpec, shard: Shard, out: PathBuf, svg_only: bool) -> Result<String> {
    crate::atomic::check_output_dir(&out)?;
    let mine = shard.len_of(spec.points());
    let progress = Progress::new(&format!("sweep shard {shard}"), "points", mine as u64);
    let result = sweep::run_shard(spec, shard, &|pt| {
        progress.tick(|| format!("{} p={} s={}", pt.method, pt.p, pt.seq))
    });
    progress.finish();
    let study = crate::atomic::to_json(spec);
    let file = ShardFile::new(
        SHARD_KIND,
        shard,
        &study,
        shard::unsharded_command(std::env::args().skip(1)),
        SweepShard {
            spec: spec.clone(),
            out,
            svg_only,
            result,
        },
    );
    let path = file.write(&file.data.out)?;
    Ok(format!(
        "sweep shard {shard}: {mine} of {} points; wrote {}\n",
        spec.points(),
        path.display()
    ))
}
