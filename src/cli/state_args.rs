//! The training state's arguments shared by every command that takes a workload (DESIGN §8):
//! gradient and optimizer dtypes and placement, and how the training software runs its work
//! (`config::runtime`). Split from `args.rs`; parse only, no pricing.

use clap::{Args, ValueEnum};

use crate::config::{
    CrossEntropy, GradAccumulation, GradBuffer, GradDtype, GradSync, LayerOps, LinearDtype,
    OptimizerDtype, OptimizerState, Options, ParamGather, Workload, Zero3Gather,
};
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OptimizerDtypeArg {
    Fp32,
    Fp32Remainders,
    Bf16,
}

impl From<OptimizerDtypeArg> for OptimizerDtype {
    fn from(o: OptimizerDtypeArg) -> OptimizerDtype {
        match o {
            OptimizerDtypeArg::Fp32 => OptimizerDtype::Fp32,
            OptimizerDtypeArg::Fp32Remainders => OptimizerDtype::Fp32Remainders,
            OptimizerDtypeArg::Bf16 => OptimizerDtype::Bf16,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GradAccumulationArg {
    Fused,
    Separate,
}

impl From<GradAccumulationArg> for GradAccumulation {
    fn from(g: GradAccumulationArg) -> GradAccumulation {
        match g {
            GradAccumulationArg::Fused => GradAccumulation::Fused,
            GradAccumulationArg::Separate => GradAccumulation::Separate,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GradDtypeArg {
    Fp32,
    Bf16,
}

impl From<GradDtypeArg> for GradDtype {
    fn from(g: GradDtypeArg) -> GradDtype {
        match g {
            GradDtypeArg::Fp32 => GradDtype::Fp32,
            GradDtypeArg::Bf16 => GradDtype::Bf16,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GradSyncArg {
    Overlapped,
    AfterBackward,
}

impl From<GradSyncArg> for GradSync {
    fn from(g: GradSyncArg) -> GradSync {
        match g {
            GradSyncArg::Overlapped => GradSync::Overlapped,
            GradSyncArg::AfterBackward => GradSync::AfterBackward,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LayerOpsArg {
    Fused,
    Eager,
    EagerFusedNorm,
}

impl From<LayerOpsArg> for LayerOps {
    fn from(o: LayerOpsArg) -> LayerOps {
        match o {
            LayerOpsArg::Fused => LayerOps::Fused,
            LayerOpsArg::Eager => LayerOps::Eager,
            LayerOpsArg::EagerFusedNorm => LayerOps::EagerFusedNorm,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ParamGatherArg {
    AfterStep,
    Overlapped,
}

impl From<ParamGatherArg> for ParamGather {
    fn from(g: ParamGatherArg) -> ParamGather {
        match g {
            ParamGatherArg::AfterStep => ParamGather::AfterStep,
            ParamGatherArg::Overlapped => ParamGather::Overlapped,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CrossEntropyArg {
    SingleKernel,
    MegatronJit,
    MegatronUnfused,
}

impl From<CrossEntropyArg> for CrossEntropy {
    fn from(c: CrossEntropyArg) -> CrossEntropy {
        match c {
            CrossEntropyArg::SingleKernel => CrossEntropy::SingleKernel,
            CrossEntropyArg::MegatronJit => CrossEntropy::MegatronJit,
            CrossEntropyArg::MegatronUnfused => CrossEntropy::MegatronUnfused,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GradBufferArg {
    Persistent,
    Lazy,
}

impl From<GradBufferArg> for GradBuffer {
    fn from(g: GradBufferArg) -> GradBuffer {
        match g {
            GradBufferArg::Persistent => GradBuffer::Persistent,
            GradBufferArg::Lazy => GradBuffer::Lazy,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Zero3GatherArg {
    Flat,
    PerParameter,
}

impl From<Zero3GatherArg> for Zero3Gather {
    fn from(z: Zero3GatherArg) -> Zero3Gather {
        match z {
            Zero3GatherArg::Flat => Zero3Gather::Flat,
            Zero3GatherArg::PerParameter => Zero3Gather::PerParameter,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OptimizerStateArg {
    Replicated,
    Sharded,
}

impl From<OptimizerStateArg> for OptimizerState {
    fn from(o: OptimizerStateArg) -> OptimizerState {
        match o {
            OptimizerStateArg::Replicated => OptimizerState::Replicated,
            OptimizerStateArg::Sharded => OptimizerState::Sharded,
        }
    }
}

/// The training state's precision and placement (`config::precision`), defined once for every
/// command that takes a workload.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// Dtype of the main gradients: fp32 (Megatron's default: 18 bytes per parameter,
    /// gradients reduced in fp32) or bf16 (16 bytes per parameter, reduced in bf16).
    #[arg(long, value_enum, default_value = "fp32")]
    pub grad_dtype: GradDtypeArg,
    /// Optimizer state (fp32 master weights, Adam moments): replicated on every rank holding
    /// the same weights, or sharded over them (Megatron's distributed optimizer = ZeRO-1:
    /// gradients reduce-scattered, updated weights all-gathered). Default: as --zero says.
    #[arg(long, value_enum)]
    pub optimizer_state: Option<OptimizerStateArg>,
    /// Dtype of the optimizer state: fp32 (master weights and Adam moments, 12 bytes per
    /// parameter), fp32-remainders (fp32 moments and only the 16 bits of the master weights the
    /// bf16 weights lack, 10 bytes: Apex's DistributedFusedAdam with store_param_remainders,
    /// NeMo's default for bf16 models) or bf16 (Adam moments in bf16 and no master copy, 4
    /// bytes: Apex's DistributedFusedAdam with dtype bf16, NeMo's optim.dtype: bf16).
    #[arg(long, value_enum, default_value = "fp32")]
    pub optimizer_dtype: OptimizerDtypeArg,
    /// How each micro-batch's weight gradients join the accumulated ones: fused (the
    /// weight-gradient GEMM adds into the main gradients, Megatron-LM since 2022 and Transformer
    /// Engine) or separate (autograd writes a bf16 gradient and a pass of its own adds it:
    /// 2 + 2 x grad-dtype bytes per parameter and micro-batch, as PyTorch FSDP, DeepSpeed and
    /// Megatron-LM of 2021 do).
    #[arg(long, value_enum, default_value = "fused")]
    pub grad_accumulation: GradAccumulationArg,
    /// When the main gradients are held (memory only): persistent (one buffer through the
    /// step: Megatron-LM, DeepSpeed) or lazy (PyTorch FSDP2: a model chunk's from its first
    /// backward of the step — whole ones to its last backward, where they are reduce-scattered,
    /// as LLaMA 3 trained; the shards of ZeRO 2 and 3 to the step's end).
    #[arg(long, value_enum, default_value = "persistent")]
    pub grad_buffer: GradBufferArg,
    /// When the data-parallel gradients are synchronised: overlapped (layer by layer as the
    /// backward produces them) or after-backward (once the whole backward has ended, exposed,
    /// as Megatron-LM of 2021 did; ZeRO 0 or 1).
    #[arg(long, value_enum, default_value = "overlapped")]
    pub grad_sync: GradSyncArg,
    /// How a layer's norms, rotary embedding and activation run: fused (one kernel per pass
    /// each way: Megatron-Core, Transformer Engine, Apex), eager (PyTorch ops, each a kernel:
    /// RoPE as an FP32 complex product, SwiGLU as silu and a product, GQA's K/V copied to every
    /// query head, RMSNorm written out, as torchtitan's Llama ran without torch.compile) or
    /// eager-fused-norm (the same with a fused RMSNorm kernel).
    #[arg(long, value_enum, default_value = "fused")]
    pub layer_ops: LayerOpsArg,
    /// How ZeRO-3's gathered weights become the parameters: flat (a flat buffer the parameters
    /// view: FSDP1, DeepSpeed) or per-parameter (FSDP2: each layer's gathered weights copied
    /// out of the all-gather buffer on the compute stream before it computes).
    #[arg(long, value_enum, default_value = "flat")]
    pub zero3_gather: Zero3GatherArg,
    /// When a sharded optimizer state's updated weights are all-gathered (ZeRO 1 or 2):
    /// after-step (right after the optimizer, waited for) or overlapped (layer by layer during
    /// the next step's first forward, one layer ahead, chained over an interleaved stage's
    /// chunks: Megatron-Core's --overlap-param-gather, FSDP's unshard in the forward when the
    /// weights are kept after it).
    #[arg(long, value_enum, default_value = "after-step")]
    pub param_gather: ParamGatherArg,
    /// How the loss's cross-entropy runs over the logits: single-kernel (one kernel each way
    /// over the bf16 logits, 8 bytes per logit: flash-attn's or Transformer Engine's fused
    /// cross-entropy), megatron-jit (Megatron-Core's cross_entropy_loss_fusion, NeMo 2's
    /// default: four torch.compile'd steps over FP32 logits, 44 bytes) or megatron-unfused
    /// (Megatron's vocab_parallel_cross_entropy op by op over FP32 logits, Megatron-Core's and
    /// NeMo 1's default: 52 bytes).
    #[arg(long, value_enum, default_value = "single-kernel")]
    pub cross_entropy: CrossEntropyArg,
    /// Dtype of the layers' linear GEMMs: bf16, or fp8 (Transformer Engine's FP8 training,
    /// NeMo's fp8: true: QKV, projection and MLP GEMMs forward and backward at the profile's
    /// FP8 peak, their bf16 inputs cast to FP8 first; attention, embedding and output head stay
    /// bf16). Needs a profile with an FP8 peak (Hopper or later).
    #[arg(long, value_enum, default_value = "bf16")]
    pub linear_dtype: LinearDtypeArg,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LinearDtypeArg {
    Bf16,
    Fp8,
}

impl From<LinearDtypeArg> for LinearDtype {
    fn from(d: LinearDtypeArg) -> LinearDtype {
        match d {
            LinearDtypeArg::Bf16 => LinearDtype::Bf16,
            LinearDtypeArg::Fp8 => LinearDtype::Fp8,
        }
    }
}

impl StateArgs {
    /// Sets `options`' gradient dtype and optimizer state; a placement that contradicts an
    /// explicit `--zero` is a usage error.
    pub fn apply(&self, options: &mut Options) -> Result<()> {
        options.grad_dtype = self.grad_dtype.into();
        options.optimizer_state = self.optimizer_state.map(Into::into);
        options.optimizer_dtype = self.optimizer_dtype.into();
        options.grad_accumulation = self.grad_accumulation.into();
        options.runtime.grad_sync = self.grad_sync.into();
        options.runtime.layer_ops = self.layer_ops.into();
        options.runtime.zero3_gather = self.zero3_gather.into();
        options.runtime.param_gather = self.param_gather.into();
        options.runtime.cross_entropy = self.cross_entropy.into();
        options.runtime.grad_buffer = self.grad_buffer.into();
        options.linear_dtype = self.linear_dtype.into();
        match Workload::optimizer_state_conflict(options) {
            Some(m) => Err(Error::arg("--optimizer-state", m)),
            None => Ok(()),
        }
    }
}
