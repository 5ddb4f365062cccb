//! C1: "the memory cost of METP without FlashAttention is O(1/p³)".
//!
//! Verdict: the whole per-device peak falling as 1/p³ (a log-log slope within
//! [`CUBIC_TOLERANCE`] of −3) is `holds`; only the unfused attention block doing so is `holds
//! under assumptions` (what "memory cost" counts); neither is `does not hold`.

use serde_json::json;

use super::{gib, loglog_slope, Assumption, Claim, ClaimPlot, PlotSeries, Table, Verdict};
use crate::config::{load_hardware, load_model, Hardware, MethodId, Model, Options, Workload};
use crate::error::Result;
use crate::memory::{inventory, Inventory, Kind, Phase};

/// A log-log slope in p within this of −3 is O(1/p³).
pub const CUBIC_TOLERANCE: f64 = 0.05;

/// The claim, as the abstract states it.
pub const CLAIM: &str =
    "Without FlashAttention, METP's memory cost is O(1/p³) in the parallel degree p.";

/// What C1 is checked on.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The model's file name in `models/` (how the report names it).
    pub model_id: String,
    /// The model (Korthikanti et al.'s 22B: large enough that the quadratic block matters).
    pub model: Model,
    /// The hardware (nodes enough for the largest degree).
    pub hardware: Hardware,
    /// Sequence length.
    pub seq: u64,
    /// Degrees p, ascending.
    pub degrees: Vec<u64>,
}

impl Inputs {
    /// Korthikanti et al.'s 22B model at s = 128k on DGX-A100-80GB nodes, p = 2…64.
    pub fn bundled() -> Result<Inputs> {
        Inputs::on(&load_hardware("dgx-a100-80gb")?)
    }

    /// The bundled model, length and degrees on `hw`, with nodes enough for the largest degree
    /// (an error when the profile cannot have that many).
    pub fn on(hw: &Hardware) -> Result<Inputs> {
        let degrees: Vec<u64> = vec![2, 4, 8, 16, 32, 64];
        let mut hardware = hw.clone();
        let largest = degrees.iter().copied().max().unwrap_or(1);
        hardware.set_nodes(largest.div_ceil(hardware.gpus_per_node.max(1)))?;
        Ok(Inputs {
            model_id: "korthikanti-22b".into(),
            model: load_model("korthikanti-22b")?,
            hardware,
            seq: 131072,
            degrees,
        })
    }

    fn inventory(&self, method: MethodId, p: u64, options: Options) -> Result<Inventory> {
        let w = Workload {
            model: self.model.clone(),
            hardware: self.hardware.clone(),
            method,
            p,
            dp: 1,
            outer: crate::config::OuterAxes::default(),
            seq: self.seq,
            micro_batch: 1,
            micro_batches: 1,
            options,
        };
        Ok(inventory(&w.validate()?))
    }
}

/// The verdict from the slopes of the attention block and of the whole peak.
pub fn verdict(block_slope: f64, peak_slope: f64) -> Verdict {
    let cubic = |s: f64| (s + 3.0).abs() <= CUBIC_TOLERANCE;
    if cubic(peak_slope) {
        Verdict::Holds
    } else if cubic(block_slope) {
        Verdict::HoldsUnderAssumptions
    } else {
        Verdict::DoesNotHold
    }
}

fn largest_transient(inv: &Inventory) -> (String, u128) {
    inv.tensors
        .iter()
        .filter(|t| t.kind == Kind::Transient)
        .max_by_key(|t| t.bytes())
        .map(|t| (t.name.to_string(), t.bytes()))
        .unwrap_or_default()
}

/// Bytes of the transient named `name` (0 if absent).
fn transient(inv: &Inventory, name: &str) -> u128 {
    inv.tensors
        .iter()
        .filter(|t| t.kind == Kind::Transient && t.name == name)
        .map(|t| t.bytes())
        .sum()
}

/// The largest tensor of the unfused attention block (b·(a/p)·(s/p)² elements).
fn attention_block(inv: &Inventory) -> u128 {
    inv.tensors
        .iter()
        .filter(|t| t.kind == Kind::Transient && t.name.starts_with("attn.block_"))
        .map(|t| t.bytes())
        .max()
        .unwrap_or(0)
}

fn scores_per_layer(inv: &Inventory) -> u128 {
    inv.tensors
        .iter()
        .filter(|t| t.kind == Kind::Stored && t.name.starts_with("attn.softmax"))
        .map(|t| t.bytes_each)
        .sum()
}

fn slope_of(points: &[(f64, f64)]) -> f64 {
    let positive: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.1 > 0.0).collect();
    if positive.len() < 2 {
        f64::NAN
    } else {
        loglog_slope(&positive)
    }
}

/// Checks C1 on the bundled inputs.
pub fn check() -> Result<Claim> {
    check_with(&Inputs::bundled()?)
}

