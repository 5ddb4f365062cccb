//! Class 6 — hangs and uncapped knobs: `run --link-bandwidth 1` (or a latency of 1e9 s) never
//! ended; `calibrate --devices` had no cap while `run` capped p at 256; `calibrate --runs 0`
//! exited 0 where `run --runs 0` was a usage error. The knobs are bounded the same way in both
//! commands (config::limits), and a throttled link that would take longer than a command may
//! stops at the first message past the budget.

use std::time::{Duration, Instant};

use super::refuses;

const UNIT: [&str; 8] = [
    "--seq", "32", "--hidden", "16", "--heads", "2", "--ffn", "32",
];

fn run(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["run", "--backend", "cpu"].map(String::from).to_vec();
    v.extend(UNIT.iter().map(|s| s.to_string()));
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn refuses_owned(args: &[String], code: i32) -> String {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    refuses(&a, code)
}

#[test]
fn link_throttles_are_bounded() {
    let e = refuses_owned(&run(&["--link-bandwidth", "1"]), 2);
    assert!(e.contains("--link-bandwidth") && e.contains("1e3"), "{e}");
    let e = refuses_owned(
        &run(&["--link-bandwidth", "1e6", "--link-latency", "1e9"]),
        2,
    );
    assert!(e.contains("--link-latency"), "{e}");
    let e = refuses(
        &[
            "calibrate",
            "--backend",
            "cpu",
            "--link-bandwidth",
            "0.5",
            "--out",
            "/tmp/x.json",
        ],
        2,
    );
    assert!(e.contains("--link-bandwidth"), "{e}");
}

/// At the slowest bandwidth allowed, a unit whose ring messages (512 KiB of K and V) would
/// take ~9 minutes each stops at the first of them, in seconds, with the figures.
#[test]
fn a_link_too_slow_for_the_run_stops_at_the_first_message() {
    let t0 = Instant::now();
    let e = refuses(
        &[
            "run",
            "--backend",
            "cpu",
            "--seq",
            "1024",
            "--hidden",
            "256",
            "--heads",
            "4",
            "--ffn",
            "256",
            "--hw",
            "dgx-a100-80gb",
            "--link-bandwidth",
            "1e3",
        ],
        1,
    );
    assert!(e.contains("throttled link") && e.contains("120 s"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

#[test]
fn devices_and_runs_are_bounded_alike_in_run_and_calibrate() {
    let e = refuses(&["calibrate", "--backend", "cpu", "--devices", "100000"], 2);
    assert!(e.contains("1 to 256"), "{e}");
    let e = refuses(&["calibrate", "--backend", "cpu", "--devices", "0"], 2);
    assert!(e.contains("1 to 256"), "{e}");
    let e = refuses_owned(&run(&["--p", "512"]), 2);
    assert!(e.contains("1 to 256"), "{e}");
    for cmd in [
        vec!["calibrate", "--backend", "cpu", "--runs", "0"],
        vec!["calibrate", "--backend", "cpu", "--runs", "1001"],
    ] {
        let e = refuses(&cmd, 2);
        assert!(e.contains("--runs: must be from 1 to 1000"), "{e}");
    }
    let e = refuses_owned(&run(&["--runs", "0"]), 2);
    assert!(e.contains("--runs: must be from 1 to 1000"), "{e}");
}
