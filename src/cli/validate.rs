//! `metp-sim validate`: the claims report.

use std::path::PathBuf;

use clap::Args;

use crate::atomic::OutputFolder;
use crate::error::Result;
use crate::report;
use crate::validate;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Output folder.
    #[arg(long, default_value = "reports/claims")]
    out: PathBuf,
    /// Write SVG plots only (no PNG).
    #[arg(long)]
    svg_only: bool,
}

pub fn run(a: ValidateArgs) -> Result<String> {
    // The folder is checked and held before the claims are computed (atomic::OutputFolder).
    let mut folder = OutputFolder::open(&a.out)?;
    let claims = validate::check_all()?;
    let exts: &[&str] = if a.svg_only {
        &["svg"]
    } else {
        &["svg", "png"]
    };
    for path in report::write_claims(&a.out, &claims, exts)? {
        folder.wrote(&path);
    }
    folder.finish()?;
    Ok(report::claims_summary(&claims, &a.out))
}
