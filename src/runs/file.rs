//! One published run as a file (`runs/*.json`): the layout as the paper states it, the figure it
//! measured, where it is published, and the knobs it leaves unstated with the values tried.
//!
//! The file is untrusted input: unknown fields are refused, every number is checked (positive,
//! within the tool's limits, consistent with the other axes), and an error names the file and
//! the field in one line. A run file names its model and hardware profile as a bundled name or
//! as a path relative to the run file's folder.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{
    limits, load_hardware, load_model, read_json, AttentionKernel, CpComm, CrossEntropy,
    GradAccumulation, GradBuffer, GradDtype, GradSync, Hardware, LayerOps, LinearDtype, MethodId,
    Model, OptimizerDtype, ParamGather, PipeP2p, Recompute, Zero3Gather,
};
use crate::error::{shown, Error, Result};
use crate::evaluate::{AttentionFlops, FlopConvention};

use super::knobs::{configurations, Knob, Knobs};
use crate::config::limits::MAX_RUN_FILES;

/// Where a run is published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Authors, year, title and where it appeared.
    pub paper: String,
    /// Table or figure.
    pub table: String,
    /// Row (or series and point).
    pub row: String,
    /// What else the source says that the file relies on (sections, derivations).
    #[serde(default)]
    pub notes: String,
}

/// What the paper measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Quantity {
    /// Seconds per training iteration (one optimizer step).
    IterationS,
    /// Achieved TFLOP/s per GPU, counted by the paper's FLOP convention.
    TflopsPerGpu,
    /// Model FLOPs utilisation (0..1) against the GPU's dense bf16/fp16 peak, counted by the
    /// paper's FLOP convention.
    Mfu,
    /// Tokens each GPU trains per second (torchtitan's "WPS"): the step's tokens (global
    /// batch × sequence) over the GPUs, per second of step. No FLOP convention.
    TokensPerSPerGpu,
}

impl Quantity {
    /// Whether a larger figure means a faster step.
    pub fn higher_is_faster(self) -> bool {
        !matches!(self, Quantity::IterationS)
    }

    /// Unit words for reports.
    pub fn unit(self) -> &'static str {
        match self {
            Quantity::IterationS => "s per iteration",
            Quantity::TflopsPerGpu => "TFLOP/s per GPU",
            Quantity::Mfu => "MFU",
            Quantity::TokensPerSPerGpu => "tokens/s per GPU",
        }
    }
}

/// The FLOP convention as a run file writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlopsFile {
    /// `full` or `causal`.
    pub attention: AttentionFlops,
    /// Whether recomputed forward work counts.
    pub recomputation: bool,
    /// Where the convention is stated (or why it is assumed).
    pub source: String,
}

impl FlopsFile {
    /// The convention.
    pub fn convention(&self) -> FlopConvention {
        FlopConvention {
            attention: self.attention,
            recomputation: self.recomputation,
        }
    }
}

/// The published figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    /// What was measured.
    pub quantity: Quantity,
    /// Its value, exactly as published.
    pub value: f64,
    /// How the paper counts FLOPs (required for TFLOP/s and MFU).
    #[serde(default)]
    pub flops: Option<FlopsFile>,
    /// Other figures the paper gives for the run (not checked), as text.
    #[serde(default)]
    pub also_published: String,
}

/// A knob the paper does not state, the values tried, and why the run's value was chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unstated {
    /// Which knob ([`Knob`]).
    pub knob: Knob,
    /// The values tried (the run's own value among them).
    pub tried: Vec<serde_json::Value>,
    /// Why the run's value is the one chosen, decided before comparing with the figure.
    pub why: String,
}

