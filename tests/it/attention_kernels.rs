//! Attention implementations (`--attention-kernel`, `config::attention`): every implementation
//! against its published figures (`tests/data/published-attention.json`, sources cited there),
//! the flag's contract with `--flash` / `--no-flash` on every workload command, `kernels`
//! pricing each implementation, and one device-memory convention for every profile.

use assert_cmd::Command;
use metp_sim::config::{list_names, load_hardware, AttentionKernel, DataKind, Hardware};
use metp_sim::cost::CostModel;
use metp_sim::schedule::{unfused_attention, Attention, AttnPass, KernelShape};
use serde_json::Value;

fn cmd() -> Command {
    let mut c = Command::cargo_bin("metp-sim").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = cmd().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn json_of(args: &[&str]) -> Value {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

/// A usage error: exit 2, one line, containing every needle.
fn usage_error(args: &[&str], needles: &[&str]) {
    let (code, _, err) = run(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: '{n}' not in {err}");
    }
}

/// The published sets.
fn published() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/published-attention.json"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["sets"].as_array().unwrap().clone()
}

/// The call a row measured: its own batch, heads, key/value heads and head dimension where it
/// gives them, else the FlashAttention-3 benchmark's (hidden 2048 = 16 heads of 128, batch ×
/// sequence = 16k tokens).
fn call(row: &Value) -> (Attention, f64) {
    let seq = row["seq"].as_u64().unwrap();
    let causal = row["causal"].as_bool().unwrap();
    let pass = match row["pass"].as_str().unwrap() {
        "fwd" => AttnPass::Fwd,
        _ => AttnPass::Bwd,
    };
    let head_dim = row["head_dim"].as_u64().unwrap_or(128);
    let heads = row["heads"].as_u64().unwrap_or(2048 / head_dim);
    let a = Attention {
        batch: row["batch"].as_u64().unwrap_or(16384 / seq),
        heads,
        kv_heads: row["kv_heads"].as_u64().unwrap_or(heads),
        q_tokens: seq,
        kv_tokens: seq,
        head_dim,
        causal,
        pass,
    };
    // The sources' FLOP count: 4·b·s²·h·d, halved when causal, × 2.5 for the backward.
    let fwd = 4.0 * a.batch as f64 * (seq * seq) as f64 * (heads * head_dim) as f64
        / if causal { 2.0 } else { 1.0 };
    let flops = if pass == AttnPass::Fwd {
        fwd
    } else {
        2.5 * fwd
    };
    (a, flops)
}

/// Device seconds of `a` with implementation `k` on `hw`.
fn device_s(hw: &Hardware, k: AttentionKernel, a: &Attention) -> f64 {
    if k == AttentionKernel::Unfused {
        let cost = CostModel::new(hw);
        return unfused_attention(a).iter().map(|s| cost.device_s(s)).sum();
    }
    let mut h = hw.clone();
    h.kernels.select_attention(k, &hw.name).unwrap();
    CostModel::new(&h).device_s(&KernelShape::Attention(*a))
}

/// The largest |predicted / published − 1| of a set on `hw`, printed row by row.
fn worst_error(hw: &Hardware, set: &Value) -> f64 {
    let k = AttentionKernel::parse(set["implementation"].as_str().unwrap()).unwrap();
    let mut worst = 0.0f64;
    for row in set["rows"].as_array().unwrap() {
        let (a, flops) = call(row);
        let predicted = flops / device_s(hw, k, &a) / 1e12;
        let published = row["tflops"].as_f64().unwrap();
        let e = predicted / published - 1.0;
        eprintln!(
            "{} {k} {} causal={} s={}: published {published:.0}, predicted {predicted:.0} TFLOP/s \
             ({:+.1}%)",
            hw.name,
            row["pass"],
            row["causal"],
            row["seq"],
            100.0 * e
        );
        worst = worst.max(e.abs());
    }
    worst
}

/// Every implementation's predicted rate at every shape its source measured is within the
/// set's stated tolerance of the published figure (FlashAttention-3 and cuDNN on the H100
/// within 10%, FlashAttention-2 within 10% on the H100 and 5% on the A100, FlashAttention-4 on
/// the B200 at its one published point within 5%, cuDNN on the B200 at cudnn-frontend's 18
/// measured shapes within 25% (one backward the set's source names; the others within 12%);
/// unfused within 100%, a known disagreement the set's source explains). The H200 carries the H100's fitted implementations
/// unchanged.
#[test]
fn every_implementation_meets_its_published_figures() {
    for set in published() {
        let profile = set["profile"].as_str().unwrap();
        let tolerance = set["tolerance"].as_f64().unwrap();
        let source = set["source"].as_str().unwrap();
        assert!(source.len() > 40, "{profile}: a set without its citation");
        let hw = load_hardware(profile).unwrap();
        let worst = worst_error(&hw, &set);
        assert!(
            worst <= tolerance,
            "{profile} {}: largest error {:.1}% above the stated {:.0}%",
            set["implementation"],
            100.0 * worst,
            100.0 * tolerance
        );
        if profile == "dgx-h100" && set["implementation"] != "unfused" {
            // The H200's are the H100's figures (its memory-bound terms then run at its own
            // HBM, so the backward's short sequences run up to ~16% faster there).
            let k = AttentionKernel::parse(set["implementation"].as_str().unwrap()).unwrap();
            let h200 = load_hardware("hgx-h200").unwrap();
            let (a, b) = (
                &hw.kernels.attention.as_ref().unwrap().implementations[&k],
                &h200.kernels.attention.as_ref().unwrap().implementations[&k],
            );
            for (x, y) in [(&a.fwd, &b.fwd), (&a.bwd, &b.bwd)] {
                let values =
                    |m: &metp_sim::config::AttentionModel| m.figures().map(|(_, f)| f.value);
                assert_eq!(values(x), values(y), "hgx-h200 {k}");
            }
        }
    }
}

/// The check can lose: FlashAttention-3 on an H100 whose attention rates are 20% lower leaves
/// its 10% tolerance.
#[test]
fn the_published_check_fails_a_wrong_model() {
    let set = published()
        .into_iter()
        .find(|s| s["implementation"] == "fa3")
        .unwrap();
    let mut hw = load_hardware("dgx-h100").unwrap();
    let fa3 = hw
        .kernels
        .attention
        .as_mut()
        .unwrap()
        .implementations
        .get_mut(&AttentionKernel::Fa3)
        .unwrap();
    fa3.fwd.mma_fraction.value *= 0.8;
    fa3.bwd.mma_fraction.value *= 0.8;
    assert!(worst_error(&hw, &set) > set["tolerance"].as_f64().unwrap());
}

/// `--attention-kernel` on the workload commands: the chosen implementation prices the step
/// (FlashAttention-3 is faster than the default FlashAttention-2-level SDPA on an H100) and is
/// named in JSON and in the table header; `--no-flash` is `--attention-kernel unfused` and
/// `--flash` the profile's default, byte for byte.
#[test]
fn the_flag_chooses_the_implementation_and_the_reports_name_it() {
    let base = [
        "simulate",
        "--hw",
        "dgx-h100",
        "--model",
        "llama2-7b",
        "--method",
        "tp-sp",
        "--p",
        "8",
        "--seq",
        "16k",
        "--causal",
        "--format",
        "json",
    ];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        json_of(&a)
    };
    let default = with(&[]);
    assert_eq!(default["attention_kernel"], "sdpa-fa2");
    let fa3 = with(&["--attention-kernel", "fa3"]);
    assert_eq!(fa3["attention_kernel"], "fa3");
    let t = |v: &Value| v["step_time_s"].as_f64().unwrap();
    assert!(t(&fa3) < t(&default), "{} vs {}", t(&fa3), t(&default));
    assert_eq!(with(&["--flash"]), default);
    assert_eq!(with(&["--attention-kernel", "sdpa-fa2"]), default);
    let unfused = with(&["--attention-kernel", "unfused"]);
    assert_eq!(unfused["attention_kernel"], "unfused");
    assert_eq!(with(&["--no-flash"]), unfused);
    assert!(t(&unfused) > t(&default));
    // Memory: the same tensors for every fused implementation, the scores when unfused.
    let mem = |k: &str| {
        json_of(&[
            "memory",
            "--hw",
            "dgx-h100",
            "--method",
            "tp-sp",
            "--p",
            "8",
            "--seq",
            "16k",
            "--attention-kernel",
            k,
            "--format",
            "json",
        ])
    };
    let (m_fa3, m_fa2) = (mem("fa3"), mem("sdpa-fa2"));
    assert_eq!(m_fa3["attention_kernel"], "fa3");
    assert_eq!(m_fa3["peak_bytes"], m_fa2["peak_bytes"]);
    assert!(mem("unfused")["peak_bytes"].as_u64() > m_fa2["peak_bytes"].as_u64());
    // Table headers of every workload command name it (and a placeholder profile says so).
    let header = |args: &[&str], needles: &[&str]| {
        let (code, out, err) = run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        for n in needles {
            assert!(out.contains(n), "{args:?}: '{n}' not in\n{out}");
        }
    };
    header(
        &[
            "memory", "--hw", "mi300x-8", "--method", "tp", "--p", "8", "--seq", "8k",
        ],
        &["attention: ck", "placeholder kernel figures: "],
    );
    header(
        &[
            "maxseq",
            "--hw",
            "dgx-h100",
            "--method",
            "tp-sp",
            "--p",
            "8",
            "--attention-kernel",
            "cudnn",
        ],
        &["attention: cudnn"],
    );
    header(
        &[
            "overlap",
            "--hw",
            "dgx-h100",
            "--p",
            "8",
            "--local-seq",
            "1k",
            "--attention-kernel",
            "fa3",
        ],
        &["attention: fa3"],
    );
    header(
        &[
            "simulate",
            "--hw",
            "b200-8",
            "--method",
            "tp-sp",
            "--p",
            "8",
            "--seq",
            "8k",
            "--attention-kernel",
            "fa4",
        ],
        &["attention: fa4", "placeholder kernel figures: "],
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    header(
        &[
            "sweep",
            "--hw",
            "dgx-h100,mi300x-8",
            "--methods",
            "tp-sp",
            "--p",
            "8",
            "--seq",
            "8k",
            "--engine",
            "analytic",
            "--svg-only",
            "--out",
            out,
        ],
        &["attention: sdpa-fa2", "attention: ck"],
    );
    let sweep: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sweep.json")).unwrap())
            .unwrap();
    assert_eq!(sweep["profiles"][0]["attention_kernel"], "sdpa-fa2");
    assert_eq!(sweep["profiles"][1]["attention_kernel"], "ck");
    assert!(sweep["profiles"][1]["kernel_placeholder"].is_string());
    header(
        &[
            "plan",
            "--hw",
            "dgx-h100",
            "--gpus",
            "8",
            "--seq",
            "8k",
            "--methods",
            "tp-sp",
            "--no-outer-axes",
            "--top",
            "1",
            "--attention-kernel",
            "fa3",
        ],
        &["attention: fa3"],
    );
}

/// Wrong names are usage errors in one line listing what there is: an unknown name (the
/// names there are), a name the profile lacks (what it has, default first), a fused name with
/// `--no-flash` or `unfused` with `--flash`; `plan` ranks fused candidates only.
#[test]
fn wrong_names_are_one_line_usage_errors() {
    let sim = |extra: &[&str]| {
        let mut a = vec![
            "simulate", "--hw", "mi300x-8", "--method", "tp", "--p", "8", "--seq", "8k",
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    for (extra, needles) in [
        (
            &["--attention-kernel", "fa9"][..],
            &[
                "--attention-kernel",
                "'fa9'",
                "sdpa-fa2",
                "fa3",
                "cudnn",
                "unfused",
            ][..],
        ),
        (
            &["--attention-kernel", "fa3"],
            &[
                "'fa3' is not in mi300x-8's kernel model",
                "ck (default), unfused",
            ],
        ),
        (&["--attention-kernel", "ck", "--no-flash"], &["--no-flash"]),
        (&["--attention-kernel", "unfused", "--flash"], &["--flash"]),
    ] {
        let args = sim(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        usage_error(&args, needles);
    }
    usage_error(
        &[
            "sweep",
            "--hw",
            "dgx-h100,mi300x-8",
            "--methods",
            "tp",
            "--p",
            "8",
            "--seq",
            "8k",
            "--attention-kernel",
            "fa3",
        ],
        &["'fa3' is not in mi300x-8's kernel model"],
    );
    usage_error(
        &[
            "plan",
            "--hw",
            "dgx-h100",
            "--gpus",
            "8",
            "--seq",
            "8k",
            "--attention-kernel",
            "unfused",
        ],
        &["--include-no-flash"],
    );
    usage_error(
        &[
            "kernels",
            "--hw",
            "dgx-a100-80gb",
            "--input",
            "hardware-profiles/measurements/h100-fa3-published.json",
            "--attention-kernel",
            "fa3",
        ],
        &[
            "'fa3' is not in dgx-a100-80gb's kernel model",
            "fa2 (default)",
        ],
    );
}

/// `kernels` prices each implementation: an attention entry may name one, `--attention-kernel`
/// sets it for those that do not, `unfused` is priced as its GEMMs and softmax passes; a name
/// that is unknown or that the profile lacks is refused in one line naming the entry.
#[test]
fn kernels_price_each_implementation() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("k.json");
    let entry = |imp: Option<&str>| {
        let mut v = serde_json::json!({"op": "attention", "pass": "fwd", "batch": 2, "heads": 16,
            "q_tokens": 8192, "kv_tokens": 8192, "head_dim": 128, "causal": false});
        if let Some(i) = imp {
            v["implementation"] = i.into();
        }
        v
    };
    let list = serde_json::json!([
        entry(None),
        entry(Some("fa3")),
        entry(Some("cudnn")),
        entry(Some("unfused")),
        entry(Some("sdpa-fa2"))
    ]);
    std::fs::write(&input, list.to_string()).unwrap();
    let path = input.to_str().unwrap();
    let v = json_of(&[
        "kernels", "--hw", "dgx-h100", "--input", path, "--format", "json",
    ]);
    let d: Vec<f64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["device_s"].as_f64().unwrap())
        .collect();
    assert_eq!(d[0], d[4], "no implementation: the default");
    assert!(d[1] < d[0] && d[2] < d[0] && d[3] > d[0], "{d:?}");
    assert_eq!(v[1]["implementation"], "fa3");
    let w = json_of(&[
        "kernels",
        "--hw",
        "dgx-h100",
        "--input",
        path,
        "--attention-kernel",
        "fa3",
        "--format",
        "json",
    ]);
    assert_eq!(w[0]["device_s"], v[1]["device_s"]);
    assert_eq!(w[2]["device_s"], v[2]["device_s"]);
    for (bad, needle) in [
        (entry(Some("fa9")), "[0].implementation"),
        (entry(Some("ck")), "'ck' is not in dgx-h100's kernel model"),
        (
            serde_json::json!({"op": "copy", "bytes": 8, "implementation": "fa3"}),
            "only attention entries",
        ),
    ] {
        std::fs::write(&input, serde_json::json!([bad]).to_string()).unwrap();
        let (code, _, err) = run(&["kernels", "--hw", "dgx-h100", "--input", path]);
        assert_eq!(code, 1, "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

/// `list` states each profile's implementations with the default first, whether it prices FP8
/// linear layers, and the placeholder note of the profiles whose kernel model is not (all)
/// measured on their GPU.
#[test]
fn list_states_defaults_and_placeholders() {
    let (code, out, _) = run(&["list"]);
    assert_eq!(code, 0);
    for (profile, line) in [
        // Whole lines: FP8 marked where the profile has an FP8 peak, and only there.
        (
            "dgx-h100",
            "dgx-h100: sdpa-fa2 (default), fa2, fa3, cudnn, unfused; FP8\n",
        ),
        (
            "hgx-h200",
            "hgx-h200: sdpa-fa2 (default), fa2, fa3, cudnn, unfused; FP8\n",
        ),
        ("dgx-a100-80gb", "dgx-a100-80gb: fa2 (default), unfused\n"),
        ("b200-8", "b200-8: cudnn (default), fa4, unfused; FP8\n"),
        ("mi300x-8", "mi300x-8: ck (default), unfused\n"),
    ] {
        assert!(out.contains(line), "{profile}: {out}");
    }
    let placeholders = out.matches("placeholder: ").count();
    assert_eq!(
        placeholders, 5,
        "mi300x, mi325x, b200, gb200 and its segments:\n{out}"
    );
}

/// One device-memory convention: every profile's `gpu.memory_bytes` is the total the driver
/// reports (nvidia-smi, or rocm-smi for AMD), a whole number of MiB, with the vendor's figure
/// in its source; none is a marketing "GB" read as 10^9 bytes or as GiB.
#[test]
fn device_memory_is_what_the_driver_reports() {
    for name in list_names(DataKind::Hardware) {
        let hw = load_hardware(&name).unwrap();
        let m = &hw.gpu.memory_bytes;
        let (v, src) = (m.value, &m.source);
        assert!(
            src.contains("nvidia-smi") || src.contains("rocm-smi"),
            "{name}: {src}"
        );
        assert_eq!(v % (1 << 20) as f64, 0.0, "{name}: {v} is not whole MiB");
        let gb = v / 1e9;
        let gib = v / (1u64 << 30) as f64;
        for marketing in [40.0, 80.0, 141.0, 180.0, 186.0, 192.0, 256.0] {
            assert!(gb != marketing, "{name}: {gb} GB is the marketing figure");
            if !name.starts_with("dgx-a100") && !name.starts_with("a100") {
                assert!(
                    gib != marketing,
                    "{name}: {gib} GiB is the marketing figure"
                );
            }
        }
    }
    // The driver totals, MiB: H100 81559, H200 143771, B200 183359, GB200 189471; MI300X
    // 206141652992 bytes.
    let mib = |n: &str| load_hardware(n).unwrap().gpu.memory_bytes.value / (1 << 20) as f64;
    assert_eq!(mib("dgx-h100"), 81559.0);
    assert_eq!(mib("hgx-h200"), 143771.0);
    assert_eq!(mib("b200-8"), 183359.0);
    assert_eq!(mib("gb200-nvl72"), 189471.0);
    assert_eq!(
        load_hardware("mi300x-8").unwrap().gpu.memory_bytes.value,
        206141652992.0
    );
}
