//! A calibration's time budget: the guard [`super::measure::measure`] runs under when a plan has
//! a [`Budget`], and the repetition policy of backends that time calls with events (the CUDA
//! backend: [`repetitions`], [`warmups`]) from which a measurement's cost is estimated.
//!
//! **The guard**: each kind of measurement gets a share of the budget ([`SHARES`]); before
//! each measurement its time is estimated from the fastest rate measured so far for its kind
//! (or the budget's [`Prior`]) and the repetitions the backend will run; a measurement that
//! would end past its kind's deadline is skipped and listed ("skipped for time: …"), as is one
//! that fails (with its error). Five failures in a row end the calibration (the device is
//! probably gone).
//!
//! Depends on `calibrate` (backend shapes) and `error`.

use std::time::Instant;

use crate::backend::repeat::{repetitions, warmups};
use crate::backend::{AttnCall, Pass};
use crate::error::{Error, Result};

/// Rates the guard assumes for a kind before it has measured one of its calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    /// GEMM FLOP/s.
    pub gemm_flops_per_s: f64,
    /// Fused attention forward FLOP/s.
    pub attn_fwd_flops_per_s: f64,
    /// Fused attention backward FLOP/s (counted as 2.5× the forward FLOPs).
    pub attn_bwd_flops_per_s: f64,
    /// Copy bytes/s (bytes moved).
    pub copy_bytes_per_s: f64,
    /// Message bytes/s.
    pub link_bytes_per_s: f64,
    /// Fixed time of any call (launch, synchronisation, events).
    pub call_s: f64,
}

/// Seconds a plan's kernel and link measurements may take, and the rates to expect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Seconds for all the measurements together.
    pub seconds: f64,
    /// Rates assumed before a kind has been measured.
    pub prior: Prior,
    /// Short measurements (fewer repetitions).
    pub quick: bool,
}

/// Budget shares of the kinds, in measurement order: host overhead and copies, GEMMs,
/// attention, links (messages, collectives, slowdown).
pub const SHARES: [(&str, f64); 4] = [
    ("copies", 0.10),
    ("gemm", 0.34),
    ("attention", 0.41),
    ("links", 0.15),
];

impl Budget {
    /// Seconds one measurement of a call taking `call_s` costs: warm-ups and repetitions, each
    /// with a synchronisation.
    pub fn measurement_s(&self, call_s: f64) -> f64 {
        let n = (warmups(call_s) + repetitions(call_s, self.quick)) as f64;
        n * (call_s + self.prior.call_s)
    }

    /// One attention call of `pass` at `flops_per_s` (forward FLOPs × 2.5 backward).
    pub fn attention_call_s(&self, c: &AttnCall, pass: Pass, flops_per_s: f64) -> f64 {
        self.prior.call_s + c.flops(pass) / flops_per_s
    }
}

/// Running state of a guarded measurement: the clock, the kind deadlines, what was left out.
pub(super) struct Guard {
    start: Instant,
    budget: Option<Budget>,
    kind: usize,
    pub(super) skipped: Vec<String>,
    failures_in_a_row: usize,
}

impl Guard {
    /// A guard for `budget` (none: nothing is ever skipped for time, and a failure is an error).
    pub(super) fn new(budget: Option<Budget>) -> Guard {
        Guard {
            start: Instant::now(),
            budget,
            kind: 0,
            skipped: Vec::new(),
            failures_in_a_row: 0,
        }
    }

    pub(super) fn elapsed_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Moves to kind `k` of [`SHARES`].
    pub(super) fn enter(&mut self, k: usize) {
        self.kind = k;
    }

    /// The prior rates, when there is a budget.
    pub(super) fn budget(&self) -> Option<&Budget> {
        self.budget.as_ref()
    }

    /// Whether a measurement whose cost `est(budget)` estimates fits in the current kind's
    /// share; records it as skipped if not. Without a budget everything fits.
    pub(super) fn fits(&mut self, what: &str, est: impl Fn(&Budget) -> f64) -> bool {
        let Some(b) = self.budget else {
            return true;
        };
        let est_s = est(&b);
        let deadline = b.seconds * SHARES[..=self.kind].iter().map(|s| s.1).sum::<f64>();
        if self.elapsed_s() + est_s <= deadline {
            true
        } else {
            self.skipped.push(format!(
                "skipped for time: {what} (estimated {est_s:.2} s; {} budget ends at \
                 {deadline:.0} s)",
                SHARES[self.kind].0,
            ));
            false
        }
    }

    /// Records a failed measurement: without a budget the error itself; with one, a line, and
    /// an error after 5 failures in a row.
    pub(super) fn failed(&mut self, what: &str, e: Error) -> Result<()> {
        if self.budget.is_none() {
            return Err(e);
        }
        self.skipped.push(format!("failed: {what}: {e}"));
        self.failures_in_a_row += 1;
        if self.failures_in_a_row >= 5 {
            return Err(Error::Calibration {
                message: format!("5 measurements failed in a row, the last one {what}: {e}"),
            });
        }
        Ok(())
    }

    pub(super) fn ok(&mut self) {
        self.failures_in_a_row = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calib_without_a_budget_nothing_is_skipped_and_a_failure_is_an_error() {
        let mut g = Guard::new(None);
        assert!(g.fits("anything", |_| f64::INFINITY));
        assert!(g
            .failed(
                "x",
                Error::Calibration {
                    message: "gone".into()
                }
            )
            .is_err());
        assert!(g.skipped.is_empty());
    }
}
