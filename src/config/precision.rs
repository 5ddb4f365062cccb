//! The training state's precision and placement: the dtype gradients are accumulated, held and
//! reduced in, and whether the optimizer state is replicated on every data-parallel rank or
//! sharded over them (Megatron's distributed optimizer; ZeRO stage 1 and up).
//!
//! Bytes per parameter, with bf16 weights and an fp32 optimizer (master weights, Adam m and v:
//! 12 bytes) over a group of d ranks that hold the same weights:
//!
//! | gradients | optimizer state replicated | sharded (distributed optimizer, ZeRO-1) |
//! |---|---|---|
//! | fp32 | 2 + 4 + 12 = 18 | 6 + 12/d |
//! | bf16 | 2 + 2 + 12 = 16 | 4 + 12/d |
//!
//! The fp32 row is Megatron Core's table for bf16 parameters with fp32 gradients (Distributed
//! Optimizer, docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/dist_optimizer.html);
//! the bf16 row is the ZeRO paper's mixed-precision Adam (Rajbhandari et al. 2019, §3.1: 2Ψ of
//! fp16 weights + 2Ψ of fp16 gradients + 12Ψ of optimizer state = 16Ψ), where the optimizer
//! reads the 16-bit gradients and casts them as it steps (Megatron's fp16 row, 20 and 4 + 16/d,
//! keeps an extra fp32 copy of the gradients; this tool does not model that variant).
//!
//! The optimizer state itself is fp32 (the 12 above) unless its master weights are kept as the
//! 16 bits the bf16 weights lack ([`OptimizerDtype::Fp32Remainders`]: 2 + 4 + 4 = 10 bytes, the
//! fp32 master weight rebuilt from the bf16 weight and its remainder — Apex's
//! `DistributedFusedAdam(store_param_remainders=True)`, which NeMo's distributed Adam sets for a
//! bf16 model with an fp32 optimizer, and Transformer Engine's `FusedAdam` with the same
//! option), or it is kept in bf16 ([`OptimizerDtype::Bf16`]: Adam's moments in bf16, 2 + 2
//! bytes, and no master copy — the update is applied to the bf16 weights), as Apex's
//! `DistributedFusedAdam` runs with `dtype=torch.bfloat16` (NeMo's `optim.dtype: bf16`: NeMo
//! then sets `store_params=False` because the optimizer's dtype equals the model's). Both from
//! NeMo's megatron_base_model.py `setup_optimization` (NeMo ≥ 1.23, 2.0 and 2.1 alike): 12
//! becomes 10 or 4 in the table.
//!
//! Communication follows the same two choices: a replicated optimizer state all-reduces the
//! gradients (in their dtype: Megatron reduces bf16 training's gradients in fp32); a sharded
//! one reduce-scatters them and all-gathers the updated bf16 weights after the step (Megatron's
//! distributed optimizer and ZeRO-1/2), unless ZeRO-3 gathers each layer's weights where it is
//! used anyway.

use serde::{Deserialize, Serialize};

/// The dtype of the main gradients: accumulated over micro-batches, held until the optimizer
/// step, and reduced across data-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum GradDtype {
    /// fp32 main gradients (Megatron-LM's default for bf16 training: 18 bytes per parameter).
    #[default]
    Fp32,
    /// bf16 gradients (ZeRO/FSDP with 16-bit reduction: 16 bytes per parameter).
    Bf16,
}

impl GradDtype {
    /// Bytes per gradient element.
    pub fn bytes(self) -> u128 {
        match self {
            GradDtype::Fp32 => 4,
            GradDtype::Bf16 => 2,
        }
    }

    /// `fp32` or `bf16`, as on the command line and in JSON.
    pub fn id(self) -> &'static str {
        match self {
            GradDtype::Fp32 => "fp32",
            GradDtype::Bf16 => "bf16",
        }
    }
}

/// The dtype the optimizer state is kept in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerDtype {
    /// fp32 master weights and Adam moments: 12 bytes per parameter (Megatron-LM, DeepSpeed,
    /// PyTorch FSDP with fp32 optimizer state).
    #[default]
    Fp32,
    /// fp32 Adam moments, and of the master weights only the 16 bits the bf16 weights lack:
    /// 10 bytes per parameter (Apex `DistributedFusedAdam(store_param_remainders=True)`, NeMo's
    /// default for bf16 models with its distributed Adam).
    #[serde(rename = "fp32-remainders")]
    Fp32Remainders,
    /// Adam moments in bf16 and no master copy: 4 bytes per parameter (Apex
    /// `DistributedFusedAdam(dtype=bfloat16)`, NeMo's `optim.dtype: bf16`).
    Bf16,
}

impl OptimizerDtype {
    /// Bytes of optimizer state per parameter.
    pub fn bytes_per_param(self) -> u128 {
        match self {
            OptimizerDtype::Fp32 => 12,
            OptimizerDtype::Fp32Remainders => 10,
            OptimizerDtype::Bf16 => 4,
        }
    }

    /// `fp32`, `fp32-remainders` or `bf16`, as on the command line and in JSON.
    pub fn id(self) -> &'static str {
        match self {
            OptimizerDtype::Fp32 => "fp32",
            OptimizerDtype::Fp32Remainders => "fp32-remainders",
            OptimizerDtype::Bf16 => "bf16",
        }
    }

    /// Whether this is the default (fp32), which serialised options leave out.
    pub fn is_default(&self) -> bool {
        *self == OptimizerDtype::Fp32
    }
}

