//! How the training software orders its work and its communication, where frameworks of the
//! literature differ and the difference shows in a step: the interleaved pipeline's rounds, whether
//! pipeline exchanges block compute, and when the data-parallel gradient synchronisation runs.
//! Plain data (`Options` holds it); the layers that schedule and price a step read it. Depends on
//! nothing else in the crate but the model's normalisation kind (`config::model::Norm`).
//!
//! The defaults are what the tool models for current software (Megatron-LM's interleaved 1F1B
//! with asynchronous exchanges, gradients synchronised layer by layer as the backward produces
//! them); the others are what published runs ran:
//! - **Rounds.** Megatron's interleaved 1F1B runs each model chunk for `pp` micro-batches in a
//!   row. LLaMA 3's flexible schedule (Grattafiori et al. 2024, §3.3.2 and Fig. 6) makes that
//!   number N tunable, to run fewer micro-batches, or trade memory against exposed exchanges;
//!   PyTorch's `ScheduleInterleaved1F1B` has the same order (`microbatches_per_round`): forward
//!   op k runs chunk ⌊k/N⌋ mod v of micro-batch ⌊k/(N·v)⌋·N + k mod N, and rank r warms up with
//!   (v − 1)·N + 2·(pp − 1 − r) of them, so N sets the activations in flight.
//! - **Blocking exchanges.** Megatron-LM of 2021–22 (`p2p_communication.py`: the
//!   `batch_isend_irecv` requests waited on at once, then `torch.cuda.synchronize()`) held the
//!   compute of a stage until its pipeline sends and receives had completed; later versions
//!   overlap them (`--overlap-p2p-communication`).
//! - **Lock-step exchanges.** DeepSpeed's pipeline engine (`TrainSchedule`,
//!   deepspeed/runtime/pipe/schedule.py, as Megatron-DeepSpeed ran MT-NLG and BLOOM) runs
//!   2·(m + pp − 1) steps of one forward or one backward each, stages of one parity forward
//!   while the others run backward, and opens every step with blocking sends and receives paired
//!   with the neighbour's (a forward step receives the activation from the stage before and
//!   sends it the previous backward's gradient; a backward step sends the previous forward's
//!   activation on and receives the gradient). A message moves only once both sides have
//!   reached it: a stage's next compute waits for its neighbours' previous compute, so the
//!   stages advance in lock-step and each step lasts about the longer of a forward and a
//!   backward. The order of forwards and backwards is 1F1B's.
//! - **Gradient synchronisation after the backward.** Megatron-LM of 2021 all-reduced the
//!   data-parallel gradients from its contiguous buffer once the whole backward of the step had
//!   ended (`model.allreduce_gradients()` in `train_step`), not overlapped with it; overlapping
//!   it with the backward came later (`--overlap-grad-reduce`).
//! - **Context parallelism by all-gather.** Megatron's context parallelism passes K/V blocks
//!   around a ring while the current block's attention runs (the default). LLaMA 3's
//!   (Grattafiori et al. 2024, §3.3.2) all-gathers K and V first and then computes the local
//!   queries' attention, the all-gather 'exposed in the critical path' (small under GQA); the
//!   backward returns the K/V gradients to their owners the same way. Both move the same bytes
//!   over the same cp − 1 hops; the all-gather holds all cp blocks at once and computes only
//!   once they have arrived.
//! - **A layer's memory-bound passes in PyTorch eager.** Megatron-Core with Transformer Engine
//!   or Apex runs each norm, rotary embedding and activation as one fused kernel each way (the
//!   default). torchtitan's Llama as it ran in April 2024 (`torchtitan/models/llama/model.py`
//!   and `models/norms.py` at 1ea476e, `compile = false`) writes them as PyTorch ops, each its
//!   own kernel: the rotary embedding as a complex product in FP32, SwiGLU as `silu` and a
//!   product, the keys and values of grouped-query attention copied out to every query head
//!   (`repeat_kv`), and, with `norm_type = "rmsnorm"`, RMSNorm as an FP32 cast, square, mean,
//!   reciprocal square root, two products and a cast back (`fused_rmsnorm`: one Triton kernel
//!   each way, as fused). `schedule::kernels` counts what each moves.
//! - **ZeRO-3 gathers per parameter.** FSDP1 and DeepSpeed gather a layer's weights into one
//!   flat buffer whose views are the parameters (the default). FSDP2 shards each parameter on
//!   its own: it all-gathers a layer's shards into one buffer and then, on the compute stream,
//!   copies each parameter out of it (`foreach_all_gather_copy_out`, called from
//!   `FSDPParamGroup.wait_for_unshard` after the compute stream waits for the all-gather:
//!   `torch/distributed/_composable/fsdp/_fsdp_collectives.py`), reading and writing every
//!   gathered bf16 weight once before the layer computes, at each gather (forward, and again
//!   for the backward when the weights were freed after the forward).
//! - **The updated weights gathered during the next forward.** With the optimizer state
//!   sharded below ZeRO-3, each replica updates its shard and the updated bf16 weights are
//!   all-gathered. By default the gather runs right after the optimizer step and the next step
//!   waits for it. Megatron-Core's `--overlap-param-gather` instead issues it bucket by bucket
//!   in forward order (`megatron/core/optimizer/distrib_optimizer.py`): the first bucket's
//!   in `zero_grad` at the step's start, 'before forward compute is initiated', and each next
//!   one 'in the forward pre-hook when this all-gather finishes', which waits for a bucket just
//!   before the forward that uses it. So every gather but the first flows beside the first
//!   micro-batch's forward — and paces it where a layer's gather takes longer than its
//!   forward, which a pipeline's fill then carries from stage to stage. FSDP that keeps the weights after the forward
//!   (LLaMA 3's) unshards the same way, in the forward pre-hook with its prefetch. The tool
//!   gathers one layer ahead (a layer's weights, a bucket of Megatron's default 40 M parameters
//!   being of the order of one layer of a large model). Megatron orders the buckets chunk by
//!   chunk over an interleaved stage's model chunks, in one chain: a chunk's first layer is
//!   gathered as the chunk before it starts its last layer's first forward, so with virtual
//!   stages only the stage's first gather waits at the step's start.
//! - **The loss's cross-entropy.** By default the loss is one kernel each way over the bf16
//!   logits (flash-attn's fused cross-entropy, as MosaicML ran it; Transformer Engine's parallel
//!   cross-entropy): 8 bytes per logit. Megatron's `vocab_parallel_cross_entropy`
//!   (`megatron/core/tensor_parallel/cross_entropy.py`, the only one before June 2024 and
//!   Megatron-Core's default since, NeMo 1's too — its configs never set
//!   `cross_entropy_loss_fusion`) runs op by op over FP32 logits: the cast (2 bytes read, 4
//!   written), the max (4), the shift (8), `exp` (8), the sum (4) and the division (8) forward,
//!   the product with the loss gradient (8) and the cast back (6) backward — 52 bytes per
//!   logit. With `cross_entropy_loss_fusion` (`megatron/core/fusions/fused_cross_entropy.py`,
//!   NeMo 2's default since September 2024) each of its four steps is one `jit_fuser` graph:
//!   cast and max (6), shift, `exp` and sum, division (8), gradient and cast back. `jit_fuser`
//!   is `torch.compile` from PyTorch 2.2 (`megatron/core/jit.py`), and Inductor keeps an input
//!   mutated in place only when pointwise ops alone consume it: the shift-`exp`-sum step (an
//!   in-place update that a row sum reads) and the gradient step (an in-place scatter) are
//!   computed into a fresh logits-sized buffer and copied back, one more FP32 read and write
//!   (8 bytes) each — Megatron-LM's later rewrite of the file says so and compiles those
//!   updates apart. 6 + 16 + 8 + 14 = 44 bytes per logit. Liger-Kernel's H100 benchmark of the
//!   two implementations (`tests/data/published-cross-entropy.json`) takes 0.82–0.86 of the
//!   op-by-op time for the fused one on large logits: 44 / 52 = 0.85, where four ideal fused
//!   kernels (28 bytes, 0.54) would price it 1.6 times too fast (`tests/it/cross_entropy.rs`).
//! - **Gradient buffers allocated when the backward first needs them.** Megatron-LM and
//!   DeepSpeed keep every parameter's main gradient in one contiguous buffer allocated at start-up
//!   (the default: the gradients are held through the whole step, beside the activations in
//!   flight). PyTorch FSDP2 with the gradient synchronisation skipped between micro-batches
//!   allocates a module's unsharded FP32 accumulator in the post-backward hook of its first
//!   backward of the step (`FSDPParam.to_accumulated_grad_if_needed`) and drops it once the
//!   backward that synchronises has handed it to the reduce-scatter
//!   (`FSDPParamGroup.post_backward`: `unsharded_accumulated_grad = None`) — under PyTorch's
//!   pipelining, a model chunk's last backward of the step (`set_requires_gradient_sync`). With
//!   `lazy`, a stage's whole gradients are held per model chunk from its first backward to its
//!   last: none during a pipeline's warm-up, where its activations peak. Under ZeRO 2 and 3
//!   (a reduce-scatter after every micro-batch's backward) the gradients held are the device's
//!   shards, which FSDP2 allocates at a chunk's first reduce-scatter and `zero_grad` drops after
//!   the optimizer step: with `lazy` they are held from the chunk's first backward to the
//!   step's end. Memory only.

