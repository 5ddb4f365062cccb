//! `metp-sim maxseq`.

use clap::Args;

use super::args::{apply_global_batch, BatchArgs, CommonArgs, OuterArgs};
use crate::config::{parse_list, MethodId};
use crate::error::Result;
use crate::report::{self, Format};
use crate::search;

#[derive(Debug, Args)]
pub struct MaxseqArgs {
    /// Methods: a comma-separated list or `all`.
    #[arg(long, alias = "method", default_value = "all")]
    methods: String,
    /// Degrees, comma-separated.
    #[arg(long, default_value = "1,2,4,8")]
    p: String,
    #[command(flatten)]
    batch: BatchArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    outer: OuterArgs,
}

pub fn run(a: MaxseqArgs) -> Result<String> {
    let methods = MethodId::parse_list("--methods", &a.methods)?;
    let degrees = parse_list("--p", &a.p)?;
    let outer = a.outer.axes()?;
    let mut template = a.common.workload(methods[0], degrees[0], 1)?;
    template.outer = outer;
    a.outer.apply(&mut template.options)?;
    apply_global_batch(&mut template, a.batch.global_batch.as_deref())?;
    let rows = search::max_seq_grid(&template, &methods, &degrees);
    Ok(match a.common.format.into() {
        Format::Table => report::maxseq_table(&template, &rows),
        Format::Json => report::maxseq_json(&rows),
        Format::Csv => report::maxseq_csv(&rows),
    })
}
