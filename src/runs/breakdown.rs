//! Where a run's predicted step goes, part by part, and which part a gap between prediction and
//! measurement points at.
//!
//! The parts come from the step plan priced by the profile's cost model, for the pipeline stage
//! with the most compute: GEMMs, attention (the fused call, or the unfused score GEMMs and
//! softmax), memory-bound passes (norms, residuals, activations, optimizer), and, from the
//! step's times, the exposed communication and the idle time (pipeline bubble and waits: what
//! is left of the step when compute and exposed communication are taken out). The suspects of
//! a gap are the parts whose size it could be a plausible error of: a part that would have to
//! be off by at most [`PLAUSIBLE_FRACTION`] of itself to close the gap alone.

use serde::Serialize;

use crate::config::ValidWorkload;
use crate::cost::CostModel;
use crate::schedule::{KernelShape, PhaseBlock, Stage, StepPlan, StepTimes};

/// A part is suspected when the gap is at most this fraction of it.
pub const PLAUSIBLE_FRACTION: f64 = 0.25;

/// The parts of one predicted step (seconds per step on the stage with the most compute).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Breakdown {
    /// Projection and MLP GEMMs, and the output head's.
    pub gemm_s: f64,
    /// Attention cores: fused calls, or unfused score GEMMs and their softmax passes.
    pub attention_s: f64,
    /// Memory-bound passes: norms, residuals, activations, dropout, optimizer.
    pub memory_bound_s: f64,
    /// Communication the compute waits for, as simulated (or in closed form).
    pub exposed_communication_s: f64,
    /// The rest of the step: pipeline bubble and waits on other devices.
    pub idle_s: f64,
}

