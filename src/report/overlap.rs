//! `overlap` outputs (table, JSON, CSV): METP's full-overlap thresholds, closed form and solved,
//! and the simulated exposure of its rings on either side of them.

use serde::Serialize;

use super::columns::{self, Column};
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

/// The columns of `overlap --format csv`: each row's figures under the JSON's keys, with the
/// study's solved thresholds repeated on every row (`threshold_local_seq` of the JSON).
fn overlap_columns(st: &Study) -> Vec<Column<Row>> {
    type C = Column<Row>;
    let (attn, mlp) = (st.attention_threshold, st.solved.mlp_local_seq);
    vec![
        C::data("seq", |r| r.seq.into()),
        C::data("p", |r| r.p.into()),
        C::data("local_seq", |r| r.local_seq.into()),
        C::data("threshold_local_seq_attention", move |_| attn.into()),
        C::data("threshold_local_seq_mlp", move |_| mlp.into()),
        C::data("condition_holds", |r| r.condition_holds.into()),
        C::data("mlp_condition_holds", |r| r.mlp_condition_holds.into()),
        C::data("exposed_communication_s", |r| {
            r.exposed_communication_s.into()
        }),
        C::data("attention_ring_exposed_s", |r| {
            r.attention_ring_exposed_s.into()
        }),
        C::data("attention_ring_exposed_share", |r| {
            r.attention_ring_exposed_share.into()
        }),
        C::data("mlp_ring_exposed_s", |r| r.mlp_ring_exposed_s.into()),
        C::data("mlp_ring_exposed_share", |r| {
            r.mlp_ring_exposed_share.into()
        }),
        C::data("attention_bwd_ring_exposed_share", |r| {
            r.attention_bwd_ring_exposed_share.into()
        }),
        C::data("attention_agrees", |r| r.attention_agrees.into()),
        C::data("mlp_agrees", |r| r.mlp_agrees.into()),
        C::data("agrees", |r| r.agrees.into()),
    ]
}

/// CSV for `metp-sim overlap`: a header and one row per local sequence length (numbers as the
/// JSON writes them, unformatted; an undecided agreement is an empty cell).
pub fn overlap_csv(st: &Study) -> String {
    columns::csv(&overlap_columns(st), &st.rows)
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
