//! Issue 22, class 4 — work not bounded at the documented limits: `sweep --engine analytic`
//! with 99,984 points wrote everything in 5 s and then spent more than 115 s printing its table
//! (each cell searched every point: quadratic). The summary now looks each point up once and
//! shows at most `report::TABLE_MAX_LENGTHS` lengths, evenly spaced, saying so; the plots
//! gather each curve once. `calibrate --fit` with 90,000 attention entries ran past 120 s (2k
//! entries 8.8 s, 10k 221 s): each parameter search now estimates its work (samples × the full
//! fits it runs, the session clocks' trials included) before it starts and runs on an even
//! share of the samples above `config::limits::MAX_FIT_SEARCH_WORK`, reporting errors over all
//! of them (`calibrate::kernel_fit`'s unit test; 90,000 entries in ~3 s in a release build).
//! (The full-size cases are in `scripts/hostile-prlimit.sh`.)

use super::succeeds;

#[test]
fn a_sweep_of_many_lengths_prints_a_bounded_table() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let said = succeeds(&[
        "sweep",
        "--model",
        "gpt3-1.3b",
        "--methods",
        "metp",
        "--p",
        "2",
        "--seq",
        "1k..40k:+1k",
        "--engine",
        "analytic",
        "--svg-only",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(said.contains("12 of the 40 lengths shown"), "{said}");
    let header = said
        .lines()
        .find(|l| l.starts_with("method"))
        .expect("a table header");
    let cols: Vec<&str> = header.split_whitespace().collect();
    // method, p, max_seq and 12 lengths, from the first to the last.
    assert_eq!(cols.len(), 15, "{header}");
    assert_eq!((cols[3], cols[14]), ("1k", "40k"), "{header}");
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 41);
}
