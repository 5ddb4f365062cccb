//! Integration tests: one binary, one module per concern.

mod analytic_vs_sim;
mod attention_kernels;
mod calib;
mod calib_cli;
mod calib_fit;
mod cli;
mod collectives;
mod commands;
mod common;
mod compose;
mod cross_entropy;
mod cuda_emu;
mod data;
mod evaluate;
mod fabric;
mod fleet;
mod fp8;
mod gpu;
mod gpu_data;
mod gpu_dist;
mod gpu_script;
mod gqa;
mod hf;
mod hostile;
mod kernels;
mod korthikanti;
mod layering;
mod layering_docs;
mod layering_files;
mod param_gather;
mod periodic;
mod pipeline;
mod plan;
mod plot;
mod properties;
mod runs;
mod runs_groups;
mod runs_llama3;
mod runtime;
mod scaling;
mod schedules;
mod shard;
mod unit_memory;
mod validate;
mod zero;

/// Says why a check is skipped where a plain `cargo test` shows it: the test harness captures
/// `eprintln!` but not writes to the stderr handle, so a green run that checked nothing reads
/// "skipped" and is not mistaken for a check that ran.
fn skipped(why: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}

/// Held by the tests that load every core (the CUDA emulator's build and its
/// thread-per-CUDA-thread run, torchrun's two ranks), so that two of them do not run at once on
/// a 2-core machine. The tests whose assertions rest on CPU timings are a binary of their own
/// (tests/timing), where nothing runs beside them.
fn cpu_exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    CPU.write().unwrap_or_else(|e| e.into_inner())
}

/// Held (shared) by the tests that run the binary in a process of its own (the hostile corpus):
/// many of them at once, never beside a test that holds [`cpu_exclusive`].
fn cpu_shared() -> std::sync::RwLockReadGuard<'static, ()> {
    CPU.read().unwrap_or_else(|e| e.into_inner())
}

static CPU: std::sync::RwLock<()> = std::sync::RwLock::new(());