use serde::{Deserialize, Serialize};

use super::model::Norm;

/// Whether pipeline exchanges overlap compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PipeP2p {
    /// On their own streams: a stage computes while its messages travel (the default).
    #[default]
    Async,
    /// The stage's compute waits until the message it sent has arrived (Megatron 2021–22).
    Blocking,
    /// Blocking, and a message leaves only once its receiver has reached its receive, after
    /// the receiver's own previous compute: DeepSpeed's lock-step `TrainSchedule` (module docs).
    Lockstep,
}

impl PipeP2p {
    /// `async`, `blocking` or `lockstep`, as on the command line and in run files.
    pub fn id(self) -> &'static str {
        match self {
            PipeP2p::Async => "async",
            PipeP2p::Blocking => "blocking",
            PipeP2p::Lockstep => "lockstep",
        }
    }

    /// Whether a stage's next compute waits for the message it sent (blocking and lock-step).
    pub fn blocks(self) -> bool {
        self != PipeP2p::Async
    }
}

/// When the data-parallel gradient synchronisation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GradSync {
    /// Layer by layer as the backward produces the gradients, overlapped with the rest of it
    /// (the default).
    #[default]
    Overlapped,
    /// Once the stage's whole backward of the step has ended, exposed (Megatron-LM 2021).
    AfterBackward,
}

