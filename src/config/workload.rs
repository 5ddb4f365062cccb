//! A workload: model × hardware × method × degree × sequence × batch × options — everything one
//! memory or time estimate needs.

use super::layout::{
    flexible_op, flexible_order, pipeline_op, pipeline_order, virtual_stage_layers, Axes, Coord,
    PipeOp,
};
use super::precision::OptimizerState;
use super::{Hardware, MethodId, Model, Options, OuterAxes, ZeroStage};
use crate::error::{Error, Result};

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
    /// Pipeline stages, interleaving and context parallelism (default: none).
    pub outer: OuterAxes,
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
    /// The dense peak an MFU of this workload refers to: the profile's FP8 peak where the
    /// layers' linear GEMMs run FP8 (NVIDIA's convention for FP8 training), else its bf16 one.
    pub fn peak_flops_per_s(&self) -> f64 {
        self.hardware.peak_flops_per_s(self.options.linear_dtype)
    }

    /// The ZeRO stage in force (resolving automatic).
    pub fn zero_stage(&self) -> ZeroStage {
        match (self.options.zero, self.options.optimizer_state) {
            (Some(z), _) => z,
            (None, Some(OptimizerState::Replicated)) => ZeroStage::Zero0,
            (None, Some(OptimizerState::Sharded)) if self.method.shards_weights() => {
                ZeroStage::Zero1
            }
            (None, _) if self.method.shards_weights() => ZeroStage::Zero0,
            (None, _) => ZeroStage::Zero3,
        }
    }

    /// Where the optimizer state lives, resolved: sharded from ZeRO stage 1 up.
    pub fn optimizer_state(&self) -> OptimizerState {
        if self.zero_stage() >= ZeroStage::Zero1 {
            OptimizerState::Sharded
        } else {
            OptimizerState::Replicated
        }
    }

    /// An explicit ZeRO stage that contradicts an explicit optimizer-state placement, in words.
    pub fn optimizer_state_conflict(options: &Options) -> Option<String> {
        match (options.zero, options.optimizer_state) {
            (Some(ZeroStage::Zero0), Some(OptimizerState::Sharded)) => Some(
                "a sharded optimizer state contradicts ZeRO stage 0 (which replicates it; the \
                 distributed optimizer is ZeRO stage 1)"
                    .into(),
            ),
            (Some(z), Some(OptimizerState::Replicated)) if z >= ZeroStage::Zero1 => Some(format!(
                "a replicated optimizer state contradicts ZeRO stage {} (stages 1 to 3 shard \
                 it)",
                z as u8
            )),
            _ => None,
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

    /// Checks everything a configuration needs before any estimate — positive sizes within the
    /// supported range, enough devices in the profile, METP's receive buffers, and the method's
    /// rules for this model, degree and sequence length ([`MethodId::check_degree`],
    /// [`MethodId::seq_multiple`]) — once, and returns the workload as a [`ValidWorkload`],
    /// the only input of the evaluation path (`memory`, `schedule`, `analytic`, `sim`).
    pub fn validate(mut self) -> Result<ValidWorkload> {
        // The attention implementation, resolved once: its figures become the profile's
        // fused-attention figures for everything downstream.
        let attention = self.options.attention_kernel(&self.hardware);
        self.hardware
            .kernels
            .select_attention(attention, &self.hardware.name)?;
        self.options.attention = Some(attention);
        self.options.flash = attention.is_fused();
        if self.p == 0 || self.dp == 0 || self.seq == 0 || self.micro_batch == 0 {
            return Err(self.invalid("p, dp, sequence and micro-batch must be positive"));
        }
        if self.micro_batches == 0 {
            return Err(self.invalid("the number of micro-batches must be positive"));
        }
        use super::limits::{MAX_GPUS, MAX_MICRO_BATCH, MAX_MICRO_BATCHES};
        if self.micro_batch > MAX_MICRO_BATCH {
            return Err(self.invalid(format!(
                "micro-batch {} is above the supported 2^20",
                self.micro_batch
            )));
        }
        if self.micro_batches > MAX_MICRO_BATCHES {
            return Err(self.invalid(format!(
                "{} micro-batches per step is above the supported 2^16 (lower --global-batch)",
                self.micro_batches
            )));
        }
        self.check_outer()?;
        // Each axis is at most 2^20 (check_outer), so the saturating product only saturates
        // far above the limit and is refused here.
        let gpus = self.devices_needed();
        if gpus > MAX_GPUS {
            return Err(self.invalid(format!(
                "p × cp × pp × dp = {} × {} × {} × {} is more than the {MAX_GPUS} GPUs this tool \
                 models",
                self.p, self.outer.cp, self.outer.pp, self.dp
            )));
        }
        if gpus > self.hardware.total_gpus() {
            return Err(self.invalid(format!(
                "needs {gpus} GPUs ({}) but '{}' describes {} ({} node(s) × {}); use --nodes",
                self.axes_formula(),
                self.hardware.name,
                self.hardware.total_gpus(),
                self.hardware.nodes,
                self.hardware.gpus_per_node
            )));
        }
        // The clock the job's slowest GPU holds, resolved once for everything downstream
        // (`config::fleet`): the whole job waits for it every step.
        if let Some(spread) = &self.hardware.kernels.gemm.fleet_clock_spread {
            self.hardware.kernels.gemm.job_clock_fraction =
                Some(super::fleet::slowest_clock_fraction(spread.value, gpus));
        }
        if let Some(m) = Workload::optimizer_state_conflict(&self.options) {
            return Err(self.invalid(m));
        }
        if self.options.metp.recv_buffers == 0 || self.options.metp.recv_buffers > 2 {
            return Err(self.invalid("METP receive buffers must be 1 or 2"));
        }
        self.method
            .check_degree(&self.model, self.p, &self.options)
            .map_err(|m| self.invalid(m))?;
        self.check_seq(self.seq)?;
        Ok(ValidWorkload(self))
    }

    /// What a sequence length must be for this workload: at most 2^40 and a multiple of the
    /// method's granule at this degree.
    fn check_seq(&self, seq: u64) -> Result<()> {
        use super::limits::{MAX_SEQ, MAX_TOKENS_PER_MICRO_BATCH, MAX_TOKENS_PER_STEP};
        if seq > MAX_SEQ {
            return Err(self.invalid(format!("sequence length {seq} is above the supported 2^40")));
        }
        // Bounded one factor at a time (each ≤ 2^40 · 2^20), so no product below wraps.
        let per_micro_batch = seq * self.micro_batch;
        if per_micro_batch > MAX_TOKENS_PER_MICRO_BATCH {
            return Err(self.invalid(format!(
                "s × b = {seq} × {} tokens per micro-batch is above the supported 2^40",
                self.micro_batch
            )));
        }
        let per_step = (per_micro_batch as u128) * (self.micro_batches as u128) * (self.dp as u128);
        if per_step > MAX_TOKENS_PER_STEP as u128 {
            return Err(self.invalid(format!(
                "s × b × micro-batches × dp = {per_step} tokens per step is above the supported \
                 2^53"
            )));
        }
        if let Some(window) = self.model.sliding_window.filter(|&w| seq > w) {
            return Err(self.invalid(format!(
                "sequence length {seq} is longer than {}'s sliding attention window of {window} \
                 tokens: metp-sim models full attention, which is exact only up to the window",
                self.model.name
            )));
        }
        let multiple = self.seq_multiple();
        if !seq.is_multiple_of(multiple) {
            return Err(self.invalid(format!(
                "sequence length {seq} is not a multiple of {multiple}"
            )));
        }
        Ok(())
    }

    /// The multiple every sequence length must be: the method's granule at p, times cp for
    /// context parallelism (twice that under zig-zag causal masking, whose 2·cp chunks each
    /// rank holds two of, as Megatron's CP does).
    pub fn seq_multiple(&self) -> u64 {
        let m = self.method.seq_multiple(self.p, &self.options);
        let cp = self.outer.cp;
        if cp > 1 {
            let zigzag = if self.options.causal && self.options.causal_zigzag {
                2
            } else {
                1
            };
            m.saturating_mul(cp).saturating_mul(zigzag)
        } else {
            m
        }
    }

    /// Devices the configuration occupies: p · cp · pp · dp (saturating).
    pub(crate) fn devices_needed(&self) -> u64 {
        self.p
            .saturating_mul(self.outer.cp)
            .saturating_mul(self.outer.pp)
            .saturating_mul(self.dp)
    }

    /// `p × dp`, with the outer axes that are in use.
    fn axes_formula(&self) -> String {
        let mut f = String::from("p");
        if self.outer.cp > 1 {
            f.push_str(" × cp");
        }
        if self.outer.pp > 1 {
            f.push_str(" × pp");
        }
        f.push_str(" × dp");
        f
    }

    /// The rules of the outer axes: positive, at most 2^20 each; pp · v stages at most the
    /// layers; interleaving needs a pipeline and a micro-batch count divisible by pp
    /// (Megatron's rule); context parallelism is Megatron's, for `tp-sp`.
    fn check_outer(&self) -> Result<()> {
        let o = self.outer;
        for (name, v) in [
            ("pipeline stages (pp)", o.pp),
            ("pipeline interleave (v)", o.interleave),
            ("context-parallel degree (cp)", o.cp),
            ("data-parallel degree (dp)", self.dp),
        ] {
            if v == 0 || v > 1 << 20 {
                return Err(self.invalid(format!("{name} must be from 1 to 2^20, got {v}")));
            }
        }
        // Up to two virtual stages more than layers: the first may hold only the embedding and
        // the last only the head and loss, as LLaMA 3's pipeline does (Grattafiori et al. 2024
        // §3.3.2; Megatron's --account-for-embedding/loss-in-pipeline-split); the layers go to
        // the middle virtual stages first (`virtual_stage_layers`), so no other stage is empty.
        let virtual_stages = o.pp.saturating_mul(o.interleave);
        if virtual_stages > self.model.layers.saturating_add(2) {
            return Err(self.invalid(format!(
                "{} pipeline stages × {} virtual stages each = {virtual_stages} is more than the \
                 model's {} layers plus the embedding's and the head's own stages",
                o.pp, o.interleave, self.model.layers
            )));
        }
        if self.options.runtime.grad_sync == super::GradSync::AfterBackward
            && self.zero_stage() >= ZeroStage::Zero2
        {
            return Err(self.invalid(
                "--grad-sync after-backward keeps every gradient until the backward has ended: \
                 it needs ZeRO 0 or 1 (ZeRO 2 and 3 reduce-scatter each micro-batch's gradients \
                 as they are produced)",
            ));
        }
        if self.options.tp_comm_overlap && self.method != MethodId::TpSp {
            return Err(self.invalid(format!(
                "--tp-comm-overlap overlaps the all-gathers and reduce-scatters of sequence \
                 parallelism with the GEMMs (Transformer Engine's userbuffers): it needs \
                 --method tp-sp, not {}",
                self.method.id()
            )));
        }
        if self.options.tp_comm_overlap && self.p < 2 {
            return Err(self.invalid(
                "--tp-comm-overlap overlaps the collectives among the tensor-parallel ranks: it \
                 needs --p 2 or more",
            ));
        }
        // Userbuffers share their buffers through CUDA multicast and IPC handles, which exist
        // only inside one NVLink domain (TransformerEngine issue 1071; multi-node NVLink since
        // its PR 1470): the profile's node.
        let gpn = self.hardware.gpus_per_node;
        if self.options.tp_comm_overlap && (self.p > gpn || !gpn.is_multiple_of(self.p)) {
            return Err(self.invalid(format!(
                "--tp-comm-overlap needs the {} tensor-parallel ranks inside one NVLink domain \
                 (a node of {gpn} GPUs on this profile): Transformer Engine's userbuffers do not \
                 cross the inter-node network",
                self.p
            )));
        }
        if self.options.linear_dtype == super::LinearDtype::Fp8 {
            if let Some(why) = self.hardware.refuses(super::LinearDtype::Fp8) {
                return Err(self.invalid(format!("--linear-dtype {why}")));
            }
            if self.method == MethodId::Metp {
                return Err(self.invalid(
                    "--linear-dtype fp8 prices Transformer Engine's FP8 linear layers: METP runs \
                     its own bf16 kernels",
                ));
            }
        }
        if self.options.runtime.layer_ops.eager() && self.method == MethodId::Metp {
            return Err(self.invalid(format!(
                "--layer-ops {} prices a PyTorch eager layer (torchtitan's): METP runs its own \
                 kernels, which the tool prices fused",
                self.options.runtime.layer_ops.id()
            )));
        }
        if self.zero_stage() != ZeroStage::Zero3
            && self.options.runtime.zero3_gather != super::Zero3Gather::Flat
        {
            return Err(self.invalid(
                "--zero3-gather per-parameter sets how ZeRO-3's gathered weights become the \
                 parameters: it needs --zero 3",
            ));
        }
        if !matches!(self.zero_stage(), ZeroStage::Zero1 | ZeroStage::Zero2)
            && self.options.runtime.param_gather != super::ParamGather::AfterStep
        {
            return Err(self.invalid(
                "--param-gather overlapped sets when a sharded optimizer state's updated weights \
                 are all-gathered: it needs --zero 1 or 2",
            ));
        }
        if self.options.runtime.cp_comm == super::CpComm::AllGather && o.cp < 2 {
            return Err(self.invalid(
                "--cp-comm all-gather sets how context parallelism exchanges K/V: it needs --cp 2 \
                 or more",
            ));
        }
        if self.options.runtime.pp_p2p == super::PipeP2p::Lockstep && o.interleave > 1 {
            return Err(self.invalid(
                "--pp-p2p lockstep is DeepSpeed's pipeline schedule, which has no virtual stages: \
                 it needs --pp-interleave 1",
            ));
        }
        if let Some(round) = self.options.runtime.pp_round {
            if o.interleave < 2 {
                return Err(self.invalid(
                    "--pp-round sets the micro-batches per round of an interleaved pipeline: \
                     it needs --pp-interleave 2 or more",
                ));
            }
            if round == 0 || !self.micro_batches.is_multiple_of(round) {
                return Err(self.invalid(format!(
                    "--pp-round {round}: the micro-batches per replica ({}) must be a multiple \
                     of the micro-batches per round (LLaMA 3's flexible schedule runs whole \
                     rounds)",
                    self.micro_batches
                )));
            }
            if round < o.pp && round != self.micro_batches {
                return Err(self.invalid(format!(
                    "--pp-round {round} is fewer micro-batches than the {} pipeline stages: \
                     allowed only as the one round of the step (--pp-round = the micro-batches \
                     per replica, {})",
                    o.pp, self.micro_batches
                )));
            }
        }
        if o.interleave > 1 {
            if o.pp < 2 {
                return Err(self.invalid("--pp-interleave needs at least 2 pipeline stages"));
            }
            if self.options.runtime.pp_round.is_none() && !self.micro_batches.is_multiple_of(o.pp) {
                return Err(self.invalid(format!(
                    "interleaved 1F1B needs the micro-batches per replica ({}) to be a multiple \
                     of pp = {} (Megatron's rule); set --global-batch",
                    self.micro_batches, o.pp
                )));
            }
        }
        if o.cp > 1 && self.method != MethodId::TpSp {
            return Err(self.invalid(format!(
                "context parallelism (cp = {}) is Megatron's ring attention across tp-sp groups: \
                 use --method tp-sp",
                o.cp
            )));
        }
        if self.micro_batches > u32::MAX as u64 / o.interleave.max(1) {
            return Err(self.invalid(format!(
                "{} micro-batches is more than the simulator's schedule holds",
                self.micro_batches
            )));
        }
        Ok(())
    }
}

/// A workload that passed [`Workload::validate`]: the one type the evaluation path accepts, so
/// a configuration is checked once, where it is built, and never again downstream. Read-only
/// (it dereferences to the [`Workload`]); to change a field, take the workload back out
/// ([`ValidWorkload::into_workload`]) and validate it again.
///
/// It is also the one place that knows a device's coordinates: devices are numbered replica by
/// replica (`device = replica · p + rank`), and a replica's p devices share one sequence.
#[derive(Debug, Clone)]
pub struct ValidWorkload(Workload);

impl std::ops::Deref for ValidWorkload {
    type Target = Workload;
    fn deref(&self) -> &Workload {
        &self.0
    }
}

impl ValidWorkload {
    /// The workload, for changing and validating again.
    pub fn into_workload(self) -> Workload {
        self.0
    }

    /// Changes the sequence length to `seq` if the workload stays valid (nothing else depends
    /// on it), else leaves it unchanged: the search for the longest sequence that fits probes
    /// many lengths of one workload without copying it.
    pub fn set_seq(&mut self, seq: u64) -> Result<()> {
        if seq == 0 {
            return Err(self.invalid("p, dp, sequence and micro-batch must be positive"));
        }
        self.0.check_seq(seq)?;
        self.0.seq = seq;
        Ok(())
    }

    /// Devices the step runs on: p · cp · pp · dp (at most `limits::MAX_GPUS`, checked by
    /// validation).
    pub fn devices(&self) -> u64 {
        self.p * self.outer.cp * self.outer.pp * self.dp
    }

    /// Tokens one step trains on over all devices: s · b · micro-batches · dp (at most 2^53,
    /// checked by validation).
    pub fn tokens_per_step(&self) -> u64 {
        self.seq * self.micro_batch * self.micro_batches * self.dp
    }

    /// The sizes of the axes.
    pub fn axes(&self) -> Axes {
        Axes {
            p: self.p as u32,
            cp: self.outer.cp as u32,
            dp: self.dp as u32,
            pp: self.outer.pp as u32,
        }
    }

    /// How many devices hold each weight: the data-parallel and context-parallel ranks, times
    /// p for the methods that replicate their weights (the size of [`Self::replica_group`]).
    pub fn weight_replicas(&self) -> u64 {
        let replicated = !self.method.shards_weights();
        self.dp * self.outer.cp * if replicated { self.p } else { 1 }
    }

    /// Whether ZeRO-3 gathers each layer's weights before it computes (stage 3 with more than
    /// one replica to gather from).
    pub fn gathers_layer_weights(&self) -> bool {
        self.zero_stage() == ZeroStage::Zero3 && self.weight_replicas() > 1
    }

    /// The cluster rank of a device (`config::layout`).
    pub fn rank_of(&self, c: Coord) -> u32 {
        self.axes().rank_of(c)
    }

    /// Layers per virtual stage (`config::layout::virtual_stage_layers`), in virtual-stage
    /// order (`chunk · pp + stage`).
    pub fn virtual_stage_layers(&self) -> Vec<u64> {
        virtual_stage_layers(self.model.layers, self.outer.pp * self.outer.interleave)
    }

    /// The chunks of stage `stage`: (first layer, layer count) of each, in chunk order.
    pub fn stage_chunks(&self, stage: u32) -> Vec<(u64, u64)> {
        let layers = self.virtual_stage_layers();
        self.chunks_of(&layers, &first_layers(&layers), stage)
    }

    /// [`Self::stage_chunks`] of every stage, the split computed once (pp of them).
    pub fn all_stage_chunks(&self) -> Vec<Vec<(u64, u64)>> {
        let layers = self.virtual_stage_layers();
        let first = first_layers(&layers);
        (0..self.outer.pp as u32)
            .map(|s| self.chunks_of(&layers, &first, s))
            .collect()
    }

    fn chunks_of(&self, layers: &[u64], first: &[u64], stage: u32) -> Vec<(u64, u64)> {
        let pp = self.outer.pp as usize;
        (0..self.outer.interleave as usize)
            .map(|chunk| {
                let u = chunk * pp + stage as usize;
                (first[u], layers[u])
            })
            .collect()
    }

    /// Layers stage `stage` holds.
    pub fn stage_layers(&self, stage: u32) -> u64 {
        self.stage_chunks(stage).iter().map(|c| c.1).sum()
    }

    /// The 1F1B order of stage `stage` (`config::layout::pipeline_order`).
    pub fn pipeline_order(&self, stage: u32) -> Vec<PipeOp> {
        let (pp, v, m) = (
            self.outer.pp as u32,
            self.outer.interleave as u32,
            self.micro_batches as u32,
        );
        match self.options.runtime.pp_round {
            Some(round) if v > 1 => flexible_order(pp, v, m, round as u32, stage),
            _ => pipeline_order(pp, v, m, stage),
        }
    }

    /// Op `k` of stage `stage`'s order with `micro_batches` per replica (the closed form walks
    /// shorter copies), without listing it: Megatron's, or LLaMA 3's flexible rounds
    /// (`config::runtime`) — [`Self::pipeline_order`]'s op `k` at the workload's micro-batches.
    pub fn pipeline_op(&self, micro_batches: u32, stage: u32, k: u32) -> PipeOp {
        let (pp, v) = (self.outer.pp as u32, self.outer.interleave as u32);
        match self.options.runtime.pp_round {
            Some(round) if v > 1 => flexible_op(pp, v, micro_batches, round as u32, stage, k),
            _ => pipeline_op(pp, v, micro_batches, stage, k),
        }
    }

    /// Whether stage `stage` runs the embedding (the first virtual stage is chunk 0 of
    /// stage 0).
    pub fn has_embedding(&self, stage: u32) -> bool {
        stage == 0
    }

    /// Whether stage `stage` runs the output head and loss (the last virtual stage is the last
    /// chunk of the last stage).
    pub fn has_head(&self, stage: u32) -> bool {
        stage as u64 + 1 == self.outer.pp
    }

    /// A line saying how the layers are split when stages differ in layer count, else `None`.
    pub fn uneven_layers_note(&self) -> Option<String> {
        let layers = self.virtual_stage_layers();
        let (lo, hi) = (
            *layers.iter().min().unwrap_or(&0),
            *layers.iter().max().unwrap_or(&0),
        );
        if lo == hi {
            return None;
        }
        // Consecutive stages as ranges (`1–126`): 128 virtual stages would otherwise be listed
        // one by one.
        let mut big: Vec<String> = Vec::new();
        let mut run: Option<(usize, usize)> = None;
        for (u, _) in layers.iter().enumerate().filter(|(_, &n)| n == hi) {
            run = match run {
                Some((a, b)) if b + 1 == u => Some((a, u)),
                Some((a, b)) => {
                    big.push(range_text(a, b));
                    Some((u, u))
                }
                None => Some((u, u)),
            };
        }
        if let Some((a, b)) = run {
            big.push(range_text(a, b));
        }
        let what = if self.outer.interleave > 1 {
            "virtual stages"
        } else {
            "stages"
        };
        let mut empty = Vec::new();
        if layers.first() == Some(&0) {
            empty.push(format!(
                "{} 0 holds only the embedding",
                what.trim_end_matches('s')
            ));
        }
        if layers.len() > 1 && layers.last() == Some(&0) {
            empty.push(format!(
                "{} {} holds only the head and loss",
                what.trim_end_matches('s'),
                layers.len() - 1
            ));
        }
        let empty = if empty.is_empty() {
            String::new()
        } else {
            format!(" ({}, as LLaMA 3's pipeline does)", empty.join("; "))
        };
        Some(format!(
            "pipeline: {} layers over {} {what} do not divide evenly: {what} {} hold {hi} \
             layer{}, the others {lo}{empty}",
            self.model.layers,
            layers.len(),
            big.join(", "),
            if hi == 1 { "" } else { "s" }
        ))
    }
}

/// `a` or `a–b` (`a, b` when they are neighbours).
fn range_text(a: usize, b: usize) -> String {
    match b - a {
        0 => a.to_string(),
        1 => format!("{a}, {b}"),
        _ => format!("{a}–{b}"),
    }
}

/// The first layer of each virtual stage, from their layer counts.
fn first_layers(layers: &[u64]) -> Vec<u64> {
    let mut first = vec![0u64; layers.len()];
    for u in 1..layers.len() {
        first[u] = first[u - 1] + layers[u - 1];
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_hardware, load_model};

    fn ring(seq: u64) -> Workload {
        Workload {
            model: load_model("llama2-7b").unwrap(),
            hardware: load_hardware("dgx-a100-80gb").unwrap(),
            method: MethodId::Ring,
            p: 8,
            dp: 1,
            outer: OuterAxes::default(),
            seq,
            micro_batch: 1,
            micro_batches: 1,
            options: Options::default(),
        }
    }

    /// Validation checks once, with the reason; a valid workload's length changes only to
    /// another valid one (ring attention at p = 8: multiples of 8).
    #[test]
    fn validation_names_what_is_wrong_and_set_seq_keeps_it_valid() {
        let e = ring(4100).validate().unwrap_err().to_string();
        assert!(
            e.contains("sequence length 4100 is not a multiple of 8"),
            "{e}"
        );
        let e = ring(4096).with_p(16).validate().unwrap_err().to_string();
        assert!(e.contains("needs 16 GPUs"), "{e}");
        let mut v = ring(4096).validate().unwrap();
        assert!(v.set_seq(4100).is_err() && v.seq == 4096);
        assert!(v.set_seq(0).is_err() && v.seq == 4096);
        v.set_seq(8192).unwrap();
        assert_eq!((v.seq, v.tokens_per_step(), v.devices()), (8192, 8192, 8));
        assert_eq!(v.replica_group(false), [0]);
    }

    impl Workload {
        fn with_p(mut self, p: u64) -> Workload {
            self.p = p;
            self
        }
    }
}