/// A run file as written (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFile {
    /// One line: who ran what.
    pub title: String,
    /// Where it is published.
    pub source: Source,
    /// Model: a bundled name or a path relative to the run file.
    pub model: String,
    /// Hardware profile: a bundled name or a path relative to the run file.
    pub hardware: String,
    /// Nodes the run used.
    pub nodes: u64,
    /// Method (`tp` for Megatron tensor parallelism, `tp-sp` with sequence parallelism, …).
    pub method: MethodId,
    /// Tensor-parallel (the method's) degree.
    pub p: u64,
    /// Context-parallel degree.
    pub cp: u64,
    /// Pipeline stages.
    pub pp: u64,
    /// Virtual stages per pipeline stage.
    pub interleave: u64,
    /// Data-parallel replicas.
    pub dp: u64,
    /// Sequences per micro-batch.
    pub micro_batch: u64,
    /// Sequences per iteration over all replicas.
    pub global_batch: u64,
    /// Tokens per sequence.
    pub seq: u64,
    /// Activation recomputation.
    pub recompute: Recompute,
    /// ZeRO stage (0–3; FSDP sharding optimizer state and gradients is 2; Megatron's
    /// distributed optimizer is 1).
    pub zero: u64,
    /// Dtype the gradients are accumulated and reduced in (`fp32`, or `bf16` for any 16-bit).
    pub grad_dtype: GradDtype,
    /// Dtype the optimizer state was kept in: `fp32` (default: master weights and Adam
    /// moments), `fp32-remainders` (fp32 moments, 16-bit master remainders) or `bf16` (moments
    /// in bf16, no master copy): `config::precision`.
    #[serde(default)]
    pub optimizer_dtype: OptimizerDtype,
    /// How each micro-batch's weight gradients joined the accumulated ones: `fused` (default:
    /// into the main gradients by the weight-gradient GEMMs, Megatron-LM since 2022) or
    /// `separate` (a pass of its own after autograd: PyTorch FSDP, DeepSpeed, Megatron-LM of
    /// 2021): `config::precision`.
    #[serde(default)]
    pub grad_accumulation: GradAccumulation,
    /// Whether the run overlapped TP + SP's all-gathers and reduce-scatters with the GEMMs
    /// (Megatron-Core's `tp_comm_overlap`, Transformer Engine's userbuffers); default false.
    #[serde(default)]
    pub tp_comm_overlap: bool,
    /// Attention implementation (`unfused`, `sdpa-fa2`, `fa3`, `cudnn`, …: `config::attention`;
    /// the profile must have it).
    pub attention_kernel: AttentionKernel,
    /// Causal attention.
    pub causal: bool,
    /// Pipeline exchanges as the run's software ran them (`config::runtime`): `async`
    /// (default) or `blocking`.
    #[serde(default)]
    pub pp_p2p: PipeP2p,
    /// When its data-parallel gradients were synchronised: `overlapped` (default) or
    /// `after-backward`.
    #[serde(default)]
    pub grad_sync: GradSync,
    /// Micro-batches per round of its interleaved schedule (LLaMA 3's flexible schedule);
    /// absent: pp, Megatron's.
    #[serde(default)]
    pub pp_round: Option<u64>,
    /// How its context parallelism exchanged K/V: `ring` (default, Megatron CP) or
    /// `all-gather` (LLaMA 3).
    #[serde(default)]
    pub cp_comm: CpComm,
    /// How its layers' norms, rotary embedding and activation ran: `fused` (default), `eager`
    /// or `eager-fused-norm` (PyTorch eager, torchtitan's; `config::runtime`).
    #[serde(default)]
    pub layer_ops: LayerOps,
    /// How its ZeRO-3 gathered weights became the parameters: `flat` (default) or
    /// `per-parameter` (FSDP2's copy-out; `config::runtime`).
    #[serde(default)]
    pub zero3_gather: Zero3Gather,
    /// When its sharded optimizer state's updated weights were all-gathered: `after-step`
    /// (default) or `overlapped` (during the next step's first forward: Megatron-Core's
    /// `--overlap-param-gather`; `config::runtime`).
    #[serde(default)]
    pub param_gather: ParamGather,
    /// How its loss's cross-entropy ran: `single-kernel` (default), `megatron-jit` or
    /// `megatron-unfused` (`config::runtime`).
    #[serde(default)]
    pub cross_entropy: CrossEntropy,
    /// When its whole main gradients were allocated: `persistent` (default) or `lazy` (PyTorch
    /// FSDP2's accumulators, from a model chunk's first backward to its last;
    /// `config::runtime`).
    #[serde(default)]
    pub grad_buffer: GradBuffer,
    /// The dtype of its layers' linear GEMMs: `bf16` (default) or `fp8` (Transformer
    /// Engine's FP8 training; `config::precision::LinearDtype`).
    #[serde(default)]
    pub linear_dtype: LinearDtype,
    /// The published figure.
    pub measured: Measured,
    /// The largest relative error this run may show before the CI test fails.
    pub tolerance: f64,
    /// Why the tolerance is what it is, when it is not the 5% goal.
    #[serde(default)]
    pub tolerance_why: String,
    /// Knobs the paper leaves unstated.
    #[serde(default)]
    pub unstated: Vec<Unstated>,
}

