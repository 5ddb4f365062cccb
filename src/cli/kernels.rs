//! `metp-sim kernels --hw H --input FILE.json [--compare] [--format json|table]`: prices a list
//! of kernels (or every kernel of a measurement file) with a profile's kernel model
//! (`calibrate::price`).

use std::path::PathBuf;

use clap::Args;

use super::link::OutFormat;
use crate::calibrate::price::{price, read_input};
use crate::config::load_hardware;
use crate::error::Result;
use crate::report::{kernels_table, to_json};

#[derive(Debug, Args)]
pub struct KernelsArgs {
    /// Hardware profile (name in hardware-profiles/ or a path).
    #[arg(long, default_value = "hgx-h200")]
    hw: String,
    /// A JSON list of kernels (DESIGN §8) or a kernel measurement file.
    #[arg(long)]
    input: PathBuf,
    /// Add each measured kernel's relative error and, per kind, the median and largest
    /// |error|.
    #[arg(long)]
    compare: bool,
    /// Output format (json: the kernels in input order with `predicted_s`; with --compare an
    /// object with `kernels` and `by_kind`).
    #[arg(long, value_enum, default_value = "table")]
    format: OutFormat,
}

pub fn run(a: KernelsArgs) -> Result<String> {
    let hw = load_hardware(&a.hw)?;
    let (items, timing) = read_input(&a.input)?;
    let p = price(&hw, &items, timing, a.compare);
    Ok(match a.format {
        OutFormat::Json if a.compare => to_json(&p),
        OutFormat::Json => to_json(&p.kernels),
        OutFormat::Table => kernels_table(&hw.name, &p, a.compare),
    })
}
