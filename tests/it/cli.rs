//! The command line as a user meets it: JSON fields of DESIGN §8, and one clear line for every
//! kind of bad input, with exit status 1 (2 for usage errors) and never a panic.

use assert_cmd::Command;
use predicates::prelude::*;

fn cmd() -> Command {
    let mut c = Command::cargo_bin("metp-sim").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

/// Runs, expects failure with `code`, and returns stderr, checking it is one line and no panic.
pub(crate) fn fails(args: &[&str], code: i32) -> String {
    let out = cmd().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    if code == 1 {
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {err}"
        );
    }
    err
}

#[test]
fn memory_json_has_the_design_fields() {
    let out = cmd()
        .args([
            "memory",
            "--model",
            "llama2-7b",
            "--method",
            "metp",
            "--p",
            "8",
            "--seq",
            "64k",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for f in [
        "peak_bytes",
        "static_bytes",
        "activation_bytes_per_layer",
        "transient_peak_bytes",
        "capacity_bytes",
        "fits",
        "tensors",
    ] {
        assert!(v.get(f).is_some(), "missing {f}");
    }
    let t = &v["tensors"][0];
    for f in ["name", "block", "kind", "bytes", "replicated"] {
        assert!(t.get(f).is_some(), "tensor missing {f}");
    }
}

#[test]
fn memory_table_groups_by_block_and_marks_replicated() {
    cmd()
        .args(["memory", "--method", "tp", "--p", "8", "--seq", "8k"])
        .assert()
        .success()
        .stdout(predicate::str::contains("norm.ln1_input *"))
        .stdout(predicate::str::contains("replicated"))
        .stdout(predicate::str::contains("peak per device"));
}

#[test]
fn maxseq_json_lists_every_method_and_degree_with_reasons() {
    let v = super::common::cli_json(&[
        "maxseq",
        "--model",
        "llama2-70b",
        "--p",
        "1,2,4,8,16",
        "--zero",
        "3",
        "--nodes",
        "2",
        "--format",
        "json",
    ]);
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 6 * 5);
    for r in rows {
        assert!(r.get("method").is_some() && r.get("p").is_some() && r.get("max_seq").is_some());
    }
    // LLaMA-2 70B has 8 KV heads: Ulysses at p = 16 is valid (KV replicated), but its 64 query
    // heads divide 16; nothing is silently dropped.
    assert!(rows.iter().any(|r| r["method"] == "metp" && r["p"] == 16));
}

#[test]
fn same_command_gives_identical_bytes() {
    let args = ["maxseq", "--format", "json"];
    let a = cmd().args(args).output().unwrap().stdout;
    let b = cmd().args(args).output().unwrap().stdout;
    assert_eq!(a, b);
}

#[test]
fn unknown_names_list_the_available_ones() {
    let e = fails(&["memory", "--model", "gpt5"], 1);
    assert!(
        e.contains("unknown model 'gpt5'") && e.contains("llama2-7b"),
        "{e}"
    );
    let e = fails(&["memory", "--hw", "tpu-v9"], 1);
    assert!(
        e.contains("unknown hardware profile") && e.contains("dgx-h100"),
        "{e}"
    );
}

#[test]
fn bad_files_name_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/models/llama2-7b.json"
    ))
    .unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let malformed = write("malformed.json", "{ \"name\": ");
    let e = fails(&["memory", "--model", &malformed], 1);
    assert!(e.contains("malformed.json") && e.contains("line"), "{e}");

    let unknown = write(
        "unknown.json",
        &good.replacen("\"layers\"", "\"layerz\": 1, \"layers\"", 1),
    );
    let e = fails(&["memory", "--model", &unknown], 1);
    assert!(e.contains("unknown.json") && e.contains("layerz"), "{e}");

    let zero = write(
        "zero.json",
        &good.replacen("\"layers\": 32", "\"layers\": 0", 1),
    );
    let e = fails(&["memory", "--model", &zero], 1);
    assert!(e.contains("zero.json") && e.contains("'layers'"), "{e}");

    let negative = write(
        "negative.json",
        &good.replacen("\"hidden\": 4096", "\"hidden\": -4096", 1),
    );
    let e = fails(&["memory", "--model", &negative], 1);
    assert!(e.contains("negative.json") && e.contains("hidden"), "{e}");

    let hw = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/hardware-profiles/dgx-a100-80gb.json"
    ))
    .unwrap();
    let bad_hw = write(
        "bad-hw.json",
        &hw.replacen("\"value\": 85899345920", "\"value\": -1", 1),
    );
    let e = fails(&["memory", "--hw", &bad_hw], 1);
    assert!(
        e.contains("bad-hw.json") && e.contains("gpu.memory_bytes"),
        "{e}"
    );

    let missing = dir.path().join("nope.json");
    let e = fails(&["memory", "--model", missing.to_str().unwrap()], 1);
    assert!(e.contains("nope.json"), "{e}");
}

