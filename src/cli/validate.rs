//! `metp-sim validate`: the claims report.

use std::path::PathBuf;

use clap::Args;

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
    let claims = validate::check_all()?;
    let exts: &[&str] = if a.svg_only {
        &["svg"]
    } else {
        &["svg", "png"]
    };
    report::write_claims(&a.out, &claims, exts)?;
    Ok(report::claims_summary(&claims, &a.out))
}