/// Checks C1 on `inp`.
pub fn check_with(inp: &Inputs) -> Result<Claim> {
    let model = &inp.model_id;
    let seq = inp.seq;
    let no_flash = Options {
        flash: false,
        ..Options::default()
    };
    let mut rows = Vec::new();
    let mut metp_invs = Vec::new();
    let (mut block, mut largest, mut working, mut peak, mut tp_scores, mut tp_peak) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut statics, mut stored) = (vec![], vec![]);
    for &p in &inp.degrees {
        let m = inp.inventory(MethodId::Metp, p, no_flash)?;
        let t = inp.inventory(MethodId::Tp, p, no_flash)?;
        let (name, bytes) = largest_transient(&m);
        let x = p as f64;
        block.push((x, attention_block(&m) as f64));
        largest.push((x, bytes as f64));
        working.push((x, m.transient_bytes(Phase::BwdAttention) as f64));
        peak.push((x, m.peak_bytes as f64));
        statics.push((x, m.static_bytes as f64));
        stored.push((x, m.stored_bytes as f64));
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
        metp_invs.push((p, m));
    }
    let s_block = slope_of(&block);
    let s_largest = slope_of(&largest);
    let s_working = slope_of(&working);
    let s_peak = slope_of(&peak);
    let s_static = slope_of(&statics);
    let s_stored = slope_of(&stored);
    let s_tp = slope_of(&tp_scores);
    let s_tp_peak = slope_of(&tp_peak);
    let verdict = verdict(s_block, s_peak);
    let (lo, hi) = (
        inp.degrees.first().copied().unwrap_or(0),
        inp.degrees.last().copied().unwrap_or(0),
    );
    // Up to which degree the block is the largest transient, and what takes over beyond.
    let up_to = block
        .iter()
        .zip(&largest)
        .filter(|(b, l)| b.1 > 0.0 && b.1 >= l.1)
        .map(|(b, _)| b.0 as u64)
        .max()
        .unwrap_or(0);
    let takes_over = metp_invs
        .iter()
        .find(|(p, _)| *p > up_to)
        .map(|(_, m)| largest_transient(m).0);
    let largest_sentence = match (&takes_over, up_to) {
        (None, _) => "It is the largest transient at every degree.".to_string(),
        (Some(name), 0) => format!("It is never the largest transient ({name} is)."),
        (Some(name), _) => {
            let pts: Vec<(f64, f64)> = metp_invs
                .iter()
                .map(|(p, m)| (*p as f64, transient(m, name) as f64))
                .collect();
            format!(
                "It is the largest transient up to p = {up_to}; beyond, {name} (slope {:.2}) \
                 takes over.",
                slope_of(&pts)
            )
        }
    };
    let conclusion = match verdict {
        Verdict::Holds => format!(
            "The per-device peak of METP falls with {s_peak:.2} as well: the whole memory is \
             O(1/p³) here."
        ),
        Verdict::HoldsUnderAssumptions => format!(
            "The per-device peak of METP, however, falls only as {s_peak:.2}: weights, \
             gradients and optimizer state fall with {s_static:.2} and the stored activations \
             with {s_stored:.2}. So the O(1/p³) term is the quadratic attention working set — \
             the part that limits sequence length without FlashAttention — not the whole memory."
        ),
        // (`verdict` never gives NotChecked.)
        Verdict::DoesNotHold | Verdict::NotChecked => format!(
            "Neither the attention block nor the per-device peak ({s_peak:.2}) falls as \
             O(1/p³) here."
        ),
    };
    let summary = format!(
        "For {model} at s = {seq} without FlashAttention, METP's unfused attention block holds \
         b·(a/p)·(s/p)² elements; across p = {lo}…{hi} its bytes fall with a log-log slope of \
         {s_block:.2} (−3 is O(1/p³)). {largest_sentence} The largest transient overall falls \
         with {s_largest:.2} and the whole backward-attention working set with {s_working:.2}. \
         TP stores its attention scores for every layer and they fall as {s_tp:.2}. \
         {conclusion}"
    );
    // With FlashAttention the quadratic block disappears.
    let mut flash_block = Vec::new();
    for &p in &inp.degrees {
        let m = inp.inventory(MethodId::Metp, p, Options::default())?;
        flash_block.push((p as f64, largest_transient(&m).1 as f64));
    }
    let s_flash = slope_of(&flash_block);
    // Dropout masks of the attention probabilities, were METP to store them: one byte per
    // score of its rows, b·(s/p)·s·a per layer.
    let mask_points: Vec<(f64, f64)> = inp
        .degrees
        .iter()
        .map(|&p| {
            let (s, a) = (seq as f64, inp.model.heads as f64);
            (p as f64, (s / p as f64) * s * a)
        })
        .collect();
    let s_mask = slope_of(&mask_points);
    // Two head groups per device: blocks of b·(a/G)·(s/p)², G = 2p, where the heads allow.
    let mut grouped = Vec::new();
    for &p in &inp.degrees {
        let mut o = no_flash;
        o.metp.head_groups = Some(2 * p);
        if let Ok(m) = inp.inventory(MethodId::Metp, p, o) {
            grouped.push((p as f64, attention_block(&m) as f64));
        }
    }
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
    Ok(Claim {
        id: "C1",
        claim: CLAIM.into(),
        verdict,
        summary,
        measured: json!({
            "model": model,
            "seq": seq,
            "degrees": inp.degrees,
            "metp_attention_block_slope": s_block,
            "metp_largest_transient_slope": s_largest,
            "metp_attention_working_set_slope": s_working,
            "metp_peak_slope": s_peak,
            "tp_score_memory_slope": s_tp,
            "tp_peak_slope": s_tp_peak,
            "metp_largest_transient_slope_with_flash": s_flash,
        }),
        assumptions: vec![
            Assumption {
                name: "what 'memory cost' counts".into(),
                effect: format!(
                    "the attention block: slope {s_block:.2}; the largest transient: {s_largest:.2}; the per-device peak: {s_peak:.2}"
                ),
            },
            Assumption {
                name: "attention-probability dropout masks regenerated from the RNG state, not stored".into(),
                effect: format!(
                    "stored masks would take b·(s/p)·s·a bytes per layer on each device (slope {s_mask:.2}), as TP's stored scores do ({s_tp:.2})"
                ),
            },
            Assumption {
                name: "FlashAttention off".into(),
                effect: format!(
                    "with it there is no quadratic block; the largest transient is linear in s and falls with slope {s_flash:.2}"
                ),
            },
            Assumption {
                name: "one head group per device (G = p)".into(),
                effect: grouped_effect,
            },
        ],
        tables: vec![Table {
            caption: format!("{model}, s = {seq}, b = 1, no FlashAttention, bytes per device"),
            header: vec![
                "p".into(),
                "METP attention block".into(),
                "METP largest transient".into(),
                "METP bwd-attention working set".into(),
                "METP peak".into(),
                "TP stored scores per layer".into(),
                "TP peak".into(),
            ],
            rows,
        }],
        plots: vec![ClaimPlot {
            file: "c1-memory-vs-p".into(),
            title: format!(
                "C1: memory vs degree without FlashAttention ({model}, s = {})",
                super::tokens(seq)
            ),
            x_label: "degree p".into(),
            y_label: "bytes per device".into(),
            y_kind: "bytes".into(),
            x_kind: "plain".into(),
            x_log2: true,
            y_log: true,
            reference: None,
            series: vec![
                PlotSeries { name: format!("metp attention block (slope {s_block:.2})"), points: block },
                PlotSeries { name: format!("metp peak (slope {s_peak:.2})"), points: peak },
                PlotSeries { name: format!("tp scores per layer (slope {s_tp:.2})"), points: tp_scores },
                PlotSeries { name: format!("tp peak (slope {s_tp_peak:.2})"), points: tp_peak },
            ],
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_follows_the_slopes() {
        assert_eq!(verdict(-3.0, -3.02), Verdict::Holds);
        assert_eq!(verdict(-3.0, -1.15), Verdict::HoldsUnderAssumptions);
        assert_eq!(verdict(-2.0, -1.15), Verdict::DoesNotHold);
    }

    /// A changed input changes the prose: over p = 2…8 the block is the largest transient at
    /// every degree, over 2…64 only up to p = 16.
    #[test]
    fn a_shorter_range_of_degrees_changes_the_prose() {
        let mut inp = Inputs::bundled().unwrap();
        let full = check_with(&inp).unwrap();
        inp.degrees = vec![2, 4, 8];
        let short = check_with(&inp).unwrap();
        assert!(full.summary.contains("p = 2…64") && short.summary.contains("p = 2…8"));
        assert!(
            short.summary.contains("at every degree"),
            "{}",
            short.summary
        );
        assert!(full.summary.contains("up to p = 16"), "{}", full.summary);
    }

    /// A changed input changes the verdict: a one-layer model with h = 256 and a small
    /// vocabulary at s = 2^20 is all attention block — at p = 2 one block of scores is
    /// 2·(a/p)·(s/p)² = 2·8·2^38 B = 4 TiB against about 1 GiB of everything else but the
    /// reserved bytes — so the whole peak falls as 1/p³ between p = 2 and 4.
    #[test]
    fn a_model_that_is_all_attention_block_holds_whole() {
        let mut inp = Inputs::bundled().unwrap();
        let m = &mut inp.model;
        (
            m.layers,
            m.hidden,
            m.heads,
            m.kv_heads,
            m.ffn_hidden,
            m.vocab,
        ) = (1, 256, 16, 16, 1024, 1024);
        inp.seq = 1 << 20;
        inp.degrees = vec![2, 4];
        let c = check_with(&inp).unwrap();
        assert_eq!(c.verdict, Verdict::Holds, "{}", c.summary);
        assert!(c.summary.contains("the whole memory is O(1/p³) here"));
        assert_eq!(check().unwrap().verdict, Verdict::HoldsUnderAssumptions);
    }
}
