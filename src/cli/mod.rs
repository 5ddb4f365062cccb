//! The command line: clap definitions, turning arguments into library calls, printing, and
//! mapping errors to exit codes (0 success, 1 error, 2 usage). Nothing else in the crate depends
//! on this module, and clap is used nowhere else.

mod args;
mod calibrate;
mod collectives;
mod gpu_check;
mod kernels;
mod link;
mod maxseq;
mod memory;
mod merge;
mod overlap;
mod plan;
mod progress;
mod run;
mod simulate;
mod state_args;
mod sweep;
mod validate;

use clap::{Parser, Subcommand};

use crate::config::limits::help;
use crate::error::Result;

/// How long a sequence fits, how fast a step runs, and where memory and time go — for METP and
/// the tensor/sequence-parallel methods it competes with.
#[derive(Debug, Parser)]
#[command(name = "metp-sim", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Per-device memory of one workload, tensor by tensor.
    #[command(after_help = help("memory"))]
    Memory(memory::MemoryArgs),
    /// Longest sequence that fits, per method and degree.
    #[command(after_help = help("maxseq"))]
    Maxseq(maxseq::MaxseqArgs),
    /// Simulate one training step: time, overlap, memory high-water; trace and timeline.
    #[command(after_help = help("simulate"))]
    Simulate(simulate::SimulateArgs),
    /// Every method × degree × sequence length: CSV, JSON and plots.
    #[command(after_help = help("sweep"))]
    Sweep(sweep::SweepArgs),
    /// METP's full-overlap condition and the simulated exposed communication around it.
    #[command(after_help = help("overlap"))]
    Overlap(overlap::OverlapArgs),
    /// Check METP's published claims C1–C4; writes reports/claims/ (--hw: on other profiles).
    #[command(after_help = help("validate"))]
    Validate(validate::ValidateArgs),
    /// Rank the configurations that fit N GPUs by simulated throughput, with memory headroom.
    #[command(after_help = help("plan"))]
    Plan(plan::PlanArgs),
    /// Join the shard files of a split sweep or plan (--shard K/N) into what one run would
    /// have written.
    #[command(after_help = help("merge"))]
    Merge(merge::MergeArgs),
    /// Execute one unit (attention or MLP, METP or TP) on a backend: error against an f64
    /// reference, measured and predicted memory and time.
    #[command(after_help = help("run"))]
    Run(run::RunArgs),
    /// Measure this machine (CPU or CUDA), fit and write a hardware profile, and compare METP
    /// units' predicted and measured times.
    #[command(after_help = help("calibrate"))]
    Calibrate(calibrate::CalibrateArgs),
    /// nccl-tests' table (size, count, type, time, algbw, busbw) predicted on a profile;
    /// --compare LOG adds a published nccl-tests / rccl-tests log and flags a short curve.
    #[command(after_help = help("collectives"))]
    Collectives(collectives::CollectivesArgs),
    /// Price a list of kernels (or a measurement file's) with a profile's kernel model;
    /// --compare reports the error against measured times.
    #[command(after_help = help("kernels"))]
    Kernels(kernels::KernelsArgs),
    /// The GPU check's held-out split of a measurement file and its closing table
    /// (scripts/gpu-check.sh).
    #[command(after_help = help("gpu-check"))]
    GpuCheck(gpu_check::GpuCheckArgs),
    /// List the bundled models and hardware profiles.
    List,
}

/// Runs the CLI with the process arguments and returns the exit status.
pub fn main() -> i32 {
    // An interrupted run removes its temporaries and releases its output folders.
    crate::atomic::install_interrupt_cleanup();
    // No output of this command may replace one of its inputs (`inputs`).
    crate::inputs::track();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            // A failed check still prints what the command wrote.
            if let crate::error::Error::CheckFailed { report, .. } = &e {
                print(report);
            }
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let text = match cli.command {
        Command::Memory(a) => memory::run(a)?,
        Command::Maxseq(a) => maxseq::run(a)?,
        Command::Simulate(a) => simulate::run(a)?,
        Command::Sweep(a) => sweep::run(a)?,
        Command::Overlap(a) => overlap::run(a)?,
        Command::Validate(a) => validate::run(a)?,
        Command::Plan(a) => plan::run(a)?,
        Command::Merge(a) => merge::run(a)?,
        Command::Run(a) => run::run(a)?,
        Command::Calibrate(a) => calibrate::run(a)?,
        Command::Collectives(a) => collectives::run(a)?,
        Command::Kernels(a) => kernels::run(a)?,
        Command::GpuCheck(a) => gpu_check::run(a)?,
        Command::List => list(),
    };
    print(&text);
    Ok(())
}

fn list() -> String {
    use crate::config::{list_names, load_hardware, DataKind};
    let mut out = format!("models: {}\n", list_names(DataKind::Model).join(", "));
    out.push_str(
        "hardware profiles (attention implementations, default first; FP8 where the profile \
         prices --linear-dtype fp8):\n",
    );
    for name in list_names(DataKind::Hardware) {
        match load_hardware(&name) {
            Ok(hw) => {
                let k = &hw.kernels;
                let fp8 = if hw.gpu.peak_fp8_flops_per_s.is_some() {
                    "; FP8"
                } else {
                    ""
                };
                out.push_str(&format!("  {name}: {}{fp8}\n", k.attention_list()));
                if let Some(p) = k.placeholder_note(k.default_attention()) {
                    out.push_str(&format!("    placeholder: {p}\n"));
                }
            }
            Err(e) => out.push_str(&format!("  {name}: does not load: {e}\n")),
        }
    }
    out
}

/// Prints to stdout, ignoring a closed pipe (`metp-sim … | head`).
fn print(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().write_all(text.as_bytes());
}