impl Breakdown {
    /// The parts, named, in report order.
    pub fn parts(&self) -> [(&'static str, f64); 5] {
        [
            ("GEMMs", self.gemm_s),
            ("attention", self.attention_s),
            ("memory-bound passes", self.memory_bound_s),
            ("exposed communication", self.exposed_communication_s),
            ("idle (bubble, waits)", self.idle_s),
        ]
    }

    /// The parts a gap may be an error of: each part, and every kernel together (a clock or
    /// power effect slows them all alike).
    pub fn candidates(&self) -> [(&'static str, f64); 6] {
        let [a, b, c, d, e] = self.parts();
        [
            a,
            b,
            c,
            d,
            e,
            (
                "every kernel alike (clock)",
                self.gemm_s + self.attention_s + self.memory_bound_s,
            ),
        ]
    }
}

/// Kernel time by part, for one pass through some stages.
#[derive(Debug, Clone, Copy, Default)]
struct Kernels {
    gemm: f64,
    attention: f64,
    memory: f64,
}

impl Kernels {
    fn add(&mut self, o: Kernels, times: f64) {
        self.gemm += o.gemm * times;
        self.attention += o.attention * times;
        self.memory += o.memory * times;
    }

    fn total(&self) -> f64 {
        self.gemm + self.attention + self.memory
    }
}

fn kernel(cost: &CostModel, name: &str, shape: &KernelShape, out: &mut Kernels) {
    let t = cost.kernel_s(shape);
    let attention = name.starts_with("attn-core")
        || name.starts_with("attn-qk")
        || name.starts_with("attn-pv")
        || name.starts_with("attn-bwd")
        || name.starts_with("softmax");
    match shape {
        KernelShape::Attention(_) => out.attention += t,
        _ if attention => out.attention += t,
        KernelShape::Gemm(_) => out.gemm += t,
        _ => out.memory += t,
    }
}

fn stages(cost: &CostModel, stages: &[Stage], out: &mut Kernels) {
    for s in stages {
        match s {
            Stage::Compute(ks) => ks.iter().for_each(|k| kernel(cost, k.name, &k.shape, out)),
            Stage::Collective { .. } => {}
            Stage::Ring(r) => {
                // Device 0's blocks (under a causal mask the blocks differ by device, and a
                // balanced order gives every device the same work).
                let n = r.steps.len();
                for (k, step) in r.steps.iter().enumerate() {
                    step.kernels_of(step.block(n, 0, k))
                        .iter()
                        .chain(&step.accumulate)
                        .for_each(|k| kernel(cost, k.name, &k.shape, out));
                }
            }
            Stage::Outer(o) => {
                let mut body = Kernels::default();
                self::stages(cost, &o.body, &mut body);
                out.add(body, f64::from(o.groups));
            }
        }
    }
}

fn blocks(cost: &CostModel, blocks: &[PhaseBlock]) -> Kernels {
    let mut k = Kernels::default();
    for b in blocks {
        stages(cost, &b.stages, &mut k);
    }
    k
}

/// The parts of a step of `w` (plan `plan`) whose times are `times`.
pub fn breakdown(w: &ValidWorkload, plan: &StepPlan, times: &StepTimes) -> Breakdown {
    let cost = CostModel::new(&w.hardware);
    let mut layer = blocks(&cost, &plan.layer_fwd);
    layer.add(blocks(&cost, &plan.layer_bwd), 1.0);
    let head = blocks(&cost, std::slice::from_ref(&plan.head));
    let mut embedding = Kernels::default();
    for k in plan.embedding_fwd.iter().chain(&plan.embedding_bwd) {
        kernel(&cost, k.name, &k.shape, &mut embedding);
    }
    let m = w.micro_batches as f64;
    let mut best = Kernels::default();
    for stage in 0..w.outer.pp as u32 {
        let mut k = Kernels::default();
        k.add(layer, w.stage_layers(stage) as f64 * m);
        if w.has_head(stage) {
            k.add(head, m);
        }
        if w.has_embedding(stage) {
            k.add(embedding, m);
        }
        let optimizer = plan
            .optimizer
            .get(stage as usize)
            .or(plan.optimizer.last())
            .map_or(&[][..], Vec::as_slice);
        for o in optimizer {
            kernel(&cost, o.name, &o.shape, &mut k);
        }
        if k.total() > best.total() {
            best = k;
        }
    }
    let idle = times.step_time_s - times.compute_s - times.exposed_communication_s;
    Breakdown {
        gemm_s: best.gemm,
        attention_s: best.attention,
        memory_bound_s: best.memory,
        exposed_communication_s: times.exposed_communication_s,
        idle_s: idle.max(0.0),
    }
}

/// One part and what closing the gap through it alone would take.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suspect {
    /// The part.
    pub part: &'static str,
    /// Its predicted seconds per step.
    pub predicted_s: f64,
    /// The change of the part that would close the gap alone: +0.1 = 10% longer.
    pub change_to_close: f64,
}

/// The parts a gap of `gap_s` seconds (measured minus predicted step time: positive when the
/// tool is too fast) could be a plausible error of, the most plausible (smallest change)
/// first: every part of at least one microsecond whose needed change is within
/// [`PLAUSIBLE_FRACTION`] (a part cannot shrink below zero).
pub fn suspects(b: &Breakdown, gap_s: f64) -> Vec<Suspect> {
    let mut out: Vec<Suspect> = b
        .candidates()
        .iter()
        .filter(|(_, s)| *s >= 1e-6)
        .map(|&(part, s)| Suspect {
            part,
            predicted_s: s,
            change_to_close: gap_s / s,
        })
        .filter(|x| x.change_to_close.abs() <= PLAUSIBLE_FRACTION && x.change_to_close > -1.0)
        .collect();
    out.sort_by(|a, b| {
        a.change_to_close
            .abs()
            .total_cmp(&b.change_to_close.abs())
            .then(a.part.cmp(b.part))
    });
    out
}

/// One sentence on a gap and its suspects, from the numbers.
pub fn explain(b: &Breakdown, gap_s: f64, step_s: f64) -> String {
    let direction = if gap_s > 0.0 { "fast" } else { "slow" };
    let mut s = format!(
        "The prediction is {:.2} s per step too {direction} ({:+.1}% of the predicted step).",
        gap_s.abs(),
        100.0 * gap_s / step_s
    );
    let shares: Vec<String> = b
        .parts()
        .iter()
        .map(|(p, t)| format!("{p} {:.2} s ({:.0}%)", t, 100.0 * t / step_s))
        .collect();
    s.push_str(&format!(" Predicted step: {}.", shares.join(", ")));
    let sus = suspects(b, gap_s);
    if sus.is_empty() {
        let largest = b
            .candidates()
            .iter()
            .copied()
            .fold(("", 0.0), |a, x| if x.1 > a.1 { x } else { a });
        s.push_str(&format!(
            " No part explains it within {:.0}%: even {} would have to be {:+.0}% off — a cost \
             the model leaves out is more likely.",
            100.0 * PLAUSIBLE_FRACTION,
            largest.0,
            100.0 * gap_s / largest.1.max(1e-12)
        ));
    } else {
        let list: Vec<String> = sus
            .iter()
            .map(|x| format!("{} ({:+.0}%)", x.part, 100.0 * x.change_to_close))
            .collect();
        s.push_str(&format!(
            " Suspected, by the change that would close the gap alone: {}.",
            list.join(", ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b() -> Breakdown {
        Breakdown {
            gemm_s: 8.0,
            attention_s: 1.0,
            memory_bound_s: 0.5,
            exposed_communication_s: 2.0,
            idle_s: 0.4,
        }
    }

    /// A gap of 0.4 s is 4% of all kernels, 5% of the GEMMs and 20% of the exposed
    /// communication: suspected in that order; the attention (40%), memory-bound passes (80%)
    /// and idle time (100%) not.
    #[test]
    fn suspects_are_the_parts_the_gap_is_a_plausible_error_of() {
        let s = suspects(&b(), 0.4);
        let parts: Vec<&str> = s.iter().map(|x| x.part).collect();
        assert_eq!(
            parts,
            [
                "every kernel alike (clock)",
                "GEMMs",
                "exposed communication"
            ]
        );
        assert!((s[1].change_to_close - 0.05).abs() < 1e-12);
        // A gap larger than a quarter of every part has no suspect, and the sentence says so.
        assert!(suspects(&b(), 3.0).is_empty());
        assert!(explain(&b(), 3.0, 11.9).contains("No part explains it"));
        // A prediction that is too slow points the other way.
        let slow = suspects(&b(), -0.4);
        assert_eq!(slow[1].part, "GEMMs");
        assert!(slow[0].change_to_close < 0.0);
        assert!(explain(&b(), -0.4, 11.9).contains("too slow"));
    }
}
