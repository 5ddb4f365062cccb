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
//! - Messages: `α + bytes / B` for the link class the two devices share (NVLink/NVSwitch, an
//!   xGMI mesh or PCIe inside a node, InfiniBand or Ethernet across nodes), B the narrowest
//!   link of the route: a GPU's port through a switch, the pair's own link in a mesh, the NIC
//!   (or a leaf's share of an oversubscribed spine) across nodes ([`CostModel::link_bytes_per_s`]).
//! - Collectives: the library's tuner picks the fastest enabled algorithm (ring, tree, direct,
//!   NVLS) and protocol (LL, LL128, Simple) for the operation, group and size; [`collective`]
//!   says what each step moves ([`pattern`]) over which links ([`route`]) and what it costs.
//!
//! Input: a [`Hardware`] profile. Used by the simulator and the analytic model alike, so both
//! price the same work identically. Depends on `config`, `schedule`'s kernel shapes (plain
//! data) and `error`; never on calibration (`backend`, `fitting`, `calibrate`).

pub mod attention;
pub mod collective;
pub mod gemm;
pub mod memo;
pub mod memory_bound;
pub mod pattern;
pub mod route;

pub use collective::{collective_steps, Plan};
pub use route::{LinkKey, RouteKeys};

use crate::config::{Hardware, IntraNodeKind, Wiring};
use crate::schedule::{AttnPass, CollectiveOp, KernelShape};

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

    /// Device seconds of one kernel call inside a training step: [`Self::device_s`], GEMMs at
    /// the clock they hold in a step (`gemm::step_device_s`: the profile's
    /// `step_clock_fraction`, and in a job of many GPUs the slowest one's share of it).
    pub fn step_device_s(&self, k: &KernelShape) -> f64 {
        match k {
            KernelShape::Gemm(g) if !k.is_empty() => gemm::step_device_s(self.hw, g),
            _ => self.device_s(k),
        }
    }

    /// Seconds one kernel adds to a training step's compute stream: `max(host op time, device
    /// time in a step)` — the host issues ahead of the GPU, so only kernels shorter than the
    /// host's work per op are bounded by it. An empty call costs nothing.
    pub fn kernel_s(&self, k: &KernelShape) -> f64 {
        self.host_bounded(k, |k| self.step_device_s(k))
    }

    /// Seconds one kernel adds to a stream of kernels that runs for a moment only, as the
    /// executed units of `gpu-check` and the calibration's calls do: [`Self::kernel_s`] at the
    /// calibrated clock (no `step_clock_fraction`).
    pub fn short_run_kernel_s(&self, k: &KernelShape) -> f64 {
        self.host_bounded(k, |k| self.device_s(k))
    }

    /// `max(host op time, device)` of a call in a stream the host issues ahead of; an empty
    /// call costs nothing.
    fn host_bounded(&self, k: &KernelShape, device: impl Fn(&KernelShape) -> f64) -> f64 {
        if k.is_empty() {
            return 0.0;
        }
        device(k).max(self.hw.kernels.host.op_s.value)
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

    /// The best GEMM rate in a training step: a full wave of tiles, long k, no fixed costs
    /// (the F of METP's overlap condition) — no faster than the power cap allows, at the clock
    /// GEMMs hold in a step.
    pub fn best_gemm_flops_per_s(&self) -> f64 {
        let g = &self.hw.kernels.gemm;
        let tile = g.mma_fraction.value;
        let fraction = g
            .power_fraction
            .as_ref()
            .map_or(tile, |p| p.value.min(tile));
        self.hw.gpu.peak_bf16_flops_per_s.value * fraction * gemm::step_clock_fraction(self.hw)
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

    /// Bandwidth one transfer of a link class gets alone, per direction (bytes/s): the
    /// narrowest link of its route. Inside a node: the GPU's port through a switch or PCIe, the
    /// pair's link (capped by the port) in a mesh. Across nodes: the rail's NIC, or less when an
    /// oversubscribed spine gives a leaf less than one NIC's bandwidth (routes between leaves;
    /// the class figure assumes the route crosses the spine when one is described).
    pub fn link_bytes_per_s(&self, class: LinkClass) -> f64 {
        match class {
            LinkClass::Local => f64::INFINITY,
            LinkClass::IntraNode => {
                let port = self.hw.intra_node.bytes_per_s_per_direction.value;
                match (
                    self.hw.intra_node.kind,
                    &self.hw.intra_node.link_bytes_per_s_per_direction,
                ) {
                    (IntraNodeKind::Mesh, Some(l)) => l.value.min(port),
                    _ => port,
                }
            }
            LinkClass::InterNode => {
                let nic = self.hw.inter_node.bytes_per_s_per_nic.value;
                self.uplink_bytes_per_s().map_or(nic, |u| u.min(nic))
            }
        }
    }

    /// Bandwidth all of one GPU's concurrent transfers of a link class share, per direction:
    /// its intra-node port total, or its rail's NIC.
    pub fn port_bytes_per_s(&self, class: LinkClass) -> f64 {
        match class {
            LinkClass::Local => f64::INFINITY,
            LinkClass::IntraNode => self.hw.intra_node.bytes_per_s_per_direction.value,
            LinkClass::InterNode => self.hw.inter_node.bytes_per_s_per_nic.value,
        }
    }

    /// NICs wired to one leaf switch (`None` without a spine).
    pub fn leaf_ports(&self) -> Option<u64> {
        let sp = self.hw.inter_node.spine.as_ref()?;
        Some(match self.hw.inter_node.wiring {
            Wiring::Rail => sp.nodes_per_leaf,
            Wiring::Node => sp.nodes_per_leaf * self.hw.inter_node.nics_per_node.max(1),
        })
    }

    /// One leaf's spine capacity per direction: its NICs' bandwidth over the oversubscription
    /// (`None` without a spine).
    pub fn uplink_bytes_per_s(&self) -> Option<f64> {
        let sp = self.hw.inter_node.spine.as_ref()?;
        let ports = self.leaf_ports()? as f64;
        Some(ports * self.hw.inter_node.bytes_per_s_per_nic.value / sp.oversubscription.value)
    }

    /// The NIC (rail) a device sends and receives inter-node traffic through, within its node.
    pub fn rail_of(&self, device: u32) -> u64 {
        (device as u64 % self.hw.gpus_per_node.max(1)) % self.hw.inter_node.nics_per_node.max(1)
    }

    /// The leaf switch a device's NIC hangs off (0 for every device without a spine).
    pub fn leaf_of(&self, device: u32) -> u64 {
        let Some(sp) = self.hw.inter_node.spine.as_ref() else {
            return 0;
        };
        let group = self.node_of(device) / sp.nodes_per_leaf.max(1);
        match self.hw.inter_node.wiring {
            Wiring::Rail => group * self.hw.inter_node.nics_per_node.max(1) + self.rail_of(device),
            Wiring::Node => group,
        }
    }

    /// α and rate of a point-to-point message between a group's ring neighbours at the group's
    /// narrowest link class: the library's point-to-point rate inside a node; across nodes the
    /// rail's NIC, or a leaf's spine share when the group spans leaves.
    pub fn group_p2p(&self, devices: &[u32]) -> (f64, f64) {
        let class = self.group_class(devices);
        let mut rate = self.p2p_bytes_per_s(class);
        if class == LinkClass::InterNode {
            let first = devices.first().map_or(0, |&d| self.leaf_of(d));
            if devices.iter().all(|&d| self.leaf_of(d) == first) {
                rate = self.hw.inter_node.bytes_per_s_per_nic.value;
            }
        }
        (self.p2p_latency_s(class), rate)
    }

    /// The plan the collective library runs for `op` over the ranks `devices` (a group, in
    /// ring order) with a buffer of `bytes`: algorithm, protocol and steps ([`collective`]).
    pub fn collective_plan(&self, op: CollectiveOp, devices: &[u32], bytes: u64) -> Plan {
        collective::plan(self, collective::Op::Collective(op), devices, bytes)
    }

    /// Seconds of `op` over the ranks `devices` (a group, in ring order) with a buffer of
    /// `bytes`, uncontended, as the library runs it ([`collective`]).
    pub fn collective_s(&self, op: CollectiveOp, devices: &[u32], bytes: u64) -> f64 {
        self.collective_plan(op, devices, bytes).time_s
    }

    /// The library's point-to-point rate of a link class: inside a node the narrower of the
    /// link and the library's send/recv rate (`collective_library.p2p_bytes_per_s`).
    pub fn p2p_bytes_per_s(&self, class: LinkClass) -> f64 {
        let link = self.link_bytes_per_s(class);
        match (class, &self.hw.collective_library) {
            (LinkClass::IntraNode, Some(lib)) => lib
                .p2p_bytes_per_s
                .as_ref()
                .map_or(link, |p| p.value.min(link)),
            _ => link,
        }
    }

    /// Bytes a point-to-point message of `bytes` puts on its links so that, at the links'
    /// rate, it takes as long as at the library's point-to-point rate ([`Self::p2p_bytes_per_s`]).
    pub fn p2p_wire_bytes(&self, class: LinkClass, bytes: f64) -> f64 {
        bytes * self.link_bytes_per_s(class) / self.p2p_bytes_per_s(class)
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
        self.p2p_latency_s(c) + bytes / self.p2p_bytes_per_s(c)
    }

    /// Fraction by which compute slows while communication runs on the same device.
    pub fn overlap_slowdown(&self) -> f64 {
        self.hw.overlap_compute_slowdown_fraction.value
    }
}
