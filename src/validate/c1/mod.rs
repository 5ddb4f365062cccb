//! C1: "the memory cost of METP without FlashAttention is O(1/p³)".
//!
//! What is measured: for each case (a model at a sequence length s, without FlashAttention),
//! the memory that grows as s² — the second difference `(M(4S) − 3·M(2S) + 2·M(S)) / 6` of what
//! a device holds in each phase (exact for `A + B·S + C·S²`, blind to which tensor carries the
//! S² term; the largest over the phases), at lengths long enough ([`S2_SEQ`]) that it dominates
//! every phase — and its log-log exponent over the degrees p where it is positive; beside it
//! the exponents of the whole peak and of the largest working set at the case's own s.
//!
//! Rule: a case is judged where the s² memory is positive at three degrees or more. The claim
//! holds as stated if the whole peak falls as p⁻³ (an exponent within [`CUBIC_TOLERANCE`] of
//! −3, or steeper) in every judged case; it holds under an assumption (that "memory cost" is
//! the memory growing as s², the part FlashAttention removes) if the s² memory does in every
//! judged case; it does not hold if the s² memory falls slower than p⁻³ in some judged case;
//! nothing judged is "not established".

use serde_json::json;

use super::{gib, loglog_slope, Assumption, Claim, ClaimPlot, PlotSeries, Table, Verdict};
use crate::config::{load_hardware, load_model, Hardware, MethodId, Model, Options, Workload};
use crate::error::Result;
use crate::memory::{inventory, Inventory, Kind, Phase};
use detail::detail;

mod detail;

/// A log-log exponent at most this far above −3 (or below it) is O(1/p³).
pub const CUBIC_TOLERANCE: f64 = 0.1;

/// Where the s² memory is measured: lengths S, 2S and 4S so long (S = 2^24 tokens) that in every
/// phase the working set that grows as s² outweighs everything that does not, so the second
/// difference is the s² coefficient of the whole device's memory (at the lengths of the cases
/// the phase that sets the peak, and the moment inside it, can change between s and 4s).
pub const S2_SEQ: u64 = 1 << 24;

/// Degrees a case needs with a positive s² memory to be judged.
pub const MIN_DEGREES: usize = 3;

/// The claim, as the abstract states it.
pub const CLAIM: &str =
    "Without FlashAttention, METP's memory cost is O(1/p³) in the parallel degree p.";

/// One model at one sequence length.
#[derive(Debug, Clone)]
pub struct Case {
    /// The model's file name in `models/` (how the report names it).
    pub model_id: String,
    /// The model.
    pub model: Model,
    /// Sequence length s (the second difference also evaluates 2s and 4s).
    pub seq: u64,
}

/// What C1 is checked on.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The cases, the first also for the detail table and the plot.
    pub cases: Vec<Case>,
    /// The hardware (nodes enough for the largest degree).
    pub hardware: Hardware,
    /// Degrees p, ascending (each case uses those its heads allow).
    pub degrees: Vec<u64>,
    /// The method whose memory is measured (METP; another shows what the rule says of it).
    pub method: MethodId,
}

impl Inputs {
    /// Korthikanti et al.'s 22B at s = 32k and 128k, LLaMA-2 7B at 32k and 128k and GPT-3 13B
    /// at 64k, on DGX-A100-80GB nodes, p = 2…64.
    pub fn bundled() -> Result<Inputs> {
        Inputs::on(&load_hardware("dgx-a100-80gb")?)
    }

    /// The bundled cases and degrees on `hw`, with nodes enough for the largest degree (an
    /// error when the profile cannot have that many).
    pub fn on(hw: &Hardware) -> Result<Inputs> {
        let degrees: Vec<u64> = vec![2, 4, 8, 16, 32, 64];
        let mut hardware = hw.clone();
        let largest = degrees.iter().copied().max().unwrap_or(1);
        hardware.set_nodes(largest.div_ceil(hardware.gpus_per_node.max(1)))?;
        let case = |id: &str, seq: u64| -> Result<Case> {
            Ok(Case {
                model_id: id.into(),
                model: load_model(id)?,
                seq,
            })
        };
        Ok(Inputs {
            cases: vec![
                case("korthikanti-22b", 131072)?,
                case("korthikanti-22b", 32768)?,
                case("llama2-7b", 131072)?,
                case("llama2-7b", 32768)?,
                case("gpt3-13b", 65536)?,
            ],
            hardware,
            degrees,
            method: MethodId::Metp,
        })
    }

