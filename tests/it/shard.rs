//! Issue 13: a study split with `--shard K/N` and joined with `metp-sim merge` equals the
//! unsharded run byte for byte (sweep: every file of its folder, the manifest included, and its
//! table; plan: table and JSON); merge refuses foreign, missing and duplicate parts in one
//! line; `--shard` is checked as a usage error; a sweep over `--pp`/`--cp` has the columns and
//! the numbers `simulate` gives.

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;

fn run(args: &[&str]) -> Output {
    Command::cargo_bin("metp-sim")
        .unwrap()
        .args(args)
        .output()
        .unwrap()
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Exit status and the one stderr line of a refused command.
fn refused(args: &[&str]) -> (i32, String) {
    let o = run(args);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    (o.status.code().unwrap(), err)
}

/// Every file of a folder (name → bytes), shard files left out.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().contains(".shard-"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

const SWEEP: &[&str] = &[
    "sweep",
    "--model",
    "gpt3-1.3b",
    "--methods",
    "metp,tp-sp,ring",
    "--p",
    "1,2,4",
    "--seq",
    "4k,16k",
];

/// The done-when: a sweep split into 4 shards and merged equals the unsharded sweep,
/// every file (CSV, JSON, SVG and PNG plots, manifest) and the printed table, byte for byte.
#[test]
fn four_sweep_shards_merged_equal_the_unsharded_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out_s = out.to_str().unwrap();
    let mut args = SWEEP.to_vec();
    args.extend(["--out", out_s]);
    let table = ok(&args);
    let whole = files(&out);
    assert!(whole.iter().any(|(n, _)| n.ends_with(".png")));
    std::fs::remove_dir_all(&out).unwrap();
    for k in 0..4 {
        let shard = format!("{k}/4");
        let mut a = args.clone();
        a.extend(["--shard", &shard]);
        let said = ok(&a);
        assert!(said.contains(&format!("sweep shard {k}/4")), "{said}");
    }
    // The parts wrote nothing but their shard files.
    assert!(files(&out).is_empty());
    assert_eq!(ok(&["merge", out_s]), table);
    assert_eq!(files(&out), whole);
}