#[test]
fn impossible_configurations_say_why() {
    // LLaMA-2 7B has 32 heads: p = 3 does not divide them.
    let e = fails(&["memory", "--method", "tp", "--p", "3"], 1);
    assert!(e.contains("heads (32) is not divisible by p = 3"), "{e}");
    let e = fails(
        &["memory", "--method", "metp", "--p", "8", "--seq", "1001"],
        1,
    );
    assert!(e.contains("not a multiple of 8"), "{e}");
    let e = fails(&["memory", "--method", "ring", "--p", "16"], 1);
    assert!(e.contains("describes 8"), "{e}");
    let e = fails(&["memory", "--seq", "2048g"], 1);
    assert!(e.contains("2^40"), "{e}");
}

#[test]
fn usage_errors_exit_2() {
    fails(&["memory", "--seq", "abc"], 2);
    fails(&["memory", "--seq", "99999999999999999999"], 2);
    fails(&["memory", "--p", "0"], 2);
    fails(&["memory", "--p", "2,4"], 2);
    fails(&["memory", "--method", "zigzag"], 2);
    fails(&["memory", "--recompute", "sometimes"], 2);
    fails(&["memory", "--zero", "4"], 2);
    fails(&["maxseq", "--methods", "tp,nope"], 2);
    fails(&["frobnicate"], 2);
}