    fn workload(&self, model: &Model, method: MethodId, p: u64, seq: u64, flash: bool) -> Workload {
        Workload {
            model: model.clone(),
            hardware: self.hardware.clone(),
            method,
            p,
            dp: 1,
            outer: crate::config::OuterAxes::default(),
            seq,
            micro_batch: 1,
            micro_batches: 1,
            options: Options {
                flash,
                ..Options::default()
            },
        }
    }

    /// The inventory, or `None` where the degree cannot split the model.
    fn inventory(
        &self,
        model: &Model,
        method: MethodId,
        p: u64,
        seq: u64,
        flash: bool,
    ) -> Option<Inventory> {
        let w = self
            .workload(model, method, p, seq, flash)
            .validate()
            .ok()?;
        Some(inventory(&w))
    }
}

/// Whether an exponent is O(1/p³).
fn cubic(e: f64) -> bool {
    e <= -3.0 + CUBIC_TOLERANCE
}

/// The verdict from the judged cases' exponents: (s² memory, whole peak) per case.
pub fn verdict(judged: &[(f64, f64)]) -> Verdict {
    if judged.is_empty() {
        Verdict::NotEstablished
    } else if judged.iter().all(|&(_, peak)| cubic(peak)) {
        Verdict::Holds
    } else if judged.iter().all(|&(quad, _)| cubic(quad)) {
        Verdict::HoldsUnderAssumptions
    } else {
        Verdict::DoesNotHold
    }
}

/// The previous round's rule, which read one case (the first: korthikanti-22b at s = 128k):
/// its whole peak's exponent within [`CUBIC_TOLERANCE`] of −3 → holds, its attention block's →
/// holds under assumptions, else does not hold.
pub fn previous_verdict(block: f64, peak: f64) -> Verdict {
    let near_cubic = |e: f64| (e + 3.0).abs() <= CUBIC_TOLERANCE;
    if near_cubic(peak) {
        Verdict::Holds
    } else if near_cubic(block) {
        Verdict::HoldsUnderAssumptions
    } else {
        Verdict::DoesNotHold
    }
}

/// What this round's rule changed, from the numbers (see [`super::Revision`]).
fn revision(
    first: Option<(&Case, &Measured)>,
    judged: usize,
    verdict: Verdict,
    label: &dyn Fn(&Case) -> String,
) -> Option<super::Revision> {
    let (case, m) = first?;
    let previous = previous_verdict(m.quad, m.peak);
    let read = format!(
        "it read one case, {} (s² memory {:.2}, whole peak {:.2})",
        label(case),
        m.quad,
        m.peak
    );
    let why = if previous == verdict {
        format!(
            "Unchanged: the previous rule gives '{}' too — {read}. This rule judges all {judged} \
             case(s) and measures the s² memory from what a device holds, not from the named \
             attention block, so any stored s² tensor (TP's scores fall as p⁻¹) now makes it \
             lose.",
            previous.words()
        )
    } else {
        format!(
            "The previous rule gives '{}': {read}; judged over all {judged} case(s), with the \
             s² memory measured from what a device holds, the verdict is '{}'.",
            previous.words(),
            verdict.words()
        )
    };
    Some(super::Revision {
        previous,
        previous_rule: format!(
            "one case: its whole peak falls as p⁻³ (an exponent within {CUBIC_TOLERANCE} of −3) \
             → holds; its unfused attention block does → holds under assumptions; else does \
             not hold"
        ),
        why,
    })
}

