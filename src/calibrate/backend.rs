//! The [`Backend`] trait: what a machine must be able to measure for `calibrate` and `run`, and
//! the shapes it is asked about. Implemented by [`super::cpu`] (always), [`super::mock`]
//! (tests) and [`super::cuda`] (feature `cuda`). What only a GPU node measures (host overhead,
//! point-to-point messages between given devices, collectives, compute slowdown under a
//! collective) has default methods returning `Ok(None)`.

use serde::Serialize;

use crate::error::Result;
use crate::exec::device::Link;
use crate::exec::{RunReport, RunSpec};

/// An m×k by k×n matrix product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct GemmShape {
    /// Rows of the product.
    pub m: usize,
    /// Columns of the product.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
}

impl GemmShape {
    /// A shape.
    pub fn new(m: usize, n: usize, k: usize) -> GemmShape {
        GemmShape { m, n, k }
    }
    /// 2·m·n·k.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// One attention block of a ring step: `b` samples × `heads` heads, `c` query rows against
/// `c` key rows, head dimension `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AttnBlock {
    /// Samples.
    pub b: usize,
    /// Rows (tokens) of the query and key blocks.
    pub c: usize,
    /// Heads in the block.
    pub heads: usize,
    /// Head dimension.
    pub d: usize,
}

impl AttnBlock {
    /// The fused attention call this block is: `b` sequences × `heads` heads, `c` queries
    /// against `c` keys, not causal.
    pub fn call(&self) -> AttnCall {
        AttnCall {
            batch: self.b,
            heads: self.heads,
            q_tokens: self.c,
            kv_tokens: self.c,
            head_dim: self.d,
            causal: false,
        }
    }

    /// Forward FLOPs as the cost model counts them: 4·b·c²·heads·d (QKᵀ and P·V).
    pub fn forward_flops(&self) -> f64 {
        4.0 * self.b as f64 * (self.c as f64).powi(2) * self.heads as f64 * self.d as f64
    }
    /// FLOPs of a pass: backward of a fused kernel counts 2.5 × forward (it recomputes QKᵀ;
    /// the convention of `schedule::kernels`).
    pub fn flops(&self, pass: Pass) -> f64 {
        match pass {
            Pass::Forward => self.forward_flops(),
            Pass::Backward => 2.5 * self.forward_flops(),
        }
    }
}

/// One fused attention call: `batch` sequences × `heads` heads, `q_tokens` queries against
/// `kv_tokens` keys, head dimension `head_dim`, causal (bottom-right aligned) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct AttnCall {
    /// Sequences.
    pub batch: usize,
    /// Heads.
    pub heads: usize,
    /// Queries per sequence.
    pub q_tokens: usize,
    /// Keys per sequence.
    pub kv_tokens: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Causal mask, aligned at the end: query i sees key j iff j ≤ i + kv_tokens − q_tokens.
    pub causal: bool,
}

impl AttnCall {
    /// (query, key) pairs the mask leaves visible, per sequence and head. Causal: query i
    /// sees i + kv − q + 1 keys when that is positive (never more than kv), so the
    /// n = min(q, kv) queries that see any see kv − n + 1, …, kv keys: n·(2·kv − n + 1)/2.
    pub fn visible_pairs(&self) -> f64 {
        let (q, kv) = (self.q_tokens as f64, self.kv_tokens as f64);
        if !self.causal {
            return q * kv;
        }
        let n = q.min(kv);
        n * (2.0 * kv - n + 1.0) / 2.0
    }

    /// Forward FLOPs of the visible pairs: 4·batch·heads·pairs·head_dim (QKᵀ and P·V).
    pub fn forward_flops(&self) -> f64 {
        4.0 * self.batch as f64 * self.heads as f64 * self.visible_pairs() * self.head_dim as f64
    }
}

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    /// Forward.
    Forward,
    /// Backward.
    Backward,
}

/// A GEMM timed alone and while a transfer into the same device runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SlowdownSample {
    /// Seconds per GEMM alone.
    pub alone_s: f64,
    /// Seconds per GEMM with the transfer running.
    pub with_transfer_s: f64,
}

