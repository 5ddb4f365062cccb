//! Hardware profile (`hardware-profiles/*.json`): one node of identical GPUs, how nodes are
//! joined, and the bytes the runtime reserves. Every figure carries its source.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::topology::{tree_runs, Algorithm, CollectiveRule, Spine, Wiring};
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
    /// Streaming multiprocessors (the units thread blocks are scheduled on).
    pub sm_count: Figure,
}

/// How long the host takes per kernel, and what an isolated, event-timed call sees on top of
/// the device time (the kernel model's host part; see `cost`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostModel {
    /// Host time to issue one eager op: in a training step the host runs ahead of the GPU, so a
    /// kernel costs `max(op_s, device time)`.
    pub op_s: Figure,
    /// What a call timed alone (CUDA events around one call) adds to its device time: the
    /// launch latency the GPU waits for.
    pub isolated_gap_s: Figure,
    /// The shortest time an isolated call is ever measured at (host-bound calls).
    pub isolated_floor_s: Figure,
}

/// Memory-bound kernels (copies, element-wise passes, reductions): `latency_s + bytes moved /
/// gpu.hbm_bytes_per_s` for copies, at `elementwise_fraction` of that bandwidth for element-wise
/// passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryModel {
    /// Fixed device time of one kernel (launch, DRAM latency, tail).
    pub latency_s: Figure,
    /// Share of the copy bandwidth an element-wise pass reaches.
    pub elementwise_fraction: Figure,
}

/// Dense GEMMs (cuBLAS-like): output tiles of `tile`×2·`tile`, 2·`tile`×`tile` or
/// `tile`×`tile`, waves of `gpu.sm_count` tiles, each tile `tile_s` plus its k-steps at
/// `mma_fraction` of an SM's peak; the library's best tile (and split-K) per shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmModel {
    /// Short edge of the output tiles (rows).
    pub tile: Figure,
    /// Depth of one k-step (elements of k loaded per pipeline stage).
    pub k_step: Figure,
    /// Fraction of one SM's peak FLOP rate reached inside a tile's k-loop.
    pub mma_fraction: Figure,
    /// Fixed time per tile (prologue, epilogue not hidden by the next tile).
    pub tile_s: Figure,
    /// Fixed device time per call.
    pub call_s: Figure,
    /// The sustained fraction of `gpu.peak_bf16_flops_per_s` a long GEMM keeps once the GPU
    /// holds its power cap by lowering its clock; absent: no cap (`src/cost/gemm.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_fraction: Option<Figure>,
    /// How long a GEMM runs at its tile rate before the power cap takes over (the time
    /// constant of the clock's response); required with `power_fraction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_time_s: Option<Figure>,
    /// 1: the library may run stream-K (every tile's k-steps spread evenly over the SMs, with
    /// fp32 partial tiles fixed up) when tiles quantize badly; 0 or absent: it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_k: Option<Figure>,
}

/// One head dimension's fused-attention kernel: its tiles, occupancy and rates (the
/// pass-level `block_q`, `block_k`, `ctas_per_sm`, `mma_fraction` and `solo_fraction` are the
/// kernel for head dimensions no entry covers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionTiles {
    /// The kernel's head dimension: it runs calls of head dimension up to this one (padded).
    pub head_dim: u64,
    /// Query rows of one block.
    pub block_q: Figure,
    /// Key rows of one block.
    pub block_k: Figure,
    /// Thread blocks resident on one SM at once.
    pub ctas_per_sm: Figure,
    /// Fraction of one SM's peak FLOP rate the SM reaches inside the block loop.
    pub mma_fraction: Figure,
    /// Share of that rate one thread block reaches alone on an SM.
    pub solo_fraction: Figure,
    /// Query rows of one block of the split-KV kernel (forward, `max_splits` > 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_block_q: Option<Figure>,
    /// Key rows of one block of the split-KV kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_block_k: Option<Figure>,
}

