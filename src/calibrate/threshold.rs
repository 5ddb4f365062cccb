//! The overlap-threshold experiment (DESIGN §1, claim C3) on the CPU runtime: with the link
//! throttled, run METP attention over a range of local sequence lengths c = s/p and measure
//! the exposed communication of the forward K/V ring — the time a device waits for the next
//! block after computing the current one — against the closed-form threshold.
//!
//! Closed form: a forward ring step computes `4·b·c²·(h/p)` FLOPs at rate F and moves the
//! K/V block, `4·b·c·(h/p)` bytes (bf16 K and V), in `α + bytes/B`; the transfer hides when
//! `A·c² ≥ β·c + α` with `A = 4·b·(h/p)/F`, `β = 4·b·(h/p)/B`, i.e. above
//! `c* = (β + √(β² + 4Aα)) / 2A` (= F/B without latency). F is measured on the runtime's own
//! attention block.

use serde::Serialize;

use crate::backend::cpu::units::run_unit;
use crate::backend::cpu::CpuBackend;
use crate::backend::unit::device::{Link, Phase};
use crate::backend::unit::{ExecMethod, RunSpec, Shape, Unit};
use crate::backend::{AttnCall, Backend, Pass};
use crate::error::Result;

/// One local sequence length of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverlapPoint {
    /// Local tokens c = s/p.
    pub local_seq: usize,
    /// Sequence s.
    pub seq: usize,
    /// Closed form: does c reach the threshold?
    pub condition_holds: bool,
    /// Closed-form compute of one forward ring step, `4·b·c²·(h/p) / F`.
    pub predicted_compute_s: f64,
    /// Closed-form transfer of one K/V block, `α + 4·b·c·(h/p) / B`.
    pub predicted_transfer_s: f64,
    /// Measured: seconds the pacing device (the one that waited least) waited after
    /// computing, summed over the forward ring steps that receive a block.
    pub exposed_communication_s: f64,
    /// Measured: those steps' total duration on that device.
    pub steps_s: f64,
    /// `exposed / steps`.
    pub exposed_fraction: f64,
    /// Closed form of the same: `max(0, transfer − compute) / max(transfer, compute)`.
    pub predicted_exposed_fraction: f64,
}

/// The sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverlapSweep {
    /// Effective attention rate F (FLOP/s) used by the closed form.
    pub flops_per_s: f64,
    /// The throttle.
    pub link: Link,
    /// F/B in tokens.
    pub f_over_b: f64,
    /// Closed-form threshold c*.
    pub threshold_local_seq: f64,
    /// Measured: the smallest swept c from which on every exposed fraction stays below
    /// `cutoff`.
    pub measured_threshold_local_seq: Option<usize>,
    /// The cutoff used for `measured_threshold_local_seq`.
    pub cutoff: f64,
    /// Points by c.
    pub rows: Vec<OverlapPoint>,
}

/// The closed-form threshold `c*` for `b` samples, group width `hg = h/p`, rate F, link.
pub fn closed_form_threshold(b: usize, hg: usize, f: f64, link: Link) -> f64 {
    let a = 4.0 * b as f64 * hg as f64 / f;
    let beta = 4.0 * b as f64 * hg as f64 / link.bandwidth_bytes_per_s;
    (beta + (beta * beta + 4.0 * a * link.latency_s).sqrt()) / (2.0 * a)
}

/// Forward attention rate F of one ring step's block at local length `c`, measured on
/// `shape.p` threads at once (as the devices of the sweep run).
pub fn measure_attention_rate(shape: Shape, c: usize, quick: bool) -> Result<f64> {
    let mut cpu = CpuBackend::new(shape.p, None, quick)?;
    let blk = AttnCall::block(shape.b, c, shape.ag(), shape.d());
    let t = cpu.attention_s(blk, Pass::Forward)?;
    Ok(blk.flops(Pass::Forward) / t)
}

/// Runs METP attention (fused, double buffered) at each local length with `link` and
/// measures exposed communication. `base` gives b, h, a and p (its s is replaced).
pub fn sweep(
    base: Shape,
    local_seqs: &[usize],
    link: Link,
    f: f64,
    cutoff: f64,
) -> Result<OverlapSweep> {
    let (b, hg, p) = (base.b, base.hg(), base.p);
    let threshold = closed_form_threshold(b, hg, f, link);
    let mut rows = Vec::new();
    for &c in local_seqs {
        let shape = Shape { s: c * p, ..base };
        let mut spec = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape);
        spec.link = Some(link);
        let r = run_unit(&spec)?;
        // Per device: waits and durations of the forward steps that receive a block. The
        // device with the least waiting is the one that sets the pace: a slow link makes every
        // device wait, while a device slowed by the host (other processes on shared cores)
        // only makes its peers wait — so the minimum isolates what the link exposes.
        let (exposed, total) = r
            .devices
            .iter()
            .map(|d| {
                d.steps
                    .iter()
                    .filter(|s| s.phase == Phase::FwdAttention && (s.step as usize) + 1 < p)
                    .fold((0.0, 0.0), |(e, t), st| {
                        (e + st.wait_s(), t + st.duration_s())
                    })
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .unwrap_or((0.0, 0.0));
        let bytes = 4.0 * b as f64 * c as f64 * hg as f64;
        let compute = 4.0 * b as f64 * (c * c) as f64 * hg as f64 / f;
        let transfer = link.latency_s + bytes / link.bandwidth_bytes_per_s;
        rows.push(OverlapPoint {
            local_seq: c,
            seq: c * p,
            condition_holds: c as f64 >= threshold,
            predicted_compute_s: compute,
            predicted_transfer_s: transfer,
            predicted_exposed_fraction: (transfer - compute).max(0.0) / transfer.max(compute),
            exposed_communication_s: exposed,
            steps_s: total,
            exposed_fraction: if total > 0.0 { exposed / total } else { 0.0 },
        });
    }
    let mut measured = None;
    for row in rows.iter().rev() {
        if row.exposed_fraction < cutoff {
            measured = Some(row.local_seq);
        } else {
            break;
        }
    }
    Ok(OverlapSweep {
        flops_per_s: f,
        link,
        f_over_b: f / link.bandwidth_bytes_per_s,
        threshold_local_seq: threshold,
        measured_threshold_local_seq: measured,
        cutoff,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calib_threshold_is_f_over_b_without_latency() {
        let l = Link {
            bandwidth_bytes_per_s: 1e6,
            latency_s: 0.0,
        };
        assert!((closed_form_threshold(1, 8, 1e8, l) - 100.0).abs() < 1e-9);
        // With latency: at c*, compute equals transfer.
        let l = Link {
            latency_s: 1e-3,
            ..l
        };
        let c = closed_form_threshold(2, 8, 1e8, l);
        let compute = 4.0 * 2.0 * c * c * 8.0 / 1e8;
        let transfer = 1e-3 + 4.0 * 2.0 * c * 8.0 / 1e6;
        assert!((compute / transfer - 1.0).abs() < 1e-9);
        assert!(c > 100.0);
    }
}
