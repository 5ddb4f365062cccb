//! `validate` writes the claims report with four verdicts, and regenerating it gives the bytes
//! committed in reports/claims/.

use assert_cmd::Command;

/// `metp-sim validate ARGS` run in `cwd`.
fn validate_in(cwd: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::cargo_bin("metp-sim")
        .unwrap()
        .current_dir(cwd)
        .arg("validate")
        .args(args)
        .output()
        .unwrap()
}

/// The same, expected to succeed (stderr shown otherwise).
fn validate_ok(cwd: &std::path::Path, args: &[&str]) -> std::process::Output {
    let out = validate_in(cwd, args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn regenerated_claims_report_matches_the_committed_one() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    validate_ok(root, &["--out", dir.path().to_str().unwrap()]);
    let committed = root.join("reports/claims");
    let mut compared = 0;
    for entry in std::fs::read_dir(&committed).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name == "manifest.json" {
            // Names the command line, whose --out differs here; checked below.
            continue;
        }
        let fresh = std::fs::read(dir.path().join(name))
            .unwrap_or_else(|_| panic!("{name:?} is committed but no longer generated"));
        assert!(
            fresh == std::fs::read(&path).unwrap(),
            "{name:?} differs from the committed report: run `cargo run --release -- validate` and commit reports/claims"
        );
        compared += 1;
    }
    assert!(compared >= 6, "only {compared} files in reports/claims");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["status"], "complete");
    let listed = manifest["files"].as_array().unwrap().len();
    assert_eq!(
        listed, compared,
        "the manifest lists every file of the report"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("claims.json")).unwrap()).unwrap();
    let claims = v.as_array().unwrap();
    let ids: Vec<&str> = claims.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["C1", "C2", "C3", "C4"]);
    for c in claims {
        for f in [
            "claim",
            "verdict",
            "rule",
            "basis",
            "would_flip",
            "measured",
            "assumptions",
        ] {
            assert!(c.get(f).is_some(), "{} lacks {f}", c["id"]);
        }
        assert!([
            "holds",
            "holds-under-assumptions",
            "does-not-hold",
            "not-established"
        ]
        .contains(&c["verdict"].as_str().unwrap()));
        assert!(!c["rule"].as_str().unwrap().is_empty());
    }
    // The numbers behind the verdicts: C1's attention block is exactly O(1/p³); C2's DESIGN
    // accounting reproduces 5/12 at p = 8.
    let c1 = &claims[0]["measured"];
    assert!((c1["metp_attention_block_slope"].as_f64().unwrap() + 3.0).abs() < 1e-9);
    let c2 = &claims[1]["measured"];
    assert!((c2["design_accounting_saving_p8"].as_f64().unwrap() - 5.0 / 12.0).abs() < 1e-12);
}

fn claims_of(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("claims.json")).unwrap()).unwrap();
    v.as_array().unwrap().clone()
}

/// `validate --hw mi300x-8` checks every claim on MI300X-8 in place of the bundled profiles,
/// into reports/claims-mi300x-8/ by default: a complete report whose hardware-dependent numbers
/// differ from the committed default's, and whose prose says what it was checked on.
#[test]
fn validate_on_another_profile_writes_its_own_complete_report() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let cwd = tempfile::tempdir().unwrap();
    validate_ok(cwd.path(), &["--hw", "mi300x-8", "--svg-only"]);
    let dir = cwd.path().join("reports/claims-mi300x-8");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["status"], "complete");
    let md = std::fs::read_to_string(dir.join("claims.md")).unwrap();
    assert!(md.contains("`metp-sim validate --hw`"), "{md}");
    assert!(!md.contains("not checked"), "{md}");
    let fresh = claims_of(&dir);
    let committed = claims_of(&root.join("reports/claims"));
    let ids: Vec<&str> = fresh.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["C1", "C2", "C3", "C4"]);
    for c in &fresh {
        let s = c["summary"].as_str().unwrap();
        assert!(
            s.starts_with("Checked on MI300X-8") || s.starts_with("The claim is about 8 A100"),
            "{s}"
        );
        assert!(!c["assumptions"].as_array().unwrap().is_empty());
        assert!(dir
            .join(format!("{}.svg", plot_file(c["id"].as_str().unwrap())))
            .exists());
    }
    let (m, d) = (
        |i: usize| &fresh[i]["measured"],
        |i: usize| &committed[i]["measured"],
    );
    // C1: the attention block is the same tensor on any hardware; the peak adds the profile's
    // reserved bytes, so its slope moves.
    assert_eq!(
        m(0)["metp_attention_block_slope"],
        d(0)["metp_attention_block_slope"]
    );
    assert_ne!(m(0)["metp_peak_slope"], d(0)["metp_peak_slope"]);
    // C2: the DESIGN accounting is hardware-free; the longest sequence TP fits is not.
    assert_eq!(
        m(1)["design_accounting_saving_p8"],
        d(1)["design_accounting_saving_p8"]
    );
    assert_ne!(m(1)["cases"], d(1)["cases"]);
    // C3: only MI300X-8's studies.
    let keys: Vec<&String> = m(2).as_object().unwrap().keys().collect();
    assert!(keys.iter().any(|k| k.as_str() == "mi300x-8"), "{keys:?}");
    assert!(!keys.iter().any(|k| k.starts_with("dgx-")), "{keys:?}");
    assert_ne!(m(2)["points_judged"], d(2)["points_judged"]);
    // C4: 192 GB per GPU fits longer sequences; the ratios move.
    assert_ne!(
        m(3)["best_other_ratio_flash_min"],
        d(3)["best_other_ratio_flash_min"]
    );
    assert!(fresh[3]["summary"].as_str().unwrap().contains(
        "ran on 8 GPUs of MI300X-8 in place of the bundled DGX-A100-40GB and DGX-A100-80GB"
    ));
}

