//! Issue 22, class 1 — `merge` trusted what a shard said: a negative step time, MFU 5.0 (7.5
//! in a plan, ranked first), a step of 1e308 s, `fits: true` with a peak 10× the capacity, part
//! 7 of 3, another version, maxseq rows tampered or removed, an embedded model with 0 layers, a
//! profile with memory 0 and FLOP/s −1 (which failed late, at plotting, leaving half a result),
//! a NUL in a model name, an output folder taken from the file, `top: 0`. A shard file is
//! input like any other: each case is refused in one line naming the file and the entry (exit
//! 1), before anything is written.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{refuses, succeeds};

/// The two parts of a small analytic sweep (one point each, part 0 with the longest sequence).
fn sweep_parts(dir: &Path) -> (Value, Value) {
    let out = dir.join("parts");
    let out_s = out.to_string_lossy().into_owned();
    for k in ["0/2", "1/2"] {
        succeeds(&[
            "sweep",
            "--model",
            "gpt3-1.3b",
            "--methods",
            "metp",
            "--p",
            "2",
            "--seq",
            "4k,8k",
            "--engine",
            "analytic",
            "--svg-only",
            "--out",
            &out_s,
            "--shard",
            k,
        ]);
    }
    let read = |k: u32| -> Value {
        let text = std::fs::read(out.join(format!("sweep.shard-{k}-of-2.json"))).unwrap();
        serde_json::from_slice(&text).unwrap()
    };
    (read(0), read(1))
}

/// Writes `parts` as shard files of a fresh folder `name` and runs `merge` on it into
/// `<name>-out`; expects a one-line refusal containing `want`, and nothing written.
fn merge_refuses(dir: &Path, name: &str, parts: &[&Value], want: &str) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let n = parts.len();
    for (k, v) in parts.iter().enumerate() {
        let kind = v["kind"].as_str().unwrap_or("sweep");
        std::fs::write(
            d.join(format!("{kind}.shard-{k}-of-{n}.json")),
            serde_json::to_vec(v).unwrap(),
        )
        .unwrap();
    }
    let out = dir.join(format!("{name}-out"));
    let mut args = vec![d.to_str().unwrap(), "--out", out.to_str().unwrap()];
    if parts[0]["kind"] == "plan" {
        args.truncate(1);
    }
    let mut all = vec!["merge"];
    all.extend(args);
    let err = refuses(&all, 1);
    assert!(err.contains(want), "{name}: expected '{want}' in: {err}");
    assert!(!out.exists(), "{name}: merge wrote {}", out.display());
}

/// A change to a shard file's JSON.
type Tamper = Box<dyn Fn(&mut Value)>;

fn ok_point(part: &mut Value) -> &mut Value {
    let p = &mut part["data"]["result"]["points"][0];
    assert_eq!(p["status"], "ok", "{p}");
    p
}

#[test]
fn numbers_no_configuration_gives_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (p0, p1) = sweep_parts(tmp.path());
    // The untouched parts merge.
    let good = tmp.path().join("good-out");
    succeeds(&[
        "merge",
        tmp.path().join("parts").to_str().unwrap(),
        "--out",
        good.to_str().unwrap(),
    ]);
    let cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "negative-step",
            Box::new(|v| ok_point(v)["step_time_s"] = json!(-1.0)),
            "points[0].step_time_s",
        ),
        (
            "mfu-5",
            Box::new(|v| ok_point(v)["mfu"] = json!(5.0)),
            "points[0].mfu",
        ),
        (
            "step-1e308",
            Box::new(|v| ok_point(v)["step_time_s"] = json!(1e308)),
            "points[0].step_time_s",
        ),
        (
            "fits-10x",
            Box::new(|v| {
                let p = ok_point(v);
                let cap = p["capacity_bytes"].as_u64().unwrap();
                p["peak_bytes"] = json!(cap * 10);
            }),
            "points[0].peak_bytes",
        ),
        (
            "analytic-halved",
            Box::new(|v| {
                let p = ok_point(v);
                let t = p["analytic_step_time_s"].as_f64().unwrap();
                p["analytic_step_time_s"] = json!(t / 2.0);
            }),
            "closed form",
        ),
        (
            "capacity",
            Box::new(|v| ok_point(v)["capacity_bytes"] = json!(1u64 << 50)),
            "capacity_bytes",
        ),
    ];
    for (name, tamper, want) in cases {
        let mut t = p1.clone();
        tamper(&mut t);
        merge_refuses(tmp.path(), name, &[&p0, &t], want);
    }
}

