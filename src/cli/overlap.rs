//! `metp-sim overlap`: METP's full-overlap condition in closed form, and the simulator's
//! exposed communication on either side of it.

use clap::Args;

use super::args::{single_degree, CommonArgs};
use super::simulate::LinkModelArg;
use crate::config::{parse_seq_spec, MethodId, Workload};
use crate::error::{Error, Result};
use crate::report::{self, Format};
use crate::validate::overlap::{idealise, study};

#[derive(Debug, Args)]
pub struct OverlapArgs {
    /// Parallel degree p.
    #[arg(long, default_value = "8")]
    p: String,
    /// Local sequence lengths (tokens per device, s/p) to simulate.
    #[arg(long, default_value = "128..16k")]
    local_seq: String,
    /// Link model for the simulator.
    #[arg(long, value_enum, default_value = "maxmin")]
    link_model: LinkModelArg,
    /// Run kernels as the closed form assumes: no fixed costs (host, launch, per tile, per
    /// call), attention at the profile's best GEMM rate, element-wise kernels at full
    /// bandwidth, work spread evenly over the SMs.
    #[arg(long)]
    ideal_kernels: bool,
    #[command(flatten)]
    common: CommonArgs,
}

pub fn run(a: OverlapArgs) -> Result<String> {
    let p = single_degree(&a.p)?;
    if p < 2 {
        return Err(Error::arg("--p", "the overlap condition needs p ≥ 2"));
    }
    let locals = parse_seq_spec("--local-seq", &a.local_seq)?;
    let most = crate::config::limits::MAX_OVERLAP_LENGTHS;
    if locals.len() as u64 > most {
        return Err(Error::arg(
            "--local-seq",
            format!(
                "'{}' is {} local lengths; an overlap study simulates at most {most} (each a \
                 traced METP layer): use a larger step",
                a.local_seq,
                locals.len()
            ),
        ));
    }
    let mut base: Workload = a.common.workload(MethodId::Metp, p, p * locals[0])?;
    if a.ideal_kernels {
        idealise(&mut base);
    }
    let st = study(&base, &locals, a.link_model.into())?;
    Ok(match a.common.format.into() {
        Format::Json => report::overlap_json(&base, &st),
        Format::Table => report::overlap_table(&base, &st),
        Format::Csv => report::overlap_csv(&st),
    })
}