/// `--grad-dtype` and `--optimizer-state` on a workload command: the JSON says what is in
/// force (`grad_dtype`, `optimizer_state`, `zero`), the gradients' tensor is named by its
/// dtype, the static bytes follow 18 → 16 bytes per parameter, and a placement that
/// contradicts `--zero` is a usage error.
#[test]
fn training_state_flags_reach_memory_and_simulate() {
    let json = |extra: &[&str], command: &str| -> serde_json::Value {
        let mut args = vec![
            command, "--method", "tp", "--p", "4", "--dp", "2", "--seq", "4k", "--format", "json",
        ];
        args.extend_from_slice(extra);
        let out = cmd().args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let fp32 = json(&[], "memory");
    assert_eq!(
        (&fp32["grad_dtype"], &fp32["optimizer_state"], &fp32["zero"]),
        (&"fp32".into(), &"replicated".into(), &0.into())
    );
    let bf16 = json(
        &["--grad-dtype", "bf16", "--optimizer-state", "sharded"],
        "memory",
    );
    assert_eq!(
        (&bf16["grad_dtype"], &bf16["optimizer_state"], &bf16["zero"]),
        (&"bf16".into(), &"sharded".into(), &1.into())
    );
    // A tensor's bytes by name.
    let grads = |v: &serde_json::Value, name: &str| {
        v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["bytes"].as_u64().unwrap())
    };
    let g32 = grads(&fp32, "optimizer.main_grads_fp32").unwrap();
    let g16 = grads(&bf16, "optimizer.main_grads_bf16").unwrap();
    assert_eq!(g32, 2 * g16);
    let sim = json(
        &["--grad-dtype", "bf16", "--optimizer-state", "sharded"],
        "simulate",
    );
    assert_eq!(
        (&sim["grad_dtype"], &sim["optimizer_state"]),
        (&"bf16".into(), &"sharded".into())
    );
    let e = fails(
        &[
            "memory",
            "--method",
            "tp",
            "--p",
            "4",
            "--seq",
            "4k",
            "--zero",
            "2",
            "--optimizer-state",
            "replicated",
        ],
        2,
    );
    assert!(e.contains("contradicts ZeRO stage 2"), "{e}");
    // The optimizer state's dtype: fp32 master weights and moments (12 bytes per parameter) or
    // bf16 moments without a master copy (4), named by its dtype, in JSON and in the text.
    let o16 = json(&["--optimizer-dtype", "bf16"], "memory");
    assert_eq!(o16["optimizer_dtype"], "bf16");
    assert_eq!(fp32["optimizer_dtype"], "fp32");
    let s32 = grads(&fp32, "optimizer.adam_state_fp32").unwrap();
    let s16 = grads(&o16, "optimizer.adam_state_bf16").unwrap();
    assert_eq!(s32, 3 * s16);
    assert!(grads(&o16, "optimizer.adam_state_fp32").is_none());
    // fp32 moments with 16-bit master remainders: 10 bytes per parameter.
    let rem = json(&["--optimizer-dtype", "fp32-remainders"], "memory");
    assert_eq!(rem["optimizer_dtype"], "fp32-remainders");
    let s10 = grads(&rem, "optimizer.adam_state_fp32_remainders").unwrap();
    assert_eq!(6 * s10, 5 * s32);
    assert_eq!(
        o16["peak_bytes"].as_u64().unwrap() + (s32 - s16),
        fp32["peak_bytes"].as_u64().unwrap()
    );
    let text = cmd()
        .args([
            "memory",
            "--method",
            "tp",
            "--p",
            "4",
            "--seq",
            "4k",
            "--optimizer-dtype",
            "bf16",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("training state: fp32 gradients, bf16 optimizer state replicated (ZeRO 0)"),
        "{text}"
    );
    let e = fails(&["memory", "--optimizer-dtype", "fp8"], 2);
    assert!(e.contains("--optimizer-dtype"), "{e}");
}

/// `--grad-accumulation separate` reaches simulate: its JSON says it, its header gives the
/// pass's bytes per parameter (10 with fp32 gradients, 6 with bf16), the step is longer and the
/// memory the same; the default says nothing; a bad value is a usage error naming the flag.
#[test]
fn grad_accumulation_flag_reaches_simulate() {
    let run = |extra: &[&str], format: &str| -> String {
        let mut args = vec![
            "simulate",
            "--method",
            "tp",
            "--p",
            "4",
            "--seq",
            "4k",
            "--global-batch",
            "4",
            "--format",
            format,
        ];
        args.extend_from_slice(extra);
        let out = cmd().args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let json = |extra: &[&str]| -> serde_json::Value {
        serde_json::from_str(&run(extra, "json")).unwrap()
    };
    let fused = json(&[]);
    let separate = json(&["--grad-accumulation", "separate"]);
    assert_eq!(
        (&fused["grad_accumulation"], &separate["grad_accumulation"]),
        (&"fused".into(), &"separate".into())
    );
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    assert!(step(&separate) > step(&fused), "{separate} vs {fused}");
    assert_eq!(separate["peak_bytes"], fused["peak_bytes"]);
    let text = run(&["--grad-accumulation", "separate"], "table");
    assert!(
        text.contains(
            "gradients accumulated in a separate pass: 10 bytes per parameter and micro-batch"
        ),
        "{text}"
    );
    let bf16 = run(
        &["--grad-accumulation", "separate", "--grad-dtype", "bf16"],
        "table",
    );
    assert!(bf16.contains("a separate pass: 6 bytes"), "{bf16}");
    assert!(!run(&[], "table").contains("separate pass"));
    let e = fails(&["simulate", "--grad-accumulation", "sometimes"], 2);
    assert!(e.contains("--grad-accumulation"), "{e}");
}

/// `--tp-comm-overlap` reaches simulate (JSON `tp_comm_overlap`, the header says it, the
/// exposed communication falls) and another method than tp-sp refuses it in one line.
#[test]
fn tp_comm_overlap_flag_reaches_simulate() {
    let run = |extra: &[&str]| -> std::process::Output {
        let mut args = vec![
            "simulate",
            "--method",
            "tp-sp",
            "--p",
            "8",
            "--seq",
            "8k",
            "--model",
            "llama2-13b",
        ];
        args.extend_from_slice(extra);
        cmd().args(&args).output().unwrap()
    };
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut a = extra.to_vec();
        a.extend(["--format", "json"]);
        let out = run(&a);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let off = json(&[]);
    let on = json(&["--tp-comm-overlap"]);
    assert_eq!(
        (&off["tp_comm_overlap"], &on["tp_comm_overlap"]),
        (&false.into(), &true.into())
    );
    let exposed = |v: &serde_json::Value| v["exposed_communication_s"].as_f64().unwrap();
    assert!(exposed(&on) < 0.5 * exposed(&off), "{on} vs {off}");
    let text = String::from_utf8(run(&["--tp-comm-overlap"]).stdout).unwrap();
    assert!(
        text.contains("p = 8 (TP communication overlapped)"),
        "{text}"
    );
    // Refused in one line naming the flag and what it needs: another method, one
    // tensor-parallel rank (nothing to overlap), ranks on two nodes (userbuffers stay inside
    // an NVLink domain), a plan whose methods have no tp-sp (it would change nothing while its
    // header said it did).
    for (args, code, needs) in [
        ("simulate --method tp --p 8 --seq 8k", 1, "tp-sp"),
        ("simulate --method tp-sp --p 1 --seq 4k", 1, "--p 2"),
        (
            "simulate --method tp-sp --p 16 --nodes 2 --seq 8k",
            1,
            "inside one NVLink domain",
        ),
        (
            "plan --gpus 8 --seq 8k --methods ulysses,ring",
            2,
            "no tp-sp",
        ),
    ] {
        let mut a: Vec<&str> = args.split(' ').collect();
        a.push("--tp-comm-overlap");
        let e = fails(&a, code);
        assert!(
            e.trim_end().lines().count() == 1
                && e.contains("--tp-comm-overlap")
                && e.contains(needs),
            "{args}: {e}"
        );
    }
}

/// The software's schedule flags (`--pp-round`, `--pp-p2p`, `--grad-sync`) reach the workload:
/// rounds of more micro-batches hold more activations, and what no software can run is one line
/// naming the flag.
/// `--cp-comm all-gather` (LLaMA 3's context parallelism) reaches memory's JSON and holds
/// every K/V block; without context parallelism it is refused.
#[test]
fn cp_comm_reaches_memory_and_needs_context_parallelism() {
    let peak = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "memory", "--method", "tp-sp", "--p", "2", "--cp", "4", "--seq", "16k", "--causal",
            "--format", "json",
        ];
        args.extend_from_slice(extra);
        let out = cmd().args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let ring = peak(&[]);
    let gathered = peak(&["--cp-comm", "all-gather"]);
    assert_eq!(ring["cp_comm"], "ring");
    assert_eq!(gathered["cp_comm"], "all-gather");
    assert!(gathered["peak_bytes"].as_u64() > ring["peak_bytes"].as_u64());
    let e = fails(
        &[
            "memory",
            "--method",
            "tp-sp",
            "--p",
            "2",
            "--cp-comm",
            "all-gather",
        ],
        1,
    );
    assert!(e.contains("--cp-comm all-gather"), "{e}");
}

#[test]
fn runtime_flags_reach_memory_and_are_checked() {
    let base = [
        "memory",
        "--method",
        "tp-sp",
        "--p",
        "2",
        "--pp",
        "4",
        "--pp-interleave",
        "2",
        "--global-batch",
        "16",
        "--seq",
        "4k",
        "--format",
        "json",
    ];
    let peak = |extra: &[&str]| -> u64 {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let out = cmd().args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["peak_bytes"].as_u64().unwrap()
    };
    let megatron = peak(&[]);
    let mut args = base.to_vec();
    args.extend_from_slice(&["--pp-round", "8", "--pp-p2p", "blocking"]);
    let out = cmd().args(&args).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&v["pp_round"], &v["pp_p2p"], &v["grad_sync"]),
        (&8.into(), &"blocking".into(), &"overlapped".into())
    );
    assert_eq!(v["cp_comm"], "ring");
    assert_eq!(peak(&["--pp-round", "4"]), megatron);
    assert!(peak(&["--pp-round", "8", "--pp-p2p", "blocking"]) > megatron);
    let mut args = base.to_vec();
    args.extend_from_slice(&["--pp-round", "2"]);
    assert!(fails(&args, 1).contains("--pp-round 2"));
    let e = fails(
        &[
            "memory",
            "--method",
            "tp",
            "--p",
            "4",
            "--dp",
            "2",
            "--seq",
            "4k",
            "--zero",
            "2",
            "--grad-sync",
            "after-backward",
        ],
        1,
    );
    assert!(e.contains("after-backward"), "{e}");
    fails(&["memory", "--pp-p2p", "eager"], 2);
}