/// Fused attention, one pass (FlashAttention-2-like): thread blocks of `block_q` queries
/// (forward) or `block_k` keys (backward), `ctas_per_sm` of them resident per SM, each visiting
/// the (query block × key block) pairs the mask leaves, `tile_s` + pairs × pair time at
/// `mma_fraction` of the SM's peak shared by its resident blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionModel {
    /// Query rows of one block.
    pub block_q: Figure,
    /// Key rows of one block.
    pub block_k: Figure,
    /// Thread blocks resident on one SM at once.
    pub ctas_per_sm: Figure,
    /// Fraction of one SM's peak FLOP rate reached inside the block loop.
    pub mma_fraction: Figure,
    /// Fixed time per thread block.
    pub tile_s: Figure,
    /// Fixed device time per call.
    pub call_s: Figure,
    /// Bytes of extra memory-bound passes per query element (batch × q_tokens × heads ×
    /// head_dim), e.g. the backward's pre- and post-processing; 0 for none.
    pub extra_bytes_per_element: Figure,
    /// Host time an isolated call spends around its kernels beyond `host.isolated_floor_s`
    /// (a framework's ops, autograd): it raises the isolated call's floor; charged only when
    /// pricing an isolated call, never in a step.
    pub isolated_extra_s: Figure,
    /// Share of the SM's rate one thread block reaches alone (absent: `1 / ctas_per_sm`, a
    /// lone block no faster than a shared one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solo_fraction: Option<Figure>,
    /// Forward only: the most key/value splits FlashAttention-2's split-KV heuristic may
    /// choose when the grid under-fills the GPU (absent or 1: the kernel never splits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_splits: Option<Figure>,
    /// Per head dimension: the kernel that runs it (empty: the fields above for every one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiles: Vec<AttentionTiles>,
}

/// The kernel model's parameters (DESIGN §4; formulas in `src/cost`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelModel {
    /// Host-side costs.
    pub host: HostModel,
    /// Copies and element-wise kernels.
    pub memory: MemoryModel,
    /// GEMMs.
    pub gemm: GemmModel,
    /// Fused attention forward.
    pub attention_fwd: AttentionModel,
    /// Fused attention backward.
    pub attention_bwd: AttentionModel,
}

impl KernelModel {
    /// Every figure with its dotted field name (for validation, fitting and reports).
    pub fn figures(&self) -> Vec<(String, &Figure)> {
        let mut v: Vec<(String, &Figure)> = vec![
            ("kernels.host.op_s".into(), &self.host.op_s),
            (
                "kernels.host.isolated_gap_s".into(),
                &self.host.isolated_gap_s,
            ),
            (
                "kernels.host.isolated_floor_s".into(),
                &self.host.isolated_floor_s,
            ),
            ("kernels.memory.latency_s".into(), &self.memory.latency_s),
            (
                "kernels.memory.elementwise_fraction".into(),
                &self.memory.elementwise_fraction,
            ),
            ("kernels.gemm.tile".into(), &self.gemm.tile),
            ("kernels.gemm.k_step".into(), &self.gemm.k_step),
            ("kernels.gemm.mma_fraction".into(), &self.gemm.mma_fraction),
            ("kernels.gemm.tile_s".into(), &self.gemm.tile_s),
            ("kernels.gemm.call_s".into(), &self.gemm.call_s),
        ];
        for (name, f) in [
            ("power_fraction", &self.gemm.power_fraction),
            ("power_time_s", &self.gemm.power_time_s),
            ("stream_k", &self.gemm.stream_k),
        ] {
            if let Some(f) = f {
                v.push((format!("kernels.gemm.{name}"), f));
            }
        }
        for (pass, a) in [
            ("attention_fwd", &self.attention_fwd),
            ("attention_bwd", &self.attention_bwd),
        ] {
            for (f, fig) in a.figures() {
                v.push((format!("kernels.{pass}.{f}"), fig));
            }
            for (f, fig) in [
                ("solo_fraction", &a.solo_fraction),
                ("max_splits", &a.max_splits),
            ] {
                if let Some(fig) = fig {
                    v.push((format!("kernels.{pass}.{f}"), fig));
                }
            }
            for t in &a.tiles {
                for (f, fig) in t.figures() {
                    v.push((format!("kernels.{pass}.tiles[d={}].{f}", t.head_dim), fig));
                }
            }
        }
        v
    }
}

