//! What a virtual device is made of on every backend: the matrix type the programs compute
//! with, the dtype a buffer models and the per-device counter of tracked bytes, the tags that
//! match messages, the CPU link throttle's parameters, communication counters and ring-step
//! timestamps. The CPU runtime (`backend::cpu::device`) and the CUDA units build their devices
//! from these; nothing here runs anything.
//!
//! **Byte accounting.** Bytes are counted in the *modelled* dtype ([`Dtype`]: 2 bytes per bf16
//! activation or weight element, 4 per fp32 accumulator or log-sum-exp element), whatever the
//! device computes in — the same convention as the inventory in `crate::memory`. A device's
//! [`Mem`] records its high-water mark together with the per-name breakdown at that moment.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use nalgebra::DMatrix;
use serde::Serialize;

/// The matrix type the devices compute with.
pub type Mat = DMatrix<f32>;

/// The dtype a buffer models (the CPU always computes in f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 2 bytes per element: activations, weights, K/V blocks, score blocks.
    Bf16,
    /// 4 bytes per element: accumulators, log-sum-exp, main gradients.
    Fp32,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bf16 => 2,
            Dtype::Fp32 => 4,
        }
    }
}

#[derive(Debug, Default)]
struct MemState {
    live: u64,
    peak: u64,
    live_by_name: BTreeMap<&'static str, u64>,
    peak_by_name: BTreeMap<&'static str, u64>,
    allocations: u64,
}

/// One device's live-bytes counter (shared by the buffers the device tracks — the CPU runtime's
/// `Tracked` values, the CUDA units' allocations; never leaves the device's thread).
#[derive(Clone, Default)]
pub struct Mem(Rc<RefCell<MemState>>);

impl Mem {
    /// Counts `bytes` of buffer `name` as held (also by the CUDA backend's tracked allocator,
    /// whose buffers are device memory).
    pub(crate) fn alloc(&self, name: &'static str, bytes: u64) {
        let mut s = self.0.borrow_mut();
        s.live += bytes;
        s.allocations += 1;
        *s.live_by_name.entry(name).or_insert(0) += bytes;
        if s.live > s.peak {
            s.peak = s.live;
            s.peak_by_name = s
                .live_by_name
                .iter()
                .filter(|(_, &b)| b > 0)
                .map(|(&k, &v)| (k, v))
                .collect();
        }
    }

    /// Stops counting `bytes` of buffer `name`.
    pub(crate) fn free(&self, name: &'static str, bytes: u64) {
        let mut s = self.0.borrow_mut();
        s.live -= bytes;
        if let Some(b) = s.live_by_name.get_mut(name) {
            *b -= bytes;
        }
    }

    /// Bytes held now.
    pub fn live(&self) -> u64 {
        self.0.borrow().live
    }

    /// High-water mark so far.
    pub fn peak(&self) -> u64 {
        self.0.borrow().peak
    }

    /// The record so far: high-water mark, live bytes, allocations, breakdown at the peak.
    pub(crate) fn stats(&self) -> MemStats {
        let s = self.0.borrow();
        MemStats {
            peak_bytes: s.peak,
            end_live_bytes: s.live,
            allocations: s.allocations,
            peak_breakdown: s
                .peak_by_name
                .iter()
                .map(|(&k, &v)| (k.to_string(), v))
                .collect(),
        }
    }
}

/// A device's memory record.
#[derive(Debug, Clone, Serialize)]
pub struct MemStats {
    /// High-water mark of the tracked bytes.
    pub peak_bytes: u64,
    /// Bytes still tracked when the device's program returned (its outputs are handed back
    /// untracked, so this should be 0).
    pub end_live_bytes: u64,
    /// Number of tracked allocations.
    pub allocations: u64,
    /// Live bytes per buffer name at the high-water mark.
    pub peak_breakdown: BTreeMap<String, u64>,
}

/// What a message is, so that receives match sends whatever the arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// An attention weight shard (W_qkv\[g\], W_o\[g\]) for head group `g`.
    AttnWeights {
        /// Backward pass.
        bwd: bool,
        /// Head group.
        g: u32,
    },
    /// A K/V block for head group `g`, arriving for ring step `t`.
    Kv {
        /// Backward pass.
        bwd: bool,
        /// Head group.
        g: u32,
        /// Ring step it is used in.
        t: u32,
    },
    /// fp32 dK/dV accumulators for head group `g`, arriving for ring step `t` (`t = p`: the
    /// final hop back to the owner).
    Dkv {
        /// Head group.
        g: u32,
        /// Ring step.
        t: u32,
    },
    /// A device's fp32 contribution to the weight gradient of head group `g`, sent to its owner.
    AttnWeightGrad {
        /// Head group.
        g: u32,
    },
    /// An MLP shard pair (W1\[j\], W2\[j\]) arriving for ring step `t`.
    MlpWeights {
        /// Backward pass.
        bwd: bool,
        /// Ring step.
        t: u32,
    },
    /// fp32 MLP gradient accumulators arriving for ring step `t` (`t = p`: final hop).
    MlpGrad {
        /// Ring step.
        t: u32,
    },
    /// A calibration message (ping-pong and streaming probes of `crate::calibrate`).
    Probe {
        /// Which probe message.
        id: u32,
    },
    /// One step of a ring all-reduce.
    AllReduce {
        /// Which all-reduce of the run.
        id: u32,
        /// Step (reduce-scatter then all-gather).
        step: u32,
    },
}

/// A CPU link model: a message takes `latency_s + bytes / bandwidth_bytes_per_s` from the moment
/// it has been sent, its receive posted and its link is free.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Link {
    /// Bytes per second per direction of one device pair.
    pub bandwidth_bytes_per_s: f64,
    /// Seconds added to every message.
    pub latency_s: f64,
}

/// Communication counters of one device.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CommStats {
    /// Messages sent.
    pub messages_sent: u64,
    /// Bytes sent, in the modelled dtypes.
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Seconds spent blocked in receives (including throttle sleeps).
    pub wait_s: f64,
}

/// Which ring a [`StepTime`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// METP attention forward, inner K/V ring.
    FwdAttention,
    /// METP attention backward, inner K/V + dK/dV ring.
    BwdAttention,
    /// METP MLP forward, weight ring.
    FwdMlp,
    /// METP MLP backward, weight + gradient-accumulator ring.
    BwdMlp,
}

/// Timestamps of one ring step on one device, in seconds since the device's program started.
/// A step starts before its sends, computes, then completes the receives the next step needs:
/// `end_s − compute_end_s` is the time the device waited on them (exposed communication, plus
/// the copies of the sends that follow the compute in backward).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTime {
    /// Ring.
    pub phase: Phase,
    /// Head group (attention) or 0 (MLP).
    pub group: u32,
    /// Ring step, 0..p.
    pub step: u32,
    /// Step start.
    pub start_s: f64,
    /// End of the step's compute.
    pub compute_end_s: f64,
    /// Step end (the next step's data received).
    pub end_s: f64,
}

impl StepTime {
    /// Seconds of compute (and the copies of the sends before it).
    pub fn compute_s(&self) -> f64 {
        self.compute_end_s - self.start_s
    }
    /// Seconds after the compute until the step could end.
    pub fn wait_s(&self) -> f64 {
        self.end_s - self.compute_end_s
    }
    /// Step duration.
    pub fn duration_s(&self) -> f64 {
        self.end_s - self.start_s
    }
}
