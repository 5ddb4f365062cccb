//! `validate` writes the claims report with four verdicts, and regenerating it gives the bytes
//! committed in reports/claims/.

use assert_cmd::Command;

#[test]
fn regenerated_claims_report_matches_the_committed_one() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("metp-sim")
        .unwrap()
        .current_dir(root)
        .args(["validate", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
        for f in ["claim", "verdict", "measured", "assumptions"] {
            assert!(c.get(f).is_some(), "{} lacks {f}", c["id"]);
        }
        assert!(["holds", "holds-under-assumptions", "does-not-hold"]
            .contains(&c["verdict"].as_str().unwrap()));
    }
    // The numbers behind the verdicts: C1's attention block is exactly O(1/p³); C2's DESIGN
    // accounting reproduces 5/12 at p = 8.
    let c1 = &claims[0]["measured"];
    assert!((c1["metp_attention_block_slope"].as_f64().unwrap() + 3.0).abs() < 1e-9);
    let c2 = &claims[1]["measured"];
    assert!((c2["design_accounting_saving_p8"].as_f64().unwrap() - 5.0 / 12.0).abs() < 1e-12);
}
