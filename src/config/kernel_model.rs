//! The kernel model's parameters in a hardware profile (`kernels`: host, memory-bound, GEMM and
//! fused-attention figures, DESIGN §4), each a [`Figure`] with its source, and their dotted
//! field names for validation, fitting and reports. The formulas that use them live in
//! `cost`; the checks on their values in `hardware`. Depends only on serde.

use serde::{Deserialize, Serialize};

use super::attention::AttentionSet;
use super::figure::Figure;

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
    /// The attention implementations: which one `attention_fwd` / `attention_bwd` are, the
    /// default, and the others' figures (`config::attention`); absent: one unnamed fused kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionSet>,
    /// What of this kernel model is not derived from measurements of this GPU (absent: all of
    /// it is); `list` and every report header repeat it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
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
        for (pass, a) in self.attention_passes() {
            for (f, fig) in a.figures() {
                v.push((format!("{pass}.{f}"), fig));
            }
            for (f, fig) in [
                ("solo_fraction", &a.solo_fraction),
                ("max_splits", &a.max_splits),
            ] {
                if let Some(fig) = fig {
                    v.push((format!("{pass}.{f}"), fig));
                }
            }
            for t in &a.tiles {
                for (f, fig) in t.figures() {
                    v.push((format!("{pass}.tiles[d={}].{f}", t.head_dim), fig));
                }
            }
        }
        v
    }
}

impl KernelModel {
    /// Every attention pass model with its dotted field prefix: `attention_fwd`,
    /// `attention_bwd`, then each other implementation's passes.
    pub fn attention_passes(&self) -> Vec<(String, &AttentionModel)> {
        let mut v: Vec<(String, &AttentionModel)> = vec![
            ("kernels.attention_fwd".into(), &self.attention_fwd),
            ("kernels.attention_bwd".into(), &self.attention_bwd),
        ];
        if let Some(set) = &self.attention {
            for (k, i) in &set.implementations {
                v.push((format!("kernels.attention.implementations.{k}.fwd"), &i.fwd));
                v.push((format!("kernels.attention.implementations.{k}.bwd"), &i.bwd));
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