fn plot_file(id: &str) -> &'static str {
    match id {
        "C1" => "c1-memory-vs-p",
        "C2" => "c2-saving-vs-p",
        "C3" => "c3-exposed-vs-local-seq",
        _ => "c4-ratio-vs-model",
    }
}

/// A profile a claim cannot run on is left out of it with a one-line reason; the others in the
/// list still run. B200-8 runs everything; a node of 4 GPUs cannot hold C3's and C4's p = 8.
#[test]
fn validate_leaves_out_a_profile_too_small_for_a_claim_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut small: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("hardware-profiles/dgx-a100-80gb.json")).unwrap(),
    )
    .unwrap();
    small["name"] = "a100-x4".into();
    small["gpus_per_node"] = 4.into();
    let small_path = dir.path().join("x4.json");
    std::fs::write(&small_path, small.to_string()).unwrap();
    validate_ok(dir.path(), &["--svg-only", "--hw", "b200-8,x4.json"]);
    let claims = claims_of(&dir.path().join("reports/claims-b200-8-a100-x4"));
    let reason = "it has 4 GPUs per node, fewer than the p = 8 this check runs within one node";
    for c in &claims[2..] {
        assert_ne!(c["verdict"], "not-checked");
        assert_eq!(
            c["measured"]["not_checked"]["a100-x4"], reason,
            "{}",
            c["id"]
        );
        assert!(c["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("Not checked on a100-x4, {reason}.")));
    }
    assert!(claims[2]["measured"].get("b200-8").is_some());
    // C1 and C2 take the first profile.
    assert!(claims[0]["summary"]
        .as_str()
        .unwrap()
        .starts_with("Checked on B200-8 (8 nodes, for p up to 64) (the first profile given"));
    // Alone, the small profile leaves C3 and C4 not checked, and says why.
    let out = validate_ok(
        dir.path(),
        &["--svg-only", "--hw", "x4.json", "--out", "small"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("C3: not checked on these profiles"),
        "{stdout}"
    );
    let claims = claims_of(&dir.path().join("small"));
    assert_eq!(claims[3]["verdict"], "not-checked");
    assert_eq!(
        claims[3]["summary"],
        format!("Not checked on a100-x4, {reason}.")
    );
    assert_eq!(claims[0]["verdict"], "holds-under-assumptions");
}

/// Bad `--hw` is a one-line error: exit 1 for a profile that does not load, 2 for a malformed
/// list or `--scale` (argument errors) and for `--scale` without `--hw` (clap's usage error).
#[test]
fn validate_refuses_bad_hardware_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (args, code, says) in [
        (
            &["--hw", "no-such-gpu"][..],
            1,
            "unknown hardware profile 'no-such-gpu'",
        ),
        (&["--hw", "mi300x-8,"][..], 2, "an empty name in the list"),
        (&["--hw", "mi300x-8,mi300x-8"][..], 2, "listed twice"),
        (&["--hw", "b200-8", "--scale", "warp=2"][..], 2, "--scale"),
        (
            &["--scale", "hbm=2"][..],
            2,
            "required arguments were not provided",
        ),
    ] {
        let out = validate_in(dir.path(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        if args[0] == "--hw" {
            assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        }
    }
    // Nothing was written for a refused command.
    assert!(!dir.path().join("reports").exists());
}

/// `validate --hw gb200-nvl72 --scale intra=1.05`: the bandwidth that used to flip C3 (one
/// length 1.29× its threshold, 3.4% exposed, decided "does not hold" from 1.0× to 1.1×) leaves
/// it holding: full overlap is reached above the condition, whatever one grid point shows.
#[test]
fn c3_holds_on_gb200_at_the_bandwidths_that_used_to_flip_it() {
    let dir = tempfile::tempdir().unwrap();
    validate_ok(
        dir.path(),
        &[
            "--svg-only",
            "--hw",
            "gb200-nvl72",
            "--scale",
            "intra=1.05",
            "--out",
            "o",
        ],
    );
    let claims = claims_of(&dir.path().join("o"));
    assert_eq!(claims[2]["verdict"], "holds", "{}", claims[2]["summary"]);
}
