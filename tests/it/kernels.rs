//! The kernel model against the measured H200 kernels (`metp-sim kernels --compare`), its fit
//! from that file alone (`metp-sim calibrate --fit`), what it predicts for shapes the file does
//! not contain (derived from the model's structure), bad input, and the ring's causal blocks
//! as the lowering issues them.

use std::path::PathBuf;

use assert_cmd::Command;
use metp_sim::config::{load_hardware, Hardware};
use metp_sim::cost::CostModel;
use metp_sim::schedule::{Attention, AttnPass, Gemm, KernelShape};

const H200_FILE: &str = "hardware-profiles/measurements/h200-pytorch-2026-11-30.json";
/// The bundled hgx-h200's `kernels.gemm.step_clock_fraction` (its second measurement session's GEMM
/// clock against the first's).
const STEP_CLOCK: f64 = 0.8744920829604772;

fn cmd() -> Command {
    let mut c = Command::cargo_bin("metp-sim").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let out = cmd().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Issue 8's check: `metp-sim kernels --hw hgx-h200 --input ../shared/gpu-data/h200-2026-11-30.json
/// --compare` — median |error| ≤ 5% and none over 15% for every kind, GEMMs included. The
/// bundled profile is fitted to this file and the GPU check's PyTorch run together; the two
/// sessions timed the very same square GEMMs 15–21% apart
/// (`the_two_h200_sessions_disagree_on_the_same_square_gemms`), so the fit gives the later run
/// a clock factor of its own and the profile keeps this file's clock (`kernel_fit`).
#[test]
fn h200_profile_prices_the_measured_kernels_within_the_goals() {
    let v = json_of(&[
        "kernels",
        "--hw",
        "hgx-h200",
        "--input",
        H200_FILE,
        "--compare",
        "--format",
        "json",
    ]);
    let kinds = v["by_kind"].as_array().unwrap();
    let names: Vec<&str> = kinds.iter().map(|k| k["kind"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "gemm",
            "attention-fwd",
            "attention-bwd",
            "copy",
            "elementwise"
        ]
    );
    for k in kinds {
        let (med, max) = (
            k["median_abs_error"].as_f64().unwrap(),
            k["max_abs_error"].as_f64().unwrap(),
        );
        eprintln!(
            "{}: median {:.1}%, max {:.1}%",
            k["kind"],
            100.0 * med,
            100.0 * max
        );
        assert!(med <= 0.05 && max <= 0.15, "{k}");
    }
    // Every entry is priced, in file order, with its measured time and error.
    let ks = v["kernels"].as_array().unwrap();
    assert_eq!(ks.len(), 4 + 2 * 12 + 2 * 6);
    assert_eq!(ks[0]["op"], "gemm");
    assert_eq!(ks[0]["m"], 1024);
    for k in ks {
        let (p, m, e) = (
            k["predicted_s"].as_f64().unwrap(),
            k["measured_s"].as_f64().unwrap(),
            k["error"].as_f64().unwrap(),
        );
        assert!((p / m - 1.0 - e).abs() < 1e-12);
        // In a step a kernel costs no more than timed alone, at the same clock: a GEMM runs at
        // the profile's step clock there (`kernels.gemm.step_clock_fraction`), so up to
        // 1/fraction of its device time more.
        let step = k["step_s"].as_f64().unwrap();
        if k["op"] == "gemm" {
            assert!(step > k["device_s"].as_f64().unwrap(), "{k}");
            assert!(step <= p / STEP_CLOCK, "{k}");
        } else {
            assert!(step <= p, "{k}");
        }
    }
}

/// A list of kernels (DESIGN §8): each object comes back in order with its extra fields and
/// `predicted_s`; measured times under any of the shared file's names are compared.
#[test]
fn a_kernel_list_is_priced_in_order_with_its_fields_kept() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("k.json");
    std::fs::write(
        &input,
        r#"[
 {"op": "gemm", "m": 4096, "n": 4096, "k": 4096, "note": "square", "s": 1.9e-4},
 {"op": "attention", "pass": "bwd", "batch": 1, "heads": 4, "q_tokens": 2048,
  "kv_tokens": 2048, "head_dim": 128, "causal": true, "bwd_s": 2e-4},
 {"op": "copy", "bytes": 1073741824},
 {"op": "elementwise", "bytes": 1048576, "measured_s": 2e-5}
]"#,
    )
    .unwrap();
    let path = input.to_str().unwrap();
    let v = json_of(&[
        "kernels", "--hw", "hgx-h200", "--input", path, "--format", "json",
    ]);
    let ks = v.as_array().unwrap();
    assert_eq!(ks.len(), 4);
    assert_eq!(ks[0]["note"], "square");
    assert_eq!(ks[1]["pass"], "bwd");
    assert!(ks.iter().all(|k| k["predicted_s"].as_f64().unwrap() > 0.0));
    // A copy of 1 GiB moved (512 MiB buffer) at ~4.2 TB/s: ~0.25 ms.
    let copy = ks[2]["predicted_s"].as_f64().unwrap();
    assert!((2.4e-4..2.8e-4).contains(&copy), "{copy}");
    let c = json_of(&[
        "kernels",
        "--hw",
        "hgx-h200",
        "--input",
        path,
        "--compare",
        "--format",
        "json",
    ]);
    let kinds: Vec<&str> = c["by_kind"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["gemm", "attention-bwd", "elementwise"]);
    assert!(c["kernels"][2].get("error").is_none());
    // The table form names the profile and the kinds.
    let out = cmd()
        .args(["kernels", "--hw", "hgx-h200", "--input", path, "--compare"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("hgx-h200") && text.contains("median |error|"),
        "{text}"
    );
}

