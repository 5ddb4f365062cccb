//! C2's explanation: where 41.7% may come from (DESIGN's accounting) and how the inventories'
//! savings change with the degree and with what is counted, and what this round's rule changed
//! against the previous one.

use super::*;

/// What this round's rule changed, from the numbers (see [`super::super::Revision`]).
pub(super) fn revision(p: Previous, verdict: Verdict) -> super::super::Revision {
    let how = format!(
        "it counted the claim met by any accounting at any degree, and DESIGN §1's 1 − 7/(p + 4) \
         meets 41.7% {} whatever the model or hardware (read on {}), so it could not lose",
        p.design_met, p.model
    );
    let why = if p.verdict == verdict {
        format!(
            "Unchanged: the previous rule gives '{}' too, but {how}. This rule reads the tool's \
             inventories case by case (the whole peak for 'holds', activation memory for \
             'holds under assumptions').",
            p.verdict.words()
        )
    } else {
        format!(
            "The previous rule gives '{}': {how}. Read from the inventories case by case, the \
             verdict is '{}'.",
            p.verdict.words(),
            verdict.words()
        )
    };
    super::super::Revision {
        previous: p.verdict,
        previous_rule: "one model by degree: every accounting (DESIGN §1's, with one or two \
                        received blocks or Q, K, V recomputed; the inventories' stored \
                        attention, attention and peak) meets 41.7% at every degree → holds; \
                        any one at any degree → holds under assumptions; none → does not hold"
            .into(),
        why,
    }
}

pub(super) type Explanation = (
    String,
    Vec<(String, serde_json::Value)>,
    Vec<Assumption>,
    Vec<Table>,
    Vec<ClaimPlot>,
    Option<Previous>,
);

/// The previous rule's verdict on the explanation's accountings, and where DESIGN §1's meets
/// the claim.
pub(super) struct Previous {
    pub(super) verdict: Verdict,
    pub(super) design_met: String,
    pub(super) model: String,
}

