//! Arguments shared by every command that takes a workload (DESIGN §8).

use clap::{Args, ValueEnum};

use crate::config::{
    apply_scales, load_hardware, load_model, parse_attention_kernel, parse_count, parse_list,
    parse_scales, AttentionKernel, CpComm, CrossEntropy, GradAccumulation, GradDtype, GradSync,
    Hardware, LayerOps, LinearDtype, MethodId, MetpOptions, OptimizerDtype, OptimizerState,
    Options, OuterAxes, ParamGather, PipeP2p, Recompute, WeightExchange, Workload, Zero3Gather,
    ZeroStage,
};
use crate::error::{Error, Result};
use crate::report::{self, Format};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FormatArg {
    Table,
    Json,
    Csv,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Table => Format::Table,
            FormatArg::Json => Format::Json,
            FormatArg::Csv => Format::Csv,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RecomputeArg {
    None,
    Selective,
    Full,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExchangeArg {
    Ring,
    Broadcast,
}

impl From<WeightExchange> for ExchangeArg {
    fn from(e: WeightExchange) -> ExchangeArg {
        match e {
            WeightExchange::Ring => ExchangeArg::Ring,
            WeightExchange::Broadcast => ExchangeArg::Broadcast,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ZeroArg {
    Auto,
    #[value(name = "0")]
    Z0,
    #[value(name = "1")]
    Z1,
    #[value(name = "2")]
    Z2,
    #[value(name = "3")]
    Z3,
}

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
pub enum CpCommArg {
    Ring,
    AllGather,
}

impl From<CpCommArg> for CpComm {
    fn from(c: CpCommArg) -> CpComm {
        match c {
            CpCommArg::Ring => CpComm::Ring,
            CpCommArg::AllGather => CpComm::AllGather,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PipeP2pArg {
    Async,
    Blocking,
    Lockstep,
}

impl From<PipeP2pArg> for PipeP2p {
    fn from(g: PipeP2pArg) -> PipeP2p {
        match g {
            PipeP2pArg::Async => PipeP2p::Async,
            PipeP2pArg::Blocking => PipeP2p::Blocking,
            PipeP2pArg::Lockstep => PipeP2p::Lockstep,
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
    /// default: four jit-fused kernels over FP32 logits, 28 bytes) or megatron-unfused
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
        options.linear_dtype = self.linear_dtype.into();
        match Workload::optimizer_state_conflict(options) {
            Some(m) => Err(Error::arg("--optimizer-state", m)),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CausalOrderArg {
    Zigzag,
    Contiguous,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// METP's knobs, defined once for every command that takes them (defaults:
/// [`MetpOptions::default`]).
#[derive(Debug, Args)]
pub struct MetpArgs {
    /// METP: head groups in the outer attention loop (default p).
    #[arg(long)]
    pub metp_head_groups: Option<u64>,
    /// METP: how attention weight shards move.
    #[arg(long, value_enum, default_value_t = ExchangeArg::from(MetpOptions::default().weight_exchange))]
    pub metp_weight_exchange: ExchangeArg,
    /// METP: receive buffers per traveling tensor (1 or 2).
    #[arg(long, default_value_t = MetpOptions::default().recv_buffers, value_parser = clap::value_parser!(u64).range(1..=2))]
    pub metp_recv_buffers: u64,
    /// METP: store Q, K, V for backward instead of recomputing them.
    #[arg(long)]
    pub metp_store_qkv: bool,
    /// METP: store the MLP activation input instead of recomputing it.
    #[arg(long)]
    pub metp_store_mlp_act: bool,
}

impl MetpArgs {
    pub fn options(&self) -> MetpOptions {
        MetpOptions {
            head_groups: self.metp_head_groups,
            weight_exchange: match self.metp_weight_exchange {
                ExchangeArg::Ring => WeightExchange::Ring,
                ExchangeArg::Broadcast => WeightExchange::Broadcast,
            },
            recv_buffers: self.metp_recv_buffers,
            store_qkv: self.metp_store_qkv,
            store_mlp_act: self.metp_store_mlp_act,
        }
    }
}

/// Model, hardware and options: everything of a workload except method, degree and sequence.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Model: a name in models/ or a path to a JSON file.
    #[arg(long, default_value = "llama2-7b")]
    pub model: String,
    /// Hardware profile: a name in hardware-profiles/ or a path to a JSON file.
    #[arg(long, default_value = "dgx-a100-80gb")]
    pub hw: String,
    /// Number of nodes (overrides the profile's `nodes`).
    #[arg(long)]
    pub nodes: Option<u64>,
    /// What-if: multiply a profile figure when loading it, KEY=FACTOR (repeat or comma-separate):
    /// flops, hbm, memory, nvlink|xgmi|intra, intra-latency, ib|inter, inter-latency, spine,
    /// host, or a dotted figure path such as kernels.gemm.mma_fraction. Recorded in the
    /// profile's name and sources in every output.
    #[arg(long, value_name = "KEY=FACTOR")]
    pub scale: Vec<String>,
    /// Micro-batch size b.
    #[arg(long, default_value = "1")]
    pub micro_batch: String,
    /// Data-parallel replicas (ZeRO shards across them).
    #[arg(long, default_value = "1")]
    pub dp: String,
    /// Use fused (FlashAttention-style) attention kernels: the profile's default fused
    /// implementation (default).
    #[arg(long, overrides_with = "no_flash")]
    pub flash: bool,
    /// Materialise attention scores (unfused attention; the same as --attention-kernel unfused).
    #[arg(long, overrides_with = "flash")]
    pub no_flash: bool,
    /// Attention implementation from the profile's kernel model (sdpa-fa2, fa2, fa3, fa4,
    /// cudnn, ck, triton, unfused; `metp-sim list` shows each profile's, default first).
    #[arg(long, value_name = "NAME")]
    pub attention_kernel: Option<String>,
    /// Activation recomputation.
    #[arg(long, value_enum, default_value = "none")]
    pub recompute: RecomputeArg,
    /// ZeRO stage over the data-parallel group (and the p devices when weights are
    /// replicated): auto = 3 for ulysses, ring and rsa, 0 for tp, tp-sp and metp. Stage 3
    /// gathers each layer's weights one layer ahead of the compute, as FSDP prefetches them.
    #[arg(long, value_enum, default_value = "auto")]
    pub zero: ZeroArg,
    /// Causal attention.
    #[arg(long)]
    pub causal: bool,
    /// Order of sequence blocks under causal attention: zig-zag balances the work of the rings
    /// (ring, metp); contiguous leaves the last device with the most work.
    #[arg(long, value_enum, default_value = "zigzag")]
    pub causal_order: CausalOrderArg,
    /// Override the model's dropout setting.
    #[arg(long, value_enum)]
    pub dropout: Option<OnOff>,
    /// Replicate the output head instead of splitting the vocabulary (tp, tp-sp, metp).
    #[arg(long)]
    pub no_vocab_parallel: bool,
    /// tp-sp: overlap each layer's all-gathers and reduce-scatters with the GEMMs next to them
    /// (Megatron-Core's tp_comm_overlap, Transformer Engine's userbuffers); without it they
    /// are exposed, as Megatron runs them by default.
    #[arg(long)]
    pub tp_comm_overlap: bool,
    #[command(flatten)]
    pub metp: MetpArgs,
    #[command(flatten)]
    pub state: StateArgs,
    /// Output format: a table for people, JSON, or CSV (a header row, numbers unformatted:
    /// memory one row per tensor, maxseq per method and degree, simulate one row, overlap per
    /// local length, sweep what it writes to sweep.csv).
    #[arg(long, value_enum, default_value = "table")]
    pub format: FormatArg,
}

impl CommonArgs {
    pub fn options(&self) -> Result<Options> {
        let attention =
            attention_choice(self.attention_kernel.as_deref(), self.flash, self.no_flash)?;
        let mut o = Options {
            flash: !self.no_flash && attention != Some(AttentionKernel::Unfused),
            attention,
            recompute: match self.recompute {
                RecomputeArg::None => Recompute::None,
                RecomputeArg::Selective => Recompute::Selective,
                RecomputeArg::Full => Recompute::Full,
            },
            zero: match self.zero {
                ZeroArg::Auto => None,
                ZeroArg::Z0 => Some(ZeroStage::Zero0),
                ZeroArg::Z1 => Some(ZeroStage::Zero1),
                ZeroArg::Z2 => Some(ZeroStage::Zero2),
                ZeroArg::Z3 => Some(ZeroStage::Zero3),
            },
            causal: self.causal,
            causal_zigzag: matches!(self.causal_order, CausalOrderArg::Zigzag),
            dropout: self.dropout.map(|d| matches!(d, OnOff::On)),
            vocab_parallel: !self.no_vocab_parallel,
            tp_comm_overlap: self.tp_comm_overlap,
            metp: self.metp.options(),
            ..Options::default()
        };
        self.state.apply(&mut o)?;
        Ok(o)
    }

    /// Loads a hardware profile by name or path and applies `--scale`.
    pub fn hardware(&self, name: &str) -> Result<Hardware> {
        load_scaled(name, &self.scale)
    }

    /// Loads the files and builds a workload template (method, p and seq filled by the caller;
    /// no pipeline or context parallelism: the commands that take them set [`OuterArgs`]'s).
    pub fn workload(&self, method: MethodId, p: u64, seq: u64) -> Result<Workload> {
        let model = load_model(&self.model)?;
        let mut hardware = self.hardware(&self.hw)?;
        if let Some(n) = self.nodes {
            hardware.set_nodes(n)?;
        }
        let options = self.options()?;
        check_attention(&options, [&hardware])?;
        Ok(Workload {
            model,
            hardware,
            method,
            p,
            dp: parse_count("--dp", &self.dp)?,
            outer: OuterAxes::default(),
            seq,
            micro_batch: parse_count("--micro-batch", &self.micro_batch)?,
            micro_batches: 1,
            options,
        })
    }
}

/// `--global-batch` for the commands that look at one step's memory or many steps (`memory`,
/// `maxseq`, `sweep`): a pipeline's stages hold activations for the micro-batches in flight,
/// and Megatron's interleaving needs the micro-batches to be a multiple of the stages.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Global batch in sequences: micro-batches per replica = G / (dp × micro-batch)
    /// (default: one micro-batch per replica).
    #[arg(long)]
    pub global_batch: Option<String>,
}

/// Sets `w`'s micro-batches per replica from a global batch of `g` sequences (`--global-batch`):
/// G / (dp × micro-batch), which must be whole.
pub fn apply_global_batch(w: &mut Workload, g: Option<&str>) -> Result<()> {
    let Some(g) = g else {
        return Ok(());
    };
    let g = parse_count("--global-batch", g)?;
    let Some(per) = w.dp.checked_mul(w.micro_batch) else {
        return Err(Error::arg(
            "--global-batch",
            format!(
                "dp × micro-batch = {} × {} is too large",
                w.dp, w.micro_batch
            ),
        ));
    };
    if g % per != 0 {
        return Err(Error::arg(
            "--global-batch",
            format!("{g} is not a multiple of dp × micro-batch = {per}"),
        ));
    }
    w.micro_batches = g / per;
    Ok(())
}

/// Pipeline stages and context parallelism: flattened into the commands that can run them
/// (memory, maxseq, simulate, sweep), not into `overlap`, whose study is METP on one layer —
/// a command lists only the flags it can use.
#[derive(Debug, Args)]
pub struct OuterArgs {
    /// Pipeline stages (1F1B; layers split as evenly as possible, embedding on the first
    /// stage, head and loss on the last).
    #[arg(long, default_value = "1")]
    pub pp: String,
    /// Virtual stages per pipeline stage (Megatron's interleaved 1F1B; needs the micro-batches
    /// per replica to be a multiple of --pp).
    #[arg(long, default_value = "1")]
    pub pp_interleave: String,
    /// Micro-batches each model chunk runs in a row under interleaving (LLaMA 3's flexible
    /// schedule, PyTorch's ScheduleInterleaved1F1B); default --pp (Megatron's). At least --pp,
    /// or all the micro-batches in one round; they must be a multiple of it.
    #[arg(long)]
    pub pp_round: Option<String>,
    /// Pipeline exchanges: async (on their own streams, overlapped with compute), blocking
    /// (the stage's compute waits for its sends, as Megatron-LM of 2021-22 ran them) or
    /// lockstep (blocking, and a message leaves only once its receiver has reached it: DeepSpeed's
    /// pipeline engine, whose stages advance in lock-step).
    #[arg(long, value_enum, default_value = "async")]
    pub pp_p2p: PipeP2pArg,
    /// Context-parallel degree for tp-sp (Megatron CP: ring attention across cp groups of p;
    /// --cp-comm all-gather for LLaMA 3's).
    #[arg(long, default_value = "1")]
    pub cp: String,
    /// How context parallelism exchanges K/V: ring (blocks travel while the current one is
    /// computed, Megatron CP) or all-gather (gathered before the attention, exposed, as LLaMA 3
    /// ran it)
    #[arg(long, value_enum, default_value = "ring")]
    pub cp_comm: CpCommArg,
}

impl OuterArgs {
    /// The outer axes from `--pp`, `--pp-interleave` and `--cp`.
    pub fn axes(&self) -> Result<OuterAxes> {
        Ok(OuterAxes {
            pp: parse_count("--pp", &self.pp)?,
            interleave: parse_count("--pp-interleave", &self.pp_interleave)?,
            cp: parse_count("--cp", &self.cp)?,
        })
    }

    /// Sets `options`' pipeline schedule from `--pp-round` and `--pp-p2p`.
    pub fn apply(&self, options: &mut Options) -> Result<()> {
        options.runtime.pp_round = self
            .pp_round
            .as_deref()
            .map(|r| parse_count("--pp-round", r))
            .transpose()?;
        options.runtime.pp_p2p = self.pp_p2p.into();
        options.runtime.cp_comm = self.cp_comm.into();
        Ok(())
    }
}

/// `--attention-kernel NAME` with `--flash` / `--no-flash`: `--no-flash` is `unfused`, `--flash`
/// the profile's default fused implementation; naming a fused one with `--no-flash`, or
/// `unfused` with `--flash`, is a usage error. Whether a profile has the name is checked when
/// the workload is validated (a usage error listing what it has).
pub fn attention_choice(
    name: Option<&str>,
    flash: bool,
    no_flash: bool,
) -> Result<Option<AttentionKernel>> {
    let Some(name) = name else {
        return Ok(None);
    };
    let k = parse_attention_kernel(name)?;
    if no_flash && k.is_fused() {
        return Err(Error::arg(
            "--attention-kernel",
            format!("'{k}' is a fused implementation but --no-flash asks for unfused attention"),
        ));
    }
    if flash && !k.is_fused() {
        return Err(Error::arg(
            "--attention-kernel",
            "'unfused' contradicts --flash (use one of them)",
        ));
    }
    Ok(Some(k))
}

/// Refuses, as a usage error listing what it has, a profile that lacks the implementation the
/// options ask for — before any work starts (a sweep would otherwise record every point as
/// invalid).
pub fn check_attention<'a>(
    options: &Options,
    profiles: impl IntoIterator<Item = &'a Hardware>,
) -> Result<()> {
    for hw in profiles {
        hw.kernels
            .clone()
            .select_attention(options.attention_kernel(hw), &hw.name)?;
    }
    Ok(())
}

/// Loads a hardware profile by name or path and applies the `--scale` values.
pub fn load_scaled(name: &str, scale: &[String]) -> Result<Hardware> {
    let scales = parse_scales(scale)?;
    let mut hw = load_hardware(name)?;
    apply_scales(&mut hw, &scales)?;
    Ok(hw)
}

/// A comma-separated list of model or profile names, each non-empty.
pub fn names<'a>(flag: &str, text: &'a str) -> Result<Vec<&'a str>> {
    let v: Vec<&str> = text.split(',').map(str::trim).collect();
    if v.iter().any(|n| n.is_empty()) {
        return Err(Error::arg(
            flag,
            format!("'{text}': an empty name in the list"),
        ));
    }
    Ok(v)
}

/// Refuses a list that names one model (or profile) twice: their points and plots would mix.
pub fn distinct<'a>(flag: &str, names: impl Iterator<Item = &'a str>) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        if !seen.insert(report::file_slug(n)) {
            return Err(Error::arg(flag, format!("'{n}' is listed twice")));
        }
    }
    Ok(())
}

/// Parses `--p` as a single degree.
pub fn single_degree(text: &str) -> Result<u64> {
    let v = parse_list("--p", text)?;
    match v.as_slice() {
        [p] => Ok(*p),
        _ => Err(Error::arg(
            "--p",
            format!("'{text}': this command takes one degree"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Probe {
        #[command(flatten)]
        metp: MetpArgs,
    }

    /// The METP flags' defaults are the library's (one definition, shared by every command).
    #[test]
    fn metp_defaults_are_the_library_defaults() {
        let p = Probe::try_parse_from(["probe"]).unwrap();
        assert_eq!(p.metp.options(), MetpOptions::default());
        let p = Probe::try_parse_from(["probe", "--metp-weight-exchange", "ring"]).unwrap();
        assert_eq!(p.metp.options().weight_exchange, WeightExchange::Ring);
    }
}
