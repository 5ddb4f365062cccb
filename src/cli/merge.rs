//! `metp-sim merge`: joins the shard files of a split `sweep` or `plan` into exactly what one
//! run would have written (the same rendering calls as the unsharded command).

use std::path::PathBuf;

use clap::Args;

use super::{plan, sweep};
use crate::error::{Error, Result};
use crate::shard::{self, ShardFile};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Shard files (`*.shard-K-of-N.json`), or folders holding them.
    #[arg(required = true, value_name = "SHARD_FILE_OR_DIR")]
    inputs: Vec<PathBuf>,
    /// Output folder of a sweep (default: the sweep's own --out, where its parts wrote).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: MergeArgs) -> Result<String> {
    let paths = shard::expand(&a.inputs)?;
    let files = paths
        .iter()
        .map(|p| shard::read(p).map(|f| (p.clone(), f)))
        .collect::<Result<Vec<_>>>()?;
    let files = shard::check_set(files)?;
    match files[0].1.kind.as_str() {
        sweep::SHARD_KIND => {
            let (command, parts) = data::<sweep::SweepShard>(files)?;
            let first = &parts[0];
            let out = a.out.clone().unwrap_or_else(|| first.out.clone());
            let results = parts.iter().map(|p| p.result.clone()).collect();
            let result = crate::sweep::merge(&first.spec, results)?;
            sweep::write_merged(command, first, &result, &out)
        }
        plan::SHARD_KIND => {
            if a.out.is_some() {
                return Err(Error::arg(
                    "--out",
                    "a plan is printed, not written to a folder; redirect the output instead",
                ));
            }
            let (_, parts) = data::<plan::PlanShard>(files)?;
            plan::render_merged(parts)
        }
        other => Err(Error::Merge {
            message: format!("shards of '{other}' cannot be merged (sweep and plan can)"),
        }),
    }
}

/// The parts' data, in part order, with the unsharded command line.
fn data<T: serde::de::DeserializeOwned>(
    files: Vec<(PathBuf, ShardFile<shard::Unparsed>)>,
) -> Result<(Vec<String>, Vec<T>)> {
    let command = files[0].1.command.clone();
    let parts = files
        .iter()
        .map(|(path, f)| shard::parse_data(path, f))
        .collect::<Result<Vec<T>>>()?;
    Ok((command, parts))
}