/// Bad input: one line naming the item and field, exit 1; never a panic.
#[test]
fn bad_kernel_lists_fail_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (body, needle) in [
        (r#"[{"op": "gemm", "m": 0, "n": 1, "k": 1}]"#, "[0].m"),
        (r#"[{"op": "gemm", "m": 1, "n": 1}]"#, "[0].k"),
        (r#"[{"op": "conv", "bytes": 1}]"#, "unknown op"),
        (
            r#"[{"op": "attention", "pass": "sideways", "batch": 1, "heads": 1,
                "q_tokens": 1, "kv_tokens": 1, "head_dim": 1}]"#,
            "[0].pass",
        ),
        (r#"[{"op": "copy", "bytes": 1e300}]"#, "[0].bytes"),
        (r#"[{"op": "copy", "bytes": 8, "s": -1}]"#, "[0].s"),
        (
            r#"[{"op": "gemm", "m": 1, "n": 1, "k": 1, "session": 16}]"#,
            "[0].session",
        ),
        (
            r#"{"what": "", "date": "", "device": "", "software": "",
                "gemm": [{"m": 1, "n": 1, "k": 1, "s": 1e-5, "session": 99}]}"#,
            "gemm[0].session",
        ),
        (r#"[3]"#, "[0]"),
        (r#"{"what": 1}"#, "h.json"),
        ("[", "h.json"),
    ] {
        let input = dir.path().join("h.json");
        std::fs::write(&input, body).unwrap();
        let out = cmd()
            .args(["kernels", "--hw", "hgx-h200", "--input"])
            .arg(&input)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{body}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{body}: {err}");
        assert!(
            err.contains(needle) && !err.contains("panicked"),
            "{body}: {err}"
        );
    }
}

/// `--session-clock` takes K=FACTOR with K ≥ 1 and a factor in the searched range: anything
/// else is a usage error (exit 2, one line).
#[test]
fn bad_session_clocks_are_usage_errors() {
    for flag in ["0=0.9", "1=3", "1", "x=0.9", "1=nan", "16=1"] {
        let out = cmd()
            .args([
                "kernels",
                "--hw",
                "hgx-h200",
                "--input",
                H200_FILE,
                "--session-clock",
                flag,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}: {out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{flag}: {err}");
        assert!(err.contains("--session-clock"), "{flag}: {err}");
    }
}

/// Fits the H200 profile's kernel model to the shared file alone (from the bundled profile as
/// the base), into a temporary file.
fn fit_from_the_file(dir: &std::path::Path) -> (PathBuf, serde_json::Value) {
    let out = dir.join("h200-fitted.json");
    let v = json_of(&[
        "calibrate",
        "--fit",
        H200_FILE,
        "--base",
        "hgx-h200",
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    (out, v)
}

/// `calibrate --fit` writes a profile that loads, whose fitted figures name the command, the
/// file and the base, and which meets issue 8's goals on the file (median |error| ≤ 5%, none
/// above 15%, every kind). (The bundled profile is fitted to this file and a PyTorch run
/// together, `gpu_data::h200_profile_predicts_pytorchs_held_out_kernels`.) A second run is
/// refused without `--force`.
#[test]
fn calibrate_fit_from_the_shared_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (out, v) = fit_from_the_file(dir.path());
    let hw = load_hardware(out.to_str().unwrap()).unwrap();
    let src = &hw.kernels.gemm.mma_fraction.source;
    assert!(
        src.starts_with(&format!(
            "fitted by metp-sim calibrate --fit {H200_FILE} --base hgx-h200: "
        )),
        "{src}"
    );
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 5);
    for k in errors {
        assert!(
            k["median_abs_error"].as_f64().unwrap() <= 0.05
                && k["max_abs_error"].as_f64().unwrap() <= 0.15,
            "{k}"
        );
    }
    // The host's time per op comes straight from the file.
    assert_eq!(hw.kernels.host.op_s.value, 9.066359399999869e-6);
    let again = cmd()
        .args([
            "calibrate",
            "--fit",
            H200_FILE,
            "--base",
            "hgx-h200",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    // --fit needs --base and --out: a usage error.
    let usage = cmd()
        .args(["calibrate", "--fit", H200_FILE])
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
}

fn gemm(m: u64, n: u64, k: u64) -> KernelShape {
    KernelShape::Gemm(Gemm::bf16(1, m, n, k))
}

fn attn(batch: u64, heads: u64, s: u64, causal: bool, pass: AttnPass) -> KernelShape {
    KernelShape::Attention(Attention {
        batch,
        heads,
        kv_heads: heads,
        q_tokens: s,
        kv_tokens: s,
        head_dim: 128,
        causal,
        pass,
    })
}

fn fitted() -> Hardware {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = fit_from_the_file(dir.path());
    load_hardware(out.to_str().unwrap()).unwrap()
}

/// Shapes the file does not contain, from the model fitted to it alone (which holds only
/// square GEMMs). What makes METP's GEMMs slower per FLOP than a large square one: a short k
/// (the out-projection's k = h/p is 512 at p = 8 for LLaMA-2 7B), so each tile's fixed time
/// weighs more, and few rows (1024 tokens per device), so a wave leaves SMs idle. Derivation:
/// per FLOP, time ∝ (tile_s + ⌈k/k_step⌉·step) / k per tile and ∝ waves / (tiles / SMs).
/// (Against the cube of the same FLOPs the comparison is not uniform: wave quantization
/// makes some cubes awkward too — 2580³ needs 1.75 waves of 128×256 tiles.)
#[test]
fn skinny_gemms_are_slower_per_flop() {
    let hw = fitted();
    let cost = CostModel::new(&hw);
    let rate = |m, n, k| {
        let g = gemm(m, n, k);
        g.flops() / cost.device_s(&g)
    };
    // Shorter k, same output: slower per FLOP, up to the power plateau (`cost::gemm`: a call
    // of boost-clock time T runs at T + (C − T)·T/(T + power_time_s), C its time at
    // power_fraction of the peak): the longer the call, the nearer the power-limited rate, so
    // doubling k from 4096 to 8192 (~0.7 to ~1.4 ms) gains what the tiles gain and loses what
    // the clock loses — flat within 1%.
    for (m, n) in [(16384u64, 4096u64), (8192, 8192), (4096, 1536)] {
        let r: Vec<f64> = [512u64, 1024, 2048, 4096, 8192]
            .iter()
            .map(|&k| rate(m, n, k))
            .collect();
        assert!(r[..4].windows(2).all(|w| w[0] < w[1]), "{m}x{n}: {r:?}");
        assert!(r[4] >= 0.99 * r[3], "{m}x{n}: {r:?}");
    }
    // Fewer rows, same n and k (both under a few waves): slower per FLOP.
    for (n, k) in [(4096u64, 4096u64), (1536, 4096), (4096, 1376)] {
        assert!(rate(1024, n, k) < rate(4096, n, k), "n={n} k={k}");
    }
    // METP at p = 8 on LLaMA-2 7B: the out-projection at 16k tokens per device runs at least
    // 10% below the 8192³ GEMM's rate, and at 1024 tokens below half of it. (Run 2's PyTorch
    // measurements, `reports/gpu/nvidia-h200-2026-11-30/run2/pytorch-kernels.json`, of
    // m × 4096 × 512 against its 8192³ at 669 TFLOP/s: 0.27× at m = 1024, 0.71× at 8192, 0.90×
    // at 32768 — the long 8192³ call runs at the power plateau.)
    let big = rate(8192, 8192, 8192);
    assert!(rate(16384, 4096, 512) < 0.9 * big);
    assert!(rate(1024, 4096, 512) < 0.5 * big);
    // The file's own: 8192³ at ~793 TFLOP/s and 2048³ at ~458 (isolated calls).
    for (n, tflops) in [(8192u64, 793.0), (2048, 458.0)] {
        let g = gemm(n, n, n);
        let r = g.flops() / cost.isolated_s(&g) / 1e12;
        assert!((r / tflops - 1.0).abs() < 0.05, "{n}³: {r:.0} TFLOP/s");
    }
}

/// METP's attention block on LLaMA-2 7B at p = 8: 4 heads of one sequence, s/p = 512…2048.
/// Forward: 4 × s/p/128 ≤ 64 query blocks on 264 slots — every block alone, the last (which
/// sees every key) bounds the call, so the causal mask saves almost nothing (< 10%), while 16
/// heads × 16k/s sequences (the file's setting) fill the GPU many times over and causal saves
/// close to half. Backward: the first key block (seen by every query) bounds the call the same
/// way.
#[test]
fn few_head_blocks_gain_little_from_the_causal_mask() {
    let hw = fitted();
    let cost = CostModel::new(&hw);
    for pass in [AttnPass::Fwd, AttnPass::Bwd] {
        for s in [512u64, 1024, 2048] {
            let r = cost.device_s(&attn(1, 4, s, true, pass))
                / cost.device_s(&attn(1, 4, s, false, pass));
            assert!(r > 0.9, "{pass:?} s/p={s}: causal/full {r:.3}");
        }
        for s in [4096u64, 16384] {
            let b = 16384 / s;
            let r = cost.device_s(&attn(b, 16, s, true, pass))
                / cost.device_s(&attn(b, 16, s, false, pass));
            assert!(r < 0.7, "{pass:?} 16 heads s={s}: causal/full {r:.3}");
        }
    }
}

/// The backward takes a larger multiple of the forward for small calls than for large ones
/// (isolated, as measured): at 16 heads × 16k tokens the file's ratio is ~2.9; a 4-head block
/// of 512 tokens pays the backward's fixed costs on a tiny amount of work.
#[test]
fn backward_over_forward_is_larger_for_small_calls() {
    let hw = fitted();
    let cost = CostModel::new(&hw);
    let ratio = |b, h, s| {
        cost.isolated_s(&attn(b, h, s, false, AttnPass::Bwd))
            / cost.isolated_s(&attn(b, h, s, false, AttnPass::Fwd))
    };
    let large = ratio(1, 16, 16384);
    assert!((2.6..3.2).contains(&large), "{large}");
    for s in [512u64, 1024] {
        let small = ratio(1, 4, s);
        assert!(small > large, "s/p={s}: {small} vs {large}");
    }
}

/// Causal ring attention on 4 devices, as lowered: with contiguous blocks device i computes its
/// own block under the mask at step 0, full blocks of the i earlier devices, nothing for later
/// ones; with zig-zag order every device computes its own block causally and, from each of the
/// others, half a block (all its queries × half the keys, or half its queries × all the keys).
#[test]
fn causal_ring_steps_run_the_blocks_the_gpu_really_runs() {
    use metp_sim::config::{load_model, MethodId, Options, Workload};
    use metp_sim::schedule::{Pass, Work};
    for zigzag in [false, true] {
        let w = Workload {
            model: load_model("llama2-7b").unwrap(),
            hardware: load_hardware("hgx-h200").unwrap(),
            method: MethodId::Ring,
            p: 4,
            dp: 1,
            outer: metp_sim::config::OuterAxes::default(),
            seq: 8192,
            micro_batch: 1,
            micro_batches: 1,
            options: Options {
                causal: true,
                causal_zigzag: zigzag,
                ..Options::default()
            },
        };
        let w = w.validate().unwrap();
        let g = crate::common::lowered_step(&w);
        for dev in 0..4u32 {
            let calls: Vec<Attention> = g
                .tasks
                .iter()
                .filter(|t| {
                    t.device == dev
                        && t.label.pass == Pass::Fwd
                        && t.label.layer == Some(0)
                        && t.label.name == "attn-core"
                })
                .map(|t| match (&t.work, t.label.step) {
                    (Work::Compute { kernel }, Some(_)) => match g.kernels[*kernel as usize] {
                        KernelShape::Attention(a) => a,
                        other => panic!("{other:?}"),
                    },
                    other => panic!("{other:?}"),
                })
                .collect();
            let (c, half) = (2048u64, 1024u64);
            let diag = calls.iter().filter(|a| a.causal).count();
            assert_eq!(diag, 1, "zigzag={zigzag} device {dev}: {calls:?}");
            assert!(calls
                .iter()
                .all(|a| a.pass == AttnPass::Fwd && a.heads == 32));
            if zigzag {
                assert_eq!(calls.len(), 4);
                let halves = calls
                    .iter()
                    .filter(|a| {
                        !a.causal
                            && ((a.q_tokens, a.kv_tokens) == (c, half)
                                || (a.q_tokens, a.kv_tokens) == (half, c))
                    })
                    .count();
                assert_eq!(halves, 3, "device {dev}: {calls:?}");
            } else {
                assert_eq!(calls.len(), dev as usize + 1, "device {dev}");
                assert!(calls.iter().all(|a| (a.q_tokens, a.kv_tokens) == (c, c)));
            }
        }
        // Distinct shapes are few: the graph's kernel table is small.
        assert!(g.kernels.len() < 64, "{} kernel shapes", g.kernels.len());
    }
}

/// The committed pricing of METP's LLaMA-2 7B kernel shapes on the H200
/// (`reports/kernels/metp-llama2-7b-h200.json`, quoted by the README) is what `metp-sim
/// kernels` prints for the committed shape list with the bundled profile, byte for byte: a
/// change to the kernel model or the profile must regenerate it.
#[test]
fn the_committed_metp_kernel_pricing_regenerates() {
    let out = cmd()
        .args([
            "kernels",
            "--hw",
            "hgx-h200",
            "--input",
            "reports/kernels/metp-llama2-7b-shapes.json",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let committed = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reports/kernels/metp-llama2-7b-h200.json"),
    )
    .unwrap();
    assert!(
        out.stdout == committed,
        "reports/kernels/metp-llama2-7b-h200.json is stale: regenerate it with `metp-sim kernels \
         --hw hgx-h200 --input reports/kernels/metp-llama2-7b-shapes.json --format json`"
    );
}

/// A maximum achievable matmul rate (MAMF: the best of a brute-force search over shapes) bounds
/// every shape: no profile's GEMM model fitted to one may run any shape of that search faster
/// than the published figure. The B200 and GB200 models once did (fitted at the published best
/// shape alone, GB200 priced 16384³ at 2.33 PFLOP/s against a MAMF of 1.82); the fitted ones now
/// reach it and no more. dgx-h100 is derived from the H200's measured square GEMMs (8192³ at
/// 793 TFLOP/s, the H100's MAMF 794.5) and is not fitted to the figure: its best shape,
/// 11264×3072×9216 where the tiles fill the 132 SMs in whole waves, extrapolates to 834, 5%
/// above it — bounded here at 6% so that a change which widens that shows.
#[test]
fn no_gemm_shape_runs_faster_than_the_published_maximum_achievable_rate() {
    // (profile, published MAMF in FLOP/s, whether the profile's rate was fitted to it)
    let cases = [
        ("b200-8", 1745.0e12, true),
        ("gb200-nvl72", 1822.0e12, true),
        ("mi300x-8", 668.4e12, true),
        ("mi325x-8", 784.9e12, true),
        // Derived from the H200 fit, not fitted to this figure (see above).
        ("dgx-h100", 794.5e12 * 1.06, false),
    ];
    let sizes: Vec<u64> = (1..=20).map(|i| i * 1024).collect();
    for (name, mamf, fitted) in cases {
        let hw = load_hardware(name).unwrap();
        let mut best = 0.0f64;
        for &m in &sizes {
            for &n in &sizes {
                for &k in &sizes {
                    let g = Gemm::bf16(1, m, n, k);
                    let rate = 2.0 * (m * n * k) as f64 / metp_sim::cost::gemm::device_s(&hw, &g);
                    best = best.max(rate);
                }
            }
        }
        assert!(best <= mamf * 1.001, "{name}: {:.1} TFLOP/s", best / 1e12);
        if fitted {
            assert!(best >= mamf * 0.999, "{name}: {:.1} TFLOP/s", best / 1e12);
        }
    }
}

/// GB200's step clock (`kernels.gemm.step_clock_fraction`) is fitted to FP8 GEMMs timed after
/// 10,000 warm-up calls (Azure's ND GB200 v6 cuBLASLt squares, scripts/derive-kernel-models.py),
/// while its burst rates are MAMF's: the step price of the squares meets those sustained calls
/// (8192³ to 32768³ within 13%, the held-out 6144×12288×12288 within 5%), the burst price of the
/// same calls is at least 17% faster than they ran — the two regimes MAMF and a training step
/// are — and 4096³, which the carried-over H100 tile structure prices slow at any clock, is held
/// within 30% so that a change that widens it shows. The segments' profile carries the same clock.
#[test]
fn gb200_gemms_hold_the_sustained_clock_azure_measured() {
    let fp8 = |m: u64, n: u64, k: u64| Gemm {
        dtype: metp_sim::schedule::GemmDtype::Fp8,
        ..Gemm::bf16(1, m, n, k)
    };
    for name in ["gb200-nvl72", "gb200-nvl72-seg64"] {
        let hw = load_hardware(name).unwrap();
        let clock = hw
            .kernels
            .gemm
            .step_clock_fraction
            .as_ref()
            .map(|f| f.value);
        assert_eq!(clock, Some(0.8415), "{name}");
        let err = |g: &Gemm, tflops: f64, step: bool| {
            let s = if step {
                metp_sim::cost::gemm::step_device_s(&hw, g)
            } else {
                metp_sim::cost::gemm::device_s(&hw, g)
            };
            g.flops() / s / 1e12 / tflops - 1.0
        };
        for (n, tflops) in [(8192, 2781.5), (16384, 2819.5), (32768, 2755.3)] {
            let g = fp8(n, n, n);
            assert!(
                err(&g, tflops, true).abs() < 0.13,
                "{name} {n}³: {}",
                err(&g, tflops, true)
            );
            assert!(
                err(&g, tflops, false) > 0.17,
                "{name} {n}³ burst: {}",
                err(&g, tflops, false)
            );
        }
        let held = err(&fp8(6144, 12288, 12288), 2798.7, true);
        assert!(held.abs() < 0.05, "{name}: {held}");
        let small = err(&fp8(4096, 4096, 4096), 2694.7, true);
        assert!((-0.30..0.0).contains(&small), "{name} 4096³: {small}");
    }
}

/// FP8 GEMMs (`--linear-dtype fp8`) against measured FP8 calls. The measurements (Azure's
/// cuBLASLt benchmark, hardware.md S4) time each shape after 10,000 warm-up calls: the
/// sustained state a training step's clock stands for, so they meet the step-clock price.
/// dgx-h100's two FP8 figures are fitted to the H100's four squares 4096³–32768³; what is not
/// fitted is held to: another shape and a skinny one from the same H100 table, the H200's own
/// squares (hgx-h200 takes the H100's fit: same die and power), and the best rate over the
/// MAMF-style grid against the H100's FP8 MAMF (1402.6 TFLOP/s, S5).
#[test]
fn fp8_gemms_meet_the_measured_fp8_calls() {
    let rate = |hw: &metp_sim::config::Hardware, m: u64, n: u64, k: u64| {
        let g = Gemm {
            dtype: metp_sim::schedule::GemmDtype::Fp8,
            ..Gemm::bf16(1, m, n, k)
        };
        g.flops() / metp_sim::cost::gemm::step_device_s(hw, &g) / 1e12
    };
    // (profile, measured 4096³ / 8192³ / 16384³ / 32768³, tolerance)
    let cases = [
        ("dgx-h100", [1216.9, 1290.1, 1377.3, 1382.2], 0.04),
        ("hgx-h200", [1249.1, 1300.6, 1366.3, 1349.5], 0.065),
    ];
    for (name, squares, tol) in cases {
        let hw = load_hardware(name).unwrap();
        for (n, measured) in [4096u64, 8192, 16384, 32768].into_iter().zip(squares) {
            let r = rate(&hw, n, n, n);
            assert!(
                (r / measured - 1.0).abs() < tol,
                "{name} {n}³: {r:.1} vs {measured}"
            );
        }
    }
    let hw = load_hardware("dgx-h100").unwrap();
    for (m, n, k, measured, tol) in [
        (6144u64, 12288u64, 12288u64, 1351.4, 0.02),
        (802816, 192, 768, 663.8, 0.10),
    ] {
        let r = rate(&hw, m, n, k);
        assert!(
            (r / measured - 1.0).abs() < tol,
            "{m}x{n}x{k}: {r:.1} vs {measured}"
        );
    }
    let sizes: Vec<u64> = (1..=20).map(|i| i * 1024).collect();
    let mut best = 0.0f64;
    for &m in &sizes {
        for &n in &sizes {
            for &k in &sizes {
                best = best.max(rate(&hw, m, n, k));
            }
        }
    }
    assert!(best <= 1402.6 && best > 0.99 * 1402.6, "{best:.1}");
    // The same call in bf16 is slower, by less than the peaks' factor of 2.
    let g = Gemm::bf16(1, 8192, 8192, 8192);
    let bf16 = g.flops() / metp_sim::cost::gemm::step_device_s(&hw, &g) / 1e12;
    let fp8 = rate(&hw, 8192, 8192, 8192);
    assert!(fp8 > 1.5 * bf16 && fp8 < 2.0 * bf16, "{bf16:.1} {fp8:.1}");
}

/// FP8 on Blackwell: b200-8 and gb200-nvl72 price FP8 GEMMs at their FP8 peaks with one FP8
/// fraction each, fitted (scripts/derive-kernel-models.py) to the FP8 maximum achievable matmul
/// rate published for each (stas00/ml-engineering's MAMF table: B200 3432.5, GB200 3615.6
/// TFLOP/s). The fit bounds the whole search as the BF16 one does; an FP8 call is faster than
/// the same call in BF16 by less than the peaks' factor of 2. Held out on Hopper: the H200's FP8
/// MAMF (1453.4 TFLOP/s at 1280×4096×12032, the same table), which the H100-fitted FP8 model
/// prices 14.5% slow at the burst clock MAMF runs at (160 tiles of 128×256 on 132 SMs: two
/// waves, the second mostly idle, where cuBLAS picks another tile) — held here within 20% so a
/// change that widens it shows.
#[test]
fn blackwell_fp8_gemms_meet_their_published_maximum() {
    let fp8 = |m: u64, n: u64, k: u64| Gemm {
        dtype: metp_sim::schedule::GemmDtype::Fp8,
        ..Gemm::bf16(1, m, n, k)
    };
    let sizes: Vec<u64> = (1..=20).map(|i| i * 1024).collect();
    for (name, mamf) in [("b200-8", 3432.5e12), ("gb200-nvl72", 3615.6e12)] {
        let hw = load_hardware(name).unwrap();
        assert_eq!(hw.refuses(metp_sim::config::LinearDtype::Fp8), None);
        let mut best = 0.0f64;
        for &m in &sizes {
            for &n in &sizes {
                for &k in &sizes {
                    let g = fp8(m, n, k);
                    best = best.max(g.flops() / metp_sim::cost::gemm::device_s(&hw, &g));
                }
            }
        }
        assert!(
            best <= mamf * 1.001 && best >= mamf * 0.999,
            "{name}: {:.1} TFLOP/s",
            best / 1e12
        );
        let (a, b) = (Gemm::bf16(1, 8192, 8192, 8192), fp8(8192, 8192, 8192));
        let speedup =
            metp_sim::cost::gemm::device_s(&hw, &a) / metp_sim::cost::gemm::device_s(&hw, &b);
        assert!(speedup > 1.5 && speedup < 2.0, "{name}: {speedup:.2}");
    }
    let h200 = load_hardware("hgx-h200").unwrap();
    let g = fp8(1280, 4096, 12032);
    let rate = g.flops() / metp_sim::cost::gemm::device_s(&h200, &g) / 1e12;
    assert!((rate / 1453.4 - 1.0).abs() < 0.2, "{rate:.1}");
}
