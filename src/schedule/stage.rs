//! The structure of one training step, method by method, before it becomes tasks.
//!
//! A method describes each layer as a few *stages* — kernels on the compute stream, a
//! collective the compute stream waits for, a ring of double-buffered steps, METP's outer loop
//! over head groups — and `lower` turns stages into a [`super::TaskGraph`], while the analytic
//! model prices the same stages in closed form. Keeping one description for both is what makes
//! their agreement a test of the engine and the lowering rather than of two transcriptions.

use serde::Serialize;

use super::graph::CollectiveOp;
use super::shape::{Attention, Gemm, KernelShape};
use crate::memory::Phase;

/// One kernel: a name for traces and the shape of the call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Kernel {
    /// Name in traces ("qkv", "attn-block", "fc1", …).
    pub name: &'static str,
    /// What the GPU runs.
    pub shape: KernelShape,
    /// Which GEMM of a linear layer this is, if it is one (what FP8 training turns into FP8
    /// GEMMs; never serialized).
    #[serde(skip)]
    pub linear: Option<LinearGemm>,
}

/// The three GEMMs of a linear layer Y = X·W.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearGemm {
    /// Y = X·W.
    Forward,
    /// dX = dY·Wᵀ.
    InputGrad,
    /// dW = Xᵀ·dY.
    WeightGrad,
}

/// A dimension computed in f64 (the plans' arithmetic) as a whole count.
fn dim(x: f64) -> u64 {
    debug_assert!(x >= 0.0 && x.is_finite(), "dimension {x}");
    x.round().max(0.0) as u64
}

impl Kernel {
    /// A GEMM of an m×k by k×n product in bf16.
    pub fn gemm(name: &'static str, m: f64, n: f64, k: f64) -> Kernel {
        Kernel::batched_gemm(name, 1.0, m, n, k)
    }

    /// `batch` independent m×k by k×n products in one call.
    pub fn batched_gemm(name: &'static str, batch: f64, m: f64, n: f64, k: f64) -> Kernel {
        Kernel {
            name,
            shape: KernelShape::Gemm(Gemm::bf16(dim(batch), dim(m), dim(n), dim(k))),
            linear: None,
        }
    }

    /// An element-wise kernel over `elements` bf16 values read and written `passes` times
    /// (4 bytes per element and pass).
    pub fn elementwise(name: &'static str, elements: f64, passes: f64) -> Kernel {
        Kernel::memory(name, 4.0 * elements * passes)
    }

    /// A memory-bound kernel moving `bytes` (read plus written).
    pub fn memory(name: &'static str, bytes: f64) -> Kernel {
        Kernel {
            name,
            shape: KernelShape::Elementwise { bytes: dim(bytes) },
            linear: None,
        }
    }

    /// One of `parts` equal shares of this kernel where it is a GEMM (`Gemm::parts`); any
    /// other kernel unchanged.
    pub fn share(self, parts: u64) -> Kernel {
        match self.shape {
            KernelShape::Gemm(g) => Kernel {
                shape: KernelShape::Gemm(g.share(parts)),
                ..self
            },
            _ => self,
        }
    }

    /// This kernel marked as the `role` GEMM of a linear layer.
    pub fn as_linear(self, role: LinearGemm) -> Kernel {
        Kernel {
            linear: Some(role),
            ..self
        }
    }

    /// A fused attention call.
    pub fn attention(name: &'static str, a: Attention) -> Kernel {
        Kernel {
            name,
            shape: KernelShape::Attention(a),
            linear: None,
        }
    }
}

/// What a device computes at a ring step of a causal attention ring, given whose K/V block it
/// holds: with contiguous sequence blocks a full block from an earlier device, a causal
/// diagonal block of its own, nothing from a later one; with zig-zag order (each device holds
/// chunks i and 2p−1−i of 2p) its own block causally, and from any other device exactly half
/// of a block — all its queries against the first half of the keys (earlier device), or the
/// second half of its queries against all the keys (later device), as Megatron's context
/// parallelism runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Block {
    /// The whole block (non-causal rings, or an earlier device's block).
    Full,
    /// The device's own block under the causal mask.
    Diagonal,
    /// Nothing (contiguous order, a later device's block).
    Empty,
    /// Zig-zag, earlier device: all queries × the first half of the keys.
    KeyHalf,
    /// Zig-zag, later device: the second half of the queries × all keys.
    QueryHalf,
}

