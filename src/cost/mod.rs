//! Cost model: turns work into seconds (DESIGN §4).
//!
//! - Compute: the *shape* of each kernel call is priced by a small physical model with a handful
//!   of fitted parameters per kind (`kernels` in the hardware profile): GEMMs by tiles and waves
//!   over the SMs ([`gemm`]), fused attention by thread blocks whose work grows with the keys
//!   they visit ([`attention`]), copies and element-wise passes by bytes ([`memory_bound`]).
//!   In a training step the host issues kernels ahead of the GPU, so a kernel costs
//!   `max(host op time, device time)` ([`CostModel::kernel_s`]: short kernels are bounded by
//!   the host). A call timed alone, as benchmarks time it, sees its device time plus the launch
//!   gap, and never less than the host floor ([`CostModel::isolated_s`], what `metp-sim
//!   kernels` prints and what calibration fits).
//! - Messages: `α + bytes / B` for the link class the two devices share (NVLink/NVSwitch or
//!   PCIe inside a node, InfiniBand across nodes).
//!
//! Input: a [`Hardware`] profile. Used by the simulator and the analytic model alike, so both
//! price the same work identically. Depends on `config` and `schedule`'s kernel shapes (plain
//! data); never on calibration.

pub mod attention;
pub mod gemm;
pub mod memory_bound;

use crate::config::Hardware;
use crate::schedule::{AttnPass, KernelShape};

/// Which links a message between two devices uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkClass {
    /// Same device: no transfer.
    Local,
    /// Inside one node (NVLink/NVSwitch or PCIe).
    IntraNode,
    /// Across nodes (InfiniBand).
    InterNode,
}

/// Prices compute and messages on one hardware profile.
#[derive(Debug, Clone, Copy)]
pub struct CostModel<'a> {
    hw: &'a Hardware,
}

impl<'a> CostModel<'a> {
    /// A cost model for `hw`.
    pub fn new(hw: &'a Hardware) -> Self {
        CostModel { hw }
    }

