//! `metp-sim validate`: the claims report, or (`--runs`) the published-runs report.

use std::path::PathBuf;

use clap::Args;

use super::args::{distinct, load_scaled, names};
use crate::atomic::OutputFolder;
use crate::error::Result;
use crate::report;
use crate::validate;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Output folder (default reports/claims/, or reports/claims-<profiles>/ with --hw).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Hardware profiles to check the claims on in place of the bundled ones, comma-separated:
    /// names in hardware-profiles/ or paths to JSON files. C3 and C4 run on every profile with
    /// a node of 8 GPUs, C1 and C2 on the first.
    #[arg(long, value_name = "H[,H...]")]
    hw: Option<String>,
    /// What-if for the --hw profiles: multiply a profile figure, KEY=FACTOR (repeat or
    /// comma-separate), as for sweep and plan.
    #[arg(long, value_name = "KEY=FACTOR", requires = "hw")]
    scale: Vec<String>,
    /// For the --hw profiles: the fused attention implementation their runs with
    /// FlashAttention use (the profile's default unless named).
    #[arg(long, value_name = "NAME", requires = "hw")]
    attention_kernel: Option<String>,
    /// Write SVG plots only (no PNG).
    #[arg(long)]
    svg_only: bool,
    /// Predict the published runs of DIR (default runs/) instead of checking the claims, into
    /// reports/runs/ (or --out): runs.md, runs.json and a plot of predicted against measured.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "runs", conflicts_with_all = ["hw", "scale"])]
    runs: Option<PathBuf>,
    /// With --runs: time each run's own configuration in closed form only (the analytic twin),
    /// instead of simulating it.
    #[arg(long, requires = "runs")]
    analytic: bool,
    /// With --runs: exit 1 when a run leaves its tolerance (after writing the report), naming
    /// each such run in one line on stderr — for a CI job or a script.
    #[arg(long, requires = "runs")]
    check: bool,
}

pub fn run(a: ValidateArgs) -> Result<String> {
    if let Some(dir) = &a.runs {
        return published_runs(&a, dir);
    }
    let profiles = match &a.hw {
        Some(text) => {
            let listed = names("--hw", text)?;
            let most = crate::config::limits::MAX_VALIDATE_PROFILES;
            if listed.len() > most {
                return Err(crate::error::Error::arg(
                    "--hw",
                    format!(
                        "{} profiles; the claims are checked on at most {most} at once (each \
                         runs the C3 and C4 studies)",
                        listed.len()
                    ),
                ));
            }
            let hw = listed
                .into_iter()
                .map(|h| load_scaled(h, &a.scale))
                .collect::<Result<Vec<_>>>()?;
            distinct("--hw", hw.iter().map(|h| h.name.as_str()))?;
            let mut hw = hw;
            if let Some(name) = &a.attention_kernel {
                let k = crate::config::parse_attention_kernel(name)?;
                for h in &mut hw {
                    let name = h.name.clone();
                    h.kernels.set_default_attention(k, &name)?;
                }
            }
            hw
        }
        None => Vec::new(),
    };
    let hw_names: Vec<String> = profiles.iter().map(|h| h.name.clone()).collect();
    let out = a.out.clone().unwrap_or_else(|| {
        if hw_names.is_empty() {
            PathBuf::from("reports/claims")
        } else {
            let slug = report::joined_slug(hw_names.iter().map(String::as_str));
            PathBuf::from("reports").join(format!("claims-{slug}"))
        }
    });
    // The folder is checked and held before the claims are computed (atomic::OutputFolder).
    let mut folder = OutputFolder::open(&out)?;
    let claims = if profiles.is_empty() {
        validate::check_all()?
    } else {
        validate::check_on(&profiles)?
    };
    let exts: &[&str] = if a.svg_only {
        &["svg"]
    } else {
        &["svg", "png"]
    };
    let used = if profiles.is_empty() {
        crate::config::list_names(crate::config::DataKind::Hardware)
            .iter()
            .map(|n| crate::config::load_hardware(n))
            .collect::<Result<Vec<_>>>()?
    } else {
        profiles.clone()
    };
    let attention = report::claims_attention_note(&used);
    for path in report::write_claims(&out, &claims, exts, &hw_names, &attention)? {
        folder.wrote(&path);
    }
    folder.finish()?;
    Ok(report::claims_summary(&claims, &out))
}

/// `validate --runs DIR`: every run file of DIR predicted, written to reports/runs/ (or --out).
fn published_runs(a: &ValidateArgs, dir: &std::path::Path) -> Result<String> {
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("reports/runs"));
    let runs = crate::runs::load_dir(dir)?;
    let mut folder = OutputFolder::open(&out)?;
    let timing = if a.analytic {
        crate::runs::RunTiming::Analytic
    } else {
        crate::runs::RunTiming::Simulated
    };
    let results = crate::runs::evaluate_all(&runs, timing)?;
    let exts: &[&str] = if a.svg_only {
        &["svg"]
    } else {
        &["svg", "png"]
    };
    for path in report::write_runs(&out, &results, timing, exts)? {
        folder.wrote(&path);
    }
    folder.finish()?;
    let summary = report::runs_summary(&results, &out);
    let out_of: Vec<String> = results
        .iter()
        .filter(|r| !r.within_tolerance)
        .map(|r| {
            format!(
                "{} ({:+.1}%, tolerance {:.0}%)",
                r.id,
                100.0 * r.error,
                100.0 * r.tolerance
            )
        })
        .collect();
    if a.check && !out_of.is_empty() {
        const NAMED: usize = 5;
        let more = out_of.len().saturating_sub(NAMED);
        let mut named = out_of[..out_of.len().min(NAMED)].join(", ");
        if more > 0 {
            named.push_str(&format!(" and {more} more"));
        }
        return Err(crate::error::Error::CheckFailed {
            report: summary,
            message: format!(
                "{} of {} runs out of their tolerance: {named}",
                out_of.len(),
                results.len()
            ),
        });
    }
    Ok(summary)
}