/// A machine that can be measured. All times are seconds per call, robust statistics (medians)
/// over repetitions chosen by the backend.
pub trait Backend {
    /// `cpu`, `cuda` or `mock`.
    fn name(&self) -> &'static str;
    /// What is measured, in words (the CPU, the GPU and its count, the link throttle).
    fn device(&self) -> String;
    /// Virtual devices (CPU threads, GPUs) the measurements run on at once.
    fn devices(&self) -> usize;
    /// Memory of one device, in bytes.
    fn memory_bytes(&self) -> u64;
    /// Streaming multiprocessors of one device, when the backend knows them.
    fn sm_count(&self) -> Option<u64> {
        None
    }
    /// The CPU link throttle the transfers run through, if any.
    fn link(&self) -> Option<Link> {
        None
    }
    /// One GEMM.
    fn gemm_s(&mut self, shape: GemmShape) -> Result<f64>;
    /// One fused attention call, forward or backward.
    fn attention_s(&mut self, shape: AttnCall, pass: Pass) -> Result<f64>;
    /// One element-wise kernel (GeLU) moving `bytes` (bf16 in and out: 4 bytes per element).
    fn elementwise_s(&mut self, bytes: u64) -> Result<f64>;
    /// One device-local copy of a buffer moving `bytes` (4 per bf16 element: read and write):
    /// the memory bandwidth the profile's `hbm_bytes_per_s` holds.
    fn copy_s(&mut self, bytes: u64) -> Result<f64>;
    /// One point-to-point message of `bytes` between two devices.
    fn transfer_s(&mut self, bytes: u64) -> Result<f64>;
    /// A GEMM alone and while a stream of `bytes` messages arrives at its device.
    fn slowdown(&mut self, gemm: GemmShape, bytes: u64) -> Result<SlowdownSample>;
    /// Executes one unit (METP or TP, attention or MLP) and reports error, memory and time.
    fn run_unit(&mut self, spec: &RunSpec) -> Result<RunReport>;
    /// Host time of one operation issued to the device (the per-op overhead), if measured.
    fn host_overhead_s(&mut self) -> Result<Option<f64>> {
        Ok(None)
    }
    /// One point-to-point message of `bytes` from device `from` to device `to`, if measured.
    fn p2p_s(&mut self, _from: usize, _to: usize, _bytes: u64) -> Result<Option<f64>> {
        Ok(None)
    }
    /// One collective (`all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`) over
    /// `ranks` devices of `bytes` as nccl-tests define them for the op, if measured.
    fn collective_s(&mut self, _op: &str, _ranks: usize, _bytes: u64) -> Result<Option<f64>> {
        Ok(None)
    }
    /// A GEMM alone and while a collective of `bytes` runs on its device, if measured.
    fn slowdown_under_collective(
        &mut self,
        _gemm: GemmShape,
        _bytes: u64,
    ) -> Result<Option<SlowdownSample>> {
        Ok(None)
    }
    /// Whether `run_unit` and `attention_s` run forward passes only (then predictions and
    /// measurements leave the backward pass out).
    fn forward_only(&self) -> bool {
        false
    }
    /// How much slower each of `p` devices computes than in a profile measured with
    /// `profile_devices` devices at once (devices sharing cores or one GPU).
    fn compute_scale(&self, _p: usize, _profile_devices: usize) -> f64 {
        1.0
    }
    /// How much longer each message of `p` devices takes than one measured alone (devices
    /// whose transfers share one copy engine or stream).
    fn transfer_scale(&self, _p: usize) -> f64 {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(q: usize, kv: usize, causal: bool) -> AttnCall {
        AttnCall {
            batch: 2,
            heads: 3,
            q_tokens: q,
            kv_tokens: kv,
            head_dim: 64,
            causal,
        }
    }

    #[test]
    fn calib_visible_pairs_count_the_mask() {
        // Brute force over the bottom-right aligned mask: j ≤ i + kv − q.
        for (q, kv) in [(1, 1), (5, 5), (3, 7), (7, 3), (64, 150), (130, 70)] {
            let mut n = 0u64;
            for i in 0..q as i64 {
                for j in 0..kv as i64 {
                    if j <= i + kv as i64 - q as i64 {
                        n += 1;
                    }
                }
            }
            assert_eq!(call(q, kv, true).visible_pairs(), n as f64, "{q} {kv}");
            assert_eq!(call(q, kv, false).visible_pairs(), (q * kv) as f64);
        }
        // s(s+1)/2 for a square causal block; 4·b·heads·pairs·d FLOPs.
        assert_eq!(call(4, 4, true).visible_pairs(), 10.0);
        assert_eq!(call(4, 4, false).forward_flops(), 4.0 * 6.0 * 16.0 * 64.0);
    }
}
