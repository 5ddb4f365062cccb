//! `metp-sim run`: executes one unit on a backend and prints DESIGN §8's `run` fields.

use clap::{Args, ValueEnum};

use super::args::MetpArgs;
use super::link::{check_devices, check_runs, BackendArg, LinkArgs, OutFormat};
use crate::backend::cpu::CpuBackend;
use crate::backend::unit::RunSpec;
use crate::backend::Backend;
use crate::calibrate::unit_run::{self, ProfileSource};
use crate::config::{
    load_hardware, load_model, parse_count, Activation, ExecMethod, Unit, UnitShape,
};
use crate::error::{Error, Result};
use crate::report;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum UnitArg {
    Attention,
    Mlp,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ActivationArg {
    /// GeLU (tanh form).
    Gelu,
    /// SwiGLU (LLaMA's): SiLU(X·W_gate) ∘ X·W_up, three weight matrices.
    Swiglu,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExecMethodArg {
    Metp,
    Tp,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where the unit runs.
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendArg,
    /// Which computing unit.
    #[arg(long, value_enum, default_value = "attention")]
    unit: UnitArg,
    /// How it is parallelised.
    #[arg(long, value_enum, default_value = "metp")]
    method: ExecMethodArg,
    /// Devices p (CPU: threads).
    #[arg(long, default_value = "2")]
    p: String,
    /// Sequence length s (4k = 4096); must divide by p for METP.
    #[arg(long, default_value = "256")]
    seq: String,
    /// Micro-batch b.
    #[arg(long, default_value = "1")]
    micro_batch: String,
    /// Model whose hidden size, heads, K/V heads and MLP width set the shape (a real model's
    /// layer is far too big for a CPU: scale it down with --hidden/--heads/--ffn; --heads
    /// makes the attention multi-head). Without it the shape is hidden 64, heads 4, ffn 256.
    #[arg(long)]
    model: Option<String>,
    /// Override the hidden size h.
    #[arg(long)]
    hidden: Option<String>,
    /// Override the number of heads a.
    #[arg(long)]
    heads: Option<String>,
    /// Override the MLP width f.
    #[arg(long)]
    ffn: Option<String>,
    /// K/V heads (grouped-query attention when fewer than the heads; a multiple of p). Default:
    /// the model's unless --heads reshapes the attention, else the heads.
    #[arg(long)]
    kv_heads: Option<String>,
    /// The MLP's activation. Default: the model's, else gelu.
    #[arg(long, value_enum)]
    activation: Option<ActivationArg>,
    /// Causal attention (contiguous sequence blocks).
    #[arg(long)]
    causal: bool,
    /// Fused attention blocks (default).
    #[arg(long, overrides_with = "no_flash")]
    flash: bool,
    /// Unfused attention: one block's scores and probabilities materialised.
    #[arg(long, overrides_with = "flash")]
    no_flash: bool,
    #[command(flatten)]
    metp: MetpArgs,
    /// Seed of the random inputs.
    #[arg(long, default_value = "0")]
    seed: u64,
    /// Timed runs (the median is reported; one untimed warm-up run when more than one).
    #[arg(long, default_value = "1")]
    runs: usize,
    /// Calibrated hardware profile for the prediction (`metp-sim calibrate` writes one).
    /// Without it, the kernels of this very unit are measured on the backend first (a few
    /// seconds) and the prediction uses that on-the-fly profile.
    #[arg(long)]
    hw: Option<String>,
    #[command(flatten)]
    link: LinkArgs,
    /// Also print every ring step of the slowest device, predicted and measured (json).
    #[arg(long)]
    steps: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: OutFormat,
}

fn count(flag: &str, v: &Option<String>, default: u64) -> Result<usize> {
    Ok(match v {
        Some(t) => parse_count(flag, t)? as usize,
        None => default as usize,
    })
}

/// The run the flags describe.
fn spec(a: &RunArgs) -> Result<RunSpec> {
    let (h0, a0, f0, kv0, act0) = match &a.model {
        Some(m) => {
            let m = load_model(m)?;
            (
                m.hidden,
                m.heads,
                m.ffn_hidden,
                Some(m.kv_heads),
                m.activation,
            )
        }
        None => (64, 4, 256, None, Activation::Gelu),
    };
    let shape = UnitShape {
        b: parse_count("--micro-batch", &a.micro_batch)? as usize,
        s: parse_count("--seq", &a.seq)? as usize,
        h: count("--hidden", &a.hidden, h0)?,
        a: count("--heads", &a.heads, a0)?,
        f: count("--ffn", &a.ffn, f0)?,
        p: super::args::single_degree(&a.p)? as usize,
    };
    let unit = match a.unit {
        UnitArg::Attention => Unit::Attention,
        UnitArg::Mlp => Unit::Mlp,
    };
    let method = match a.method {
        ExecMethodArg::Metp => ExecMethod::Metp,
        ExecMethodArg::Tp => ExecMethod::Tp,
    };
    let mut spec = RunSpec::new(unit, method, shape);
    spec.causal = a.causal;
    spec.fused = !a.no_flash;
    spec.metp = a.metp.options();
    spec.seed = a.seed;
    spec.link = a.link.link()?;
    // The model's K/V heads, unless --heads reshapes the attention: grouped-query attention
    // meets the rule every method applies (`MethodId::check_degree`) and the backend's support.
    if let (Some(kv), None) = (kv0, &a.heads) {
        spec.unit_spec.kv_heads = kv as usize;
    }
    if let Some(kv) = &a.kv_heads {
        spec.unit_spec.kv_heads = parse_count("--kv-heads", kv)? as usize;
        if spec.unit_spec.kv_heads > shape.a || !shape.a.is_multiple_of(spec.unit_spec.kv_heads) {
            return Err(Error::arg(
                "--kv-heads",
                format!(
                    "{} K/V heads for {} heads: the heads must be a multiple of the K/V heads",
                    spec.unit_spec.kv_heads, shape.a
                ),
            ));
        }
    }
    spec.unit_spec.activation = match a.activation {
        Some(ActivationArg::Gelu) => Activation::Gelu,
        Some(ActivationArg::Swiglu) => Activation::Swiglu,
        None => act0,
    };
    spec.unit_spec.check()?;
    Ok(spec)
}

pub fn run(a: RunArgs) -> Result<String> {
    check_runs(a.runs)?;
    check_devices("--p", super::args::single_degree(&a.p)? as usize)?;
    let spec = spec(&a)?;
    let mut backend: Box<dyn Backend> = match a.backend {
        BackendArg::Cpu => Box::new(CpuBackend::new(spec.shape.p, spec.link, true)?),
        BackendArg::Cuda => {
            if spec.link.is_some() {
                return Err(Error::arg(
                    "--link-bandwidth",
                    "the link throttle exists only on the cpu backend",
                ));
            }
            crate::backend::cuda::open(spec.shape.p, true)?
        }
    };
    let profile = match &a.hw {
        Some(name) => ProfileSource::Given {
            name: name.clone(),
            hardware: Box::new(load_hardware(name)?),
        },
        // The on-the-fly profile measures the unit's own small kernels: CPU sizes.
        None if a.backend == BackendArg::Cuda => {
            return Err(Error::arg(
                "--hw",
                "the cuda backend predicts from a calibrated profile: run `metp-sim calibrate \
                 --backend cuda` and pass its profile with --hw",
            ))
        }
        None => ProfileSource::OnTheFly,
    };
    let out = unit_run::run_unit(backend.as_mut(), &spec, &profile, a.runs, a.steps)?;
    Ok(match a.format {
        OutFormat::Json => report::to_json(&out),
        OutFormat::Table => report::unit_run_table(&out),
    })
}