impl AttentionModel {
    /// The figures with their field names.
    pub fn figures(&self) -> [(&'static str, &Figure); 8] {
        [
            ("block_q", &self.block_q),
            ("block_k", &self.block_k),
            ("ctas_per_sm", &self.ctas_per_sm),
            ("mma_fraction", &self.mma_fraction),
            ("tile_s", &self.tile_s),
            ("call_s", &self.call_s),
            ("extra_bytes_per_element", &self.extra_bytes_per_element),
            ("isolated_extra_s", &self.isolated_extra_s),
        ]
    }
}

impl AttentionTiles {
    /// The figures with their field names.
    pub fn figures(&self) -> Vec<(&'static str, &Figure)> {
        let mut v = vec![
            ("block_q", &self.block_q),
            ("block_k", &self.block_k),
            ("ctas_per_sm", &self.ctas_per_sm),
            ("mma_fraction", &self.mma_fraction),
            ("solo_fraction", &self.solo_fraction),
        ];
        for (f, fig) in [
            ("split_block_q", &self.split_block_q),
            ("split_block_k", &self.split_block_k),
        ] {
            if let Some(fig) = fig {
                v.push((f, fig));
            }
        }
        v
    }
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
    /// The collective algorithm table (first matching rule wins; ring when none matches).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collectives: Vec<CollectiveRule>,
}

impl Hardware {
    /// Checks every figure; `path` is used in the error message.
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |field: &str, message: String| Error::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        use super::limits::{
            check_name, check_text, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_KERNEL_FIGURE,
            MAX_NICS_PER_NODE, MAX_NODES, MAX_PROFILE_BYTES, MAX_PROFILE_LATENCY_S, MAX_TEXT_CHARS,
            PROFILE_RATE_RANGE,
        };
        for (field, value, max) in [
            ("gpus_per_node", self.gpus_per_node, MAX_GPUS_PER_NODE),
            ("nodes", self.nodes, MAX_NODES),
            (
                "inter_node.nics_per_node",
                self.inter_node.nics_per_node,
                MAX_NICS_PER_NODE,
            ),
        ] {
            if value == 0 || value > max {
                return Err(bad(
                    field,
                    format!("must be a whole number from 1 to {max}, got {value}"),
                ));
            }
        }
        if self.gpus_per_node * self.nodes > MAX_GPUS {
            return Err(bad(
                "nodes",
                format!(
                    "{} nodes × {} GPUs is more than {MAX_GPUS} GPUs",
                    self.nodes, self.gpus_per_node
                ),
            ));
        }
        let positive = [
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
        let (lo, hi) = PROFILE_RATE_RANGE;
        for (field, fig) in positive {
            if !(fig.value.is_finite() && fig.value >= lo && fig.value <= hi) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!(
                        "must be a rate from {lo:e} to {hi:e} per second, got {:?}",
                        fig.value
                    ),
                ));
            }
        }
        for (field, fig) in [
            ("gpu.memory_bytes", &self.gpu.memory_bytes),
            (
                "reserved.cuda_context_bytes",
                &self.reserved.cuda_context_bytes,
            ),
            ("reserved.nccl_bytes", &self.reserved.nccl_bytes),
        ] {
            let v = fig.value;
            if !(v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_PROFILE_BYTES) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!("must be a whole number of bytes from 0 to 2^60, got {v:?}"),
                ));
            }
        }
        if self.gpu.memory_bytes.value == 0.0 {
            return Err(bad(
                "gpu.memory_bytes.value",
                "must be a positive number of bytes".into(),
            ));
        }
        for (field, fig) in [
            ("intra_node.p2p_latency_s", &self.intra_node.p2p_latency_s),
            (
                "intra_node.collective_latency_s",
                &self.intra_node.collective_latency_s,
            ),
            ("inter_node.latency_s", &self.inter_node.latency_s),
        ] {
            if !(fig.value.is_finite() && fig.value >= 0.0 && fig.value <= MAX_PROFILE_LATENCY_S) {
                return Err(bad(
                    &format!("{field}.value"),
                    format!(
                        "must be a latency from 0 to {MAX_PROFILE_LATENCY_S} s, got {:?}",
                        fig.value
                    ),
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
                    format!("must be in [0, 1), got {:?}", fig.value),
                ));
            }
        }
        let whole = |field: &str, fig: &Figure| -> Result<()> {
            if !(fig.value.is_finite()
                && fig.value >= 1.0
                && fig.value.fract() == 0.0
                && fig.value <= 1e6)
            {
                return Err(bad(
                    &format!("{field}.value"),
                    format!("must be a whole number from 1 to 10^6, got {:?}", fig.value),
                ));
            }
            Ok(())
        };
        whole("gpu.sm_count", &self.gpu.sm_count)?;
        // Names after the numbers: a `--scale` name carries the factors, so a factor that
        // breaks a figure is reported as the figure it breaks.
        check_name(&self.name).map_err(|m| bad("name", m))?;
        check_name(&self.gpu.model).map_err(|m| bad("gpu.model", m))?;
        check_text(&self.description, MAX_TEXT_CHARS).map_err(|m| bad("description", m))?;
        self.validate_topology(path)?;
        let k = &self.kernels;
        if k.gemm.power_fraction.is_some() != k.gemm.power_time_s.is_some() {
            return Err(bad(
                "kernels.gemm.power_time_s",
                "power_fraction and power_time_s come together (or neither)".into(),
            ));
        }
        for (pass, a) in [
            ("attention_fwd", &k.attention_fwd),
            ("attention_bwd", &k.attention_bwd),
        ] {
            let mut dims: Vec<u64> = a.tiles.iter().map(|t| t.head_dim).collect();
            dims.sort_unstable();
            if dims.iter().any(|&d| d == 0 || d > 1 << 20) || dims.windows(2).any(|w| w[0] == w[1])
            {
                return Err(bad(
                    &format!("kernels.{pass}.tiles"),
                    "head_dim must be positive, at most 2^20, and appear once".into(),
                ));
            }
        }
        for (field, fig) in k.figures() {
            let name = field.rsplit('.').next().unwrap_or("");
            match name {
                "tile" | "k_step" | "block_q" | "block_k" | "ctas_per_sm" | "max_splits"
                | "split_block_q" | "split_block_k" => whole(&field, fig)?,
                "stream_k" => {
                    if !(fig.value == 0.0 || fig.value == 1.0) {
                        return Err(bad(
                            &format!("{field}.value"),
                            format!("must be 0 or 1, got {}", fig.value),
                        ));
                    }
                }
                "mma_fraction" | "elementwise_fraction" | "power_fraction" | "solo_fraction" => {
                    if !(fig.value > 0.0 && fig.value <= 1.0) {
                        return Err(bad(
                            &format!("{field}.value"),
                            format!("must be in (0, 1], got {:?}", fig.value),
                        ));
                    }
                }
                _ => {
                    // Times and byte counts: non-negative, and below a day / 2^40 so that no
                    // kernel can take an impossible time.
                    if !(fig.value.is_finite() && fig.value >= 0.0 && fig.value < MAX_KERNEL_FIGURE)
                    {
                        return Err(bad(
                            &format!("{field}.value"),
                            format!(
                                "must be a non-negative number below {MAX_KERNEL_FIGURE}, got {:?}",
                                fig.value
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks the mesh link, the spine and the collective rules.
    fn validate_topology(&self, path: &Path) -> Result<()> {
        let bad = |field: &str, message: String| Error::InvalidField {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        // A rate, bounded as every other rate of the profile (config::limits): a tiny one made
        // every transfer longer than the simulator's clock.
        let positive = |field: &str, fig: &Figure| -> Result<()> {
            let (lo, hi) = super::limits::PROFILE_RATE_RANGE;
            if fig.value.is_finite() && fig.value >= lo && fig.value <= hi {
                Ok(())
            } else {
                Err(bad(
                    &format!("{field}.value"),
                    format!(
                        "must be a rate from {lo:e} to {hi:e} per second, got {:?}",
                        fig.value
                    ),
                ))
            }
        };
        match (
            self.intra_node.kind,
            &self.intra_node.link_bytes_per_s_per_direction,
        ) {
            (IntraNodeKind::Mesh, None) => {
                return Err(bad(
                    "intra_node.link_bytes_per_s_per_direction",
                    "a mesh needs the bandwidth of one GPU-to-GPU link".into(),
                ))
            }
            (IntraNodeKind::Mesh, Some(f)) => {
                positive("intra_node.link_bytes_per_s_per_direction", f)?
            }
            (kind, Some(_)) => {
                return Err(bad(
                    "intra_node.link_bytes_per_s_per_direction",
                    format!(
                        "only a mesh has per-pair links (intra_node.kind is '{}')",
                        kind.id()
                    ),
                ))
            }
            (_, None) => {}
        }
        if let Some(sp) = &self.inter_node.spine {
            if sp.nodes_per_leaf == 0 || sp.nodes_per_leaf > 1 << 20 {
                return Err(bad(
                    "inter_node.spine.nodes_per_leaf",
                    format!(
                        "must be a whole number from 1 to 2^20, got {}",
                        sp.nodes_per_leaf
                    ),
                ));
            }
            let o = sp.oversubscription.value;
            if !(o.is_finite() && (1.0..=1e6).contains(&o)) {
                return Err(bad(
                    "inter_node.spine.oversubscription.value",
                    format!("must be from 1 (non-blocking) to 10^6, got {o}"),
                ));
            }
        }
        for (i, r) in self.collectives.iter().enumerate() {
            if r.algorithm == Algorithm::Tree
                && r.op != super::CollectiveKind::Any
                && !tree_runs(r.op)
            {
                return Err(bad(
                    &format!("collectives[{i}].algorithm"),
                    "a tree runs all-reduce, broadcast and reduce only".into(),
                ));
            }
            if r.max_bytes == Some(0) {
                return Err(bad(
                    &format!("collectives[{i}].max_bytes"),
                    "must be positive (leave it out for any size)".into(),
                ));
            }
        }
        Ok(())
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
