//! Pairs of published runs that differ only in the micro-batches each data-parallel replica
//! runs (the same model, hardware, layout inside a replica, sequence and software; a larger
//! data-parallel degree with the same global batch): each GPU does the same work per
//! micro-batch in both, so the two step times split into a cost per micro-batch and a rest
//! (pipeline fill and drain, the last gradient synchronisation, the optimizer) — measured and
//! predicted alike. Where the prediction of such a pair is off, the split says which of the two
//! is, and the predicted step's parts say where the tool puts each.
//!
//! Reads [`RunResult`]s only; depends on nothing else.

use serde::Serialize;

use super::RunResult;

/// A step of `m` micro-batches taking `t` seconds, written as `m · per_micro_batch + rest`
/// through two such steps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Split {
    /// What one more micro-batch per replica adds to the step.
    pub per_micro_batch_s: f64,
    /// The rest of the step: `t − m · per_micro_batch` at the larger `m`.
    pub rest_s: f64,
}

impl Split {
    /// The line through `(m_a, t_a)` and `(m_b, t_b)` (`m_a != m_b`).
    pub fn through(m_a: u64, t_a: f64, m_b: u64, t_b: f64) -> Split {
        let per = (t_a - t_b) / (m_a as f64 - m_b as f64);
        Split {
            per_micro_batch_s: per,
            rest_s: t_a - m_a as f64 * per,
        }
    }
}

/// One part of a predicted step, split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PartSplit {
    /// The part.
    pub part: &'static str,
    /// Its split.
    #[serde(flatten)]
    pub split: Split,
}

/// Two runs that differ only in micro-batches per replica.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair {
    /// The run with more micro-batches per replica.
    pub more: String,
    /// The run with fewer.
    pub fewer: String,
    /// Their micro-batches per replica.
    pub micro_batches: (u64, u64),
    /// Per-GPU throughput of `fewer` against `more`, measured: `−0.07` = 7% lower.
    pub measured_throughput_change: f64,
    /// The same, predicted.
    pub predicted_throughput_change: f64,
    /// The measured step times, split.
    pub measured: Split,
    /// The predicted step times, split.
    pub predicted: Split,
    /// The predicted split part by part (they add up to `predicted`).
    pub predicted_parts: Vec<PartSplit>,
}

/// The predicted step's parts for a split: the kernels priced alone, what the simulated
/// compute takes beyond them (kernels slowed by communication in flight), the exposed
/// communication and the idle time; they add up to the step.
fn parts(r: &RunResult) -> [(&'static str, f64); 4] {
    let b = &r.breakdown;
    let kernels = b.gemm_s + b.attention_s + b.memory_bound_s;
    [
        ("kernels priced alone", kernels),
        (
            "compute slowed by communication in flight",
            r.predicted_compute_s - kernels,
        ),
        ("exposed communication", b.exposed_communication_s),
        ("idle (bubble, waits)", b.idle_s),
    ]
}

/// Per-GPU throughput of a step of `m` micro-batches in `t` seconds, relative.
fn throughput_change(m_more: u64, t_more: f64, m_fewer: u64, t_fewer: f64) -> f64 {
    (m_fewer as f64 / t_fewer) / (m_more as f64 / t_more) - 1.0
}

/// Every pair of `runs` with the same replica layout and different micro-batches per replica,
/// in the runs' order.
pub fn pairs(runs: &[RunResult]) -> Vec<Pair> {
    let mut out = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            if a.replica_layout != b.replica_layout || a.micro_batches == b.micro_batches {
                continue;
            }
            let (more, fewer) = if a.micro_batches > b.micro_batches {
                (a, b)
            } else {
                (b, a)
            };
            let (ma, mb) = (more.micro_batches, fewer.micro_batches);
            let pa = parts(more);
            let pb = parts(fewer);
            out.push(Pair {
                more: more.id.clone(),
                fewer: fewer.id.clone(),
                micro_batches: (ma, mb),
                measured_throughput_change: throughput_change(
                    ma,
                    more.measured_step_s,
                    mb,
                    fewer.measured_step_s,
                ),
                predicted_throughput_change: throughput_change(
                    ma,
                    more.predicted_step_s,
                    mb,
                    fewer.predicted_step_s,
                ),
                measured: Split::through(ma, more.measured_step_s, mb, fewer.measured_step_s),
                predicted: Split::through(ma, more.predicted_step_s, mb, fewer.predicted_step_s),
                predicted_parts: pa
                    .iter()
                    .zip(&pb)
                    .map(|(&(part, x), &(_, y))| PartSplit {
                        part,
                        split: Split::through(ma, x, mb, y),
                    })
                    .collect(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_recovers_the_line_it_was_drawn_from() {
        // 12.504 s for 32 micro-batches and 6.72 s for 16: 0.3615 s each and 0.936 s besides.
        let s = Split::through(32, 12.504, 16, 6.72);
        assert!((s.per_micro_batch_s - 0.3615).abs() < 1e-9, "{s:?}");
        assert!((s.rest_s - 0.936).abs() < 1e-9, "{s:?}");
        // The order of the two points does not matter.
        assert_eq!(Split::through(16, 6.72, 32, 12.504), s);
    }

    #[test]
    fn fewer_micro_batches_in_the_same_time_per_micro_batch_lose_throughput_to_the_rest() {
        // 1 s per micro-batch and 2 s besides: 32 in 34 s, 16 in 18 s.
        let c = throughput_change(32, 34.0, 16, 18.0);
        assert!((c - (16.0 / 18.0 / (32.0 / 34.0) - 1.0)).abs() < 1e-12);
        assert!(c < 0.0);
        // Without a rest nothing is lost.
        assert!(throughput_change(32, 32.0, 16, 16.0).abs() < 1e-12);
    }
}