/// Where 41.7% may come from (the DESIGN accounting) and how the inventories' savings change
/// with the degree and with what is counted: prose, numbers, assumptions, a table and the plot.
pub(super) fn explanation(inp: &Inputs) -> Result<Explanation> {
    let (seq, name) = (inp.explain_seq, &inp.explain_id);
    // The last profile (DGX-A100-80GB among the bundled ones).
    let Some(hw) = inp.profiles.last() else {
        return Ok((String::new(), vec![], vec![], vec![], vec![], None));
    };
    let model = &inp.explain_model;
    let degrees = &inp.degrees;
    let r = inp.p;
    let rf = r as f64;
    let (mut design1, mut design2, mut recompute) = (vec![], vec![], vec![]);
    let (mut inv_stored, mut inv_attn, mut inv_peak) = (vec![], vec![], vec![]);
    let mut rows = Vec::new();
    for &p in degrees {
        let x = p as f64;
        let m = inp.inventory(hw, model, MethodId::Metp, p, seq)?;
        let t = inp.inventory(hw, model, MethodId::Tp, p, seq)?;
        design1.push(design_saving(x, 1.0, false));
        design2.push(design_saving(x, 2.0, false));
        recompute.push(design_saving(x, 1.0, true));
        inv_stored.push(saving(stored_attention(&m), stored_attention(&t)));
        inv_attn.push(saving(attention_bytes(&m), attention_bytes(&t)));
        inv_peak.push(saving(m.peak_bytes, t.peak_bytes));
        let k = rows.len();
        rows.push(vec![
            p.to_string(),
            pct(design1[k]),
            pct(design2[k]),
            pct(recompute[k]),
            pct(inv_stored[k]),
            pct(inv_attn[k]),
            pct(inv_peak[k]),
        ]);
    }
    let m_r = inp.inventory(hw, model, MethodId::Metp, r, seq)?;
    let t_r = inp.inventory(hw, model, MethodId::Tp, r, seq)?;
    let sp_r = inp.inventory(hw, model, MethodId::TpSp, r, seq)?;
    let (stored_r, attn_r, peak_r) = (
        saving(stored_attention(&m_r), stored_attention(&t_r)),
        saving(attention_bytes(&m_r), attention_bytes(&t_r)),
        saving(m_r.peak_bytes, t_r.peak_bytes),
    );
    let (sp_stored, sp_peak) = (
        saving(stored_attention(&m_r), stored_attention(&sp_r)),
        saving(m_r.peak_bytes, sp_r.peak_bytes),
    );
    let exact: Vec<String> = degrees
        .iter()
        .zip(&design1)
        .filter(|(_, &s)| (s - CLAIMED).abs() < 1e-12)
        .map(|(p, _)| format!("p = {p}"))
        .collect();
    let exact = if exact.is_empty() {
        "at none of the degrees checked".to_string()
    } else {
        format!("at {}", exact.join(", "))
    };
    let below = degrees.iter().rev().find(|&&d| d < r).copied();
    let above = degrees.iter().find(|&&d| d > r).copied();
    let at = |p: Option<u64>, f: &dyn Fn(f64) -> f64| {
        p.map(|p| format!("{} at p = {p}", pct(f(p as f64))))
            .unwrap_or_else(|| "-".into())
    };
    let text = format!(
        "Where 41.7% may come from (an explanation, not the verdict): the abstract does not say \
         how it was counted; exactly 5/12 comes out of the accounting in DESIGN §1 {exact} — TP \
         keeps the attention input replicated (2sbh) and Q, K, V, O split (8sbh/p), METP keeps \
         X, Q, K, V, O split and one received K/V block (14sbh/p), a saving of 1 − 7/(p + 4) \
         that meets 41.7% {} ({}); with two received blocks it gives {} at p = {r}, with Q, K, V \
         recomputed {}. The inventories of {name} at s = {seq} on {} give {} for the stored \
         attention tensors and {} for the whole peak at p = {r}; the whole peak meets 41.7% {}.",
        where_met(degrees, &design1),
        at(below, &|p| design_saving(p, 1.0, false)),
        pct(design_saving(rf, 2.0, false)),
        pct(design_saving(rf, 1.0, true)),
        hw.name,
        pct(stored_r),
        pct(peak_r),
        where_met(degrees, &inv_peak),
    );
    let series = |v: &[f64]| -> Vec<(f64, f64)> {
        degrees
            .iter()
            .zip(v)
            .map(|(&p, &s)| (p as f64, 100.0 * s))
            .collect()
    };
    let measured = vec![
        (
            "design_accounting_saving_p8".to_string(),
            json!(design_saving(rf, 1.0, false)),
        ),
        (
            "design_accounting_two_buffers_p8".into(),
            json!(design_saving(rf, 2.0, false)),
        ),
        (
            "design_accounting_qkv_recomputed_p8".into(),
            json!(design_saving(rf, 1.0, true)),
        ),
        (
            "inventory_stored_attention_saving_p8".into(),
            json!(stored_r),
        ),
        ("inventory_attention_saving_p8".into(), json!(attn_r)),
        ("inventory_peak_saving_p8".into(), json!(peak_r)),
        (
            "reproduces_5_over_12".into(),
            json!(format!(
                "DESIGN accounting, one received K/V block, Q/K/V stored, {exact}"
            )),
        ),
    ];
    let assumptions = vec![
        Assumption {
            name: format!("p = {r}"),
            effect: format!(
                "1 − 7/(p+4): {}, {}; the inventories' whole peak saving on {name}: {}",
                at(below, &|p| design_saving(p, 1.0, false)),
                at(above, &|p| design_saving(p, 1.0, false)),
                where_met(degrees, &inv_peak)
            ),
        },
        Assumption {
            name: "one receive buffer for K/V (DESIGN accounting)".into(),
            effect: format!(
                "two buffers: {} at p = {r}",
                pct(design_saving(rf, 2.0, false))
            ),
        },
        Assumption {
            name: "Q, K, V stored (DESIGN accounting)".into(),
            effect: format!(
                "recomputed: {} at p = {r}",
                pct(design_saving(rf, 1.0, true))
            ),
        },
        Assumption {
            name: "what is counted (attention activations vs the whole device)".into(),
            effect: format!(
                "this tool's inventories of {name} at p = {r}: stored attention {}, attention \
                 incl. working set {}, whole peak {}",
                pct(stored_r),
                pct(attn_r),
                pct(peak_r)
            ),
        },
        Assumption {
            name: "baseline is Megatron TP without sequence parallelism".into(),
            effect: format!(
                "against TP + SP, whose activations are already split 1/p: stored attention {}, \
                 whole peak {} at p = {r}",
                pct(sp_stored),
                pct(sp_peak)
            ),
        },
    ];
    let table = Table {
        caption: format!(
            "Explanation: METP's memory saving against TP by degree (DESIGN accounting in sbh \
             units; inventories for {name} at s = {seq}, FlashAttention on)"
        ),
        header: vec![
            "p".into(),
            "DESIGN, 1 K/V block".into(),
            "DESIGN, 2 K/V blocks".into(),
            "DESIGN, QKV recomputed".into(),
            "inventory: stored attention".into(),
            "inventory: attention + working set".into(),
            "inventory: whole peak".into(),
        ],
        rows,
    };
    let plot = ClaimPlot {
        file: "c2-saving-vs-p".into(),
        title: "C2: METP's memory saving over TP with FlashAttention".into(),
        x_label: "degree p".into(),
        y_label: "saving (%)".into(),
        y_kind: "plain".into(),
        x_kind: "plain".into(),
        x_log2: true,
        y_log: false,
        reference: Some((41.7, "41.7% (claim)".into())),
        series: vec![
            PlotSeries {
                name: "DESIGN accounting, 1 K/V block".into(),
                points: series(&design1),
            },
            PlotSeries {
                name: "DESIGN accounting, 2 K/V blocks".into(),
                points: series(&design2),
            },
            PlotSeries {
                name: "DESIGN accounting, QKV recomputed".into(),
                points: series(&recompute),
            },
            PlotSeries {
                name: "inventory: stored attention".into(),
                points: series(&inv_stored),
            },
            PlotSeries {
                name: "inventory: whole peak".into(),
                points: series(&inv_peak),
            },
        ],
    };
    let previous = Previous {
        verdict: previous_verdict(&[
            design1.clone(),
            design2,
            recompute,
            inv_stored,
            inv_attn,
            inv_peak,
        ]),
        design_met: where_met(degrees, &design1),
        model: format!("{name} at s = {seq} on {}", hw.name),
    };
    Ok((
        text,
        measured,
        assumptions,
        vec![table],
        vec![plot],
        Some(previous),
    ))
}