    /// The profile.
    pub fn hardware(&self) -> &'a Hardware {
        self.hw
    }

    /// Device seconds of one kernel call: what the GPU spends once the call has started.
    pub fn device_s(&self, k: &KernelShape) -> f64 {
        if k.is_empty() {
            return 0.0;
        }
        match k {
            KernelShape::Gemm(g) => gemm::device_s(self.hw, g),
            KernelShape::Attention(a) => attention::device_s(self.hw, a),
            KernelShape::Elementwise { bytes } => {
                memory_bound::elementwise_s(self.hw, *bytes as f64)
            }
            KernelShape::Copy { bytes } => memory_bound::copy_s(self.hw, *bytes as f64),
        }
    }

    /// Seconds one kernel adds to a training step's compute stream: `max(host op time, device
    /// time)` — the host issues ahead of the GPU, so only kernels shorter than the host's work
    /// per op are bounded by it. An empty call costs nothing.
    pub fn kernel_s(&self, k: &KernelShape) -> f64 {
        if k.is_empty() {
            return 0.0;
        }
        self.device_s(k).max(self.hw.kernels.host.op_s.value)
    }

    /// Seconds of one call timed alone with events around it, as the calibration measurements
    /// are: `max(isolated floor, device + launch gap)`; for attention the pass's extra host
    /// time (a framework's ops around the kernel, autograd) raises the floor — the host is
    /// still busy with them when the kernel has finished.
    pub fn isolated_s(&self, k: &KernelShape) -> f64 {
        let h = &self.hw.kernels.host;
        let extra = match k {
            KernelShape::Attention(a) => attention::model(self.hw, a.pass).isolated_extra_s.value,
            _ => 0.0,
        };
        (self.device_s(k) + h.isolated_gap_s.value).max(h.isolated_floor_s.value + extra)
    }

    /// The best GEMM rate: a full wave of tiles, long k, no fixed costs (the F of METP's
    /// overlap condition) — and no longer than the power cap allows.
    pub fn best_gemm_flops_per_s(&self) -> f64 {
        let g = &self.hw.kernels.gemm;
        let tile = g.mma_fraction.value;
        let fraction = g
            .power_fraction
            .as_ref()
            .map_or(tile, |p| p.value.min(tile));
        self.hw.gpu.peak_bf16_flops_per_s.value * fraction
    }

    /// The attention pass's best rate for head dimension 128, in FLOPs as
    /// [`crate::schedule::Attention::flops`] counts them (backward 2.5× forward).
    pub fn best_attention_flops_per_s(&self, pass: AttnPass) -> f64 {
        self.hw.gpu.peak_bf16_flops_per_s.value * attention::kernel(self.hw, pass, 128).mma_fraction
    }

    /// Node of a device (devices are numbered node by node).
    pub fn node_of(&self, device: u32) -> u64 {
        device as u64 / self.hw.gpus_per_node
    }

    /// Link class between two devices.
    pub fn link_class(&self, a: u32, b: u32) -> LinkClass {
        if a == b {
            LinkClass::Local
        } else if self.node_of(a) == self.node_of(b) {
            LinkClass::IntraNode
        } else {
            LinkClass::InterNode
        }
    }

    /// The narrowest link class a group of devices crosses.
    pub fn group_class(&self, devices: &[u32]) -> LinkClass {
        match devices {
            [] | [_] => LinkClass::Local,
            [first, rest @ ..] => {
                if rest
                    .iter()
                    .all(|&d| self.node_of(d) == self.node_of(*first))
                {
                    LinkClass::IntraNode
                } else {
                    LinkClass::InterNode
                }
            }
        }
    }

    /// Per-direction bandwidth of one device's port of a link class (bytes/s). Inter-node
    /// traffic of a GPU goes through its rail's NIC.
    pub fn link_bytes_per_s(&self, class: LinkClass) -> f64 {
        match class {
            LinkClass::Local => f64::INFINITY,
            LinkClass::IntraNode => self.hw.intra_node.bytes_per_s_per_direction.value,
            LinkClass::InterNode => self.hw.inter_node.bytes_per_s_per_nic.value,
        }
    }

    /// Latency α of one point-to-point message of a link class.
    pub fn p2p_latency_s(&self, class: LinkClass) -> f64 {
        match class {
            LinkClass::Local => 0.0,
            LinkClass::IntraNode => self.hw.intra_node.p2p_latency_s.value,
            LinkClass::InterNode => self.hw.inter_node.latency_s.value,
        }
    }

    /// `α + bytes / B` for one uncontended message between two devices.
    pub fn message_s(&self, from: u32, to: u32, bytes: f64) -> f64 {
        let c = self.link_class(from, to);
        if c == LinkClass::Local {
            return 0.0;
        }
        self.p2p_latency_s(c) + bytes / self.link_bytes_per_s(c)
    }

    /// Fraction by which compute slows while communication runs on the same device.
    pub fn overlap_slowdown(&self) -> f64 {
        self.hw.overlap_compute_slowdown_fraction.value
    }
}

/// How a collective over `n` ranks is broken into steps, as NCCL's ring algorithms do: in every
/// step each rank sends one chunk to its ring successor, and the step ends when all chunks have
/// arrived. Returns (steps, bytes per chunk). The simulator sends these chunks as flows (so
/// they share links with point-to-point traffic); the analytic model prices them as
/// `steps × (α + chunk / B)`.
///
/// - all-reduce of M bytes: 2(n−1) steps of M/n (reduce-scatter, then all-gather);
/// - all-gather (M = output), reduce-scatter (M = input): n−1 steps of M/n;
/// - all-to-all (M = local buffer): n−1 steps of M/n, rank i sending to rank i+k at step k;
/// - broadcast and reduce (M = buffer): NCCL pipelines the buffer through the ring so every
///   link carries it once; n−1 steps of M/(n−1) give the same large-message time, M/B (nccl-tests
///   report busbw = algbw for these), plus (n−1)α.
pub fn collective_steps(op: crate::schedule::CollectiveOp, n: u64, bytes: u64) -> (u64, u64) {
    use crate::schedule::CollectiveOp as C;
    if n <= 1 {
        return (0, 0);
    }
    match op {
        C::AllReduce => (2 * (n - 1), bytes.div_ceil(n)),
        C::AllGather | C::ReduceScatter | C::AllToAll => (n - 1, bytes.div_ceil(n)),
        C::Broadcast { .. } | C::Reduce { .. } => (n - 1, bytes.div_ceil(n - 1)),
    }
}
