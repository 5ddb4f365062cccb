//! `metp-sim memory`.

use clap::Args;

use super::args::{single_degree, CommonArgs, OuterArgs};
use crate::config::{parse_count, MethodId};
use crate::error::Result;
use crate::report::{self, Format};

#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// Method: metp, tp, tp-sp, ulysses, ring or rsa.
    #[arg(long, default_value = "metp")]
    method: String,
    /// Parallel degree p.
    #[arg(long, default_value = "8")]
    p: String,
    /// Sequence length (4k = 4096).
    #[arg(long, default_value = "32k")]
    seq: String,
    /// Global batch in sequences (default: one micro-batch per data-parallel replica); with a
    /// pipeline it sets the micro-batches each stage holds in flight.
    #[arg(long)]
    global_batch: Option<String>,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    outer: OuterArgs,
}

pub fn run(a: MemoryArgs) -> Result<String> {
    let method = MethodId::parse("--method", &a.method)?;
    let p = single_degree(&a.p)?;
    let seq = parse_count("--seq", &a.seq)?;
    let w = super::simulate::workload(
        &a.common,
        &a.outer,
        method,
        p,
        seq,
        a.global_batch.as_deref(),
    )?
    .validate()?;
    let inv = crate::memory::inventory(&w);
    Ok(match a.common.format.into() {
        Format::Table => report::memory_table(&w, &inv),
        Format::Json => report::memory_json(&w, &inv),
        Format::Csv => report::memory_csv(&inv),
    })
}
