//! Published runs measured in both precisions of their linear layers: the same source, model,
//! hardware and layout on the same GPUs, once in bf16 and once in FP8 (NVIDIA publishes its
//! recipes' tables so). Most of what a prediction gets wrong about such a layout it gets wrong
//! in both, so the ratio of the two steps tests what FP8 changes on its own — the FP8 GEMMs,
//! the casts that feed them, the FP8 gathers — against the measured ratio.
//!
//! Reads [`RunResult`]s (and `config::LinearDtype`, their dtype) only.

use serde::Serialize;

use super::sources::{group_by, low_median_high, short};
use super::RunResult;
use crate::config::LinearDtype;

/// A run in bf16 and its FP8 twin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrecisionPair {
    /// The bf16 run.
    pub bf16: String,
    /// The FP8 run.
    pub fp8: String,
    /// Their GPUs.
    pub gpus: u64,
    /// bf16 step over FP8 step, measured.
    pub measured_speedup: f64,
    /// The same, predicted.
    pub predicted_speedup: f64,
}

impl PrecisionPair {
    /// The predicted speed-up against the measured one: `−0.05` = 5% less gain than measured.
    pub fn error(&self) -> f64 {
        self.predicted_speedup / self.measured_speedup - 1.0
    }
}

/// Every bf16 run with an FP8 twin among `runs` (the same source and everything but the
/// dtype, [`RunResult::precision_twin`]), in report order of the bf16 runs; where a source has
/// several runs of one kind, the first of each.
pub fn precision_pairs(runs: &[RunResult]) -> Vec<PrecisionPair> {
    let groups = group_by(runs, |r| {
        (
            short(&r.source.paper),
            r.precision_twin.as_str(),
            r.micro_batches,
        )
    });
    let mut out = Vec::new();
    for (_, members) in groups {
        let of = |d: LinearDtype| members.iter().find(|r| r.linear_dtype == d);
        if let (Some(b), Some(f)) = (of(LinearDtype::Bf16), of(LinearDtype::Fp8)) {
            out.push(PrecisionPair {
                bf16: b.id.clone(),
                fp8: f.id.clone(),
                gpus: b.gpus,
                measured_speedup: b.measured_step_s / f.measured_step_s,
                predicted_speedup: b.predicted_step_s / f.predicted_step_s,
            });
        }
    }
    out
}

/// The pairs' errors ([`PrecisionPair::error`]): lowest, median, highest (zeros when there are
/// none).
pub fn error_spread(pairs: &[PrecisionPair]) -> (f64, f64, f64) {
    low_median_high(pairs.iter().map(PrecisionPair::error).collect())
}
