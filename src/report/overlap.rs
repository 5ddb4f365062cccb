//! `overlap` outputs: METP's full-overlap thresholds, closed form and solved, and the simulated
//! exposure of its rings on either side of them.

use serde::Serialize;

use super::table::Table;
use super::to_json;
use crate::analytic::{SolvedThresholds, Thresholds};
use crate::config::Workload;
use crate::validate::overlap::{Row, Study};

#[derive(Serialize)]
struct Output<'a> {
    model: &'a str,
    hardware: &'a str,
    attention_kernel: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_placeholder: Option<String>,
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

fn output<'a>(base: &'a Workload, st: &'a Study) -> Output<'a> {
    let o = &base.options;
    Output {
        model: &base.model.name,
        hardware: &base.hardware.name,
        attention_kernel: super::attention_kernel(base),
        kernel_placeholder: super::placeholder(base),
        p: base.p,
        causal: o.causal,
        causal_zigzag: o.causal_zigzag,
        threshold_local_seq: ThresholdJson {
            attention: st.attention_threshold,
            mlp: st.solved.mlp_local_seq,
        },
        closed_form: &st.closed_form,
        solved: &st.solved,
        rows: &st.rows,
    }
}

/// JSON for `metp-sim overlap` (DESIGN §8 fields).
pub fn overlap_json(base: &Workload, st: &Study) -> String {
    to_json(&output(base, st))
}

/// Human table for `metp-sim overlap`.
pub fn overlap_table(base: &Workload, st: &Study) -> String {
    render(&output(base, st))
}

fn render(o: &Output<'_>) -> String {
    let mut s = format!(
        "METP full-overlap condition — {} on {}, p = {}{}\nattention: {}\n{}\n",
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
        },
        o.attention_kernel,
        o.kernel_placeholder
            .as_ref()
            .map_or(String::new(), |t| format!(
                "placeholder kernel figures: {t}\n"
            ))
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
