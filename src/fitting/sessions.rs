//! Measurement sessions: a file that joins the GEMMs of several sessions (`GemmSample::session`,
//! numbered by `gpu-check merge`) gives every session after the first one clock factor — its
//! GEMMs priced at factor × the tensor-core peak — searched with the GEMM parameters
//! (`kernel_fit::fit_profile` calls `session_factors`). The profile is the first session's
//! clock; the factors are reported, never written into it. Why GEMMs only: two H200 sessions
//! timed the same square GEMMs 15–21% apart while their attention calls and copies agreed
//! within 5% — the clock a session runs at (power and thermal state, the board) moves the
//! kernels that run nearest the power limit.
//!
//! Depends on `config` and `measurements` only: the search is handed the fit's cost (the
//! kernel fit's group fit and residuals at given factors), so that `kernel_fit` uses this
//! file and not the other way round. Nothing here writes a profile.

use serde::Serialize;

use super::measurements::Sample;
use crate::config::Hardware;

/// Range of a later measurement session's clock factor against the first session's.
pub const SESSION_FACTOR_RANGE: (f64, f64) = (0.5, 2.0);

/// Golden-section steps of a session factor's search (the bracket shrinks by 0.618 each).
const SESSION_SEARCH_STEPS: usize = 40;

/// A later measurement session's GEMM clock against the first session's, fitted with the GEMM
/// parameters (see [`super::kernel_fit::fit_profile`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionFactor {
    /// The session's number (1, 2, …; 0 is the first, which the profile describes).
    pub session: u32,
    /// Its GEMM samples.
    pub gemm_samples: usize,
    /// Its tensor-core rate over the first session's (< 1: slower).
    pub rate_factor: f64,
    /// Whether the factor stopped at an edge of [`SESSION_FACTOR_RANGE`] (not determined).
    pub at_edge: bool,
}

/// `hw` as a later measurement session ran its GEMMs: the tensor-core peak × `factor`, that
/// session's clock against the first session's (see [`SessionFactor`]).
pub fn session_hardware(hw: &Hardware, factor: f64) -> Hardware {
    let mut h = hw.clone();
    h.gpu.peak_bf16_flops_per_s.value *= factor;
    h
}

/// A profile at each measurement session's clock: session 0's is the profile itself, session
/// k's the profile at `factors[k − 1]` × its clock (k beyond the factors: the profile's).
pub struct SessionClocks<'a> {
    first: &'a Hardware,
    later: Vec<Hardware>,
}

impl<'a> SessionClocks<'a> {
    /// `hw` at the clock of every session `factors` names.
    pub fn new(hw: &'a Hardware, factors: &[f64]) -> SessionClocks<'a> {
        SessionClocks {
            first: hw,
            later: factors.iter().map(|&f| session_hardware(hw, f)).collect(),
        }
    }

    /// The profile as session `session` ran.
    pub fn of(&self, session: u32) -> &Hardware {
        match session {
            0 => self.first,
            k => self.later.get(k as usize - 1).unwrap_or(self.first),
        }
    }
}

/// Each later session's clock factor for the samples `ss` of one parameter group: for every
/// session k ≥ 1 in turn (twice over when there are several), the factor in
/// [`SESSION_FACTOR_RANGE`] whose full fit of the group leaves the least squared log error
/// (`cost`: that error at given factors, one per later session) — a golden-section search on
/// its log. Empty when the samples are of one session, or when the first session has none to
/// anchor the clock (then all are priced alike).
pub(super) fn session_factors(ss: &[Sample], cost: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let n = ss.iter().map(|s| s.session).max().map_or(0, |k| k as usize);
    if n == 0 || !ss.iter().any(|s| s.session == 0) {
        return Vec::new();
    }
    let mut factors = vec![1.0; n];
    let passes = if n == 1 { 1 } else { 2 };
    for _ in 0..passes {
        for k in 0..n {
            if !ss.iter().any(|s| s.session as usize == k + 1) {
                continue;
            }
            let at = |u: f64| {
                let mut f = factors.clone();
                f[k] = u.exp();
                cost(&f)
            };
            let g = (5f64.sqrt() - 1.0) / 2.0;
            let (mut a, mut b) = (SESSION_FACTOR_RANGE.0.ln(), SESSION_FACTOR_RANGE.1.ln());
            let (mut c, mut d) = (b - g * (b - a), a + g * (b - a));
            let (mut fc, mut fd) = (at(c), at(d));
            for _ in 0..SESSION_SEARCH_STEPS {
                if fc <= fd {
                    (b, d, fd) = (d, c, fc);
                    c = b - g * (b - a);
                    fc = at(c);
                } else {
                    (a, c, fc) = (c, d, fd);
                    d = a + g * (b - a);
                    fd = at(d);
                }
            }
            factors[k] = ((a + b) / 2.0).exp();
        }
    }
    factors
}

/// How many full fits of the group [`session_factors`] runs on `ss` (0 for one session): the
/// work estimate of a fit before it starts (`kernel_fit::search_samples`).
pub(super) fn session_search_fits(ss: &[Sample]) -> usize {
    let n = ss.iter().map(|s| s.session).max().map_or(0, |k| k as usize);
    if n == 0 || !ss.iter().any(|s| s.session == 0) {
        return 0;
    }
    let later = (1..=n)
        .filter(|&k| ss.iter().any(|s| s.session as usize == k))
        .count();
    let passes = if n == 1 { 1 } else { 2 };
    passes * later * (SESSION_SEARCH_STEPS + 2)
}

/// ", of N measurement sessions (…)" for a source, or nothing for one session.
pub(super) fn session_words(ss: &[Sample], factors: &[f64]) -> String {
    if factors.is_empty() {
        return String::new();
    }
    let each = factors
        .iter()
        .enumerate()
        .map(|(k, f)| {
            let n = ss.iter().filter(|s| s.session as usize == k + 1).count();
            format!("session {} ×{f:.3} over its {n}", k + 1)
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        " of {} measurement sessions — each later session's GEMMs priced at one clock factor of \
         its own, fitted with these ({each}); the profile is the first session's clock, and the \
         sessions disagree by that much",
        factors.len() + 1
    )
}
