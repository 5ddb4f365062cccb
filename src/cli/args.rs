//! Arguments shared by every command that takes a workload (DESIGN §8).

use clap::{Args, ValueEnum};

use crate::config::{
    apply_scales, load_hardware, load_model, parse_attention_kernel, parse_count, parse_list,
    parse_scales, AttentionKernel, CpComm, Hardware, MethodId, MetpOptions, Options, OuterAxes,
    PipeP2p, Recompute, WeightExchange, Workload, ZeroStage,
};
use crate::error::{Error, Result};
use crate::report::{self, Format};

pub use super::state_args::StateArgs;

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
