//! The intra-node link fitted from a measurement file's messages: point-to-point messages and,
//! where the file has them, collectives, each priced as the simulator prices it. The figures
//! stay inside the ranges a profile allows; one the data pushes to an edge is held there and its
//! source says the data did not determine it. Part of the one fit ([`super::kernel_fit`]);
//! depends on `config`, `cost`, `error` and the calibration's measurement and fit helpers.

use super::fit::{self, nelder_mead, LinkFit};
use super::measurements::KernelMeasurements;
use crate::config::limits::{MAX_PROFILE_LATENCY_S, PROFILE_RATE_RANGE};
use crate::config::{Figure, Hardware};
use crate::error::{Error, Result};

/// Most messages the link's search runs on (each of its up to 20,000 trials prices every one).
const SEARCH_MESSAGES: usize = 4096;

/// The intra-node link from the file's messages. Point-to-point messages alone: the
/// least-squares line `t = α + bytes/B` ([`fit::link`]). With collectives: least squares on the
/// log error of every message, each collective priced as the ring steps the simulator runs
/// (`cost::collective_steps`: all-reduce `2(n−1)·(α + M/(nB))`, …) and each point-to-point
/// message as `α + bytes/B`.
pub(super) fn fit_link(
    m: &KernelMeasurements,
    hw: &mut Hardware,
    origin: &dyn Fn(&str) -> String,
) -> Result<Option<LinkFit>> {
    use crate::schedule::CollectiveOp;
    if m.p2p.is_empty() && m.collectives.is_empty() {
        return Ok(None);
    }
    let mut msgs: Vec<(f64, f64, f64)> = m.p2p.iter().map(|p| (1.0, p.bytes as f64, p.s)).collect();
    for (i, c) in m.collectives.iter().enumerate() {
        let op = match c.op.as_str() {
            "all-reduce" => CollectiveOp::AllReduce,
            "all-gather" => CollectiveOp::AllGather,
            "reduce-scatter" => CollectiveOp::ReduceScatter,
            "all-to-all" => CollectiveOp::AllToAll,
            "broadcast" => CollectiveOp::Broadcast { root: 0 },
            other => {
                return Err(Error::Calibration {
                    message: format!(
                        "collectives[{i}].op: unknown collective \"{other}\" (all-reduce, \
                         all-gather, reduce-scatter, all-to-all, broadcast)"
                    ),
                })
            }
        };
        let (steps, chunk) = crate::cost::collective_steps(op, c.ranks as u64, c.bytes);
        msgs.push((steps as f64, chunk as f64, c.s));
    }
    let (rate_lo, rate_hi) = PROFILE_RATE_RANGE;
    let (mut l, how) = if m.collectives.is_empty() {
        let pts: Vec<(f64, f64)> = m.p2p.iter().map(|p| (p.bytes as f64, p.s)).collect();
        let mut l = fit::link(&pts)?;
        // Least squares with B inside its range: at the edge when the line's slope is outside
        // (latency-bound messages whose time hardly grows with size), α refitted there.
        if !(rate_lo..=rate_hi).contains(&l.bytes_per_s) {
            l.bytes_per_s = l.bytes_per_s.clamp(rate_lo, rate_hi);
            l.raw_intercept_s =
                pts.iter().map(|&(n, t)| t - n / l.bytes_per_s).sum::<f64>() / pts.len() as f64;
            l.latency_s = l.raw_intercept_s.max(0.0);
        }
        let how = format!(
            "least-squares fit t = α + bytes/B over {} point-to-point messages (r² = {:.4})",
            pts.len(),
            l.r2
        );
        (l, how)
    } else {
        // The search is bounded on its log scale to the figures' ranges.
        let clamp = |x: &[f64]| -> (f64, f64) {
            (
                x[0].min(MAX_PROFILE_LATENCY_S.ln()).exp(),
                x[1].clamp(rate_lo.ln(), rate_hi.ln())
                    .exp()
                    .clamp(rate_lo, rate_hi),
            )
        };
        let loss_over = |x: &[f64], msgs: &[(f64, f64, f64)]| -> f64 {
            let (a, b) = clamp(x);
            msgs.iter()
                .map(|&(steps, chunk, t)| (steps * (a + chunk / b) / t).ln().powi(2))
                .sum()
        };
        // The search's work is bounded before it starts: at most SEARCH_MESSAGES messages,
        // evenly across their sizes (every one of a file of real size); r² over all of them.
        let searched: Vec<(f64, f64, f64)> = if msgs.len() <= SEARCH_MESSAGES {
            msgs.clone()
        } else {
            let mut sorted = msgs.clone();
            sorted.sort_by(|p, q| {
                (p.0 * p.1)
                    .total_cmp(&(q.0 * q.1))
                    .then(p.2.total_cmp(&q.2))
            });
            (0..SEARCH_MESSAGES)
                .map(|i| sorted[i * (sorted.len() - 1) / (SEARCH_MESSAGES - 1)])
                .collect()
        };
        let loss = |x: &[f64]| loss_over(x, &searched);
        let x0 = [
            hw.intra_node.p2p_latency_s.value.max(1e-7).ln(),
            hw.intra_node.bytes_per_s_per_direction.value.ln(),
        ];
        let (x, _) = nelder_mead(&loss, &x0, 0.3, 1e-20, 20_000);
        let ss_res = loss_over(&x, &msgs);
        // r² of the log times.
        let logs: Vec<f64> = msgs.iter().map(|m| m.2.ln()).collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let ss_tot: f64 = logs.iter().map(|v| (v - mean).powi(2)).sum();
        let (a, b) = clamp(&x);
        let l = LinkFit {
            latency_s: a,
            bytes_per_s: b,
            raw_intercept_s: a,
            r2: if ss_tot > 0.0 {
                1.0 - ss_res / ss_tot
            } else {
                1.0
            },
        };
        let how = format!(
            "least squares on log(predicted / measured) over {} point-to-point messages and {} \
             collectives{}, each collective priced as the simulator's ring steps (all-reduce: \
             2(n−1)·(α + M/(nB)))",
            m.p2p.len(),
            m.collectives.len(),
            if searched.len() < msgs.len() {
                format!(
                    " (the search on {} of them, evenly across their sizes: the fit's work bound)",
                    searched.len()
                )
            } else {
                String::new()
            }
        );
        (l, how)
    };
    l.latency_s = l.latency_s.min(MAX_PROFILE_LATENCY_S);
    let unbounded = |v: f64, lo: f64, hi: f64, what: &str| {
        if v <= lo * (1.0 + 1e-9) || v >= hi * (1.0 - 1e-9) {
            format!(
                "; NOT determined by the data: the fit reaches the edge of the range {what} may \
                 take ({lo:e} to {hi:e}) and is held there"
            )
        } else {
            String::new()
        }
    };
    let b_note = unbounded(l.bytes_per_s, rate_lo, rate_hi, "a rate");
    let a_note = if l.latency_s >= MAX_PROFILE_LATENCY_S {
        unbounded(l.latency_s, 0.0, MAX_PROFILE_LATENCY_S, "a latency")
    } else {
        String::new()
    };
    // A one-GPU calibration's messages are copies standing in for a link: say so.
    let emulated = m
        .p2p
        .iter()
        .filter(|p| p.via.as_deref() == Some("copy-emulation"))
        .count();
    // Ring steps of several ranks (torchrun's METP ring steps) are messages like the rest.
    let ring_steps = m.p2p.iter().filter(|p| p.ranks.is_some()).count();
    let how = if ring_steps > 0 {
        format!(
            "{how}; {ring_steps} of the point-to-point messages were ring steps, every rank              sending to its successor at once (the slowest rank's time)"
        )
    } else {
        how
    };
    let how = if emulated > 0 {
        format!(
            "{how}; {emulated} of the messages were emulated by device-to-device copies on one \
             GPU, so this is a copy rate, not a link's"
        )
    } else {
        how
    };
    hw.intra_node.bytes_per_s_per_direction = Figure {
        value: l.bytes_per_s,
        source: origin(&format!("B of a {how}{b_note}")),
    };
    hw.intra_node.p2p_latency_s = Figure {
        value: l.latency_s,
        source: origin(&format!(
            "α of the same fit (raw intercept {:.3e} s, clamped at 0){a_note}",
            l.raw_intercept_s
        )),
    };
    Ok(Some(l))
}