#[test]
fn envelopes_maxseq_rows_and_embedded_files_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let (p0, p1) = sweep_parts(tmp.path());
    let cases: Vec<(&str, usize, Tamper, &str)> = vec![
        (
            "part-7-of-3",
            1,
            Box::new(|v| v["shard"] = json!({"index": 7, "count": 3})),
            "shard.index",
        ),
        (
            "version",
            1,
            Box::new(|v| v["version"] = json!("9.9.9")),
            "version",
        ),
        (
            "maxseq-tampered",
            0,
            Box::new(|v| {
                let r = &mut v["data"]["result"]["maxseq"][0]["row"]["max_seq"];
                *r = json!(r.as_u64().unwrap() * 2);
            }),
            "maxseq[0]",
        ),
        (
            "maxseq-removed",
            0,
            Box::new(|v| v["data"]["result"]["maxseq"] = json!([])),
            "maxseq",
        ),
        (
            "model-0-layers",
            0,
            Box::new(|v| {
                v["data"]["spec"]["models"][0]["layers"] = json!(0);
                v["data"]["spec"]["models"][0]["hidden"] = json!(0);
            }),
            "data.spec.models[0].layers",
        ),
        (
            "profile-memory-0",
            0,
            Box::new(|v| {
                let hw = &mut v["data"]["spec"]["hardware"][0];
                hw["gpu"]["memory_bytes"]["value"] = json!(0.0);
                hw["gpu"]["peak_bf16_flops_per_s"]["value"] = json!(-1.0);
            }),
            "data.spec.hardware[0].gpu",
        ),
        (
            "nul-name",
            0,
            Box::new(|v| v["data"]["spec"]["models"][0]["name"] = json!("a\u{0}<b")),
            "data.spec.models[0].name",
        ),
        (
            "edited-spec",
            0,
            Box::new(|v| v["data"]["spec"]["micro_batch"] = json!(2)),
            "fingerprint",
        ),
        (
            "command",
            1,
            Box::new(|v| v["command"] = json!(["sweep", "--shard", "0/2"])),
            "command",
        ),
    ];
    for (name, which, tamper, want) in cases {
        let (mut a, mut b) = (p0.clone(), p1.clone());
        tamper(if which == 0 { &mut a } else { &mut b });
        merge_refuses(tmp.path(), name, &[&a, &b], want);
    }
}

/// The merged sweep's folder is the one the command line names (or the shards' own folder),
/// never the one a shard file records.
#[test]
fn the_output_folder_comes_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut p0, mut p1) = sweep_parts(tmp.path());
    let elsewhere: PathBuf = tmp.path().join("elsewhere");
    for p in [&mut p0, &mut p1] {
        p["data"]["out"] = json!(elsewhere.to_str().unwrap());
    }
    let d = tmp.path().join("moved");
    std::fs::create_dir_all(&d).unwrap();
    for (k, p) in [&p0, &p1].iter().enumerate() {
        std::fs::write(
            d.join(format!("sweep.shard-{k}-of-2.json")),
            serde_json::to_vec(p).unwrap(),
        )
        .unwrap();
    }
    let said = succeeds(&["merge", d.to_str().unwrap()]);
    assert!(said.contains(d.to_str().unwrap()), "{said}");
    assert!(d.join("sweep.csv").exists());
    assert!(!elsewhere.exists());
}

/// A plan's part with MFU 7.5 on a simulated row (which would rank it first) and a spec with
/// `top: 0` are refused.
#[test]
fn a_plan_part_is_checked_like_a_sweep_part() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("plan");
    succeeds(&[
        "plan",
        "--model",
        "gpt3-1.3b",
        "--gpus",
        "2",
        "--seq",
        "4k",
        "--methods",
        "metp",
        "--top",
        "1",
        "--no-outer-axes",
        "--shard",
        "0/1",
        "--out",
        out.to_str().unwrap(),
    ]);
    let part: Value =
        serde_json::from_slice(&std::fs::read(out.join("plan.shard-0-of-1.json")).unwrap())
            .unwrap();
    succeeds(&["merge", out.to_str().unwrap()]);
    let mut mfu = part.clone();
    mfu["data"]["part"]["simulated"][0]["outcome"]["Ok"]["mfu"] = json!(7.5);
    merge_refuses(tmp.path(), "plan-mfu", &[&mfu], "mfu");
    let mut top = part.clone();
    top["data"]["spec"]["top"] = json!(0);
    merge_refuses(tmp.path(), "plan-top", &[&top], "--top");
    let mut zero = part;
    zero["data"]["part"]["pool"][0]["zero"] = json!(200);
    merge_refuses(tmp.path(), "plan-zero", &[&zero], "pool[0]");
}
