//! The hostile corpus of issue 10: inputs a new user might try — large or odd values the tool
//! accepts, interrupted and concurrent runs — one module per class of the issue. Every
//! command here runs under `prlimit --as=2GiB` where `prlimit` exists (the issue's "done
//! when"): it must finish, or refuse with exit status 1 (2 for usage) and one line — never
//! abort, panic or hang. The whole corpus takes seconds (each refusal comes before the work).

mod class1_aborts;
mod class2_impossible_numbers;
mod class3_wraparound;
mod class4_lenient_parsing;
mod class5_work_checked_late;
mod class6_hangs;
mod class7_interrupted;
mod class8_unbounded_cost;
mod class9_small_things;
mod pass2_class1_shards;
mod pass2_class2_measurements;
mod pass2_class3_inputs;
mod pass2_class4_bounded_work;
mod pass2_class5_flags;
mod pass2_class6_small_things;
mod pass2_fresh;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// 2 GiB of address space, as the check.
pub const ADDRESS_SPACE_BYTES: u64 = 2 << 30;

/// Whether `prlimit` is installed (util-linux).
pub fn have_prlimit() -> bool {
    Command::new("prlimit")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The command `metp-sim ARGS`, under `prlimit --as=2GiB` when available, run in the
/// repository root (the bundled models and profiles).
pub fn command(args: &[&str]) -> Command {
    let bin = assert_cmd::cargo::cargo_bin("metp-sim");
    let mut c = if have_prlimit() {
        let mut c = Command::new("prlimit");
        c.arg(format!("--as={ADDRESS_SPACE_BYTES}")).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    c.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

/// One step of `model` on `hardware` with `method` at p = 8, one replica, 4k tokens, one
/// micro-batch of one, default options: the library-level hostile cases' workload.
pub fn workload_p8(
    model: metp_sim::config::Model,
    hardware: metp_sim::config::Hardware,
    method: metp_sim::config::MethodId,
) -> metp_sim::config::ValidWorkload {
    metp_sim::config::Workload {
        model,
        hardware,
        method,
        p: 8,
        dp: 1,
        outer: Default::default(),
        seq: 4096,
        micro_batch: 1,
        micro_batches: 1,
        options: metp_sim::config::Options::default(),
    }
    .validate()
    .unwrap()
}

/// The arguments of a one-point analytic sweep into `out` (quick in a debug build), with
/// `extra` flags before the point's.
pub fn small_sweep<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["sweep"];
    args.extend_from_slice(extra);
    args.extend([
        "--seq",
        "4k",
        "--p",
        "2",
        "--methods",
        "metp",
        "--engine",
        "analytic",
        "--svg-only",
        "--out",
        out,
    ]);
    args
}

/// Runs `metp-sim ARGS` (under the limit), killing it after `limit` — a hang fails the test.
pub fn run_within(args: &[&str], limit: Duration) -> Output {
    // Never beside a test whose assertions rest on CPU timings.
    let _shared = crate::cpu_shared();
    let mut child = command(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("metp-sim starts");
    let t0 = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{args:?} still running after {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `metp-sim ARGS` and expects a refusal with `code` (1, or 2 for usage) in one line of
/// stderr — no abort, no panic, no backtrace; returns that line.
pub fn refuses(args: &[&str], code: i32) -> String {
    let out = run_within(args, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: expected exit {code}, got {:?}: {err}",
        out.status
    );
    for bad in [
        "panicked",
        "memory allocation",
        "backtrace",
        "RUST_BACKTRACE",
    ] {
        assert!(!err.contains(bad), "{args:?}: {err}");
    }
    let lines: Vec<&str> = err.trim_end().lines().collect();
    if code == 1 {
        assert_eq!(lines.len(), 1, "{args:?}: not one line: {err}");
    }
    assert!(
        lines.first().is_some_and(|l| l.starts_with("error:")),
        "{args:?}: {err}"
    );
    err
}

/// Runs `metp-sim ARGS` and expects success; returns stdout.
pub fn succeeds(args: &[&str]) -> String {
    let out = run_within(args, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{args:?}: {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A bundled JSON file of `models/` or `hardware-profiles/` as a value.
pub fn bundled(folder: &str, name: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(folder)
        .join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Writes `value` as `name` in `dir` and returns the path as a string.
pub fn write(dir: &Path, name: &str, value: &serde_json::Value) -> String {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}
