//! C3: "a theoretical condition for full overlap of computation and communication".
//!
//! The claim is existential: there is a condition above which METP hides its communication.
//! What is measured: METP's rings simulated (one layer, p devices) over local lengths s/p, on
//! every profile, with the profile's kernels and with ideal ones; the grid is extended until two
//! lengths lie at least twice above the solved thresholds. Full overlap is *reached* on a study
//! when, from some length on, every longer length simulated (at least [`REACHED_POINTS`] of
//! them) exposes less than [`HIDDEN_SHARE`] of the forward attention, forward MLP and backward
//! attention rings — so no single grid point decides.
//!
//! Verdict: full overlap reached in every study → holds; in some → holds under assumptions
//! (those that fail are named); in none → does not hold; no study with lengths enough to judge
//! → not established. Where the closed form puts the condition is a separate finding: its
//! agreement with the simulator is counted point by point ([`JUDGED_MARGIN`]) and reported,
//! never the verdict.

use serde_json::json;

use super::overlap::{idealise, study, Study, HIDDEN_SHARE, JUDGED_MARGIN};
use super::{pct, Assumption, Claim, ClaimPlot, PlotSeries, Table, Verdict};
use crate::analytic;
use crate::config::{load_hardware, load_model, Hardware, MethodId, Model, Options, Workload};
use crate::error::Result;
use crate::evaluate::{Evaluation, SimulateOptions};
use crate::sim::LinkModel;
#[cfg(test)]
use revision::previous_verdict;
use revision::{disagreements, revision};

mod revision;

/// The claim, as the abstract states it.
pub const CLAIM: &str =
    "There is a theoretical condition under which METP fully overlaps computation and communication.";

/// What C3 is checked on.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The model.
    pub model: Model,
    /// The hardware profiles (the first also for the one-buffer and causal runs).
    pub profiles: Vec<Hardware>,
    /// Degree.
    pub p: u64,
    /// Local lengths s/p simulated, ascending.
    pub local_seqs: Vec<u64>,
    /// The local length of the causal runs.
    pub causal_local_seq: u64,
    /// METP's options in every study (the one-buffer and causal runs change one knob each).
    pub options: Options,
}

impl Inputs {
    /// METP on LLaMA-2 7B at p = 8, s/p = 128…8192 (longer where a profile's thresholds lie
    /// beyond), on DGX-A100 and DGX-H100 (NVSwitch), 8×MI300X (an xGMI full mesh: a ring hop
    /// has one link) and GB200 NVL72 (NVLink 5).
    pub fn bundled() -> Result<Inputs> {
        Ok(Inputs {
            model: load_model("llama2-7b")?,
            profiles: vec![
                load_hardware("dgx-a100-80gb")?,
                load_hardware("dgx-h100")?,
                load_hardware("mi300x-8")?,
                load_hardware("gb200-nvl72")?,
            ],
            p: 8,
            local_seqs: vec![128, 256, 512, 1024, 2048, 4096, 8192],
            causal_local_seq: 8192,
            options: Options::default(),
        })
    }

    /// The local lengths simulated for `base`: `local_seqs`, doubled on until the longest is
    /// at least [`ABOVE`] × 2 times both solved thresholds (so that at least two lengths lie
    /// [`ABOVE`] times above them), so that a fabric whose rings need longer blocks is checked
    /// on both sides of its condition.
    fn local_seqs_for(&self, base: &Workload) -> Vec<u64> {
        let solved = analytic::solve_thresholds(base);
        let need = solved
            .attention_local_seq
            .max(solved.mlp_local_seq.div_ceil(base.micro_batch.max(1)));
        let mut seqs = self.local_seqs.clone();
        // Bounded: at most 10 doublings past the given list (s/p × 1024).
        for _ in 0..10 {
            match seqs.last() {
                Some(&last) if (last as f64) < 2.0 * ABOVE * need as f64 => seqs.push(last * 2),
                _ => break,
            }
        }
        seqs
    }

    fn base(&self, hw: &Hardware, options: Options, ideal: bool) -> Workload {
        let mut w = Workload {
            model: self.model.clone(),
            hardware: hw.clone(),
            method: MethodId::Metp,
            p: self.p,
            dp: 1,
            outer: crate::config::OuterAxes::default(),
            seq: self.p * 1024,
            micro_batch: 1,
            micro_batches: 1,
            options,
        };
        if ideal {
            idealise(&mut w);
        }
        w
    }
}

