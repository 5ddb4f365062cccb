//! Published runs that differ only in their number of data-parallel replicas (weak scaling):
//! the same source, model, hardware, layout inside a replica, sequence and micro-batches per
//! replica, on more GPUs. Each GPU does the same work in every run of such a group, so an ideal
//! cluster would keep the step time; what it grows by from the fewest GPUs to the most is the
//! cost of scaling out (longer rings in the data-parallel collectives, more ranks to wait for).
//! A planner extrapolates from a few nodes to thousands along exactly this line, so the
//! measured growth is set beside the predicted one, and the gap is named where they differ.
//!
//! Reads [`RunResult`]s only; depends on nothing else.

use serde::Serialize;

use super::sources::{group_by, short};
use super::RunResult;

/// How far the predicted growth of the step may differ from the measured one, as a share of
/// the smallest run's measured step, and still be said to follow it: one point of the step,
/// about the spread of two published measurements of one layout (NVIDIA's releases 24.11.1 and
/// 25.02 time the same nine Llama 3.1 layouts 0.2% to 1.7% apart, 0.5% in the median; runs.md's
/// section on configurations published more than once, `runs::repeats`, lists them).
pub const FOLLOWS: f64 = 0.01;

/// One run of a group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScalingPoint {
    /// The run.
    pub id: String,
    /// Its GPUs.
    pub gpus: u64,
    /// Its measured step.
    pub measured_step_s: f64,
    /// Its predicted step.
    pub predicted_step_s: f64,
}

/// Runs that differ only in data-parallel replicas, from the fewest GPUs to the most.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeakScaling {
    /// Their source.
    pub source: String,
    /// Their model.
    pub model: String,
    /// Their hardware profile.
    pub hardware: String,
    /// The layout inside one replica they share.
    pub replica_layout: String,
    /// Their micro-batches per replica.
    pub micro_batches: u64,
    /// The runs, by GPUs.
    pub points: Vec<ScalingPoint>,
    /// Per-GPU throughput at the most GPUs against the fewest, measured: `−0.07` = 7% lower.
    pub measured_throughput_change: f64,
    /// The same, predicted.
    pub predicted_throughput_change: f64,
    /// What the step grows by from the fewest GPUs to the most, measured.
    pub measured_growth_s: f64,
    /// The same, predicted.
    pub predicted_growth_s: f64,
    /// Whether the predicted growth is within [`FOLLOWS`] of the smallest run's measured step
    /// of the measured growth.
    pub follows: bool,
}

/// Which way a group's predicted growth of the step stands to the measured one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScalingVerdict {
    /// Within [`FOLLOWS`] of it.
    Follows,
    /// The measured step grows more: a cost of scale the prediction leaves out.
    MissesCost,
    /// The predicted step grows more.
    ChargesMore,
}

impl ScalingVerdict {
    /// The verdict in a table cell.
    pub fn label(self) -> &'static str {
        match self {
            ScalingVerdict::Follows => "follows",
            ScalingVerdict::MissesCost => "misses a cost of scale",
            ScalingVerdict::ChargesMore => "charges more than measured",
        }
    }
}

impl WeakScaling {
    /// Which way the prediction stands to the measured growth.
    pub fn kind(&self) -> ScalingVerdict {
        if self.follows {
            ScalingVerdict::Follows
        } else if self.measured_growth_s > self.predicted_growth_s {
            ScalingVerdict::MissesCost
        } else {
            ScalingVerdict::ChargesMore
        }
    }

    /// The group's verdict in words, computed from its numbers.
    pub fn verdict(&self) -> String {
        let first = &self.points[0];
        let last = &self.points[self.points.len() - 1];
        let gap_s = self.measured_growth_s - self.predicted_growth_s;
        match self.kind() {
            ScalingVerdict::Follows => format!(
                "the prediction follows the measured scaling from {} to {} GPUs (the growth of \
                 the step within {:.1}% of it)",
                first.gpus,
                last.gpus,
                100.0 * FOLLOWS
            ),
            ScalingVerdict::MissesCost => format!(
                "from {} to {} GPUs the measured step grows {:.3} s more than the predicted one: \
                 a cost that grows with the number of GPUs is missing from the prediction, and \
                 an extrapolation to more GPUs along this line is optimistic",
                first.gpus, last.gpus, gap_s
            ),
            ScalingVerdict::ChargesMore => format!(
                "from {} to {} GPUs the predicted step grows {:.3} s more than the measured one: \
                 the prediction charges scaling out more than the runs paid",
                first.gpus, last.gpus, -gap_s
            ),
        }
    }
}

/// How many `groups` the prediction follows, how many show a cost of scale it leaves out (the
/// measured step grows more), and how many it charges more than measured.
pub fn tally(groups: &[WeakScaling]) -> (usize, usize, usize) {
    let count = |v: ScalingVerdict| groups.iter().filter(|g| g.kind() == v).count();
    (
        count(ScalingVerdict::Follows),
        count(ScalingVerdict::MissesCost),
        count(ScalingVerdict::ChargesMore),
    )
}

/// Per-GPU throughput of `b` against `a` at the same work per GPU: `t_a / t_b − 1`.
fn throughput_change(t_a: f64, t_b: f64) -> f64 {
    t_a / t_b - 1.0
}

/// Every group of two or more `runs` from one source with the same replica layout and
/// micro-batches per replica on different numbers of GPUs, in order of each group's first run;
/// a group's runs by GPUs (runs on the same number of GPUs: the first in report order).
pub fn weak_scaling(runs: &[RunResult]) -> Vec<WeakScaling> {
    let groups = group_by(runs, |r| {
        (
            short(&r.source.paper),
            r.replica_layout.as_str(),
            r.micro_batches,
        )
    });
    let mut out = Vec::new();
    for (_, members) in groups {
        let mut points: Vec<ScalingPoint> = Vec::new();
        for r in &members {
            if points.iter().all(|p| p.gpus != r.gpus) {
                points.push(ScalingPoint {
                    id: r.id.clone(),
                    gpus: r.gpus,
                    measured_step_s: r.measured_step_s,
                    predicted_step_s: r.predicted_step_s,
                });
            }
        }
        if points.len() < 2 {
            continue;
        }
        points.sort_by_key(|p| p.gpus);
        let (a, b) = (&points[0], &points[points.len() - 1]);
        let measured_growth_s = b.measured_step_s - a.measured_step_s;
        let predicted_growth_s = b.predicted_step_s - a.predicted_step_s;
        let follows = (measured_growth_s - predicted_growth_s).abs() <= FOLLOWS * a.measured_step_s;
        let r0 = members[0];
        out.push(WeakScaling {
            source: short(&r0.source.paper).to_string(),
            model: r0.model.clone(),
            hardware: r0.hardware.clone(),
            replica_layout: r0.replica_layout.clone(),
            micro_batches: r0.micro_batches,
            measured_throughput_change: throughput_change(a.measured_step_s, b.measured_step_s),
            predicted_throughput_change: throughput_change(a.predicted_step_s, b.predicted_step_s),
            measured_growth_s,
            predicted_growth_s,
            follows,
            points,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_step_on_more_gpus_keeps_the_throughput_per_gpu() {
        assert!(throughput_change(2.0, 2.0).abs() < 1e-12);
        // 10% longer on more GPUs: a tenth of the throughput per GPU lost, less a little.
        assert!((throughput_change(1.0, 1.1) - (1.0 / 1.1 - 1.0)).abs() < 1e-12);
    }
}
