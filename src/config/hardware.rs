//! Hardware profile (`hardware-profiles/*.json`): one node of identical GPUs, how nodes are
//! joined, and the bytes the runtime reserves. Every figure carries its source.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A number with the place it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    /// The number, in the unit the field name carries.
    pub value: f64,
    /// Datasheet, paper, measurement or derivation.
    pub source: String,
}

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
    /// Achievable HBM bandwidth.
    pub hbm_bytes_per_s: Figure,
    /// Per-kernel launch overhead.
    pub kernel_launch_s: Figure,
}

/// Fraction of peak a kernel reaches, as a function of its size, interpolated in log(size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EfficiencyTable {
    /// Where the points come from.
    pub source: String,
    /// `(size, fraction)` pairs sorted by size.
    pub points: Vec<(f64, f64)>,
}

impl EfficiencyTable {
    /// Fraction at `size`: clamped to the end points, log-linear in between.
    pub fn at(&self, size: f64) -> f64 {
        let pts = &self.points;
        if size <= pts[0].0 {
            return pts[0].1;
        }
        for w in pts.windows(2) {
            let ((x0, y0), (x1, y1)) = (w[0], w[1]);
            if size <= x1 {
                let t = (size.ln() - x0.ln()) / (x1.ln() - x0.ln());
                return y0 + t * (y1 - y0);
            }
        }
        pts[pts.len() - 1].1
    }
}

/// Efficiency tables per kernel kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    /// Dense GEMM; size = FLOPs of one call; fraction of peak FLOP/s.
    pub gemm: EfficiencyTable,
    /// Fused attention; size = FLOPs of one call; fraction of peak FLOP/s.
    pub attention: EfficiencyTable,
    /// Element-wise kernels; size = bytes moved; fraction of HBM bandwidth.
    pub elementwise: EfficiencyTable,
}

/// How the GPUs of one node talk to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IntraNodeKind {
    /// NVLink through NVSwitch: full bandwidth between any pair.
    Nvswitch,
    /// PCIe only.
    Pcie,
}

/// Intra-node interconnect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntraNode {
    /// Interconnect kind.
    pub kind: IntraNodeKind,
    /// Effective bandwidth per GPU per direction.
    pub bytes_per_s_per_direction: Figure,
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
    /// Kernel efficiency tables.
    pub efficiency: Efficiency,
    /// Intra-node links.
    pub intra_node: IntraNode,
    /// Inter-node fabric.
    pub inter_node: InterNode,
    /// Reserved memory.
    pub reserved: Reserved,
    /// Fraction by which compute slows while communication kernels run beside it.
    pub overlap_compute_slowdown_fraction: Figure,
}

impl Hardware {
    /// Checks every figure; `path` is used in the error message.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |field: &str, message: String| Error::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        if self.gpus_per_node == 0 {
            return Err(bad("gpus_per_node", "must be a positive integer".into()));
        }
        if self.nodes == 0 {
            return Err(bad("nodes", "must be a positive integer".into()));
        }
        if self.inter_node.nics_per_node == 0 {
            return Err(bad(
                "inter_node.nics_per_node",
                "must be a positive integer".into(),
            ));
        }
        let positive = [
            ("gpu.memory_bytes", &self.gpu.memory_bytes),
            ("gpu.peak_bf16_flops_per_s", &self.gpu.peak_bf16_flops_per_s),
            ("gpu.hbm_bytes_per_s", &self.gpu.hbm_bytes_per_s),
            (
                "intra_node.bytes_per_s_per_direction",
                &self.intra_node.bytes_per_s_per_direction,
            ),
            (
                "inter_node.bytes_per_s_per_nic",
                &self.inter_node.bytes_per_s_per_nic,
            ),
        ];
        for (field, fig) in positive {
            if !(fig.value.is_finite() && fig.value > 0.0) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!("must be a positive number, got {}", fig.value),
                ));
            }
        }
        if self.gpu.memory_bytes.value.fract() != 0.0 || self.gpu.memory_bytes.value > 2f64.powi(60)
        {
            return Err(bad(
                "gpu.memory_bytes.value",
                format!(
                    "must be a whole number of bytes below 2^60, got {}",
                    self.gpu.memory_bytes.value
                ),
            ));
        }
        let non_negative = [
            ("gpu.kernel_launch_s", &self.gpu.kernel_launch_s),
            ("intra_node.p2p_latency_s", &self.intra_node.p2p_latency_s),
            (
                "intra_node.collective_latency_s",
                &self.intra_node.collective_latency_s,
            ),
            ("inter_node.latency_s", &self.inter_node.latency_s),
            (
                "reserved.cuda_context_bytes",
                &self.reserved.cuda_context_bytes,
            ),
            ("reserved.nccl_bytes", &self.reserved.nccl_bytes),
        ];
        for (field, fig) in non_negative {
            if !(fig.value.is_finite() && fig.value >= 0.0) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!("must be a non-negative number, got {}", fig.value),
                ));
            }
        }
        for (field, fig) in [
            (
                "reserved.allocator_headroom_fraction",
                &self.reserved.allocator_headroom_fraction,
            ),
            (
                "overlap_compute_slowdown_fraction",
                &self.overlap_compute_slowdown_fraction,
            ),
        ] {
            if !(fig.value >= 0.0 && fig.value < 1.0) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!("must be in [0, 1), got {}", fig.value),
                ));
            }
        }
        for (name, table) in [
            ("gemm", &self.efficiency.gemm),
            ("attention", &self.efficiency.attention),
            ("elementwise", &self.efficiency.elementwise),
        ] {
            let field = format!("efficiency.{name}.points");
            if table.points.is_empty() {
                return Err(bad(&field, "needs at least one point".into()));
            }
            let mut prev = 0.0;
            for (i, &(size, frac)) in table.points.iter().enumerate() {
                if !(size.is_finite() && size > prev) {
                    return Err(bad(
                        &format!("{field}[{i}]"),
                        format!("sizes must be positive and increasing, got {size}"),
                    ));
                }
                if !(frac > 0.0 && frac <= 1.0) {
                    return Err(bad(
                        &format!("{field}[{i}]"),
                        format!("fraction must be in (0, 1], got {frac}"),
                    ));
                }
                prev = size;
            }
        }
        Ok(())
    }

    /// Total GPUs described.
    pub fn total_gpus(&self) -> u64 {
        self.gpus_per_node * self.nodes
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
