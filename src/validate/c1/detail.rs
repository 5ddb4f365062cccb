//! C1's detail: the first case's tensors by degree (what the s² memory is), its plot, and the
//! assumptions that would change the exponents.

use super::*;

/// The first case's tensors by degree (the explanation of what the s² memory is), the plot,
/// and the assumptions that would change the exponents.
pub(super) struct Detail {
    pub(super) caption: String,
    pub(super) measured: Vec<(String, serde_json::Value)>,
    pub(super) assumptions: Vec<Assumption>,
}

pub(super) fn detail(inp: &Inputs) -> Result<(Vec<Vec<String>>, Vec<ClaimPlot>, Detail)> {
    let Some(case) = inp.cases.first() else {
        let d = Detail {
            caption: "no case".into(),
            measured: vec![],
            assumptions: vec![],
        };
        return Ok((vec![], vec![], d));
    };
    let (model, seq) = (&case.model_id, case.seq);
    let mut rows = Vec::new();
    let (mut block, mut peak, mut tp_scores, mut tp_peak) = (vec![], vec![], vec![], vec![]);
    let mut flash_block = Vec::new();
    let mut grouped = Vec::new();
    for &p in &inp.degrees {
        let (Some(m), Some(t)) = (
            inp.inventory(&case.model, MethodId::Metp, p, seq, false),
            inp.inventory(&case.model, MethodId::Tp, p, seq, false),
        ) else {
            continue;
        };
        let (name, bytes) = largest_transient(&m);
        let x = p as f64;
        block.push((x, attention_block(&m) as f64));
        peak.push((x, m.peak_bytes as f64));
        tp_scores.push((x, scores_per_layer(&t) as f64));
        tp_peak.push((x, t.peak_bytes as f64));
        rows.push(vec![
            p.to_string(),
            gib(attention_block(&m)),
            format!("{name}: {}", gib(bytes)),
            gib(m.transient_bytes(Phase::BwdAttention)),
            gib(m.peak_bytes),
            gib(scores_per_layer(&t)),
            gib(t.peak_bytes),
        ]);
        if let Some(f) = inp.inventory(&case.model, MethodId::Metp, p, seq, true) {
            flash_block.push((x, largest_transient(&f).1 as f64));
        }
        let mut w = inp.workload(&case.model, MethodId::Metp, p, seq, false);
        w.options.metp.head_groups = Some(2 * p);
        if let Ok(v) = w.validate() {
            grouped.push((x, attention_block(&inventory(&v)) as f64));
        }
    }
    let (s_block, s_peak, s_tp, s_tp_peak) = (
        slope_of(&block),
        slope_of(&peak),
        slope_of(&tp_scores),
        slope_of(&tp_peak),
    );
    let s_flash = slope_of(&flash_block);
    let s_grouped = slope_of(&grouped);
    let grouped_effect = if grouped.len() >= 2 {
        format!(
            "G head groups give blocks of b·(a/G)·(s/p)²; with G = 2p (p = {}…{}) the block \
             falls with {s_grouped:.2}",
            grouped[0].0,
            grouped[grouped.len() - 1].0
        )
    } else {
        "G head groups give blocks of b·(a/G)·(s/p)²; the model's heads allow G = 2p at fewer \
         than two of these degrees"
            .to_string()
    };
    let assumptions = vec![
        Assumption {
            name: "what 'memory cost' counts".into(),
            effect: format!(
                "on {model} at s = {seq}: the attention block falls with {s_block:.2}, the \
                 whole peak with {s_peak:.2}"
            ),
        },
        Assumption {
            name: "attention-probability dropout masks regenerated from the RNG state, not stored"
                .into(),
            effect: format!(
                "stored masks would take b·(s/p)·s·a bytes per layer on each device (exponent \
                 −1), as TP's stored scores do ({s_tp:.2})"
            ),
        },
        Assumption {
            name: "FlashAttention off".into(),
            effect: format!(
                "with it there is no s² memory; the largest transient is linear in s and falls \
                 with {s_flash:.2}"
            ),
        },
        Assumption {
            name: "one head group per device (G = p)".into(),
            effect: grouped_effect,
        },
    ];
    let plot = ClaimPlot {
        file: "c1-memory-vs-p".into(),
        title: format!(
            "C1: memory vs degree without FlashAttention ({model}, s = {})",
            super::super::tokens(seq)
        ),
        x_label: "degree p".into(),
        y_label: "bytes per device".into(),
        y_kind: "bytes".into(),
        x_kind: "plain".into(),
        x_log2: true,
        y_log: true,
        reference: None,
        series: vec![
            PlotSeries {
                name: format!("metp attention block (slope {s_block:.2})"),
                points: block,
            },
            PlotSeries {
                name: format!("metp peak (slope {s_peak:.2})"),
                points: peak,
            },
            PlotSeries {
                name: format!("tp scores per layer (slope {s_tp:.2})"),
                points: tp_scores,
            },
            PlotSeries {
                name: format!("tp peak (slope {s_tp_peak:.2})"),
                points: tp_peak,
            },
        ],
    };
    Ok((
        rows,
        vec![plot],
        Detail {
            caption: format!(
                "What the s² memory is made of: {model}, s = {seq}, b = 1, no FlashAttention, \
                 bytes per device"
            ),
            measured: vec![
                ("metp_attention_block_slope".into(), json!(s_block)),
                ("metp_peak_slope".into(), json!(s_peak)),
                ("tp_peak_slope".into(), json!(s_tp_peak)),
                (
                    "metp_largest_transient_slope_with_flash".into(),
                    json!(s_flash),
                ),
            ],
            assumptions,
        },
    ))
}