impl GradSync {
    /// `overlapped` or `after-backward`, as on the command line and in run files.
    pub fn id(self) -> &'static str {
        match self {
            GradSync::Overlapped => "overlapped",
            GradSync::AfterBackward => "after-backward",
        }
    }
}

/// How context parallelism exchanges K/V (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CpComm {
    /// K/V blocks travel around a ring while the current block's attention runs (Megatron CP;
    /// the default).
    #[default]
    Ring,
    /// K and V all-gathered before the attention, their gradients returned after it, exposed
    /// (LLaMA 3).
    AllGather,
}

impl CpComm {
    /// `ring` or `all-gather`, as on the command line and in run files.
    pub fn id(self) -> &'static str {
        match self {
            CpComm::Ring => "ring",
            CpComm::AllGather => "all-gather",
        }
    }
}

/// How the software runs a layer's memory-bound passes (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LayerOps {
    /// One fused kernel per pass each way (Megatron-Core, Transformer Engine, Apex; the
    /// default).
    #[default]
    Fused,
    /// PyTorch eager ops, as torchtitan's Llama ran with `norm_type = "rmsnorm"`.
    Eager,
    /// PyTorch eager ops with the norm fused (torchtitan's `norm_type = "fused_rmsnorm"`).
    EagerFusedNorm,
}

impl LayerOps {
    /// `fused`, `eager` or `eager-fused-norm`, as on the command line and in run files.
    pub fn id(self) -> &'static str {
        match self {
            LayerOps::Fused => "fused",
            LayerOps::Eager => "eager",
            LayerOps::EagerFusedNorm => "eager-fused-norm",
        }
    }

    /// Whether this is the default, fused (serde's `skip_serializing_if` takes a reference).
    pub fn is_fused(&self) -> bool {
        *self == LayerOps::Fused
    }

    /// Whether a norm of kind `norm` runs as eager ops: RMSNorm written out under `Eager`;
    /// LayerNorm is one ATen kernel either way, and `EagerFusedNorm` fuses the RMSNorm.
    pub fn eager_norm(self, norm: Norm) -> bool {
        self == LayerOps::Eager && norm == Norm::Rmsnorm
    }

    /// Its id where it is not the default (what reports print), else `None`.
    pub fn shown(self) -> Option<&'static str> {
        (!self.is_fused()).then(|| self.id())
    }

    /// Whether the rotary embedding, the activation and the K/V expansion run as eager ops.
    pub fn eager(self) -> bool {
        self != LayerOps::Fused
    }
}

