//! The structure of one training step, method by method, before it becomes tasks.
//!
//! A method describes each layer as a few *stages* — kernels on the compute stream, a
//! collective the compute stream waits for, a ring of double-buffered steps, METP's outer loop
//! over head groups — and `lower` turns stages into a [`super::TaskGraph`], while the analytic
//! model prices the same stages in closed form. Keeping one description for both is what makes
//! their agreement a test of the engine and the lowering rather than of two transcriptions.

use serde::Serialize;

use super::graph::{CollectiveOp, OpKind};
use crate::memory::Phase;

/// One kernel: FLOPs and HBM bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Kernel {
    /// Name in traces ("qkv", "attn-block", "fc1", …).
    pub name: &'static str,
    /// Kind (selects the efficiency table).
    pub op: OpKind,
    /// Floating-point operations.
    pub flops: f64,
    /// Bytes moved to and from HBM.
    pub bytes: f64,
}

impl Kernel {
    /// A GEMM of an m×k by k×n product in bf16: 2mnk FLOPs, 2(mk + kn + mn) bytes.
    pub fn gemm(name: &'static str, m: f64, n: f64, k: f64) -> Kernel {
        Kernel {
            name,
            op: OpKind::Gemm,
            flops: 2.0 * m * n * k,
            bytes: 2.0 * (m * k + k * n + m * n),
        }
    }

    /// An element-wise kernel over `elements` bf16 values read and written `passes` times.
    pub fn elementwise(name: &'static str, elements: f64, passes: f64) -> Kernel {
        Kernel {
            name,
            op: OpKind::Elementwise,
            flops: 0.0,
            bytes: 4.0 * elements * passes,
        }
    }

    /// The same kernel scaled (e.g. by the fraction of a causal block that is computed).
    pub fn scaled(self, f: f64) -> Kernel {
        Kernel {
            flops: self.flops * f,
            bytes: self.bytes * f,
            ..self
        }
    }
}

/// One step of a ring: kernels every device runs (scaled per device by `fraction` for the
/// attention-block kernels under causal masking), then `accumulate` kernels that wait for the
/// traveling accumulator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RingStep {
    /// Kernels whose data arrives by the prefetched message (or is local at step 0).
    pub kernels: Vec<Kernel>,
    /// Per-device fraction of `kernels` actually computed (empty: all 1).
    pub fraction: Vec<f64>,
    /// Kernels that fold this step's contribution into the traveling accumulator.
    pub accumulate: Vec<Kernel>,
}

/// A ring of `steps.len()` steps over the p devices. Between consecutive steps each device
/// passes `prefetch_bytes` to its successor (the data the next step needs: K/V blocks, weight
/// shards); with two receive buffers that transfer overlaps the current step, with one it
/// follows it. `accumulator_bytes` (if non-zero) travel after each step's `accumulate` and make
/// one final hop back to their owner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ring {
    /// Name in traces.
    pub name: &'static str,
    /// Steps.
    pub steps: Vec<RingStep>,
    /// Bytes each device passes on before each step after the first.
    pub prefetch_bytes: u64,
    /// Bytes of the traveling accumulator (0: none).
    pub accumulator_bytes: u64,
    /// Receive buffers (1 or 2).
    pub buffers: u64,
}

/// How METP's outer loop brings head group g's weights to every device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Exchange {
    /// Store-and-forward along the ring from the owner: p−1 sequential hops.
    Chain,
    /// An NCCL broadcast from the owner.
    Broadcast,
}

/// METP's outer loop: `groups` iterations of `body`; the weights of the next group
/// (`weight_bytes`) are fetched while the current one runs (two buffers) or after it (one); in
/// backward the group's weight gradients (`grad_bytes`, fp32) are reduced to the owner while
/// the next group runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outer {
    /// Name in traces.
    pub name: &'static str,
    /// Head groups.
    pub groups: u32,
    /// Bytes of one group's weight shard.
    pub weight_bytes: u64,
    /// Bytes of one group's weight gradients (0 in forward).
    pub grad_bytes: u64,
    /// How weights (and gradients) move.
    pub exchange: Exchange,
    /// Weight receive buffers (1 or 2).
    pub buffers: u64,
    /// What one group does.
    pub body: Vec<Stage>,
}

/// One stage of a layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Stage {
    /// Kernels back to back on the compute stream.
    Compute(Vec<Kernel>),
    /// A collective over the p devices that the compute stream waits for.
    Collective {
        /// Name in traces.
        name: &'static str,
        /// Operation.
        op: CollectiveOp,
        /// Buffer bytes as nccl-tests define them.
        bytes: u64,
    },
    /// A ring.
    Ring(Ring),
    /// METP's outer loop.
    Outer(Outer),
}

/// A run of stages that share one transient working set (one memory phase).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseBlock {
    /// The phase whose transients are live during these stages.
    pub phase: Phase,
    /// Block name for labels ("attention", "mlp", "head").
    pub block: &'static str,
    /// The stages.
    pub stages: Vec<Stage>,
}

/// One training step of one micro-batch on the p devices of a group, plus the optimizer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepPlan {
    /// Embedding forward.
    pub embedding_fwd: Vec<Kernel>,
    /// One layer's forward, in order (attention, then MLP).
    pub layer_fwd: Vec<PhaseBlock>,
    /// Head and loss, forward and backward.
    pub head: PhaseBlock,
    /// One layer's backward, in order (MLP, then attention).
    pub layer_bwd: Vec<PhaseBlock>,
    /// Embedding backward.
    pub embedding_bwd: Vec<Kernel>,
    /// Bytes of weight gradients each device synchronises per layer over the group of devices
    /// that hold the same weights (the p devices for replicated-weight methods, plus data
    /// parallelism), issued asynchronously after the layer's backward.
    pub layer_grad_sync_bytes: u64,
    /// Collective used for that synchronisation (all-reduce, or reduce-scatter under ZeRO ≥ 2).
    pub grad_sync_op: CollectiveOp,
    /// Whether the synchronisation (and ZeRO-3 gathering) spans the p devices too (methods that
    /// replicate weights across them) or only the data-parallel replicas of each rank.
    pub grad_sync_over_p: bool,
    /// ZeRO-3: bytes of one layer's weights all-gathered before its forward and its backward.
    pub zero3_gather_bytes: u64,
    /// Optimizer step.
    pub optimizer: Vec<Kernel>,
    /// Layers.
    pub layers: u32,
    /// Micro-batches per step.
    pub micro_batches: u32,
}