/// One case measured.
#[derive(Debug, Clone)]
struct Measured {
    /// (p, s² memory bytes, peak bytes, largest transient bytes) where the s² memory is
    /// positive.
    points: Vec<(u64, f64, f64, f64)>,
    /// Exponents of the s² memory, the peak and the largest transient (NaN when not judged).
    quad: f64,
    peak: f64,
    transient: f64,
}

impl Measured {
    fn judged(&self) -> bool {
        self.points.len() >= MIN_DEGREES
    }
}

fn slope_of(points: &[(f64, f64)]) -> f64 {
    let positive: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.1 > 0.0).collect();
    if positive.len() < 2 {
        f64::NAN
    } else {
        loglog_slope(&positive)
    }
}

/// The memory growing as s², from the inventories at S, 2S and 4S: in each phase, the second
/// difference (M(4S) − 3M(2S) + 2M(S))/6 of what the device holds then (stored activations and
/// that phase's working set; weights and reserved bytes cancel), exact for a quadratic in S;
/// the largest over the phases.
fn s2_memory(m1: &Inventory, m2: &Inventory, m4: &Inventory) -> f64 {
    Phase::ALL
        .iter()
        .map(|&ph| {
            let held = |i: &Inventory| (i.stored_bytes + i.transient_bytes(ph)) as f64;
            (held(m4) - 3.0 * held(m2) + 2.0 * held(m1)) / 6.0
        })
        .fold(f64::NEG_INFINITY, f64::max)
}

