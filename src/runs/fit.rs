//! Whether the published runs fit by the tool's memory model, over all of them.
//!
//! Every published run trained on its hardware, so each one the model calls too large is a
//! disagreement with a measurement, of one of two kinds: the allocator headroom the profile
//! assumes decides it (the tensors, CUDA context and NCCL buffers fit, the headroom does not),
//! or the tensors alone exceed the device (the model counts tensors the run did not hold).
//! Reads [`RunResult`]s only; the per-run parts are `runs::peak`.

use serde::Serialize;

use super::RunResult;

/// The runs by memory verdict (file stems, in the runs' order).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitSummary {
    /// Runs.
    pub runs: usize,
    /// Runs that fit with the profile's allocator headroom.
    pub fit: usize,
    /// Runs that fit only with less allocator headroom than the profile assumes.
    pub fit_with_less_headroom: Vec<String>,
    /// Runs whose tensors, context and NCCL buffers alone exceed device memory.
    pub tensors_exceed_memory: Vec<String>,
}

/// The memory verdicts of `runs`.
pub fn fit_summary(runs: &[RunResult]) -> FitSummary {
    let mut s = FitSummary {
        runs: runs.len(),
        fit: 0,
        fit_with_less_headroom: Vec::new(),
        tensors_exceed_memory: Vec::new(),
    };
    for r in runs {
        match (r.fits, r.peak.headroom_fraction_that_fits) {
            (true, _) => s.fit += 1,
            (false, Some(_)) => s.fit_with_less_headroom.push(r.id.clone()),
            (false, None) => s.tensors_exceed_memory.push(r.id.clone()),
        }
    }
    s
}
