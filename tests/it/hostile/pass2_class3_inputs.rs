//! Issue 22, class 3 — inputs overwritten: `gpu-check split` with `--fit` equal to
//! `--held-out` or to the input, `gpu-check merge --out` equal to an input. No command writes
//! over one of its inputs: every file read is remembered by identity (`inputs`: canonical path,
//! device and inode, so a symbolic or hard link to an input is the input), and every output is
//! checked against them before the work and when it is written; two outputs of one command on
//! one file are a usage error.

use std::path::Path;

use super::{refuses, write};

fn measurements(dir: &Path) -> (String, Vec<u8>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hardware-profiles/measurements/h200-pytorch-2026-11-30.json");
    let bytes = std::fs::read(src).unwrap();
    let path = dir.join("m.json");
    std::fs::write(&path, &bytes).unwrap();
    (path.to_string_lossy().into_owned(), bytes)
}

#[test]
fn split_and_merge_never_write_over_an_input() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, bytes) = measurements(tmp.path());
    let other = tmp.path().join("held.json");
    let other = other.to_str().unwrap();
    // --fit = --held-out: a usage error, nothing written.
    let e = refuses(
        &[
            "gpu-check",
            "split",
            "--input",
            &input,
            "--fit",
            other,
            "--held-out",
            other,
        ],
        2,
    );
    assert!(e.contains("--held-out"), "{e}");
    assert!(!Path::new(other).exists());
    // --fit = the input, by the same name, by another spelling of it, by a link to it.
    let dotted = format!("{}/./m.json", tmp.path().display());
    let mut names = vec![input.clone(), dotted];
    #[cfg(unix)]
    {
        let link = tmp.path().join("link.json");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        names.push(link.to_string_lossy().into_owned());
        let hard = tmp.path().join("hard.json");
        std::fs::hard_link(&input, &hard).unwrap();
        names.push(hard.to_string_lossy().into_owned());
    }
    for name in &names {
        let e = refuses(
            &[
                "gpu-check",
                "split",
                "--input",
                &input,
                "--fit",
                name,
                "--held-out",
                other,
            ],
            1,
        );
        assert!(
            e.contains("inputs") || e.contains("same file as the input"),
            "{e}"
        );
        let e = refuses(&["gpu-check", "merge", &input, "--out", name], 1);
        assert!(e.contains("input"), "{e}");
    }
    assert_eq!(std::fs::read(&input).unwrap(), bytes, "the input changed");
    assert!(!Path::new(other).exists());
}

#[test]
fn a_fitted_profile_never_replaces_its_base_or_its_measurements() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, bytes) = measurements(tmp.path());
    let base = write(
        tmp.path(),
        "base.json",
        &super::bundled("hardware-profiles", "hgx-h200"),
    );
    let base_bytes = std::fs::read(&base).unwrap();
    for out in [&base, &input] {
        let e = refuses(
            &[
                "calibrate",
                "--fit",
                &input,
                "--base",
                &base,
                "--out",
                out,
                "--force",
            ],
            1,
        );
        assert!(e.contains("input"), "{e}");
    }
    assert_eq!(std::fs::read(&input).unwrap(), bytes);
    assert_eq!(std::fs::read(&base).unwrap(), base_bytes);
}

#[test]
fn a_trace_never_replaces_the_model_it_traces() {
    let tmp = tempfile::tempdir().unwrap();
    let model = write(tmp.path(), "m.json", &super::bundled("models", "gpt3-1.3b"));
    let before = std::fs::read(&model).unwrap();
    let e = refuses(
        &[
            "simulate", "--model", &model, "--p", "2", "--seq", "4k", "--trace", &model,
        ],
        1,
    );
    assert!(e.contains("input"), "{e}");
    assert_eq!(std::fs::read(&model).unwrap(), before);
}