/// The s² memory and its exponent over the degrees, with the peak and largest working set at
/// the case's length, for `method`.
fn measure(inp: &Inputs, case: &Case, method: MethodId) -> Measured {
    let mut points = Vec::new();
    for &p in &inp.degrees {
        let at = |s: u64| inp.inventory(&case.model, method, p, s, false);
        let (Some(m1), Some(q1), Some(q2), Some(q4)) =
            (at(case.seq), at(S2_SEQ), at(2 * S2_SEQ), at(4 * S2_SEQ))
        else {
            continue;
        };
        let m = |i: &Inventory| i.peak_bytes as f64;
        let quad = s2_memory(&q1, &q2, &q4);
        if quad > 0.0 {
            points.push((p, quad, m(&m1), m1.transient_peak_bytes as f64));
        }
    }
    let series = |k: usize| -> Vec<(f64, f64)> {
        points
            .iter()
            .map(|pt| {
                let y = [pt.1, pt.2, pt.3][k];
                (pt.0 as f64, y)
            })
            .collect()
    };
    let judged = points.len() >= MIN_DEGREES;
    let e = |k| {
        if judged {
            slope_of(&series(k))
        } else {
            f64::NAN
        }
    };
    Measured {
        quad: e(0),
        peak: e(1),
        transient: e(2),
        points,
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

/// `a–b` of exponents.
fn range(v: &[f64]) -> String {
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    if v.is_empty() {
        "-".into()
    } else if (hi - lo).abs() < 0.005 {
        format!("{lo:.2}")
    } else {
        format!("{lo:.2} to {hi:.2}")
    }
}

/// Checks C1 on the bundled inputs.
pub fn check() -> Result<Claim> {
    check_with(&Inputs::bundled()?)
}

/// Checks C1 on `inp`.
pub fn check_with(inp: &Inputs) -> Result<Claim> {
    let method = inp.method;
    let measured: Vec<(&Case, Measured)> = inp
        .cases
        .iter()
        .map(|c| (c, measure(inp, c, method)))
        .collect();
    let judged: Vec<(&Case, &Measured)> = measured
        .iter()
        .filter(|(_, m)| m.judged())
        .map(|(c, m)| (*c, m))
        .collect();
    let verdict = verdict(
        &judged
            .iter()
            .map(|(_, m)| (m.quad, m.peak))
            .collect::<Vec<_>>(),
    );
    let label = |c: &Case| format!("{} at s = {}", c.model_id, super::tokens(c.seq));
    let quads: Vec<f64> = judged.iter().map(|(_, m)| m.quad).collect();
    let peaks: Vec<f64> = judged.iter().map(|(_, m)| m.peak).collect();
    let transients: Vec<f64> = judged.iter().map(|(_, m)| m.transient).collect();
    let not_judged: Vec<String> = measured
        .iter()
        .filter(|(_, m)| !m.judged())
        .map(|(c, _)| label(c))
        .collect();
    // TP's s² memory on the first case, for comparison: its scores are stored per layer.
    let tp = inp.cases.first().map(|c| measure(inp, c, MethodId::Tp));
    let tp_quad = tp.as_ref().map_or(f64::NAN, |m| m.quad);
    let (lo, hi) = (
        inp.degrees.first().copied().unwrap_or(0),
        inp.degrees.last().copied().unwrap_or(0),
    );
    let rule = format!(
        "a case (model, s) is judged where its s² memory — the largest over the phases of \
         (M(4S) − 3M(2S) + 2M(S))/6, M what a device holds in the phase, S = 2^24 tokens — is \
         positive at {MIN_DEGREES} or more degrees; the claim holds if the whole peak at s falls with a log-log exponent ≤ {:.1} in every judged case, holds under \
         assumptions if the s² memory does, does not hold if the s² memory falls slower in \
         some case; no judged case: not established",
        -3.0 + CUBIC_TOLERANCE
    );
    let slowest_quad = judged
        .iter()
        .max_by(|a, b| a.1.quad.total_cmp(&b.1.quad))
        .map(|(c, m)| (label(c), m.quad));
    let steepest_peak = judged
        .iter()
        .min_by(|a, b| a.1.peak.total_cmp(&b.1.peak))
        .map(|(c, m)| (label(c), m.peak));
    let who = match method {
        MethodId::Metp => "METP".to_string(),
        m => format!("{m} (in place of METP)"),
    };
    let conclusion = match verdict {
        Verdict::Holds => format!(
            "The whole per-device peak falls as p⁻³ too (exponents {}): here the s² block is \
             the memory.",
            range(&peaks)
        ),
        Verdict::HoldsUnderAssumptions => format!(
            "The whole per-device peak does not (exponents {}): weights, gradients, optimizer \
             state and stored activations fall as p⁻¹. So the O(1/p³) memory is what grows as \
             s² — the part that limits sequence length without FlashAttention — not the whole \
             memory.",
            range(&peaks)
        ),
        Verdict::DoesNotHold => format!(
            "{who}'s s² memory falls slower than p⁻³ in {} (exponent {:.2}).",
            slowest_quad.as_ref().map_or(String::new(), |x| x.0.clone()),
            slowest_quad.as_ref().map_or(f64::NAN, |x| x.1)
        ),
        Verdict::NotEstablished | Verdict::NotChecked => format!(
            "No case has memory growing as s² at {MIN_DEGREES} degrees or more (none is \
             judged), so the claim is not established either way."
        ),
    };
    let basis = format!(
        "s² memory exponent {} in {} judged case(s) of {}; whole peak {}",
        range(&quads),
        judged.len(),
        measured.len(),
        range(&peaks)
    );
    let would_flip = match verdict {
        Verdict::Holds => format!(
            "the whole peak falls as p⁻³ in every case; a case whose weights or stored \
             activations set the peak (exponent near −1) would leave it to the s² memory \
             (now {})",
            range(&quads)
        ),
        Verdict::HoldsUnderAssumptions => format!(
            "'holds' if the s² block set the whole peak (the steepest peak exponent is {}); \
             'does not hold' if any tensor growing as s² fell slower than p⁻³ — as TP's stored \
             scores do ({tp_quad:.2}) and METP's attention-probability dropout masks would if \
             they were stored (b·(s/p)·s·a: −1)",
            steepest_peak
                .as_ref()
                .map_or("-".into(), |x| format!("{:.2} on {}", x.1, x.0))
        ),
        Verdict::DoesNotHold => format!(
            "'holds under assumptions' only if every case's s² memory fell as p⁻³ (the slowest \
             is {})",
            slowest_quad
                .as_ref()
                .map_or("-".into(), |x| format!("{:.2} on {}", x.1, x.0))
        ),
        Verdict::NotEstablished | Verdict::NotChecked => {
            "a case with memory growing as s² (longer sequences, FlashAttention off) would be \
             judged"
                .into()
        }
    };
    let skipped = if not_judged.is_empty() {
        String::new()
    } else {
        format!(
            " Not judged (no s² memory at {MIN_DEGREES} degrees): {}.",
            not_judged.join(", ")
        )
    };
    let summary = format!(
        "Without FlashAttention, for {} case(s) of {} (p = {lo}…{hi} where the heads divide), \
         the memory that grows as s² — measured from what a device holds in each phase, M, as \
         (M(4S) − 3M(2S) + 2M(S))/6 at S = 2^24 tokens, whichever tensor carries it — falls \
         with log-log exponent {} (−3 is O(1/p³)); at the cases' own lengths the largest \
         working set falls with {} (the s² block sets it only up to some degree, weight \
         buffers beyond) and the whole peak with {}. TP's s² \
         memory (its stored attention scores) falls with {tp_quad:.2}. {conclusion}{skipped}",
        judged.len(),
        who,
        range(&quads),
        range(&transients),
        range(&peaks),
    );
    // The detail of the first case: what the s² memory is made of.
    let (rows, plot_series, detail) = detail(inp)?;
    let case_rows: Vec<Vec<String>> = measured
        .iter()
        .map(|(c, m)| {
            let f = |e: f64| {
                if e.is_nan() {
                    "-".to_string()
                } else {
                    format!("{e:.2}")
                }
            };
            vec![
                c.model_id.clone(),
                c.seq.to_string(),
                m.points
                    .iter()
                    .map(|p| p.0.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                f(m.quad),
                f(m.peak),
                f(m.transient),
                if !m.judged() {
                    "not judged".into()
                } else if cubic(m.quad) {
                    "O(1/p³)".into()
                } else {
                    "slower".into()
                },
            ]
        })
        .collect();
    let mut measured_json = serde_json::Map::new();
    for (c, m) in &measured {
        measured_json.insert(
            format!("{} s={}", c.model_id, c.seq),
            json!({
                "degrees": m.points.iter().map(|p| p.0).collect::<Vec<_>>(),
                "s2_memory_exponent": if m.judged() { Some(m.quad) } else { None },
                "peak_exponent": if m.judged() { Some(m.peak) } else { None },
                "largest_transient_exponent": if m.judged() { Some(m.transient) } else { None },
            }),
        );
    }
    measured_json.insert("method".into(), json!(method.id()));
    measured_json.insert("cases_judged".into(), json!(judged.len()));
    measured_json.insert("tp_s2_memory_exponent".into(), json!(tp_quad));
    for (k, v) in detail.measured {
        measured_json.insert(k, v);
    }
    Ok(Claim {
        id: "C1",
        claim: CLAIM.into(),
        verdict,
        rule,
        basis,
        would_flip,
        revision: revision(
            measured.first().map(|(c, m)| (*c, m)),
            judged.len(),
            verdict,
            &label,
        ),
        summary,
        measured: serde_json::Value::Object(measured_json),
        assumptions: detail.assumptions,
        tables: vec![
            Table {
                caption: format!(
                    "{who}'s memory exponents by case, no FlashAttention (degrees where the s² \
                     memory is positive)"
                ),
                header: vec![
                    "model".into(),
                    "s".into(),
                    "degrees".into(),
                    "s² memory".into(),
                    "whole peak".into(),
                    "largest transient".into(),
                    "s² memory is".into(),
                ],
                rows: case_rows,
            },
            Table {
                caption: detail.caption,
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
            },
        ],
        plots: plot_series,
    })
}

#[cfg(test)]
mod tests;