/// How a micro-batch's weight gradients reach the accumulated main gradients.
///
/// Megatron-LM since 2022 (`--gradient-accumulation-fusion`, on by default; commit 83b1e42 of
/// February 2022, before the sequence-parallel work of Korthikanti et al.) and Transformer
/// Engine compute each weight gradient straight into the fp32 main gradient (the GEMM's
/// β = 1): no pass of its own. Software without that fusion lets autograd write each
/// micro-batch's bf16 weight gradient and then adds it to the accumulator in an element-wise
/// pass: PyTorch's `AccumulateGrad` (16-bit `.grad` += new), Megatron-LM of 2021 (its DDP hook
/// `param.main_grad.add_(param.grad)`), DeepSpeed's `BF16_Optimizer` (bf16 gradients added into
/// its fp32 buffer after every micro-batch's backward), PyTorch FSDP2 with an fp32 reduce dtype
/// and gradient synchronisation skipped (`FSDPParam.unsharded_accumulated_grad`, fp32, `+=` the
/// bf16 `.grad` — Llama 3's 'FP32 gradient accumulation during backward computation').
/// The pass reads the new 16-bit gradient and reads and writes the accumulator in the main
/// gradients' dtype: 2 + 2·g bytes per parameter and micro-batch (6 with 16-bit, 10 with fp32
/// accumulation; the first micro-batch's cast reads no accumulator, priced the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum GradAccumulation {
    /// Into the main gradients by the weight-gradient GEMM itself (Megatron-LM ≥ 2022, TE).
    #[default]
    Fused,
    /// An element-wise pass per micro-batch after autograd wrote the 16-bit gradient.
    Separate,
}

impl GradAccumulation {
    /// `fused` or `separate`, as on the command line and in JSON.
    pub fn id(self) -> &'static str {
        match self {
            GradAccumulation::Fused => "fused",
            GradAccumulation::Separate => "separate",
        }
    }

    /// Bytes the accumulation pass moves per parameter and micro-batch with main gradients of
    /// `grad` (none when fused).
    pub fn pass_bytes_per_param(self, grad: GradDtype) -> u128 {
        match self {
            GradAccumulation::Fused => 0,
            GradAccumulation::Separate => 2 + 2 * grad.bytes(),
        }
    }

    /// Whether this is the default (fused), which serialised options leave out.
    pub fn is_default(&self) -> bool {
        *self == GradAccumulation::Fused
    }
}

/// Where the optimizer state (fp32 master weights and Adam moments) lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerState {
    /// A full copy on every rank that holds the same weights (ZeRO-0).
    Replicated,
    /// Sharded over those ranks: Megatron's distributed optimizer (`--use-distributed-optimizer`),
    /// ZeRO stage 1 (and, with more sharded, stages 2 and 3).
    Sharded,
}

impl OptimizerState {
    /// `replicated` or `sharded`, as on the command line and in JSON.
    pub fn id(self) -> &'static str {
        match self {
            OptimizerState::Replicated => "replicated",
            OptimizerState::Sharded => "sharded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_bytes() {
        assert_eq!((GradDtype::Fp32.bytes(), GradDtype::Bf16.bytes()), (4, 2));
        assert_eq!(GradDtype::default(), GradDtype::Fp32);
        assert_eq!(
            (
                OptimizerDtype::Fp32.bytes_per_param(),
                OptimizerDtype::Fp32Remainders.bytes_per_param(),
                OptimizerDtype::Bf16.bytes_per_param()
            ),
            (12, 10, 4)
        );
        assert_eq!(
            serde_json::to_string(&OptimizerDtype::Fp32Remainders).unwrap(),
            format!("\"{}\"", OptimizerDtype::Fp32Remainders.id())
        );
        assert!(OptimizerDtype::default().is_default() && !OptimizerDtype::Bf16.is_default());
        assert_eq!(
            (
                GradAccumulation::Fused.pass_bytes_per_param(GradDtype::Fp32),
                GradAccumulation::Separate.pass_bytes_per_param(GradDtype::Bf16),
                GradAccumulation::Separate.pass_bytes_per_param(GradDtype::Fp32)
            ),
            (0, 6, 10)
        );
        assert!(GradAccumulation::default().is_default());
        assert_eq!(
            serde_json::to_string(&GradAccumulation::Separate).unwrap(),
            format!("\"{}\"", GradAccumulation::Separate.id())
        );
        assert_eq!(
            serde_json::to_string(&(GradDtype::Bf16, OptimizerState::Sharded)).unwrap(),
            r#"["bf16","sharded"]"#
        );
    }
}

/// The dtype the transformer layers' linear GEMMs compute in (QKV, the attention output
/// projection, the MLP's up and down projections, forward and backward). Attention, the
/// embedding and the output head stay bf16 either way, as in Transformer Engine's FP8 training
/// under Megatron-Core and NeMo (TE's `Linear`/`LayerNormLinear` modules run FP8; the output
/// layer is Megatron's own bf16 `ColumnParallelLinear`; FP8 attention is a separate switch,
/// off by default, not modelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LinearDtype {
    /// bf16 (the default).
    #[default]
    Bf16,
    /// FP8 with per-tensor scales (Transformer Engine's delayed-scaling recipe; NeMo's
    /// `fp8: true`, Megatron-LM's `--fp8-format hybrid`: E4M3 forward, E5M2 gradients; both one
    /// byte, priced alike): each GEMM at the FP8 tensor-core peak, with its bf16 inputs cast
    /// to FP8 first (`schedule`'s FP8 pass).
    Fp8,
}

impl LinearDtype {
    /// `bf16` or `fp8`, as on the command line and in run files.
    pub fn id(self) -> &'static str {
        match self {
            LinearDtype::Bf16 => "bf16",
            LinearDtype::Fp8 => "fp8",
        }
    }

    /// Whether this is the default, bf16 (serde's `skip_serializing_if` takes a reference).
    pub fn is_bf16(&self) -> bool {
        *self == LinearDtype::Bf16
    }
}