/// Lengths from which every longer one must hide its rings for full overlap to count as
/// reached.
pub const REACHED_POINTS: usize = 2;

/// How far above the solved thresholds the grid reaches (at least [`REACHED_POINTS`] lengths).
pub const ABOVE: f64 = 2.0;

/// The verdict from the studies: for each one judged, whether full overlap was reached.
pub fn verdict(reached: &[bool]) -> Verdict {
    if reached.is_empty() {
        Verdict::NotEstablished
    } else if reached.iter().all(|&r| r) {
        Verdict::Holds
    } else if reached.iter().any(|&r| r) {
        Verdict::HoldsUnderAssumptions
    } else {
        Verdict::DoesNotHold
    }
}

/// Whether every ring of a row hides its transfers.
fn hidden(r: &super::overlap::Row) -> bool {
    r.attention_ring_exposed_share < HIDDEN_SHARE
        && r.mlp_ring_exposed_share < HIDDEN_SHARE
        && r.attention_bwd_ring_exposed_share < HIDDEN_SHARE
}

/// The local length from which every longer one simulated hides every ring, when at least
/// [`REACHED_POINTS`] lengths do; `None` when full overlap is not reached on the grid.
pub fn full_overlap_from(s: &Study) -> Option<u64> {
    let suffix = s.rows.iter().rev().take_while(|r| hidden(r)).count();
    (suffix >= REACHED_POINTS).then(|| s.rows[s.rows.len() - suffix].local_seq)
}

/// Whether a study has lengths enough to judge.
fn is_judged(s: &Study) -> bool {
    s.rows.len() >= REACHED_POINTS
}

/// Largest exposed share of the attention ring at local lengths well above its threshold
/// (`None` when no length simulated is).
fn above_exposure(s: &Study) -> Option<f64> {
    s.rows
        .iter()
        .filter(|r| r.local_seq as f64 >= JUDGED_MARGIN * s.attention_threshold as f64)
        .map(|r| r.attention_ring_exposed_share)
        .reduce(f64::max)
}

/// The smallest local length from which a ring's exposed share stays below
/// [`HIDDEN_SHARE`], if any.
fn hidden_from(s: &Study, share: impl Fn(&super::overlap::Row) -> f64) -> Option<u64> {
    let mut from = None;
    for r in s.rows.iter().rev() {
        if share(r) < HIDDEN_SHARE {
            from = Some(r.local_seq);
        } else {
            break;
        }
    }
    from
}

fn us(s: f64) -> String {
    format!("{:.1} µs", s * 1e6)
}

/// Checks C3 on the bundled inputs.
pub fn check() -> Result<Claim> {
    check_with(&Inputs::bundled()?)
}