/// A run file read and checked, with its model and profile loaded.
#[derive(Debug, Clone)]
pub struct Run {
    /// The file's stem: the run's id in reports.
    pub id: String,
    /// The file.
    pub path: PathBuf,
    /// What the file says.
    pub file: RunFile,
    /// The model.
    pub model: Model,
    /// The profile, with the run's node count.
    pub hardware: Hardware,
    /// Every configuration tried: the product of the unstated knobs' values, the run's own
    /// first.
    pub configurations: Vec<Knobs>,
}

impl Run {
    /// The run's own configuration (its stated and chosen values).
    pub fn chosen(&self) -> &Knobs {
        &self.configurations[0]
    }

    /// The knobs the paper leaves unstated, in file order.
    pub fn unstated_knobs(&self) -> Vec<Knob> {
        self.file.unstated.iter().map(|u| u.knob).collect()
    }

    /// GPUs the run used: p · cp · pp · dp.
    pub fn gpus(&self) -> u64 {
        let f = &self.file;
        f.p * f.cp * f.pp * f.dp
    }
}

/// Reads every `*.json` in `dir` as a run file, sorted by name. An empty folder is an error.
pub fn load_dir(dir: &Path) -> Result<Vec<Run>> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = Vec::new();
    for e in entries {
        let e = e.map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") && p.is_file() {
            paths.push(p);
        }
    }
    paths.sort();
    if paths.is_empty() {
        return Err(Error::Parse {
            path: dir.to_path_buf(),
            message: "holds no run files (*.json)".into(),
        });
    }
    if paths.len() > MAX_RUN_FILES {
        return Err(Error::Parse {
            path: dir.to_path_buf(),
            message: format!(
                "holds {} run files, more than the {MAX_RUN_FILES} one report takes",
                paths.len()
            ),
        });
    }
    paths.iter().map(|p| load(p)).collect()
}