impl Block {
    /// The block device `i` of `p` computes at ring step `k` (it then holds the K/V block of
    /// device (i − k) mod p).
    pub fn at(p: usize, i: usize, k: usize, zigzag: bool) -> Block {
        let src = (i + p - k % p) % p;
        match (src.cmp(&i), zigzag) {
            (std::cmp::Ordering::Equal, _) => Block::Diagonal,
            (std::cmp::Ordering::Less, false) => Block::Full,
            (std::cmp::Ordering::Greater, false) => Block::Empty,
            (std::cmp::Ordering::Less, true) => Block::KeyHalf,
            (std::cmp::Ordering::Greater, true) => Block::QueryHalf,
        }
    }

    /// The blocks some device computes at step `k` of a ring over `p` devices (the analytic
    /// model's critical device is the slowest of them).
    pub fn present(p: usize, k: usize, zigzag: bool) -> &'static [Block] {
        match (k % p.max(1), zigzag) {
            (0, _) => &[Block::Diagonal],
            (_, false) => &[Block::Full, Block::Empty],
            (_, true) => &[Block::KeyHalf, Block::QueryHalf],
        }
    }
}

/// The kernels of each block a causal ring step can compute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CausalBlocks {
    /// Zig-zag order (else contiguous).
    pub zigzag: bool,
    /// The device's own block.
    pub diagonal: Vec<Kernel>,
    /// Zig-zag, earlier device's block.
    pub key_half: Vec<Kernel>,
    /// Zig-zag, later device's block.
    pub query_half: Vec<Kernel>,
}

/// One step of a ring: kernels every device runs (under a causal mask, the ones of the block
/// it holds at this step), then `accumulate` kernels that wait for the traveling accumulator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RingStep {
    /// Kernels of a full block, whose data arrives by the prefetched message (or is local at
    /// step 0).
    pub kernels: Vec<Kernel>,
    /// Causal rings: the kernels of the other blocks (`None`: every device runs `kernels`).
    pub causal: Option<CausalBlocks>,
    /// Kernels that fold this step's contribution into the traveling accumulator.
    pub accumulate: Vec<Kernel>,
}

impl RingStep {
    /// The block device `i` of `p` computes at step `k`.
    pub fn block(&self, p: usize, i: usize, k: usize) -> Block {
        match &self.causal {
            None => Block::Full,
            Some(c) => Block::at(p, i, k, c.zigzag),
        }
    }

    /// The kernels of a block.
    pub fn kernels_of(&self, block: Block) -> &[Kernel] {
        match (block, &self.causal) {
            (Block::Full, _) | (_, None) => &self.kernels,
            (Block::Empty, _) => &[],
            (Block::Diagonal, Some(c)) => &c.diagonal,
            (Block::KeyHalf, Some(c)) => &c.key_half,
            (Block::QueryHalf, Some(c)) => &c.query_half,
        }
    }

    /// The blocks some device computes at step `k` of a ring over `p`.
    pub fn present(&self, p: usize, k: usize) -> &'static [Block] {
        match &self.causal {
            None => &[Block::Full],
            Some(c) => Block::present(p, k, c.zigzag),
        }
    }
}

/// The group of devices a ring runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    /// The method's p devices.
    Method,
    /// The cp context-parallel ranks (each a group of p devices; device i of each group
    /// takes part), as Megatron's context parallelism runs its K/V ring.
    Context,
}