/// A plan split 4 ways and merged prints the unsharded plan, as a table and as JSON (counts —
/// evaluated, skipped as equivalent, feasible, simulated, rejected, omitted — and the ranked
/// rows simulated by different parts).
#[test]
fn four_plan_shards_merged_equal_the_unsharded_plan() {
    let tmp = tempfile::tempdir().unwrap();
    for format in ["table", "json"] {
        let args = [
            "plan",
            "--model",
            "gpt3-1.3b",
            "--gpus",
            "8",
            "--seq",
            "64k",
            "--top",
            "2",
            "--methods",
            "metp,tp-sp,ulysses",
            "--max-rejected",
            "5",
            "--format",
            format,
        ];
        let whole = ok(&args);
        let dir = tmp.path().join(format);
        let dir_s = dir.to_str().unwrap();
        for k in 0..4 {
            let shard = format!("{k}/4");
            let mut a = args.to_vec();
            a.extend(["--shard", &shard, "--out", dir_s]);
            ok(&a);
        }
        assert_eq!(ok(&["merge", dir_s]), whole, "{format}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["merge", tmp.path().join("json").to_str().unwrap()])).unwrap();
    assert!(json["equivalent_skipped"].as_u64().unwrap() > 0);
    assert!(json["rejected_omitted"].as_u64().unwrap() > 0);
}

/// Missing, duplicate and foreign parts, and a folder without shards, are refused in one line
/// (exit 1); a malformed `--shard` is a usage error (exit 2).
#[test]
fn merge_refuses_incomplete_or_mixed_sets_and_shard_is_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let part = |dir: &str, seq: &str, k: u64, n: u64| {
        let out = tmp.path().join(dir);
        let shard = format!("{k}/{n}");
        ok(&[
            "sweep",
            "--model",
            "gpt3-1.3b",
            "--methods",
            "metp",
            "--p",
            "2",
            "--seq",
            seq,
            "--engine",
            "analytic",
            "--svg-only",
            "--out",
            out.to_str().unwrap(),
            "--shard",
            &shard,
        ]);
        out.join(format!("sweep.shard-{k}-of-{n}.json"))
            .to_string_lossy()
            .into_owned()
    };
    let a0 = part("a", "4k,8k", 0, 2);
    let a1 = part("a", "4k,8k", 1, 2);
    let b1 = part("b", "4k,16k", 1, 2);
    let c1 = part("c", "4k,8k", 1, 3);
    for (args, want) in [
        (vec![a0.as_str()], "missing part(s) 1"),
        (vec![&a0, &a0, &a1], "given twice"),
        (vec![&a0, &b1], "different study"),
        (vec![&a0, &c1], "part of 3 shards"),
        (vec![tmp.path().to_str().unwrap()], "holds no shard files"),
    ] {
        let mut a = vec!["merge"];
        a.extend(args.iter().copied());
        let out = tmp.path().join("merged");
        a.extend(["--out", out.to_str().unwrap()]);
        let (code, err) = refused(&a);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains(want), "{want}: {err}");
    }
    // A part whose points are not the ones its place in the study says.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a1).unwrap()).unwrap();
    let seq = &mut doc["data"]["result"]["points"][0]["seq"];
    *seq = (seq.as_u64().unwrap() + 4096).into();
    let tampered = serde_json::to_string(&doc).unwrap();
    let d = tmp.path().join("tampered");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::copy(&a0, d.join("sweep.shard-0-of-2.json")).unwrap();
    std::fs::write(d.join("sweep.shard-1-of-2.json"), tampered).unwrap();
    let out = tmp.path().join("merged2");
    let (code, err) = refused(&["merge", d.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("does not hold point"), "{err}");
    for bad in ["4/4", "0/0", "1", "x/2", "1/-2", "0/20000"] {
        let (code, err) = refused(&[
            "sweep",
            "--seq",
            "4k",
            "--p",
            "1",
            "--methods",
            "metp",
            "--shard",
            bad,
        ]);
        assert_eq!(code, 2, "{bad}: {err}");
    }
    // clap's own usage error (with its usage lines): plan --shard needs --out.
    let o = run(&["plan", "--gpus", "8", "--seq", "4k", "--shard", "0/2"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `sweep --pp/--cp`: the cp, pp and interleave columns appear (and only then), cp on a method
/// other than tp-sp is marked invalid with the reason, and a point's numbers are simulate's.
#[test]
fn sweep_over_pp_and_cp_has_their_columns_and_simulates_points_as_simulate_does() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    ok(&[
        "sweep",
        "--model",
        "gpt3-1.3b",
        "--methods",
        "tp-sp,metp",
        "--p",
        "2",
        "--pp",
        "1,2",
        "--cp",
        "1,2",
        "--seq",
        "8k",
        "--svg-only",
        "--out",
        out.to_str().unwrap(),
    ]);
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(
        header.starts_with("model,hardware,method,p,cp,pp,interleave,seq,status"),
        "{header}"
    );
    assert_eq!(csv.lines().count(), 1 + 2 * 4);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap();
    let points = json["points"].as_array().unwrap();
    let metp_cp2 = points
        .iter()
        .find(|p| p["method"] == "metp" && p["cp"] == 2)
        .unwrap();
    assert_eq!(metp_cp2["status"], "invalid", "{metp_cp2}");
    assert!(out.join("step-time-p2-cp2-pp2.svg").exists());
    // The longest sequence with context parallelism counts in the cp-fold granule.
    let longest = json["maxseq"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["method"] == "tp-sp" && r["cp"] == 2 && r["pp"] == 2)
        .unwrap();
    assert!(longest["max_seq"].as_u64().unwrap() > 8192, "{longest}");
    let pt = points
        .iter()
        .find(|p| p["method"] == "tp-sp" && p["cp"] == 2 && p["pp"] == 2)
        .unwrap();
    assert_eq!(pt["status"], "ok", "{pt}");
    let sim: serde_json::Value = serde_json::from_str(&ok(&[
        "simulate",
        "--model",
        "gpt3-1.3b",
        "--method",
        "tp-sp",
        "--p",
        "2",
        "--pp",
        "2",
        "--cp",
        "2",
        "--seq",
        "8k",
        "--format",
        "json",
    ]))
    .unwrap();
    for key in [
        "step_time_s",
        "peak_bytes",
        "tokens_per_s",
        "exposed_communication_s",
    ] {
        assert_eq!(pt[key], sim[key], "{key}");
    }
    // Without --pp/--cp the columns are the ones a sweep always wrote.
    let plain = tmp.path().join("plain");
    ok(&[
        "sweep",
        "--model",
        "gpt3-1.3b",
        "--methods",
        "metp",
        "--p",
        "2",
        "--seq",
        "8k",
        "--engine",
        "analytic",
        "--svg-only",
        "--out",
        plain.to_str().unwrap(),
    ]);
    let csv = std::fs::read_to_string(plain.join("sweep.csv")).unwrap();
    assert!(
        csv.starts_with("model,hardware,method,p,seq,status"),
        "{csv}"
    );
}
