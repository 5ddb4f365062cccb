//! A workload: model × hardware × method × degree × sequence × batch × options — everything one
//! memory or time estimate needs.

use serde::Serialize;

use super::{Hardware, Model};
use crate::error::{Error, Result};

/// The parallel methods metp-sim compares (DESIGN §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum MethodId {
    /// METP (DESIGN §1).
    #[serde(rename = "metp")]
    Metp,
    /// Megatron tensor parallelism.
    #[serde(rename = "tp")]
    Tp,
    /// Megatron TP + sequence parallelism.
    #[serde(rename = "tp-sp")]
    TpSp,
    /// DeepSpeed-Ulysses.
    #[serde(rename = "ulysses")]
    Ulysses,
    /// Ring attention / context parallelism.
    #[serde(rename = "ring")]
    Ring,
    /// Ring self-attention (Li et al. 2021).
    #[serde(rename = "rsa")]
    Rsa,
}

impl MethodId {
    /// All methods, in the order reports list them.
    pub const ALL: [MethodId; 6] = [
        MethodId::Metp,
        MethodId::Tp,
        MethodId::TpSp,
        MethodId::Ulysses,
        MethodId::Ring,
        MethodId::Rsa,
    ];

    /// The id used on the command line and in outputs.
    pub fn id(self) -> &'static str {
        match self {
            MethodId::Metp => "metp",
            MethodId::Tp => "tp",
            MethodId::TpSp => "tp-sp",
            MethodId::Ulysses => "ulysses",
            MethodId::Ring => "ring",
            MethodId::Rsa => "rsa",
        }
    }

    /// Parses one id.
    pub fn parse(flag: &str, text: &str) -> Result<MethodId> {
        MethodId::ALL
            .into_iter()
            .find(|m| m.id() == text.trim())
            .ok_or_else(|| {
                Error::arg(
                    flag,
                    format!(
                        "unknown method '{text}'; available: {}",
                        MethodId::ALL.map(|m| m.id()).join(", ")
                    ),
                )
            })
    }

    /// Parses `a,b,…` or `all`.
    pub fn parse_list(flag: &str, text: &str) -> Result<Vec<MethodId>> {
        if text.trim() == "all" {
            return Ok(MethodId::ALL.to_vec());
        }
        let mut v: Vec<MethodId> = text
            .split(',')
            .map(|t| MethodId::parse(flag, t))
            .collect::<Result<_>>()?;
        v.sort();
        v.dedup();
        Ok(v)
    }

    /// Whether the method shards the layer weights 1/p (otherwise they are replicated across
    /// the p devices unless ZeRO shards them).
    pub fn shards_weights(self) -> bool {
        matches!(self, MethodId::Metp | MethodId::Tp | MethodId::TpSp)
    }
}

impl std::fmt::Display for MethodId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// Activation recomputation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Default)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WeightExchange {
    /// Relayed along the ring, owner → owner+1 → …, each device forwarding what it received.
    Ring,
    /// An NCCL broadcast from the owner, as ParaDySe's implementation does (the default).
    #[default]
    Broadcast,
}

/// METP knobs (DESIGN §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Options {
    /// Fused (FlashAttention-style) attention kernels.
    pub flash: bool,
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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            flash: true,
            recompute: Recompute::None,
            zero: None,
            causal: false,
            causal_zigzag: true,
            dropout: None,
            vocab_parallel: true,
            metp: MetpOptions::default(),
        }
    }
}

/// One configuration to estimate.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The model.
    pub model: Model,
    /// The hardware.
    pub hardware: Hardware,
    /// The method.
    pub method: MethodId,
    /// Parallel degree p (devices that share one sequence).
    pub p: u64,
    /// Data-parallel replicas (default 1).
    pub dp: u64,
    /// Micro-batches per step on each data-parallel replica (gradient accumulation).
    pub micro_batches: u64,
    /// Sequence length s.
    pub seq: u64,
    /// Micro-batch b.
    pub micro_batch: u64,
    /// Options.
    pub options: Options,
}

impl Workload {
    /// The ZeRO stage in force (resolving automatic).
    pub fn zero_stage(&self) -> ZeroStage {
        match self.options.zero {
            Some(z) => z,
            None if self.method.shards_weights() => ZeroStage::Zero0,
            None => ZeroStage::Zero3,
        }
    }

    /// Whether dropout is on (the model's setting unless overridden).
    pub fn dropout(&self) -> bool {
        self.options.dropout.unwrap_or(self.model.dropout)
    }

    /// The error for this workload's method and degree.
    pub fn invalid(&self, message: impl Into<String>) -> Error {
        Error::InvalidConfig {
            method: self.method.id().to_string(),
            p: self.p,
            message: message.into(),
        }
    }

    /// Checks what every method needs: positive sizes and enough devices in the profile.
    pub fn check_common(&self) -> Result<()> {
        if self.p == 0 || self.dp == 0 || self.seq == 0 || self.micro_batch == 0 {
            return Err(self.invalid("p, dp, sequence and micro-batch must be positive"));
        }
        if self.seq > 1 << 40 {
            return Err(self.invalid(format!(
                "sequence length {} is above the supported 2^40",
                self.seq
            )));
        }
        if self.micro_batch > 1 << 20 {
            return Err(self.invalid(format!(
                "micro-batch {} is above the supported 2^20",
                self.micro_batch
            )));
        }
        let gpus = self.p.saturating_mul(self.dp);
        if gpus > self.hardware.total_gpus() {
            return Err(self.invalid(format!(
                "needs {gpus} GPUs (p × dp) but '{}' describes {} ({} node(s) × {}); use --nodes",
                self.hardware.name,
                self.hardware.total_gpus(),
                self.hardware.nodes,
                self.hardware.gpus_per_node
            )));
        }
        if self.options.metp.recv_buffers == 0 || self.options.metp.recv_buffers > 2 {
            return Err(self.invalid("METP receive buffers must be 1 or 2"));
        }
        Ok(())
    }
}
