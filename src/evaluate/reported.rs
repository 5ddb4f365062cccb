//! Figures read back from a file (a shard of a sweep or plan) checked against the workload they
//! claim to be of: the memory they report must be the inventory's, the closed-form step time the
//! closed form's, and the throughput, MFU and exposed share the ones their step time gives —
//! with every number one the tool may report ([`Metrics::check`]). Only the simulated times
//! cannot be recomputed without the simulation itself; they are held to what is physical (a
//! positive, finite step no faster than the hardware's peak, compute and exposed communication
//! within it).

use super::{Evaluation, Metrics};
use crate::memory::Inventory;
use crate::schedule::StepTimes;

/// The figures a file reports for one configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reported {
    /// Step time (simulated, or the closed form's).
    pub step_time_s: f64,
    /// Compute time on the critical device.
    pub compute_s: f64,
    /// Communication time on the critical device.
    pub communication_s: f64,
    /// Exposed communication on the critical device.
    pub exposed_communication_s: f64,
    /// Exposed communication as a share of the step.
    pub exposed_share: f64,
    /// Tokens per second.
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation.
    pub mfu: f64,
    /// The closed form's step time.
    pub analytic_step_time_s: f64,
}

/// Relative tolerance between a reported figure and the one recomputed from the same inputs
/// (the file's decimal round trip, nothing more).
pub const REPORTED_TOLERANCE: f64 = 1e-9;

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= REPORTED_TOLERANCE * a.abs().max(b.abs())
}

/// Checks `r` against `e` (the configuration's closed-form evaluation, rebuilt from the file's
/// spec). `Err((field, what is wrong))`, naming the first figure that is not what its inputs
/// give.
pub fn check_reported(
    e: &Evaluation,
    r: &Reported,
) -> std::result::Result<(), (&'static str, String)> {
    let times = StepTimes {
        step_time_s: r.step_time_s,
        compute_s: r.compute_s,
        communication_s: r.communication_s,
        exposed_communication_s: r.exposed_communication_s,
    };
    let m = Metrics::new(&e.workload, &times, &e.inventory);
    m.check("reported")
        .map_err(|err| ("step_time_s", err.to_string()))?;
    for (field, v) in [
        ("compute_s", r.compute_s),
        ("exposed_communication_s", r.exposed_communication_s),
    ] {
        if v > r.step_time_s * (1.0 + REPORTED_TOLERANCE) {
            return Err((
                field,
                format!("{v:?} s, longer than the step ({:?} s)", r.step_time_s),
            ));
        }
    }
    if !close(r.analytic_step_time_s, e.estimate.step_time_s) {
        return Err((
            "analytic_step_time_s",
            format!(
                "{:?} s, but the closed form of this configuration gives {:?} s",
                r.analytic_step_time_s, e.estimate.step_time_s
            ),
        ));
    }
    for (field, got, want) in [
        ("tokens_per_s", r.tokens_per_s, m.tokens_per_s),
        ("mfu", r.mfu, m.mfu),
        ("exposed_share", r.exposed_share, m.exposed_share),
    ] {
        if !close(got, want) {
            return Err((
                field,
                format!(
                    "{got:?}, but a step of {:?} s of this configuration gives {want:?}",
                    r.step_time_s
                ),
            ));
        }
    }
    Ok(())
}

/// Checks the memory a file reports (peak, capacity, whether it fits) against the inventory of
/// the configuration's critical device (`memory::critical_stage`).
pub fn check_reported_memory(
    inv: &Inventory,
    peak_bytes: u128,
    capacity_bytes: u128,
    fits: bool,
) -> std::result::Result<(), (&'static str, String)> {
    if peak_bytes != inv.peak_bytes {
        return Err((
            "peak_bytes",
            format!(
                "{peak_bytes}, but the memory inventory of this configuration peaks at {}",
                inv.peak_bytes
            ),
        ));
    }
    if capacity_bytes != inv.capacity_bytes {
        return Err((
            "capacity_bytes",
            format!(
                "{capacity_bytes}, but the profile's device memory is {}",
                inv.capacity_bytes
            ),
        ));
    }
    if fits != inv.fits {
        return Err((
            "fits",
            format!(
                "{fits}, but a peak of {peak_bytes} bytes {} a capacity of {capacity_bytes}",
                if inv.fits { "fits in" } else { "exceeds" }
            ),
        ));
    }
    Ok(())
}
