//! Cost model: turns work into seconds (DESIGN §4).
//!
//! - Compute: `max(flops / (peak × efficiency(size)), bytes / (HBM × efficiency)) + launch`,
//!   with the efficiency tables of the hardware profile (calibration replaces them).
//! - Messages: `α + bytes / B` for the link class the two devices share (NVLink/NVSwitch or
//!   PCIe inside a node, InfiniBand across nodes).
//!
//! Input: a [`Hardware`] profile. Used by the simulator and the analytic model alike, so both
//! price the same work identically. Depends on `config` only (and `schedule`'s `OpKind` enum,
//! which is plain data).

use crate::config::Hardware;
use crate::schedule::OpKind;

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

    /// Effective FLOP/s a kernel of `op` with `flops` reaches.
    pub fn flops_per_s(&self, op: OpKind, flops: f64) -> f64 {
        let peak = self.hw.gpu.peak_bf16_flops_per_s.value;
        let eff = match op {
            OpKind::Gemm => self.hw.efficiency.gemm.at(flops),
            OpKind::Attention => self.hw.efficiency.attention.at(flops),
            OpKind::Elementwise => 1.0,
        };
        peak * eff
    }

    /// Effective HBM bytes/s a kernel of `op` moving `bytes` reaches.
    pub fn hbm_bytes_per_s(&self, op: OpKind, bytes: f64) -> f64 {
        let bw = self.hw.gpu.hbm_bytes_per_s.value;
        match op {
            OpKind::Elementwise => bw * self.hw.efficiency.elementwise.at(bytes),
            _ => bw,
        }
    }

    /// Seconds for one kernel, launch overhead included.
    pub fn compute_s(&self, op: OpKind, flops: f64, bytes: f64) -> f64 {
        let t_flops = if flops > 0.0 {
            flops / self.flops_per_s(op, flops)
        } else {
            0.0
        };
        let t_bytes = if bytes > 0.0 {
            bytes / self.hbm_bytes_per_s(op, bytes)
        } else {
            0.0
        };
        t_flops.max(t_bytes) + self.hw.gpu.kernel_launch_s.value
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
