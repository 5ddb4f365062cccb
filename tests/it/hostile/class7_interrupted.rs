//! Class 7 — interrupted and concurrent runs: two sweeps into one `--out` shared one partial
//! file (full of NUL bytes after SIGKILL); Ctrl-C during the final writes left truncated
//! `.sweep.json.tmp-<pid>` files; an interrupted run could leave a new CSV beside an old plot
//! with nothing saying so. A run holds its output folder (a lock refuses a second run), removes
//! its temporaries on SIGINT/SIGTERM, and writes a manifest last.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::{command, refuses, small_sweep, succeeds};

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-") || n == ".metp-sim.lock")
        .collect()
}

#[test]
fn a_finished_sweep_has_a_complete_manifest_written_last() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out_s = out.to_string_lossy().into_owned();
    let args = small_sweep(&out_s, &[]);
    succeeds(&args);
    let m = manifest(&out);
    assert_eq!(m["status"], "complete");
    assert_eq!(m["tool"], "metp-sim");
    assert_eq!(m["command"][0], "sweep");
    let files: Vec<&str> = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        files.contains(&"sweep.csv") && files.contains(&"sweep.json"),
        "{files:?}"
    );
    for f in m["files"].as_array().unwrap() {
        let len = std::fs::metadata(out.join(f["path"].as_str().unwrap()))
            .unwrap()
            .len();
        assert_eq!(f["bytes"].as_u64(), Some(len), "{f}");
    }
    assert!(leftovers(&out).is_empty(), "{:?}", leftovers(&out));
    assert!(!out.join("sweep.csv.partial").exists());
    // Same command, same manifest, byte for byte.
    let first = std::fs::read(out.join("manifest.json")).unwrap();
    succeeds(&args);
    assert_eq!(first, std::fs::read(out.join("manifest.json")).unwrap());
}

#[test]
fn a_busy_folder_is_refused_and_a_dead_runs_lock_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let out_s = dir.path().to_string_lossy().into_owned();
    let args = small_sweep(&out_s, &[]);
    // A live process holds the folder (this test's own process).
    let lock = dir.path().join(".metp-sim.lock");
    std::fs::write(&lock, format!("{}\n", std::process::id())).unwrap();
    if Path::new("/proc/self").exists() {
        let e = refuses(&args, 1);
        assert!(e.contains("in use by another metp-sim run"), "{e}");
        assert!(lock.exists());
    }
    // Left by a process that no longer exists (SIGKILL): taken over.
    std::fs::write(&lock, format!("{}\n", u32::MAX - 1)).unwrap();
    succeeds(&args);
    assert!(!lock.exists());
    assert_eq!(manifest(dir.path())["status"], "complete");
}

/// SIGINT and SIGTERM in the middle of a sweep: exit status 130, no temporaries, no lock, and
/// a manifest that says `interrupted` (the rows computed so far stay in the partial file).
#[test]
fn an_interrupted_sweep_leaves_no_temporaries_and_says_so() {
    if !Path::new("/proc/self").exists() {
        return super::super::skipped("no /proc: signals are sent with kill(1) on Linux");
    }
    for signal in ["-INT", "-TERM"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let child = command(&[
            "sweep",
            "--seq",
            // Long enough (over a second in a release build) that the signal lands mid-run
            // in both profiles: a shorter sweep finished before it in release.
            "4k..1m:+4k",
            "--out",
            out.to_str().unwrap(),
            "--svg-only",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        // Wait until the run holds its folder, then interrupt it mid-way.
        let t0 = Instant::now();
        while !out.join(".metp-sim.lock").exists() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        let status = std::process::Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let out_put = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out_put.stderr);
        assert_eq!(out_put.status.code(), Some(130), "{signal}: {err}");
        assert!(err.contains("interrupted"), "{err}");
        assert!(
            leftovers(&out).is_empty(),
            "{signal}: {:?}",
            leftovers(&out)
        );
        assert_eq!(manifest(&out)["status"], "interrupted", "{signal}");
        assert!(!out.join("sweep.csv").exists() || out.join("sweep.json").exists());
    }
}
