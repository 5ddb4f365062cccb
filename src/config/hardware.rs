//! Hardware profile (`hardware-profiles/*.json`): one node of identical GPUs, how nodes are
//! joined, and the bytes the runtime reserves. Every figure carries its source; `hardware_check.rs`
//! validates them.

use serde::{Deserialize, Serialize};

use super::figure::Figure;
use super::kernel_model::KernelModel;
use super::library::CollectiveLibrary;
use super::topology::{CollectiveRule, Spine, Wiring};
use crate::error::{Error, Result};

/// The GPU of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Product name.
    pub model: String,
    /// Device memory as the driver reports it.
    pub memory_bytes: Figure,
    /// Dense bf16 peak.
    pub peak_bf16_flops_per_s: Figure,
    /// Dense FP8 peak, where the tensor cores have FP8 (Hopper and later; absent on Ampere and
    /// in profiles without a source for it: FP8 training is then refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_fp8_flops_per_s: Option<Figure>,
    /// Achievable HBM bandwidth.
    pub hbm_bytes_per_s: Figure,
    /// Streaming multiprocessors (the units thread blocks are scheduled on).
    pub sm_count: Figure,
}

/// How the GPUs of one node (one scale-up domain: an NVLink domain of 72 GPUs is one "node")
/// talk to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IntraNodeKind {
    /// NVLink through NVSwitch: full bandwidth between any pair; only a GPU's own ports can
    /// be a bottleneck.
    Nvswitch,
    /// PCIe only.
    Pcie,
    /// A full mesh (AMD xGMI / Infinity Fabric): every pair of GPUs has a link of its own of
    /// `link_bytes_per_s_per_direction`, so a ring hop gets one link while traffic to all peers
    /// at once uses all of them.
    Mesh,
}

impl IntraNodeKind {
    /// The name in profiles and outputs.
    pub fn id(self) -> &'static str {
        match self {
            IntraNodeKind::Nvswitch => "nvswitch",
            IntraNodeKind::Pcie => "pcie",
            IntraNodeKind::Mesh => "mesh",
        }
    }
}

/// Intra-node interconnect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntraNode {
    /// Interconnect kind.
    pub kind: IntraNodeKind,
    /// Effective bandwidth per GPU per direction: everything one GPU sends (or receives)
    /// inside the node at once.
    pub bytes_per_s_per_direction: Figure,
    /// Mesh only: effective bandwidth of the one link between a pair of GPUs, per direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bytes_per_s_per_direction: Option<Figure>,
    /// Latency of one point-to-point message.
    pub p2p_latency_s: Figure,
    /// Latency of one small collective.
    pub collective_latency_s: Figure,
}

/// Inter-node fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum InterNodeKind {
    /// InfiniBand HDR (200 Gb/s per NIC).
    #[serde(rename = "ib-hdr")]
    IbHdr,
    /// InfiniBand NDR (400 Gb/s per NIC).
    #[serde(rename = "ib-ndr")]
    IbNdr,
    /// RDMA over Converged Ethernet.
    #[serde(rename = "roce")]
    Roce,
}

/// How nodes are joined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterNode {
    /// Fabric kind.
    pub kind: InterNodeKind,
    /// NICs per node (one per GPU on DGX-class nodes).
    pub nics_per_node: u64,
    /// Effective bandwidth of one NIC per direction.
    pub bytes_per_s_per_nic: Figure,
    /// Latency of one message across the fabric.
    pub latency_s: Figure,
    /// How the NICs reach the leaf switches (default: rail-optimised).
    #[serde(default, skip_serializing_if = "Wiring::is_default")]
    pub wiring: Wiring,
    /// The spine between leaf switches; none: one non-blocking switch layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spine: Option<Spine>,
}

/// Memory the runtime takes before any tensor is allocated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reserved {
    /// CUDA context.
    pub cuda_context_bytes: Figure,
    /// NCCL communicator buffers.
    pub nccl_bytes: Figure,
    /// Allocator fragmentation and caching headroom, as a fraction of device memory.
    pub allocator_headroom_fraction: Figure,
}

