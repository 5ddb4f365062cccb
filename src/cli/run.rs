//! `metp-sim run`: executes one unit on a backend and prints DESIGN §8's `run` fields.

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::args::ExchangeArg;
use super::link::{BackendArg, LinkArgs, OutFormat};
use crate::calibrate::compare::{compare_unit, PhaseComparison};
use crate::calibrate::cpu::CpuBackend;
use crate::calibrate::{self, Backend, PredictOptions};
use crate::config::{load_hardware, load_model, parse_count, WeightExchange};
use crate::error::{Error, Result};
use crate::exec::device::Link;
use crate::exec::{ExecMethod, RunSpec, Shape, Unit};
use crate::report::{to_json, Table};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum UnitArg {
    Attention,
    Mlp,
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
    /// Model whose hidden size, heads and MLP width set the shape (a real model's layer is
    /// far too big for a CPU: scale it down with --hidden/--heads/--ffn). Without it the
    /// shape is hidden 64, heads 4, ffn 256.
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
    /// Causal attention (contiguous sequence blocks).
    #[arg(long)]
    causal: bool,
    /// Fused attention blocks (default).
    #[arg(long, overrides_with = "no_flash")]
    flash: bool,
    /// Unfused attention: one block's scores and probabilities materialised.
    #[arg(long, overrides_with = "flash")]
    no_flash: bool,
    /// METP receive buffers per traveling tensor (1 or 2).
    #[arg(long, default_value = "2", value_parser = clap::value_parser!(u64).range(1..=2))]
    metp_recv_buffers: u64,
    /// METP: how attention weight shards move.
    #[arg(long, value_enum, default_value = "ring")]
    metp_weight_exchange: ExchangeArg,
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

/// DESIGN §8 `run` output.
#[derive(Debug, Serialize)]
struct RunOutput {
    backend: &'static str,
    unit: Unit,
    method: ExecMethod,
    shape: Shape,
    causal: bool,
    flash: bool,
    recv_buffers: usize,
    weight_exchange: WeightExchange,
    link: Option<Link>,
    max_rel_error: f64,
    errors: std::collections::BTreeMap<String, f64>,
    measured_peak_bytes: u64,
    predicted_peak_bytes: Option<u64>,
    measured_time_s: f64,
    predicted_time_s: f64,
    time_rel_error: f64,
    predicted_compute_s: f64,
    predicted_exposed_communication_s: f64,
    predicted_from: String,
    phases: Vec<PhaseComparison>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    gpu_memory: Vec<crate::exec::GpuMemory>,
    notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    steps: Option<Vec<crate::calibrate::compare::StepComparison>>,
}

fn count(flag: &str, v: &Option<String>, default: u64) -> Result<usize> {
    Ok(match v {
        Some(t) => parse_count(flag, t)? as usize,
        None => default as usize,
    })
}

pub fn run(a: RunArgs) -> Result<String> {
    let (h0, a0, f0) = match &a.model {
        Some(m) => {
            let m = load_model(m)?;
            (m.hidden, m.heads, m.ffn_hidden)
        }
        None => (64, 4, 256),
    };
    let shape = Shape {
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
    let link = a.link.link()?;
    let mut spec = RunSpec::new(unit, method, shape);
    spec.causal = a.causal;
    spec.fused = !a.no_flash;
    spec.recv_buffers = a.metp_recv_buffers as usize;
    spec.weight_exchange = match a.metp_weight_exchange {
        ExchangeArg::Ring => WeightExchange::Ring,
        ExchangeArg::Broadcast => WeightExchange::Broadcast,
    };
    spec.seed = a.seed;
    spec.link = link;
    // The CPU runtime's size limits; the cuda backend checks its own (device memory).
    if a.backend == BackendArg::Cpu {
        shape.check(unit, method)?;
    }
    if a.runs == 0 {
        return Err(Error::arg("--runs", "must be positive"));
    }

    let mut backend: Box<dyn Backend> = match a.backend {
        BackendArg::Cpu => Box::new(CpuBackend::new(shape.p, link, true)?),
        BackendArg::Cuda => {
            if link.is_some() {
                return Err(Error::arg(
                    "--link-bandwidth",
                    "the link throttle exists only on the cpu backend",
                ));
            }
            calibrate::cuda::open(shape.p, true)?
        }
    };
    let mut notes = vec![
        "predicted_peak_bytes is the memory inventory's figure for this unit (memory::unit: the \
         largest set of tensors one device holds at once); null for tp, whose runtime has no \
         inventory yet"
            .to_string(),
    ];
    let (hw, opts, from) = match &a.hw {
        Some(name) => {
            let hw = load_hardware(name)?;
            let opts = PredictOptions {
                link,
                compute_scale: backend.compute_scale(shape.p, hw.gpus_per_node as usize),
                transfer_scale: backend.transfer_scale(shape.p),
                ..Default::default()
            };
            if opts.compute_scale != 1.0 {
                notes.push(format!(
                    "compute times scaled by {:.3}: {} devices share the {} backend's compute \
                     ({} cores here); the profile was measured with {} devices at once",
                    opts.compute_scale,
                    shape.p,
                    backend.name(),
                    crate::calibrate::cpu::cores(),
                    hw.gpus_per_node
                ));
            }
            (hw, opts, format!("hardware profile {name}"))
        }
        None if a.backend == BackendArg::Cuda => {
            return Err(Error::arg(
                "--hw",
                "the cuda backend predicts from a calibrated profile: run `metp-sim calibrate \
                 --backend cuda` and pass its profile with --hw",
            ))
        }
        None => {
            let plan = calibrate::Plan::for_units(vec![spec], true, link);
            let m = calibrate::measure(backend.as_mut(), &plan, &mut |_| {})?;
            let fits = calibrate::fit_all(&m)?;
            let meta = calibrate::Meta {
                backend: backend.name().to_string(),
                host: calibrate::profile::host_name(),
                date: calibrate::profile::today(),
                device: backend.device(),
                devices: backend.devices(),
                link: backend.link(),
                memory_bytes: backend.memory_bytes(),
            };
            let hw = calibrate::profile::build(&meta, &fits, &m);
            (
                hw,
                PredictOptions {
                    compute_scale: backend.compute_scale(shape.p, backend.devices()),
                    transfer_scale: backend.transfer_scale(shape.p),
                    ..Default::default()
                },
                format!(
                    "profile measured on the fly on the {} backend: this unit's own kernels and \
                     messages ({} GEMM shapes, {} attention blocks, {} message sizes, {} devices \
                     at once)",
                    backend.name(),
                    plan.gemms.len(),
                    plan.attention.len(),
                    plan.transfer_bytes.len(),
                    backend.devices()
                ),
            )
        }
    };
    let cmp = compare_unit(backend.as_mut(), &spec, &hw, opts, a.runs)?;
    if a.backend == BackendArg::Cpu {
        if let Some(load) = crate::calibrate::cpu::load_average() {
            let cores = crate::calibrate::cpu::cores();
            if load > 0.75 * cores as f64 {
                notes.push(format!(
                    "host load average {load:.2} on {cores} cores: other processes share the \
                     cores, so measured times (and the prediction's error) are unreliable"
                ));
            }
        }
    }
    let out = RunOutput {
        backend: backend.name(),
        unit,
        method,
        shape,
        causal: spec.causal,
        flash: spec.fused,
        recv_buffers: spec.recv_buffers,
        weight_exchange: spec.weight_exchange,
        link,
        max_rel_error: cmp.max_rel_error,
        errors: cmp.errors.clone(),
        measured_peak_bytes: cmp.measured_peak_bytes,
        predicted_peak_bytes: cmp.inventory_peak_bytes,
        measured_time_s: cmp.measured_time_s,
        predicted_time_s: cmp.predicted.time_s,
        time_rel_error: cmp.rel_error,
        predicted_compute_s: cmp.predicted.compute_s,
        predicted_exposed_communication_s: cmp.predicted.exposed_communication_s,
        predicted_from: from,
        phases: cmp.phases.clone(),
        gpu_memory: cmp.gpu_memory.clone(),
        notes,
        steps: a.steps.then(|| cmp.steps.clone()),
    };
    Ok(match a.format {
        OutFormat::Json => to_json(&out),
        OutFormat::Table => table(&out),
    })
}

fn table(o: &RunOutput) -> String {
    let sh = o.shape;
    let mut s = format!(
        "{} {} {:?} on the {} backend — p = {}, b = {}, s = {}, h = {}, a = {}, f = {}{}{}\n\n",
        o.method.id(),
        match o.unit {
            Unit::Attention => "attention",
            Unit::Mlp => "mlp",
        },
        if o.flash { "fused" } else { "unfused" },
        o.backend,
        sh.p,
        sh.b,
        sh.s,
        sh.h,
        sh.a,
        sh.f,
        if o.causal { ", causal" } else { "" },
        match o.link {
            Some(l) => format!(
                ", link {:.3e} B/s + {:.3e} s",
                l.bandwidth_bytes_per_s, l.latency_s
            ),
            None => String::new(),
        }
    );
    let mut t = Table::new(&["field", "value"], &[false, true]);
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
    for (k, v) in [
        ("max_rel_error", format!("{:.3e}", o.max_rel_error)),
        ("measured_peak_bytes", o.measured_peak_bytes.to_string()),
        ("predicted_peak_bytes", opt(o.predicted_peak_bytes)),
        ("measured_time_s", format!("{:.6}", o.measured_time_s)),
        ("predicted_time_s", format!("{:.6}", o.predicted_time_s)),
        (
            "time_rel_error",
            format!("{:+.1}%", 100.0 * o.time_rel_error),
        ),
    ] {
        t.row(vec![k.to_string(), v]);
    }
    s.push_str(&t.render());
    if !o.phases.is_empty() {
        s.push('\n');
        let mut t = Table::new(
            &[
                "ring",
                "steps",
                "predicted_s",
                "measured_s",
                "waited_s",
                "error",
            ],
            &[false, true, true, true, true, true],
        );
        for p in &o.phases {
            t.row(vec![
                format!("{:?}", p.phase),
                p.steps.to_string(),
                format!("{:.6}", p.predicted_s),
                format!("{:.6}", p.measured_s),
                format!("{:.6}", p.measured_wait_s),
                format!("{:+.1}%", 100.0 * p.rel_error),
            ]);
        }
        s.push_str(&t.render());
    }
    for g in &o.gpu_memory {
        s.push_str(&format!(
            "\nGPU {} ({} virtual devices): tracked high-water {} B, allocator high-water {}, \
             in use before {} B, after {} B (cuMemGetInfo)",
            g.gpu,
            g.virtual_devices,
            g.tracked_high_bytes,
            g.allocator_high_bytes
                .map(|b| format!("{b} B"))
                .unwrap_or_else(|| "-".into()),
            g.used_before_bytes,
            g.used_after_bytes
        ));
    }
    s.push_str(&format!("\npredicted from: {}\n", o.predicted_from));
    for n in &o.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}
