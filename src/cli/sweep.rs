//! `metp-sim sweep`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Mutex;

use clap::{Args, ValueEnum};

use super::args::{distinct, names, CommonArgs};
use super::simulate::LinkModelArg;
use crate::atomic::OutputFolder;
use crate::config::{limits, load_model, parse_count, parse_list, parse_seq_spec, MethodId};
use crate::error::{Error, Result};
use crate::evaluate::Timing;
use crate::report;
use crate::sweep::{self, Point, SweepSpec};

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
    #[command(flatten)]
    common: CommonArgs,
}

pub fn run(a: SweepArgs) -> Result<String> {
    let methods = MethodId::parse_list("--methods", &a.methods)?;
    let degrees = parse_list("--p", &a.p)?;
    let seqs = parse_seq_spec("--seq", &a.seq)?;
    let model_names = names("--model", &a.common.model)?;
    let hw_names = names("--hw", &a.common.hw)?;
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
        seqs.len(),
    ]
    .iter()
    .try_fold(1u64, |acc, &n| acc.checked_mul(n as u64))
    .unwrap_or(u64::MAX);
    if total > limits::MAX_SWEEP_POINTS {
        return Err(Error::arg(
            "--seq",
            format!(
                "the sweep has {total} points (models × profiles × methods × degrees × \
                 lengths), more than {}; sweep fewer lengths or degrees",
                limits::MAX_SWEEP_POINTS
            ),
        ));
    }
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
    let options = a.common.options();
    let spec = SweepSpec {
        models,
        hardware,
        methods,
        degrees,
        seqs,
        micro_batch,
        options,
        timing: match a.engine {
            EngineArg::Sim => Timing::Simulated(a.link_model.into()),
            EngineArg::Analytic => Timing::Analytic,
        },
    };
    let out = a.out.clone().unwrap_or_else(|| {
        let name = if model_names.len() == 1 && hw_names.len() == 1 {
            format!(
                "{}-{}",
                report::file_slug(model_names[0]),
                report::file_slug(hw_names[0])
            )
        } else {
            "sweep".into()
        };
        PathBuf::from("reports").join(name)
    });
    // The folder is this run's until it finishes: a second sweep into it is refused, and its
    // manifest says `running` until the last file is written (atomic::OutputFolder).
    let mut folder = OutputFolder::open(&out)?;

    // Rows are appended to a partial file as they complete, so an interrupted sweep keeps what
    // it computed; the final files are written atomically in spec order.
    let partial_path = out.join("sweep.csv.partial");
    let partial = std::fs::File::create(&partial_path).map_err(|source| Error::Io {
        path: partial_path.clone(),
        source,
    })?;
    let partial = Mutex::new(std::io::BufWriter::new(partial));
    if let Ok(mut f) = partial.lock() {
        let _ = f.write_all(report::sweep_csv_header().as_bytes());
    }
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(total)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} points  {elapsed_precise}  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let on_point = |pt: &Point| {
        if let Ok(mut f) = partial.lock() {
            let _ = f.write_all(report::sweep_csv_row(pt).as_bytes());
            let _ = f.flush();
        }
        bar.set_message(format!("{} p={} s={}", pt.method, pt.p, pt.seq));
        bar.inc(1);
    };
    let result = sweep::run(&spec, &on_point);
    bar.finish_and_clear();
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
    Ok(report::sweep_table(&result, &spec, &out, &plots))
}
