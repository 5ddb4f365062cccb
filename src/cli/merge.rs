//! `metp-sim merge`: joins the shard files of a split `sweep` or `plan` into exactly what one
//! run would have written (the same rendering calls as the unsharded command). A shard file is
//! input like any other: sizes are checked before anything is read, every envelope before any
//! data, and each part's data — the study it embeds and every number — before it is joined
//! (`shard`, `sweep::check_part`, `plan::check_part`); the output folder comes from the command
//! line, never from a file.

use std::path::{Path, PathBuf};

use clap::Args;

use super::{plan, sweep};
use crate::error::{Error, Result};
use crate::shard::{self, Envelope};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Shard files (`*.shard-K-of-N.json`), or folders holding them.
    #[arg(required = true, value_name = "SHARD_FILE_OR_DIR")]
    inputs: Vec<PathBuf>,
    /// Output folder of a sweep (default: the folder the shard files are in).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: MergeArgs) -> Result<String> {
    let paths = shard::expand(&a.inputs)?;
    shard::check_sizes(&paths)?;
    let files = paths
        .iter()
        .map(|p| shard::read(p).map(|f| (p.clone(), f)))
        .collect::<Result<Vec<_>>>()?;
    let files = shard::check_set(files)?;
    match files[0].1.kind.as_str() {
        sweep::SHARD_KIND => {
            let out = match a.out.clone() {
                Some(out) => out,
                None => shards_folder(&files)?,
            };
            crate::atomic::check_output_dir(&out)?;
            let (command, first, results) = sweep::read_parts(&files)?;
            let result = crate::sweep::merge(&first.spec, results)?;
            sweep::write_merged(command, &first, &result, &out)
        }
        plan::SHARD_KIND => {
            if a.out.is_some() {
                return Err(Error::arg(
                    "--out",
                    "a plan is printed, not written to a folder; redirect the output instead",
                ));
            }
            plan::render_merged(&files)
        }
        other => Err(Error::Merge {
            message: format!("shards of '{other}' cannot be merged (sweep and plan can)"),
        }),
    }
}

/// The folder every shard file is in: where the parts of a sweep wrote them (their `--out`),
/// and the default output folder of its merge.
fn shards_folder(files: &[(PathBuf, Envelope)]) -> Result<PathBuf> {
    let folder = |p: &Path| {
        p.parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    };
    let first = folder(&files[0].0);
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    for (path, _) in &files[1..] {
        if canonical(&folder(path)) != canonical(&first) {
            return Err(Error::arg(
                "--out",
                format!(
                    "the shard files are in more than one folder ({} and {}); name the merged \
                     sweep's folder with --out",
                    first.display(),
                    folder(path).display()
                ),
            ));
        }
    }
    Ok(first)
}
