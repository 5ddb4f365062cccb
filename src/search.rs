//! Longest sequence that fits: for one method and degree, the largest multiple of the method's
//! sequence granule whose per-device peak fits in device memory.
//!
//! Peak memory is monotone non-decreasing in s (every tensor's bytes are products of non-negative
//! powers of s), so feasibility is a monotone predicate: bracket by doubling, then bisect on
//! multiples of the granule. Input: a template [`Workload`] (its `seq` is ignored); output: a
//! [`MaxSeq`] row. Depends on `memory`, `config`, `error`; never on
//! `schedule` or `sim` (what fits is a question of memory alone).

use serde::{Deserialize, Serialize};

use crate::config::{MethodId, Workload};
use crate::memory;

/// The longest sequence the search tries: 2^40 tokens.
pub const SEQ_LIMIT: u64 = 1 << 40;

/// One row of `maxseq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaxSeq {
    /// Method id.
    pub method: MethodId,
    /// Degree.
    pub p: u64,
    /// Longest sequence that fits; `None` when the degree is invalid or nothing fits.
    pub max_seq: Option<u64>,
    /// Granule the length is a multiple of.
    pub seq_multiple: u64,
    /// Peak bytes per device at `max_seq`.
    pub peak_bytes: Option<u128>,
    /// Device memory.
    pub capacity_bytes: u128,
    /// Why `max_seq` is `None` (invalid degree, or even the shortest length does not fit), or
    /// what else than memory bounds it (a model's sliding attention window).
    pub reason: Option<String>,
}

/// Finds the longest sequence for `method` at degree `p`, using `template` for everything else.
pub fn max_seq(template: &Workload, method: MethodId, p: u64) -> MaxSeq {
    let mut w = template.clone();
    w.method = method;
    w.p = p;
    let capacity_bytes = w.hardware.memory_bytes();
    let row = |max_seq, seq_multiple, peak_bytes, reason| MaxSeq {
        method,
        p,
        max_seq,
        seq_multiple,
        peak_bytes,
        capacity_bytes,
        reason,
    };
    if let Err(reason) = method.check_degree(&w.model, p, &w.options) {
        return row(None, 0, None, Some(reason));
    }
    // The method's granule, times cp with context parallelism (Workload::seq_multiple).
    let k = w.seq_multiple();
    w.seq = k;
    let mut v = match w.validate() {
        Ok(v) => v,
        Err(e) => return row(None, k, None, Some(e.to_string())),
    };
    let shortest = memory::inventory(&v);
    if shortest.peak_bytes > capacity_bytes {
        let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
        return row(
            None,
            k,
            None,
            Some(format!(
                "does not fit even at s = {k}: weights, gradients and optimizer state alone take \
                 {:.1} GiB of {:.1} GiB ({})",
                gib(shortest.static_bytes),
                gib(capacity_bytes),
                if method.shards_weights() {
                    "try a larger p, or --dp N with --zero 1-3"
                } else if v.zero_stage() < crate::config::ZeroStage::Zero3 {
                    "try --zero 3, which shards them over the p devices"
                } else {
                    "try a larger p or --dp N: ZeRO-3 shards them over p × dp devices"
                }
            )),
        );
    }
    let lo_peak = shortest.peak_bytes;
    let window = v.model.sliding_window.filter(|&x| x < SEQ_LIMIT);
    let mut peak_at = |s: u64| -> Result<u128, String> {
        v.set_seq(s).map_err(|e| e.to_string())?;
        Ok(memory::inventory(&v).peak_bytes)
    };
    // Invariant: lo·k fits; hi·k does not (or exceeds the limit). A sliding attention window
    // bounds the lengths this tool models exactly (`Workload::validate`).
    let limit = window.unwrap_or(SEQ_LIMIT) / k;
    let (mut lo, mut lo_peak, mut hi) = (1u64, lo_peak, 2u64);
    loop {
        if hi > limit {
            hi = limit + 1;
            break;
        }
        match peak_at(hi * k) {
            Ok(peak) if peak <= capacity_bytes => {
                lo = hi;
                lo_peak = peak;
                hi *= 2;
            }
            _ => break,
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match peak_at(mid * k) {
            Ok(peak) if peak <= capacity_bytes => {
                lo = mid;
                lo_peak = peak;
            }
            _ => hi = mid,
        }
    }
    let capped = window.filter(|_| lo == limit).map(|x| {
        format!(
            "the model's sliding attention window of {x} tokens bounds the length: metp-sim \
                 models full attention, exact only up to the window"
        )
    });
    row(Some(lo * k), k, Some(lo_peak), capped)
}

/// `max_seq` for every method × degree, in the order given.
pub fn max_seq_grid(template: &Workload, methods: &[MethodId], degrees: &[u64]) -> Vec<MaxSeq> {
    methods
        .iter()
        .flat_map(|&m| degrees.iter().map(move |&p| (m, p)))
        .map(|(m, p)| max_seq(template, m, p))
        .collect()
}
