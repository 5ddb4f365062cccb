//! `metp-sim collectives --hw H [--nodes N] --op OP [--gpus N] [--sizes 8..16g] [--compare LOG]`:
//! nccl-tests' table predicted on a profile, and compared with a published log
//! (`nccl_tests`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::args::FormatArg;
use crate::config::{apply_scales, load_hardware, parse_scales};
use crate::error::Result;
use crate::nccl_tests::{self, sizes::parse_sizes, Request, TestOp};
use crate::report::{collectives_csv, collectives_table, to_json, Format};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OpArg {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Sendrecv,
    Broadcast,
    Reduce,
}

impl From<OpArg> for TestOp {
    fn from(o: OpArg) -> TestOp {
        match o {
            OpArg::AllReduce => TestOp::AllReduce,
            OpArg::AllGather => TestOp::AllGather,
            OpArg::ReduceScatter => TestOp::ReduceScatter,
            OpArg::AllToAll => TestOp::AllToAll,
            OpArg::Sendrecv => TestOp::SendRecv,
            OpArg::Broadcast => TestOp::Broadcast,
            OpArg::Reduce => TestOp::Reduce,
        }
    }
}

#[derive(Debug, Args)]
pub struct CollectivesArgs {
    /// Hardware profile (name in hardware-profiles/ or a path).
    #[arg(long)]
    hw: String,
    /// The operation nccl-tests times (all_reduce_perf, …, sendrecv_perf).
    #[arg(long, value_enum)]
    op: OpArg,
    /// Nodes (default: the log's hosts, else the profile's nodes).
    #[arg(long)]
    nodes: Option<u64>,
    /// GPUs per node taking part (default: the log's, else every GPU of a node).
    #[arg(long)]
    gpus: Option<u64>,
    /// Buffer sizes: `8..16g` doubles as nccl-tests' -f 2, `1m,4m,1g` lists; k, m, g, t are
    /// powers of 1024 (default: the log's sizes, else 8..16g).
    #[arg(long)]
    sizes: Option<String>,
    /// An nccl-tests or rccl-tests log: adds its measured time, algbw, busbw (out-of-place) and
    /// the error per size, and says whether the curve falls short of the profile.
    #[arg(long)]
    compare: Option<PathBuf>,
    /// What-if scaling of the profile, as on the workload commands (e.g. intra=0.5).
    #[arg(long)]
    scale: Vec<String>,
    /// Output format (json: {"rows": [{size_bytes, predicted_time_us, predicted_busbw_gb_s,
    /// measured_time_us, measured_busbw_gb_s, …}], …}).
    #[arg(long, value_enum, default_value = "table")]
    format: FormatArg,
}

pub fn run(a: CollectivesArgs) -> Result<String> {
    let mut hardware = load_hardware(&a.hw)?;
    apply_scales(&mut hardware, &parse_scales(&a.scale)?)?;
    let sizes = a.sizes.as_deref().map(parse_sizes).transpose()?;
    let r = nccl_tests::run(&Request {
        hardware,
        op: a.op.into(),
        nodes: a.nodes,
        gpus: a.gpus,
        sizes,
        compare: a.compare,
    })?;
    Ok(match Format::from(a.format) {
        Format::Table => collectives_table(&r),
        Format::Json => to_json(&r),
        Format::Csv => collectives_csv(&r),
    })
}
