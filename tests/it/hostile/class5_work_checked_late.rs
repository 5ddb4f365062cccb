//! Class 5 — work checked after it is done: `--seq 1..2^40:+1` expanded 2^40 lengths before
//! checking the 1,000,000 limit; `simulate` ran the whole step before finding that `--trace`
//! pointed below a file, and calibrate, validate and simulate said "File exists (os error 17)".
//! Everything is counted or checked first, and a file in the way is "not a directory".

use std::time::{Duration, Instant};

use super::refuses;

#[test]
fn a_huge_sequence_spec_is_counted_before_it_is_expanded() {
    let t0 = Instant::now();
    let e = refuses(&["sweep", "--seq", "1..1099511627776:+1"], 2);
    assert!(e.contains("expands to 1099511627776 lengths"), "{e}");
    // Points are counted before any model is loaded or evaluated.
    let e = refuses(&["sweep", "--seq", "1k..500m:+1k", "--p", "1,2"], 2);
    assert!(e.contains("points") && e.contains("100000"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

#[test]
fn outputs_are_checked_before_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("afile");
    std::fs::write(&file, b"x").unwrap();
    let below = |name: &str| file.join(name).to_string_lossy().into_owned();
    // A step that would take minutes to simulate in a debug build is refused at once.
    let t0 = Instant::now();
    for flag in ["--trace", "--timeline"] {
        let e = refuses(&["simulate", "--seq", "512k", flag, &below("x.svg")], 1);
        assert!(e.contains("afile is not a directory"), "{flag}: {e}");
        assert!(!e.contains("os error"), "{e}");
    }
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    let e = refuses(&["validate", "--out", &below("claims")], 1);
    assert!(e.contains("afile is not a directory"), "{e}");
    let e = refuses(&["sweep", "--seq", "4k", "--out", &below("sweep")], 1);
    assert!(e.contains("afile is not a directory"), "{e}");
    let e = refuses(
        &["sweep", "--seq", "4k", "--out", file.to_str().unwrap()],
        1,
    );
    assert!(e.contains("is not a directory"), "{e}");
    let e = refuses(
        &[
            "calibrate",
            "--backend",
            "cpu",
            "--quick",
            "--out",
            &below("cpu.json"),
        ],
        1,
    );
    assert!(e.contains("afile is not a directory"), "{e}");
    let e = refuses(
        &[
            "simulate",
            "--seq",
            "4k",
            "--trace",
            dir.path().to_str().unwrap(),
        ],
        1,
    );
    assert!(e.contains("is a directory"), "{e}");
    // gpu-check split checks both outputs before writing either: no fit part is left behind
    // when the held-out path cannot be written.
    let fit = dir.path().join("fit.json");
    let e = refuses(
        &[
            "gpu-check",
            "split",
            "--input",
            "hardware-profiles/measurements/a100-sxm-published.json",
            "--fit",
            fit.to_str().unwrap(),
            "--held-out",
            &below("held.json"),
        ],
        1,
    );
    assert!(e.contains("afile is not a directory"), "{e}");
    assert!(!fit.exists());
}
