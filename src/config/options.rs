//! The options of a training configuration beyond model, hardware, method and sizes:
//! recomputation, ZeRO stage, masks, dropout, the vocabulary split and METP's own knobs. Plain
//! data every layer reads; its own file so that the methods' rules (`method.rs`) and the
//! workload (`workload.rs`) both use it without using each other the other way.

use serde::{Deserialize, Serialize};

use super::precision::{GradAccumulation, GradDtype, LinearDtype, OptimizerDtype, OptimizerState};
use super::{AttentionKernel, Hardware, Runtime};

/// Activation recomputation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Store everything backward needs.
    #[default]
    None,
    /// Recompute the attention core (QKᵀ, softmax, dropout, ·V) — Korthikanti et al.
    Selective,
    /// Store only each layer's input; recompute the layer in backward.
    Full,
}

/// ZeRO stage: what is sharded across the data-parallel (and, for methods with replicated
/// weights, sequence-parallel) group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub enum ZeroStage {
    /// Nothing sharded.
    #[default]
    #[serde(rename = "0")]
    Zero0,
    /// Optimizer state sharded.
    #[serde(rename = "1")]
    Zero1,
    /// Optimizer state and gradients sharded.
    #[serde(rename = "2")]
    Zero2,
    /// Optimizer state, gradients and weights sharded.
    #[serde(rename = "3")]
    Zero3,
}

/// How METP brings head group g's attention weights to every device: all devices work on the
/// same group at once (the inner K/V ring needs every device's K/V of that group), so the
/// owner's shard must reach all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WeightExchange {
    /// Relayed along the ring, owner → owner+1 → …, each device forwarding what it received.
    Ring,
    /// An NCCL broadcast from the owner, as ParaDySe's implementation does (the default).
    #[default]
    Broadcast,
}

impl WeightExchange {
    /// `ring` or `broadcast`, as on the command line.
    pub fn id(self) -> &'static str {
        match self {
            WeightExchange::Ring => "ring",
            WeightExchange::Broadcast => "broadcast",
        }
    }
}

/// METP knobs (DESIGN §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetpOptions {
    /// Head groups in the outer attention loop; `None` means one per device (p).
    pub head_groups: Option<u64>,
    /// Weight exchange for attention shards.
    pub weight_exchange: WeightExchange,
    /// Receive buffers per traveling tensor: 1 (single) or 2 (true double buffering).
    pub recv_buffers: u64,
    /// Store Q, K, V for backward instead of recomputing them.
    pub store_qkv: bool,
    /// Store the MLP activation input (X·W1) instead of recomputing it.
    pub store_mlp_act: bool,
}

impl MetpOptions {
    /// Head groups G of the outer attention loop at degree `p` (p unless set).
    pub fn head_groups(&self, p: u64) -> u64 {
        self.head_groups.unwrap_or(p)
    }
}

impl Default for MetpOptions {
    fn default() -> Self {
        MetpOptions {
            head_groups: None,
            weight_exchange: WeightExchange::Broadcast,
            recv_buffers: 2,
            store_qkv: false,
            store_mlp_act: false,
        }
    }
}

/// Options that change memory or time but not the shape of the problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    /// Fused (FlashAttention-style) attention kernels; `false` is `--no-flash`, the `unfused`
    /// implementation whatever `attention` says.
    pub flash: bool,
    /// The attention implementation (`--attention-kernel`, `config::attention`); `None`: the
    /// profile's default. Validation resolves it ([`Options::attention_kernel`]): a validated
    /// workload always has `Some`, with `flash` false exactly when it is `unfused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionKernel>,
    /// Recompute policy.
    pub recompute: Recompute,
    /// ZeRO stage; `None` = automatic: stage 3 for the methods that otherwise replicate
    /// weights across the p devices (as DeepSpeed-Ulysses and context parallelism are run in
    /// practice), stage 0 for the methods that shard them.
    pub zero: Option<ZeroStage>,
    /// Causal attention.
    pub causal: bool,
    /// Under causal masking, order the sequence blocks zig-zag (load-balanced, as Megatron's
    /// context parallelism does) instead of contiguously. Needs s to be a multiple of 2p.
    pub causal_zigzag: bool,
    /// Override the model's dropout setting.
    pub dropout: Option<bool>,
    /// Vocabulary-parallel output head and loss, for the methods that shard weights.
    pub vocab_parallel: bool,
    /// METP knobs.
    pub metp: MetpOptions,
    /// The dtype of the main gradients (memory and gradient communication).
    pub grad_dtype: GradDtype,
    /// Replicated or sharded optimizer state; `None` follows the ZeRO stage. `Sharded` raises
    /// an automatic stage to at least 1 (Megatron's distributed optimizer); `Replicated`
    /// lowers it to 0. An explicit stage that contradicts it is refused.
    pub optimizer_state: Option<OptimizerState>,
    /// The dtype of the optimizer state (memory and the optimizer step's traffic).
    #[serde(default, skip_serializing_if = "OptimizerDtype::is_default")]
    pub optimizer_dtype: OptimizerDtype,
    /// Whether weight gradients are accumulated by their GEMM or in a pass of their own (time).
    #[serde(default, skip_serializing_if = "GradAccumulation::is_default")]
    pub grad_accumulation: GradAccumulation,
    /// The dtype of the layers' linear GEMMs (`config::precision::LinearDtype`; absent from
    /// JSON when bf16).
    #[serde(default, skip_serializing_if = "LinearDtype::is_bf16")]
    pub linear_dtype: LinearDtype,
    /// TP + SP: each layer's all-gathers and reduce-scatters overlapped with the GEMMs next to
    /// them (Megatron-Core's `tp_comm_overlap`, Transformer Engine's userbuffers;
    /// `schedule::tp_sp`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tp_comm_overlap: bool,
    /// How the software schedules its pipeline and gradient synchronisation
    /// (`config::runtime`).
    #[serde(default, skip_serializing_if = "Runtime::is_default")]
    pub runtime: Runtime,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            flash: true,
            attention: None,
            recompute: Recompute::None,
            zero: None,
            causal: false,
            causal_zigzag: true,
            dropout: None,
            vocab_parallel: true,
            metp: MetpOptions::default(),
            grad_dtype: GradDtype::Fp32,
            optimizer_state: None,
            optimizer_dtype: OptimizerDtype::Fp32,
            grad_accumulation: GradAccumulation::Fused,
            linear_dtype: LinearDtype::Bf16,
            tp_comm_overlap: false,
            runtime: Runtime::default(),
        }
    }
}

impl Options {
    /// The options reports print only where they are not the defaults: the runtime's
    /// ([`Runtime::shown`]) and the linear layers' dtype.
    pub fn shown(&self) -> super::Shown {
        super::Shown {
            linear_dtype: (!self.linear_dtype.is_bf16()).then(|| self.linear_dtype.id()),
            ..self.runtime.shown()
        }
    }

    /// The implementation these options run on `hw`: `unfused` when `flash` is off or it is
    /// named, else the named one, else the profile's default.
    pub fn attention_kernel(&self, hw: &Hardware) -> AttentionKernel {
        if !self.flash {
            return AttentionKernel::Unfused;
        }
        self.attention
            .unwrap_or_else(|| hw.kernels.default_attention())
    }
}