/// A hardware profile: `nodes` nodes of `gpus_per_node` GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    /// Profile name.
    pub name: String,
    /// One-line description.
    pub description: String,
    /// GPUs in one node.
    pub gpus_per_node: u64,
    /// Number of nodes (overridden by `--nodes`).
    pub nodes: u64,
    /// The GPU.
    pub gpu: Gpu,
    /// The kernel model's parameters.
    pub kernels: KernelModel,
    /// Intra-node links.
    pub intra_node: IntraNode,
    /// Inter-node fabric.
    pub inter_node: InterNode,
    /// Reserved memory.
    pub reserved: Reserved,
    /// Fraction by which compute slows while communication kernels run beside it.
    pub overlap_compute_slowdown_fraction: Figure,
    /// The collective algorithms the library has beyond the ring, by operation, scope and size
    /// (every matching rule is a candidate, the ring always is; the fastest wins, as NCCL's
    /// tuner picks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collectives: Vec<CollectiveRule>,
    /// The collective library's protocols, NVLS and point-to-point rate (none: every step costs
    /// the point-to-point latency, at the full link bandwidth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective_library: Option<CollectiveLibrary>,
}

impl Hardware {
    /// The dense tensor-core peak for linear layers of `dtype`: the FP8 peak where `dtype` is FP8
    /// and the profile has one, else the bf16 peak (what an MFU refers to and what bounds a
    /// measured rate; [`Hardware::refuses`] says when FP8 cannot run at all).
    pub fn peak_flops_per_s(&self, dtype: super::LinearDtype) -> f64 {
        match (dtype, &self.gpu.peak_fp8_flops_per_s) {
            (super::LinearDtype::Fp8, Some(f)) => f.value,
            _ => self.gpu.peak_bf16_flops_per_s.value,
        }
    }

    /// Why linear layers of `dtype` cannot run on this profile, in words (`None`: they can):
    /// FP8 needs an FP8 peak.
    pub fn refuses(&self, dtype: super::LinearDtype) -> Option<String> {
        (dtype == super::LinearDtype::Fp8 && self.gpu.peak_fp8_flops_per_s.is_none()).then(|| {
            format!(
                "fp8 needs FP8 tensor cores: profile {} has no gpu.peak_fp8_flops_per_s",
                self.name
            )
        })
    }

    /// The collective library: the profile's, or [`CollectiveLibrary::fallback`].
    pub fn library(&self) -> std::borrow::Cow<'_, CollectiveLibrary> {
        match &self.collective_library {
            Some(l) => std::borrow::Cow::Borrowed(l),
            None => std::borrow::Cow::Owned(CollectiveLibrary::fallback(
                &self.intra_node.p2p_latency_s,
                &self.inter_node.latency_s,
            )),
        }
    }

    /// GPUs under one leaf switch of the fabric (one node's without a spine): moved by a
    /// multiple of this, a group crosses the same kinds of links, rails and leaves.
    pub fn gpus_per_leaf(&self) -> u64 {
        let per_leaf = self
            .inter_node
            .spine
            .as_ref()
            .map_or(1, |sp| sp.nodes_per_leaf.max(1));
        self.gpus_per_node.max(1).saturating_mul(per_leaf)
    }

    /// Total GPUs described (saturating: a validated profile is within
    /// [`MAX_GPUS`](super::limits::MAX_GPUS), and `--nodes` is checked against it).
    pub fn total_gpus(&self) -> u64 {
        self.gpus_per_node.saturating_mul(self.nodes)
    }

    /// Sets the node count (`--nodes`), refusing one that makes more GPUs than the tool
    /// models.
    pub fn set_nodes(&mut self, nodes: u64) -> Result<()> {
        use super::limits::{MAX_GPUS, MAX_NODES};
        let gpus = nodes.checked_mul(self.gpus_per_node);
        match gpus {
            Some(g) if (1..=MAX_NODES).contains(&nodes) && g <= MAX_GPUS => {
                self.nodes = nodes;
                Ok(())
            }
            _ => Err(Error::arg(
                "--nodes",
                format!(
                    "{nodes} nodes of {} GPUs: the most is {} nodes and {MAX_GPUS} GPUs in all",
                    self.gpus_per_node,
                    (MAX_GPUS / self.gpus_per_node.max(1)).min(MAX_NODES)
                ),
            )),
        }
    }

    /// Device memory in bytes.
    pub fn memory_bytes(&self) -> u128 {
        self.gpu.memory_bytes.value as u128
    }

    /// Bytes the runtime takes on each device: context + NCCL + allocator headroom.
    pub fn reserved_bytes(&self) -> u128 {
        let headroom =
            (self.gpu.memory_bytes.value * self.reserved.allocator_headroom_fraction.value).round();
        self.reserved.cuda_context_bytes.value.round() as u128
            + self.reserved.nccl_bytes.value.round() as u128
            + headroom as u128
    }
}
