//! `metp-sim overlap`: METP's full-overlap condition in closed form, and the simulator's
//! exposed communication on either side of it.

use clap::Args;
use serde::Serialize;

use super::args::{single_degree, CommonArgs};
use super::simulate::LinkModelArg;
use crate::analytic::{SolvedThresholds, Thresholds};
use crate::config::{parse_seq_spec, MethodId, Workload};
use crate::error::{Error, Result};
use crate::report::{self, Format, Table};
use crate::validate::overlap::{idealise, study, Row};

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

#[derive(Serialize)]
struct Output<'a> {
    model: &'a str,
    hardware: &'a str,
    p: u64,
    causal: bool,
    causal_zigzag: bool,
    threshold_local_seq: ThresholdJson,
    closed_form: &'a Thresholds,
    solved: &'a SolvedThresholds,
    rows: &'a [Row],
}

#[derive(Serialize)]
struct ThresholdJson {
    attention: u64,
    mlp: u64,
}

pub fn run(a: OverlapArgs) -> Result<String> {
    let p = single_degree(&a.p)?;
    if p < 2 {
        return Err(Error::arg("--p", "the overlap condition needs p ≥ 2"));
    }
    let locals = parse_seq_spec("--local-seq", &a.local_seq)?;
    let mut base: Workload = a.common.workload(MethodId::Metp, p, p * locals[0])?;
    if a.ideal_kernels {
        idealise(&mut base);
    }
    let st = study(&base, &locals, a.link_model.into())?;
    let o = &base.options;
    let out = Output {
        model: &base.model.name,
        hardware: &base.hardware.name,
        p,
        causal: o.causal,
        causal_zigzag: o.causal_zigzag,
        threshold_local_seq: ThresholdJson {
            attention: st.attention_threshold,
            mlp: st.solved.mlp_local_seq,
        },
        closed_form: &st.closed_form,
        solved: &st.solved,
        rows: &st.rows,
    };
    Ok(match a.common.format.into() {
        Format::Json => report::to_json(&out),
        Format::Table | Format::Csv => render(&out),
    })
}

fn render(o: &Output<'_>) -> String {
    let mut s = format!(
        "METP full-overlap condition — {} on {}, p = {}{}\n\n",
        o.model,
        o.hardware,
        o.p,
        if o.causal {
            if o.causal_zigzag {
                ", causal (zig-zag)"
            } else {
                ", causal (contiguous)"
            }
        } else {
            ""
        }
    );
    s.push_str(&format!(
        "closed form (best GEMM efficiency): F = {:.0} TFLOP/s, B = {:.0} GB/s, α = {:.1} µs → F/B = {:.0} tokens\n",
        o.closed_form.flops_per_s / 1e12,
        o.closed_form.bytes_per_s / 1e9,
        o.closed_form.latency_s * 1e6,
        o.closed_form.f_over_b
    ));
    s.push_str(&format!(
        "  attention ring hides its K/V when s/p ≥ {:.0} (causal zig-zag: {:.0}); MLP ring when b·s/p ≥ {:.0}\n",
        o.closed_form.attention_local_seq,
        o.closed_form.attention_causal_zigzag_local_seq,
        o.closed_form.mlp_local_seq
    ));
    s.push_str(&format!(
        "solved with the profile's kernel timings and overlap slowdown: attention s/p ≥ {} (zig-zag {}), MLP s/p ≥ {}\n\n",
        o.solved.attention_local_seq, o.solved.attention_causal_zigzag_local_seq, o.solved.mlp_local_seq
    ));
    let mut t = Table::new(
        &[
            "s/p",
            "s",
            "attn holds",
            "attn ring exposed",
            "mlp holds",
            "mlp ring exposed",
            "agrees",
        ],
        &[true, true, false, true, false, true, false],
    );
    for r in o.rows {
        t.row(vec![
            r.local_seq.to_string(),
            r.seq.to_string(),
            if r.condition_holds { "yes" } else { "no" }.into(),
            format!(
                "{:.3} ms ({:.1}%)",
                r.attention_ring_exposed_s * 1e3,
                100.0 * r.attention_ring_exposed_share
            ),
            if r.mlp_condition_holds { "yes" } else { "no" }.into(),
            format!(
                "{:.3} ms ({:.1}%)",
                r.mlp_ring_exposed_s * 1e3,
                100.0 * r.mlp_ring_exposed_share
            ),
            match r.agrees {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "near threshold",
            }
            .into(),
        ]);
    }
    s.push_str(&t.render());
    s.push_str("\nexposed: compute-stream time waiting inside the forward ring steps of device 0 (one layer simulated)\n");
    s
}