/// A ring of `steps.len()` steps over the devices of an [`Axis`] (the method's p by default). Between consecutive steps each device
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
    /// The devices the ring runs over.
    pub axis: Axis,
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
    /// Collective used for that synchronisation: all-reduce, or reduce-scatter when the
    /// optimizer state is sharded (ZeRO ≥ 1, Megatron's distributed optimizer).
    pub grad_sync_op: CollectiveOp,
    /// Whether every micro-batch's gradients are synchronised as its backward ends, not only
    /// the last one's: under ZeRO ≥ 2 a device keeps only its shard of the gradients (the
    /// memory inventory holds no full gradient buffer), so each micro-batch's gradients are
    /// reduce-scattered into the shards as they are produced — as DeepSpeed's ZeRO-2 and
    /// PyTorch FSDP without `no_sync` run gradient accumulation. With ZeRO 0 and 1 gradients
    /// accumulate locally and are synchronised after the last micro-batch.
    pub grad_sync_every_micro_batch: bool,
    /// Whether the synchronisation (and ZeRO-3 gathering) spans the p devices too (methods that
    /// replicate weights across them) or only the data-parallel replicas of each rank.
    pub grad_sync_over_p: bool,
    /// ZeRO-3: bytes of one layer's weights all-gathered before its forward and its backward.
    pub zero3_gather_bytes: u64,
    /// A sharded optimizer state below ZeRO-3 (ZeRO-1/2, Megatron's distributed optimizer):
    /// bytes of one layer's updated bf16 weights each device all-gathers after the optimizer
    /// step (over the same group as the gradients; all of a stage's layers in one collective).
    pub layer_param_gather_bytes: u64,
    /// That all-gather's bytes per device for each pipeline stage (its layers; one entry
    /// without a pipeline): the whole model's, so a copy lowered with fewer layers
    /// (`sim::shorten`) gathers what the whole step does. Zero when the gather is overlapped
    /// with the next step's first forward (`first_forward_gather_bytes`).
    pub param_gather_bytes: Vec<u64>,
    /// `config::ParamGather::Overlapped`: bytes of one layer's updated weights each device
    /// all-gathers during the first micro-batch's forward, one layer ahead of the compute (the
    /// step starts with the previous step's gather, as a steady step does); else 0.
    pub first_forward_gather_bytes: u64,
    /// Optimizer step of each pipeline stage (its parameters; one entry without a pipeline).
    pub optimizer: Vec<Vec<Kernel>>,
    /// Layers.
    pub layers: u32,
    /// Micro-batches per step.
    pub micro_batches: u32,
    /// Bytes each device passes to its pipeline neighbour per micro-batch: the layer output
    /// forward and its gradient backward (b·s·h bf16 over the p · cp devices of a stage: the
    /// sequence-split methods hold that share; Megatron TP scatters the replicated tensor
    /// across its ranks before sending, `scatter_gather_tensors_in_pipeline`).
    pub pipeline_bytes: u64,
    /// Bytes (the whole tensor) each receiving stage's method group all-gathers after every
    /// pipeline receive, on the compute path: Megatron-LM's scatter-gather of 2021–22 (TP
    /// without sequence parallelism: `gather_split_1d_tensor` after the receive,
    /// p2p_communication.py) and DeepSpeed's partitioned activations and gradients do; 0 where
    /// the devices of a stage hold their own share (sequence-split methods, TP + SP).
    pub pipeline_gather_bytes: u64,
    /// Tied embeddings across pipeline stages: bytes of embedding gradients each device of the
    /// first and the last stage all-reduce with its peer before the optimizer (Megatron's
    /// embedding group); 0 without.
    pub embedding_sync_bytes: u64,
    /// Whether every device of the method's group runs the same program up to its rank (so one
    /// stands for all, `lower`'s symmetric reduction): false for METP's owner-rooted weight
    /// exchange and for causal rings, whose blocks differ by rank.
    pub ranks_symmetric: bool,
    /// The same for the context-parallel ranks (their K/V ring under a causal mask is not).
    pub context_symmetric: bool,
}

impl Stage {
    /// Floating-point operations of this stage on one device: its kernels, a ring's steps (under
    /// a causal mask the diagonal block at step 0 and a half block after, as zig-zag order
    /// gives every device), an outer loop's body once per group.
    pub fn flops(&self) -> f64 {
        let sum = |ks: &[Kernel]| ks.iter().map(|k| k.shape.flops()).sum::<f64>();
        match self {
            Stage::Compute(ks) => sum(ks),
            Stage::Collective { .. } => 0.0,
            Stage::Ring(r) => r
                .steps
                .iter()
                .enumerate()
                .map(|(k, step)| {
                    let block = match &step.causal {
                        None => sum(&step.kernels),
                        Some(c) if k == 0 => sum(&c.diagonal),
                        Some(c) => sum(&c.key_half),
                    };
                    block + sum(&step.accumulate)
                })
                .sum(),
            Stage::Outer(o) => f64::from(o.groups) * o.body.iter().map(Stage::flops).sum::<f64>(),
        }
    }
}

impl StepPlan {
    /// Floating-point operations one device spends on one layer for one micro-batch, forward
    /// and backward (recomputation included).
    pub fn layer_flops(&self) -> f64 {
        self.layer_fwd
            .iter()
            .chain(&self.layer_bwd)
            .flat_map(|b| &b.stages)
            .map(Stage::flops)
            .sum()
    }
}
