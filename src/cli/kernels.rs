//! `metp-sim kernels --hw H --input FILE.json [--compare] [--format json|table]`: prices a list
//! of kernels (or every kernel of a measurement file) with a profile's kernel model
//! (`fitting::price`).

use std::path::PathBuf;

use clap::Args;

use super::link::OutFormat;
use crate::config::limits::MAX_MEASUREMENT_SESSIONS;
use crate::config::{load_hardware, parse_attention_kernel};
use crate::error::{Error, Result};
use crate::fitting::price::{check_implementations, check_measured, price_at_clocks, read_input};
use crate::fitting::sessions::SESSION_FACTOR_RANGE;
use crate::report::{kernels_table, to_json};
use crate::schedule::KernelShape;

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
    /// Price the GEMMs of measurement session K (≥ 1) at FACTOR × the profile's clock, as
    /// `calibrate --fit` fitted it for a file joining several sessions (repeatable).
    #[arg(long = "session-clock", value_name = "K=FACTOR")]
    session_clock: Vec<String>,
    /// Price attention entries that name no `implementation` with this one of the profile's
    /// (default: the profile's default; `metp-sim list` shows each profile's).
    #[arg(long, value_name = "NAME")]
    attention_kernel: Option<String>,
}

/// `K=FACTOR` flags as factors for sessions 1…max K (1 where none is given).
fn session_clocks(flags: &[String]) -> Result<Vec<f64>> {
    let mut factors: Vec<f64> = Vec::new();
    for flag in flags {
        let bad = || {
            Error::arg(
                "--session-clock",
                format!(
                    "'{flag}': expected K=FACTOR with K from 1 to {} and FACTOR from {} to {}",
                    MAX_MEASUREMENT_SESSIONS - 1,
                    SESSION_FACTOR_RANGE.0,
                    SESSION_FACTOR_RANGE.1
                ),
            )
        };
        let (k, f) = flag.split_once('=').ok_or_else(bad)?;
        let k: u32 = k.trim().parse().map_err(|_| bad())?;
        let f: f64 = f.trim().parse().map_err(|_| bad())?;
        if k == 0
            || k >= MAX_MEASUREMENT_SESSIONS
            || !(SESSION_FACTOR_RANGE.0..=SESSION_FACTOR_RANGE.1).contains(&f)
        {
            return Err(bad());
        }
        if factors.len() < k as usize {
            factors.resize(k as usize, 1.0);
        }
        factors[k as usize - 1] = f;
    }
    Ok(factors)
}

pub fn run(a: KernelsArgs) -> Result<String> {
    let clocks = session_clocks(&a.session_clock)?;
    let hw = load_hardware(&a.hw)?;
    let default = match &a.attention_kernel {
        Some(name) => parse_attention_kernel(name)?,
        None => hw.kernels.default_attention(),
    };
    // The profile's own figures for the default, and a usage error if it lacks it.
    hw.kernels.clone().select_attention(default, &hw.name)?;
    let (mut items, timing) = read_input(&a.input)?;
    for it in &mut items {
        if matches!(it.shape, KernelShape::Attention(_)) {
            it.attention = it.attention.or(Some(default));
        }
    }
    check_implementations(&hw, &items, &a.input)?;
    check_measured(&hw, &items, &a.input)?;
    let p = price_at_clocks(&hw, &items, timing, a.compare, &clocks);
    Ok(match a.format {
        OutFormat::Json if a.compare => to_json(&p),
        OutFormat::Json => to_json(&p.kernels),
        OutFormat::Table => kernels_table(&hw.name, &p, a.compare),
    })
}
