//! Issue 22's closing pass: a fresh hostile pass over every command (malformed, huge,
//! negative, tampered and linked inputs and outputs) found these, each fixed at its root:
//! - a named pipe given as a model waited forever for a writer (now read without waiting: a
//!   pipe nobody writes to reads as empty; `--model <(…)` is read once), and so did a pipe
//!   left as an output folder's lock or manifest;
//! - a link left as `sweep.csv.partial` sent the sweep's rows into the file it named, and
//!   `--trace /dev/stdout` replaced the `/dev/stdout` link with a regular file (as root, for
//!   the whole system): an output that is a link now replaces the file the link names, and a
//!   descriptor of the process or a device is refused;
//! - `run --seq 64k` aborted allocating its f64 reference (s × s matrices per head), and
//!   `calibrate --backend cpu --devices 256` aborted after minutes: a unit's host cost is
//!   estimated from its shape before anything runs;
//! - `overlap --local-seq 128..1000000:+1` simulated a million traced layers, a sweep could
//!   draw any number of plots, and a profile with thousands of collective rules made every
//!   collective walk them: each is bounded (`config::limits`) before the work.

use std::path::Path;

use super::{bundled, command, refuses, small_sweep, succeeds, write};

#[cfg(unix)]
fn fifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "mkfifo");
}

#[cfg(unix)]
#[test]
fn named_pipes_never_block_a_command() {
    let tmp = tempfile::tempdir().unwrap();
    let pipe = tmp.path().join("model.json");
    fifo(&pipe);
    let e = refuses(&["memory", "--model", pipe.to_str().unwrap()], 1);
    assert!(e.contains("EOF"), "{e}");
    // A pipe as an output folder's lock, or as its manifest.
    let out = tmp.path().join("locked");
    std::fs::create_dir(&out).unwrap();
    fifo(&out.join(".metp-sim.lock"));
    let out_s = out.to_string_lossy().into_owned();
    let e = refuses(&small_sweep(&out_s, &[]), 1);
    assert!(e.contains("not a lock file"), "{e}");
    let out = tmp.path().join("manifest");
    std::fs::create_dir(&out).unwrap();
    fifo(&out.join("manifest.json"));
    let out_s = out.to_string_lossy().into_owned();
    let e = refuses(&small_sweep(&out_s, &[]), 1);
    assert!(e.contains("not a regular file"), "{e}");
    assert!(!out.join(".metp-sim.lock").exists());
    // A shard that is a pipe or a device is not a file a part wrote.
    let d = tmp.path().join("shards");
    std::fs::create_dir(&d).unwrap();
    fifo(&d.join("sweep.shard-0-of-1.json"));
    let e = refuses(&["merge", d.to_str().unwrap()], 1);
    assert!(e.contains("not a regular file"), "{e}");
}

#[cfg(unix)]
#[test]
fn outputs_through_links_replace_the_file_they_name() {
    let tmp = tempfile::tempdir().unwrap();
    // A link left where the sweep keeps its rows while it runs.
    let keep = tmp.path().join("keep.txt");
    std::fs::write(&keep, "mine").unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::symlink(&keep, out.join("sweep.csv.partial")).unwrap();
    succeeds(&small_sweep(&out.to_string_lossy(), &[]));
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "mine");
    // A trace through a link: the link stays, the file it names is written.
    let real = tmp.path().join("real.json");
    let link = tmp.path().join("link.json");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let args = [
        "simulate",
        "--model",
        "gpt3-1.3b",
        "--p",
        "2",
        "--seq",
        "4k",
    ];
    let mut a = args.to_vec();
    a.extend(["--trace", link.to_str().unwrap()]);
    succeeds(&a);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::metadata(&real).unwrap().len() > 0);
    // A descriptor of the process is not a file to replace.
    let mut a = args.to_vec();
    a.extend(["--trace", "/dev/stdout"]);
    let e = refuses(&a, 1);
    assert!(e.contains("file descriptor"), "{e}");
}

#[test]
fn work_is_counted_before_it_starts() {
    let e = refuses(&["run", "--backend", "cpu", "--seq", "64k"], 1);
    assert!(e.contains("f64 reference") && e.contains("--seq"), "{e}");
    let e = refuses(
        &["run", "--backend", "cpu", "--unit", "mlp", "--ffn", "1g"],
        1,
    );
    assert!(e.contains("f64 reference"), "{e}");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("c.json");
    let e = refuses(
        &[
            "calibrate",
            "--backend",
            "cpu",
            "--devices",
            "256",
            "--quick",
            "--out",
            out.to_str().unwrap(),
        ],
        1,
    );
    assert!(e.contains("f64 reference"), "{e}");
    let e = refuses(&["overlap", "--local-seq", "128..1000000:+1"], 2);
    assert!(e.contains("at most 64"), "{e}");
    let e = refuses(
        &[
            "sweep",
            "--p",
            "1,2,4,8,16,32,64,128,256,512,1024,2048,4096",
            "--pp",
            "1,2,4,8,16",
            "--cp",
            "1,2,4,8",
            "--seq",
            "4k",
            "--engine",
            "analytic",
        ],
        2,
    );
    assert!(e.contains("plot files"), "{e}");
    let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
    hw["collectives"] = (0..5000)
        .map(|_| serde_json::json!({"op": "any", "algorithm": "ring", "source": "x"}))
        .collect();
    let path = write(tmp.path(), "rules.json", &hw);
    let e = refuses(&["memory", "--hw", &path], 1);
    assert!(e.contains("5000 rules"), "{e}");
    let _ = command(&["--version"]).output();
}