/// Checks C3 on `inp`.
pub fn check_with(inp: &Inputs) -> Result<Claim> {
    // Profiles without a node of p GPUs are left out, each with its reason.
    let (profiles, skipped) = super::one_node_of(&inp.profiles, inp.p);
    if profiles.is_empty() {
        return Ok(Claim::not_checked("C3", CLAIM, &skipped));
    }
    let (skipped_sentence, skipped_measured) = super::left_out(&skipped);
    let inp = &Inputs {
        profiles,
        ..inp.clone()
    };
    let mut tables = Vec::new();
    let mut measured = serde_json::Map::new();
    let mut plot_series = Vec::new();
    let (mut total_disagree, mut judged) = (0, 0);
    let (mut real, mut ideal_studies) = (Vec::new(), Vec::new());
    let mut hi_all = 0;
    let (mut unshared_agree, mut disagreeing) = (0, Vec::new());
    // (study, judged, full overlap from) for the verdict.
    let mut overlaps: Vec<(String, bool, Option<u64>)> = Vec::new();
    for hw in &inp.profiles {
        for ideal in [true, false] {
            let base = inp.base(hw, inp.options, ideal);
            let seqs = inp.local_seqs_for(&base);
            hi_all = hi_all.max(seqs.last().copied().unwrap_or(0));
            let st = study(&base, &seqs, LinkModel::MaxMin)?;
            total_disagree += disagreements(&st);
            judged += st.rows.iter().filter(|r| r.agrees.is_some()).count();
            // A disagreement is rerun with links that are never shared: the condition prices
            // the ring's transfer alone on its link, the max-min simulation also runs the
            // step's other traffic over the same ports.
            let wrong: Vec<u64> = st
                .rows
                .iter()
                .filter(|r| r.agrees == Some(false))
                .map(|r| r.local_seq)
                .collect();
            if !wrong.is_empty() {
                let alone = study(&base, &wrong, LinkModel::Ideal)?;
                unshared_agree += alone.rows.iter().filter(|r| r.agrees == Some(true)).count();
                for r in &st.rows {
                    if r.agrees == Some(false) {
                        disagreeing.push(format!(
                            "s/p = {} on {}{} ({} of the attention ring exposed)",
                            r.local_seq,
                            hw.name,
                            if ideal { " with ideal kernels" } else { "" },
                            pct(r.attention_ring_exposed_share.max(r.mlp_ring_exposed_share))
                        ));
                    }
                }
            }
            let label = format!("{}{}", hw.name, if ideal { ", ideal kernels" } else { "" });
            let from = full_overlap_from(&st);
            overlaps.push((label.clone(), is_judged(&st), from));
            measured.insert(
                label.clone(),
                json!({
                    "f_over_b": st.closed_form.f_over_b,
                    "closed_form_attention_local_seq": st.closed_form.attention_local_seq,
                    "closed_form_mlp_local_seq": st.closed_form.mlp_local_seq,
                    "solved_attention_local_seq": st.solved.attention_local_seq,
                    "solved_mlp_local_seq": st.solved.mlp_local_seq,
                    "disagreements": disagreements(&st),
                    "full_overlap_from_local_seq": from,
                }),
            );
            tables.push(Table {
                caption: format!(
                    "{label}: thresholds attention s/p ≥ {}, MLP s/p ≥ {} (closed form: {:.0} and {:.0}; F/B = {:.0})",
                    st.attention_threshold,
                    st.solved.mlp_local_seq,
                    st.closed_form.attention_local_seq,
                    st.closed_form.mlp_local_seq,
                    st.closed_form.f_over_b
                ),
                header: vec!["s/p".into(), "attention holds".into(), "attention ring exposed".into(), "MLP holds".into(), "MLP ring exposed".into(), "bwd attention ring exposed".into(), "all rings hidden".into(), "closed form agrees".into()],
                rows: st
                    .rows
                    .iter()
                    .map(|r| {
                        vec![
                            r.local_seq.to_string(),
                            if r.condition_holds { "yes" } else { "no" }.into(),
                            pct(r.attention_ring_exposed_share),
                            if r.mlp_condition_holds { "yes" } else { "no" }.into(),
                            pct(r.mlp_ring_exposed_share),
                            pct(r.attention_bwd_ring_exposed_share),
                            match (hidden(r), from) {
                                (true, Some(f)) if r.local_seq >= f => "yes (full overlap)",
                                (true, _) => "yes",
                                (false, _) => "no",
                            }
                            .into(),
                            match r.agrees {
                                Some(true) => "yes",
                                Some(false) => "NO",
                                None => "near threshold",
                            }
                            .into(),
                        ]
                    })
                    .collect(),
            });
            if ideal {
                plot_series.push(PlotSeries {
                    name: format!("{} attention ring", hw.name),
                    points: st
                        .rows
                        .iter()
                        .map(|r| (r.local_seq as f64, 100.0 * r.attention_ring_exposed_share))
                        .collect(),
                });
                plot_series.push(PlotSeries {
                    name: format!("{} MLP ring", hw.name),
                    points: st
                        .rows
                        .iter()
                        .map(|r| (r.local_seq as f64, 100.0 * r.mlp_ring_exposed_share))
                        .collect(),
                });
                ideal_studies.push((hw, st));
            } else {
                real.push((hw, st));
            }
        }
    }
    let first = &inp.profiles[0];
    // Assumptions that flip the condition: one receive buffer, causal masking.
    let mut one = inp.options;
    one.metp.recv_buffers = 1;
    // Lengths past the threshold as for the two-buffer studies (on profiles whose threshold
    // lies within the given lengths, these are the given lengths).
    let single_base = inp.base(first, one, true);
    let single = study(
        &single_base,
        &inp.local_seqs_for(&single_base),
        LinkModel::MaxMin,
    )?;
    let single_exposure = above_exposure(&single);
    let single_from = full_overlap_from(&single);
    let causal_run = |zigzag: bool| -> Result<(f64, f64, f64)> {
        let mut w = inp.base(
            first,
            Options {
                causal: true,
                causal_zigzag: zigzag,
                ..inp.options
            },
            true,
        );
        w.model.layers = 1;
        w.seq = inp.p * inp.causal_local_seq;
        let e =
            Evaluation::new(w.validate()?).simulate(SimulateOptions::full(LinkModel::MaxMin))?;
        let Some(r) = e.simulation.and_then(|s| s.run) else {
            unreachable!("a one-layer model is simulated whole")
        };
        let busy: Vec<f64> = r.result.devices.iter().map(|d| d.compute_busy_s).collect();
        let (lo, hi) = busy
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
        Ok((r.result.step_time_s, lo / hi, r.result.max_exposed_comm_s()))
    };
    let (t_zig, bal_zig, _) = causal_run(true)?;
    let (t_contig, bal_contig, exp_contig) = causal_run(false)?;
    let contig_penalty = t_contig / t_zig - 1.0;
    let verdict = verdict(
        &overlaps
            .iter()
            .filter(|o| o.1)
            .map(|o| o.2.is_some())
            .collect::<Vec<_>>(),
    );
    // Every number below comes from the studies above.
    let (lo, hi) = (inp.local_seqs.first().copied().unwrap_or(0), hi_all);
    let names: Vec<String> = inp.profiles.iter().map(|h| h.name.to_uppercase()).collect();
    let profiles = match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    };
    let closed = analytic::thresholds(&inp.base(first, inp.options, false));
    let zigzag_ratio = closed.attention_causal_zigzag_local_seq / closed.attention_local_seq;
    let agreement = if judged == 0 {
        "judges none of the points (every one is near a threshold)".to_string()
    } else if total_disagree == 0 {
        format!("agrees at all {judged} points judged")
    } else {
        format!(
            "agrees at {} of the {judged} points judged (not at {}; with links that no other \
             transfer shares, {unshared_agree} of {total_disagree} agree — the closed form \
             prices a ring's transfer alone on its link)",
            judged - total_disagree,
            disagreeing.join("; ")
        )
    };
    let agreement_short = format!(
        "agrees at {} of {judged} points judged",
        judged - total_disagree
    );
    let reached: Vec<String> = overlaps
        .iter()
        .filter_map(|(l, j, f)| f.filter(|_| *j).map(|f| format!("{l} from s/p = {f}")))
        .collect();
    let not_reached: Vec<String> = overlaps
        .iter()
        .filter(|(_, j, f)| *j && f.is_none())
        .map(|(l, _, _)| l.clone())
        .collect();
    let n_judged = overlaps.iter().filter(|o| o.1).count();
    let rule = format!(
        "full overlap is reached on a study (a profile, with its kernels or ideal ones) when \
         from some s/p on every longer length simulated — at least {REACHED_POINTS}, the grid \
         reaching {ABOVE}× past the solved thresholds — exposes less than {} of each ring \
         (forward attention, forward MLP, backward attention); reached on every study → holds, \
         on some → holds under assumptions, on none → does not hold, no study judged → not \
         established; the closed form's point-by-point agreement is a finding, not the verdict",
        pct(HIDDEN_SHARE)
    );
    let single_words = match single_from {
        Some(f) => {
            format!("with one receive buffer full overlap is still reached (from s/p = {f})")
        }
        None => format!(
            "with one receive buffer it is not reached ({} of the attention ring exposed at the \
             longest lengths)",
            single_exposure.map_or("-".into(), pct)
        ),
    };
    let basis = format!(
        "full overlap reached on {} of {n_judged} studies; the closed form {agreement_short}",
        reached.len()
    );
    let would_flip = match verdict {
        Verdict::Holds => format!(
            "a study in which some ring stays exposed at the longest lengths; {single_words} on \
             {}, so single buffering would flip it",
            first.name
        ),
        Verdict::HoldsUnderAssumptions => format!(
            "'holds' if full overlap were reached on {} too",
            not_reached.join(", ")
        ),
        Verdict::DoesNotHold => {
            "full overlap reached on some study (two buffers, zig-zag or non-causal order, longer \
             lengths)"
                .to_string()
        }
        Verdict::NotEstablished | Verdict::NotChecked => {
            "a study with lengths enough to judge".to_string()
        }
    };
    let existence = match verdict {
        Verdict::Holds => format!(
            "Full overlap is reached on every one of the {n_judged} studies: {}.",
            reached.join("; ")
        ),
        Verdict::HoldsUnderAssumptions => format!(
            "Full overlap is reached on {} of the {n_judged} studies ({}), not on {}.",
            reached.len(),
            reached.join("; "),
            not_reached.join(", ")
        ),
        Verdict::DoesNotHold => format!(
            "Full overlap is reached on none of the {n_judged} studies: some ring stays exposed \
             at the longest lengths simulated."
        ),
        Verdict::NotEstablished | Verdict::NotChecked => {
            "No study has lengths enough to judge, so the claim is not established either way."
                .to_string()
        }
    };
    let launches: Vec<String> = inp
        .profiles
        .iter()
        .map(|h| us(h.kernels.host.op_s.value))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let launch = launches.join(" and ");
    // Query heads in one of METP's attention calls (one head group).
    let heads = inp.model.heads / inp.p.max(1);
    let attention_always = real.iter().all(|(_, st)| st.attention_threshold <= lo);
    let real_thresholds = real
        .iter()
        .map(|(h, st)| {
            format!(
                "attention s/p ≥ {}, MLP s/p ≥ {} on {}",
                st.attention_threshold, st.solved.mlp_local_seq, h.name
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let ideal_thresholds = ideal_studies
        .iter()
        .map(|(h, st)| {
            format!(
                "{} and {} against F/B = {:.0} on {}",
                st.attention_threshold, st.solved.mlp_local_seq, st.closed_form.f_over_b, h.name
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let kernels_sentence = if attention_always {
        format!(
            "With the profiles' kernel model (a kernel costs at least the host's {launch} per \
             op, and a block of {heads} heads is priced by the thread blocks it puts on the \
             GPU) the attention ring's kernels outlast its K/V transfers at every length \
             checked, so only the MLP threshold bites ({real_thresholds}); with ideal kernels \
             both do ({ideal_thresholds})."
        )
    } else {
        format!(
            "With the profiles' kernel model (host time {launch} per op, blocks of {heads} \
             heads) the thresholds are {real_thresholds}; with ideal kernels, \
             {ideal_thresholds}."
        )
    };
    let single_sentence = match single_exposure {
        Some(x) if x >= HIDDEN_SHARE => format!(
            "The condition depends on two receive buffers: with one, the transfer follows the \
             compute and the attention ring stays exposed above the threshold ({} of the ring \
             at the longest lengths).",
            pct(x)
        ),
        Some(x) => format!(
            "With one receive buffer the attention ring is still hidden above the threshold \
             (at most {} exposed).",
            pct(x)
        ),
        None => format!(
            "With one receive buffer no length simulated (up to s/p = {}) lies {JUDGED_MARGIN}× \
             above the attention threshold of {}, so the effect of the second buffer is not \
             judged.",
            single.rows.last().map_or(0, |r| r.local_seq),
            single.attention_threshold
        ),
    };
    let single_effect = match single_exposure {
        Some(x) => format!(
            "one buffer: the attention ring is {} exposed above the threshold",
            pct(x)
        ),
        None => "one buffer: no length simulated lies above the threshold".to_string(),
    };
    let summary = format!(
        "The simulator runs METP ({}, p = {}) over local lengths {lo}…{hi} on {profiles}, with \
         the profiles' kernels and with ideal ones. {existence} Where the condition lies is a \
         separate finding. Derived in closed form, a ring step hides its transfer when its \
         compute lasts at least as long — for the attention ring s/p ≥ F/B (plus a latency \
         term; zig-zag causal masking halves each step's compute, a threshold \
         {zigzag_ratio:.2}× higher on {}), for the MLP weight ring b·s/p ≥ F/B; against the \
         simulator the closed form {agreement} — agreeing meaning a ring's exposed \
         communication below {} at {JUDGED_MARGIN}× its threshold or more and above it at \
         1/{JUDGED_MARGIN} or less. {kernels_sentence} {single_sentence} With causal \
         masking and contiguous blocks every ring step still moves a full K/V block while \
         device i computes only i + ½ blocks: at s/p = {} the least-loaded device computes {} \
         of the busiest one's work, waits on its neighbours ({:.2} ms of exposed communication \
         in one layer) and the layer takes {} longer than with zig-zag order, which balances \
         the work ({} of the busiest).",
        inp.model.name,
        inp.p,
        first.name,
        pct(HIDDEN_SHARE),
        inp.causal_local_seq,
        pct(bal_contig),
        exp_contig * 1e3,
        pct(contig_penalty),
        pct(bal_zig),
    ) + &skipped_sentence;
    // Backward rings move K/V with the fp32 dK/dV accumulators: where do they hide?
    let (fwd_from, bwd_from) = ideal_studies
        .first()
        .map(|(_, st)| {
            (
                hidden_from(st, |r| r.attention_ring_exposed_share),
                hidden_from(st, |r| r.attention_bwd_ring_exposed_share),
            )
        })
        .unwrap_or((None, None));
    let first_hi = ideal_studies
        .first()
        .and_then(|(_, st)| st.rows.last())
        .map_or(hi, |r| r.local_seq);
    let from = |x: Option<u64>| {
        x.map(|c| format!("from s/p = {c}"))
            .unwrap_or_else(|| format!("at no length up to {first_hi}"))
    };
    let backward_effect = format!(
        "backward rings move K/V and fp32 dK/dV together: with ideal kernels on {} the backward \
         attention ring hides its transfers {} (the forward ring {})",
        first.name,
        from(bwd_from),
        from(fwd_from)
    );
    measured.insert(
        "one_receive_buffer_exposure_above_threshold".into(),
        json!(single_exposure),
    );
    measured.insert(
        "causal_contiguous_step_penalty_vs_zigzag".into(),
        json!(contig_penalty),
    );
    measured.insert(
        "causal_contiguous_least_over_most_loaded".into(),
        json!(bal_contig),
    );
    measured.insert(
        "causal_contiguous_exposed_communication_s".into(),
        json!(exp_contig),
    );
    measured.insert("points_judged".into(), json!(judged));
    measured.insert("studies_judged".into(), json!(n_judged));
    measured.insert("studies_reaching_full_overlap".into(), json!(reached.len()));
    measured.insert(
        "one_receive_buffer_full_overlap_from_local_seq".into(),
        json!(single_from),
    );
    measured.insert(
        "disagreements_that_agree_on_unshared_links".into(),
        json!(unshared_agree),
    );
    measured.insert("disagreements".into(), json!(total_disagree));
    if !skipped.is_empty() {
        measured.insert("not_checked".into(), skipped_measured);
    }
    Ok(Claim {
        id: "C3",
        claim: CLAIM.into(),
        verdict,
        rule,
        basis,
        would_flip,
        revision: Some(revision(
            judged,
            total_disagree,
            reached.len(),
            n_judged,
            verdict,
        )),
        summary,
        measured: serde_json::Value::Object(measured),
        assumptions: vec![
            Assumption { name: "two receive buffers (double buffering)".into(), effect: single_effect },
            Assumption { name: "non-causal or zig-zag causal".into(), effect: format!("contiguous causal blocks: the least-loaded device does {} of the busiest one's work and the layer takes {} longer than zig-zag", pct(bal_contig), pct(contig_penalty)) },
            Assumption { name: "kernels at full efficiency without fixed costs".into(), effect: format!("with the profiles' kernel model (host time {launch} per op): {real_thresholds}") },
            Assumption { name: "forward rings".into(), effect: backward_effect },
        ],
        tables,
        plots: vec![ClaimPlot {
            file: "c3-exposed-vs-local-seq".into(),
            title: format!("C3: exposed communication inside METP's rings (ideal kernels, p = {})", inp.p),
            x_label: "tokens per device s/p".into(),
            y_label: "exposed share of the ring (%)".into(),
            y_kind: "plain".into(),
            x_kind: "tokens".into(),
            x_log2: true,
            y_log: false,
            reference: None,
            series: plot_series,
        }],
    })
}

#[cfg(test)]
mod tests;