/// Reads and checks one run file (module docs).
pub fn load(path: &Path) -> Result<Run> {
    let file: RunFile = read_json(path)?;
    let id = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let bad = |field: &str, message: String| Error::InvalidField {
        path: path.to_path_buf(),
        field: field.to_string(),
        message,
    };
    limits::check_name(&id).map_err(|m| bad("(file name)", m))?;
    check(&file, &bad)?;
    let folder = path.parent().unwrap_or(Path::new("."));
    let relative = |name: &str| -> String {
        if name.contains('/') || name.ends_with(".json") {
            folder.join(name).to_string_lossy().into_owned()
        } else {
            name.to_string()
        }
    };
    let model = load_model(&relative(&file.model)).map_err(|e| bad("model", e.to_string()))?;
    let mut hardware =
        load_hardware(&relative(&file.hardware)).map_err(|e| bad("hardware", e.to_string()))?;
    hardware
        .set_nodes(file.nodes)
        .map_err(|e| bad("nodes", e.to_string()))?;
    let has = |k: AttentionKernel| {
        let km = &hardware.kernels;
        k == AttentionKernel::Unfused || k == km.fused_attention() || km.has_attention(k)
    };
    if !has(file.attention_kernel) {
        return Err(bad(
            "attention_kernel",
            format!(
                "'{}' is not in {}'s kernel model; it has: {}",
                file.attention_kernel,
                hardware.name,
                hardware.kernels.attention_list()
            ),
        ));
    }
    for (i, u) in file.unstated.iter().enumerate() {
        if u.knob != Knob::AttentionKernel {
            continue;
        }
        for (j, v) in u.tried.iter().enumerate() {
            if let Some(k) = v.as_str().and_then(AttentionKernel::parse) {
                if !has(k) {
                    return Err(bad(
                        &format!("unstated[{i}].tried[{j}]"),
                        format!(
                            "'{k}' is not in {}'s kernel model; it has: {}",
                            hardware.name,
                            hardware.kernels.attention_list()
                        ),
                    ));
                }
            }
        }
    }
    if let Some(why) = hardware.refuses(file.linear_dtype) {
        return Err(bad("linear_dtype", why));
    }
    let gpus = file.p * file.cp * file.pp * file.dp;
    if gpus > hardware.total_gpus() {
        return Err(bad(
            "nodes",
            format!(
                "p × cp × pp × dp = {gpus} GPUs, more than {} node(s) of {} hold",
                file.nodes, hardware.gpus_per_node
            ),
        ));
    }
    if file.measured.quantity == Quantity::TokensPerSPerGpu {
        // Each token costs at least 6 FLOPs per parameter of the layers and the head: a rate
        // that would need more than the GPU's peak was not measured on it.
        let head = model.vocab.saturating_mul(model.hidden);
        let params = (model.total_params() - model.embedding_params() - model.head_params())
            .saturating_add(head) as f64;
        let needs = 6.0 * params * file.measured.value;
        let peak = hardware.peak_flops_per_s(file.linear_dtype);
        if needs > peak {
            return Err(bad(
                "measured.value",
                format!(
                    "{} tokens/s per GPU would take {:.0} TFLOP/s at 6 FLOPs per parameter, more \
                     than the profile's peak of {:.0} TFLOP/s",
                    file.measured.value,
                    needs / 1e12,
                    peak / 1e12
                ),
            ));
        }
    }
    if file.measured.quantity == Quantity::TflopsPerGpu {
        let peak = hardware.peak_flops_per_s(file.linear_dtype) / 1e12;
        if file.measured.value > peak {
            return Err(bad(
                "measured.value",
                format!(
                    "{} TFLOP/s per GPU is more than the profile's peak of {peak} TFLOP/s",
                    file.measured.value
                ),
            ));
        }
    }
    let configurations = configurations(&file, &bad)?;
    let run = Run {
        id,
        path: path.to_path_buf(),
        file,
        model,
        hardware,
        configurations,
    };
    // The run's own configuration must be one the tool can run (the others tried may not be:
    // the report says why), checked before anything is evaluated or written.
    super::workload(&run, run.chosen())
        .and_then(crate::config::Workload::validate)
        .map_err(|e| Error::Parse {
            path: path.to_path_buf(),
            message: format!("the run's own configuration: {e}"),
        })?;
    Ok(run)
}