/// How ZeRO-3's gathered weights become the parameters (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Zero3Gather {
    /// Gathered into a flat buffer the parameters view (FSDP1, DeepSpeed; the default).
    #[default]
    Flat,
    /// Gathered into one buffer and copied out to each parameter on the compute stream (FSDP2).
    PerParameter,
}

impl Zero3Gather {
    /// `flat` or `per-parameter`, as on the command line and in run files.
    pub fn id(self) -> &'static str {
        match self {
            Zero3Gather::Flat => "flat",
            Zero3Gather::PerParameter => "per-parameter",
        }
    }

    /// Whether this is the default, flat.
    pub fn is_flat(&self) -> bool {
        *self == Zero3Gather::Flat
    }

    /// Its id where it is not the default (what reports print), else `None`.
    pub fn shown(self) -> Option<&'static str> {
        (!self.is_flat()).then(|| self.id())
    }
}

/// When a sharded optimizer state's updated weights are all-gathered (below ZeRO-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ParamGather {
    /// Right after the optimizer step, waited for before the next step starts (the default).
    #[default]
    AfterStep,
    /// Layer by layer during the next step's first forward, each layer's gather issued as the
    /// layer before it starts (an interleaved stage's chunks in one chain) and waited for by
    /// that layer alone (Megatron-Core's
    /// `--overlap-param-gather`: one bucket ahead in the forward pre-hooks; FSDP's unshard in
    /// the forward pre-hook with its prefetch when the weights are not resharded after the
    /// forward).
    Overlapped,
}

impl ParamGather {
    /// `after-step` or `overlapped`, as on the command line and in run files.
    pub fn id(self) -> &'static str {
        match self {
            ParamGather::AfterStep => "after-step",
            ParamGather::Overlapped => "overlapped",
        }
    }

    /// Whether this is the default, after the step.
    pub fn is_after_step(&self) -> bool {
        *self == ParamGather::AfterStep
    }

    /// Its id where it is not the default (what reports print), else `None`.
    pub fn shown(self) -> Option<&'static str> {
        (!self.is_after_step()).then(|| self.id())
    }
}

/// How the loss's cross-entropy runs over the logits (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CrossEntropy {
    /// One kernel each way over the bf16 logits (the default).
    #[default]
    SingleKernel,
    /// Megatron-Core's `cross_entropy_loss_fusion`: four `torch.compile`d steps over FP32 logits.
    MegatronJit,
    /// Megatron's `vocab_parallel_cross_entropy` op by op over FP32 logits.
    MegatronUnfused,
}

impl CrossEntropy {
    /// `single-kernel`, `megatron-jit` or `megatron-unfused`, as on the command line and in run
    /// files.
    pub fn id(self) -> &'static str {
        match self {
            CrossEntropy::SingleKernel => "single-kernel",
            CrossEntropy::MegatronJit => "megatron-jit",
            CrossEntropy::MegatronUnfused => "megatron-unfused",
        }
    }

    /// Whether this is the default, one kernel each way.
    pub fn is_single_kernel(&self) -> bool {
        *self == CrossEntropy::SingleKernel
    }

    /// Its id where it is not the default (what reports print), else `None`.
    pub fn shown(self) -> Option<&'static str> {
        (!self.is_single_kernel()).then(|| self.id())
    }

    /// Bytes read and written per logit, forward and backward together (module docs).
    pub fn bytes_per_logit(self) -> f64 {
        match self {
            CrossEntropy::SingleKernel => 8.0,
            CrossEntropy::MegatronJit => 44.0,
            CrossEntropy::MegatronUnfused => 52.0,
        }
    }
}

/// When a stage's whole main gradients are allocated (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum GradBuffer {
    /// One buffer for the whole model, held through the step (the default).
    #[default]
    Persistent,
    /// A model chunk's gradients from its first backward of the step: whole ones to its last
    /// backward, shards (ZeRO 2 and 3) to the step's end.
    Lazy,
}