/// `validate --runs DIR --check` writes the report and prints the summary either way, and exits
/// 1 with one line naming each run out of its tolerance; within tolerance, or without
/// `--check`, it exits 0.
#[test]
fn validate_runs_check_fails_when_a_run_leaves_its_tolerance() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let run: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("runs/korthikanti-2022-22b-full.json")).unwrap(),
    )
    .unwrap();
    for (factor, code) in [(1.0, 0), (1.5, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let mut r = run.clone();
        r["measured"]["value"] = (r["measured"]["value"].as_f64().unwrap() * factor).into();
        std::fs::create_dir(dir.path().join("in")).unwrap();
        std::fs::write(
            dir.path().join("in/moved.json"),
            serde_json::to_vec(&r).unwrap(),
        )
        .unwrap();
        let args = |check: bool| {
            let mut a = vec!["validate", "--runs", "in", "--out", "out", "--analytic"];
            a.extend(["--svg-only"]);
            if check {
                a.push("--check");
            }
            cmd().current_dir(dir.path()).args(a).output().unwrap()
        };
        let out = args(true);
        let (stdout, stderr) = (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        );
        assert_eq!(out.status.code(), Some(code), "{stdout}{stderr}");
        assert!(stdout.contains("moved: measured"), "{stdout}");
        assert!(dir.path().join("out/runs.md").is_file());
        if code == 1 {
            assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
            assert!(
                stderr.contains("1 of 1 runs out of their tolerance: moved (-"),
                "{stderr}"
            );
        } else {
            assert!(stderr.is_empty(), "{stderr}");
        }
        assert_eq!(args(false).status.code(), Some(0));
    }
}