/// Checks every field that needs no model or profile.
fn check(f: &RunFile, bad: &dyn Fn(&str, String) -> Error) -> Result<()> {
    use limits::{check_text, MAX_TEXT_CHARS};
    for (field, text, required) in [
        ("title", &f.title, true),
        ("source.paper", &f.source.paper, true),
        ("source.table", &f.source.table, true),
        ("source.row", &f.source.row, true),
        ("source.notes", &f.source.notes, false),
        ("measured.also_published", &f.measured.also_published, false),
        ("tolerance_why", &f.tolerance_why, false),
    ] {
        check_text(text, MAX_TEXT_CHARS).map_err(|m| bad(field, m))?;
        if required && text.trim().is_empty() {
            return Err(bad(field, "must not be empty".into()));
        }
    }
    for (field, name) in [("model", &f.model), ("hardware", &f.hardware)] {
        limits::check_name(name).map_err(|m| bad(field, m))?;
    }
    let counts: [(&str, u64, u64); 10] = [
        ("nodes", f.nodes, limits::MAX_NODES),
        ("p", f.p, limits::MAX_GPUS),
        ("cp", f.cp, limits::MAX_GPUS),
        ("pp", f.pp, limits::MAX_GPUS),
        ("interleave", f.interleave, limits::MAX_LAYERS),
        ("dp", f.dp, limits::MAX_GPUS),
        ("micro_batch", f.micro_batch, limits::MAX_MICRO_BATCH),
        ("global_batch", f.global_batch, u64::MAX),
        ("seq", f.seq, limits::MAX_SEQ),
        ("pp_round", f.pp_round.unwrap_or(1), u64::from(u32::MAX)),
    ];
    for (field, v, max) in counts {
        if v == 0 {
            return Err(bad(field, "must be a positive integer, got 0".into()));
        }
        if v > max {
            return Err(bad(
                field,
                format!("{v} is more than {max}, the most this tool models"),
            ));
        }
    }
    let gpus = [f.p, f.cp, f.pp, f.dp]
        .iter()
        .try_fold(1u64, |acc, &x| acc.checked_mul(x))
        .filter(|&g| g <= limits::MAX_GPUS);
    if gpus.is_none() {
        return Err(bad(
            "dp",
            format!(
                "p × cp × pp × dp is more than the {} GPUs this tool models",
                limits::MAX_GPUS
            ),
        ));
    }
    let per = f.dp.saturating_mul(f.micro_batch);
    if !f.global_batch.is_multiple_of(per) {
        return Err(bad(
            "global_batch",
            format!(
                "{} is not a multiple of dp × micro_batch = {per}",
                f.global_batch
            ),
        ));
    }
    if f.global_batch / per > limits::MAX_MICRO_BATCHES {
        return Err(bad(
            "global_batch",
            format!(
                "{} micro-batches per replica is more than the {} this tool models",
                f.global_batch / per,
                limits::MAX_MICRO_BATCHES
            ),
        ));
    }
    if f.zero > 3 {
        return Err(bad("zero", format!("must be 0, 1, 2 or 3, got {}", f.zero)));
    }
    let m = &f.measured;
    if !(m.value.is_finite() && m.value > 0.0) {
        return Err(bad(
            "measured.value",
            format!("must be a positive number, got {}", shown(m.value)),
        ));
    }
    match m.quantity {
        Quantity::Mfu if m.value > 1.0 => {
            return Err(bad(
                "measured.value",
                format!("an MFU is at most 1, got {}", shown(m.value)),
            ))
        }
        Quantity::IterationS if m.value > 86_400.0 => {
            return Err(bad(
                "measured.value",
                format!("{} s is more than a day per iteration", shown(m.value)),
            ))
        }
        _ => {}
    }
    match (&m.flops, m.quantity) {
        (None, Quantity::TflopsPerGpu | Quantity::Mfu) => {
            return Err(bad(
                "measured.flops",
                "a TFLOP/s or MFU figure needs the paper's FLOP convention".into(),
            ))
        }
        (Some(fl), _) => {
            check_text(&fl.source, MAX_TEXT_CHARS).map_err(|m| bad("measured.flops.source", m))?;
            if fl.source.trim().is_empty() {
                return Err(bad("measured.flops.source", "must not be empty".into()));
            }
        }
        _ => {}
    }
    if !(f.tolerance.is_finite() && f.tolerance > 0.0 && f.tolerance <= 1.0) {
        return Err(bad(
            "tolerance",
            format!("must be a fraction in (0, 1], got {}", shown(f.tolerance)),
        ));
    }
    if f.tolerance > 0.05 && f.tolerance_why.trim().is_empty() {
        return Err(bad(
            "tolerance_why",
            format!(
                "a tolerance of {} is above the 5% goal: say why",
                f.tolerance
            ),
        ));
    }
    Ok(())
}