impl GradBuffer {
    /// `persistent` or `lazy`, as on the command line and in run files.
    pub fn id(self) -> &'static str {
        match self {
            GradBuffer::Persistent => "persistent",
            GradBuffer::Lazy => "lazy",
        }
    }

    /// Whether this is the default, one buffer held through the step.
    pub fn is_persistent(&self) -> bool {
        *self == GradBuffer::Persistent
    }

    /// Its id where it is not the default (what reports print), else `None`.
    pub fn shown(self) -> Option<&'static str> {
        (!self.is_persistent()).then(|| self.id())
    }
}

/// The software's schedule options (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Runtime {
    /// Micro-batches per round of the interleaved schedule (LLaMA 3's N); `None`: `pp`
    /// (Megatron's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pp_round: Option<u64>,
    /// Pipeline exchanges asynchronous or blocking.
    #[serde(default)]
    pub pp_p2p: PipeP2p,
    /// When gradients are synchronised.
    #[serde(default)]
    pub grad_sync: GradSync,
    /// How context parallelism exchanges K/V.
    #[serde(default)]
    pub cp_comm: CpComm,
    /// How a layer's memory-bound passes run (left out of serialized options when fused).
    #[serde(default, skip_serializing_if = "LayerOps::is_fused")]
    pub layer_ops: LayerOps,
    /// How ZeRO-3's gathered weights become the parameters (left out when flat).
    #[serde(default, skip_serializing_if = "Zero3Gather::is_flat")]
    pub zero3_gather: Zero3Gather,
    /// When a sharded optimizer state's updated weights are all-gathered (left out when after
    /// the step).
    #[serde(default, skip_serializing_if = "ParamGather::is_after_step")]
    pub param_gather: ParamGather,
    /// How the loss's cross-entropy runs (left out when one kernel each way).
    #[serde(default, skip_serializing_if = "CrossEntropy::is_single_kernel")]
    pub cross_entropy: CrossEntropy,
    /// When the whole main gradients are allocated (left out when persistent).
    #[serde(default, skip_serializing_if = "GradBuffer::is_persistent")]
    pub grad_buffer: GradBuffer,
}

impl Runtime {
    /// Whether every option is the default (kept out of serialized options).
    pub fn is_default(&self) -> bool {
        *self == Runtime::default()
    }

    /// Whether a step may be composed from its ops' programs (`sim::compose`): the schedule's
    /// order, its exchanges and synchronisation are the defaults the composition walks
    /// (`pp_round`, `pp_p2p`, `grad_sync`, `cp_comm`); the other options act inside an op.
    pub fn composable(&self) -> bool {
        Runtime {
            layer_ops: LayerOps::default(),
            zero3_gather: Zero3Gather::default(),
            param_gather: ParamGather::default(),
            cross_entropy: CrossEntropy::default(),
            grad_buffer: GradBuffer::default(),
            ..*self
        }
        .is_default()
    }

    /// The options reports print only where they are not the defaults.
    pub fn shown(&self) -> Shown {
        Shown {
            layer_ops: self.layer_ops.shown(),
            zero3_gather: self.zero3_gather.shown(),
            param_gather: self.param_gather.shown(),
            cross_entropy: self.cross_entropy.shown(),
            grad_buffer: self.grad_buffer.shown(),
            linear_dtype: None,
        }
    }
}

/// The ids of the options reports print only where they are not the defaults ([`Runtime::shown`]):
/// what `memory`, `simulate` and `plan` JSON carry (flattened; absent when the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Shown {
    /// How a layer's memory-bound passes run (`eager`|`eager-fused-norm`; absent: fused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer_ops: Option<&'static str>,
    /// How ZeRO-3's gathered weights become the parameters (`per-parameter`; absent: flat).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero3_gather: Option<&'static str>,
    /// When a sharded optimizer state's updated weights are all-gathered (`overlapped`;
    /// absent: after the step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param_gather: Option<&'static str>,
    /// How the loss's cross-entropy runs (`megatron-jit`|`megatron-unfused`; absent: one
    /// kernel each way).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_entropy: Option<&'static str>,
    /// When the whole main gradients are allocated (`lazy`; absent: persistent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_buffer: Option<&'static str>,
    /// The layers' linear GEMMs' dtype (`fp8`; absent: bf16). Not a runtime option: set by
    /// `Options::shown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linear_dtype: Option<&'static str>,
}
