//! FP8 linear layers on the command line (`--linear-dtype fp8`): refused in one line where
//! they cannot run, priced where they can.

use crate::cli::fails;

/// FP8 linear layers need FP8 tensor cores and a Transformer Engine stack: an Ampere profile or
/// METP is refused in one line; on H100 the same step is priced faster and its MFU counts
/// against the FP8 peak.
#[test]
fn fp8_linear_layers_are_refused_where_they_cannot_run_and_priced_where_they_can() {
    let base = [
        "simulate",
        "--model",
        "llama2-7b",
        "--method",
        "tp-sp",
        "--p",
        "8",
        "--seq",
        "4096",
        "--format",
        "json",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let a100 = with(&["--hw", "dgx-a100-80gb", "--linear-dtype", "fp8"]);
    let err = fails(&a100.iter().map(String::as_str).collect::<Vec<_>>(), 1);
    assert!(err.contains("peak_fp8_flops_per_s"), "{err}");
    let metp = [
        "simulate",
        "--model",
        "llama2-7b",
        "--method",
        "metp",
        "--p",
        "8",
        "--seq",
        "4096",
        "--hw",
        "dgx-h100",
        "--linear-dtype",
        "fp8",
    ];
    let err = fails(&metp, 1);
    assert!(err.contains("METP"), "{err}");
    fails(&["simulate", "--linear-dtype", "fp4"], 2);
    // plan says so once, not once per candidate.
    let plan = [
        "plan",
        "--model",
        "llama2-7b",
        "--hw",
        "dgx-a100-80gb",
        "--gpus",
        "8",
        "--seq",
        "8k",
        "--global-batch",
        "8",
        "--linear-dtype",
        "fp8",
    ];
    assert!(fails(&plan, 2).contains("peak_fp8_flops_per_s"));
    // A measured FP8 call is held to the FP8 peak, a bf16 one to the bf16 peak: 8192³ in
    // 0.85 ms (1.29 PFLOP/s) is possible in FP8 only.
    let dir0 = tempfile::tempdir().unwrap();
    let measured = dir0.path().join("m.json");
    let call = |dtype: &str| {
        format!(r#"[{{"op":"gemm","m":8192,"n":8192,"k":8192{dtype},"measured_s":0.00085}}]"#)
    };
    std::fs::write(&measured, call(r#","dtype":"fp8""#)).unwrap();
    let args = [
        "kernels",
        "--hw",
        "dgx-h100",
        "--input",
        measured.to_str().unwrap(),
    ];
    crate::common::cli_json(&[&args[..], &["--format", "json"]].concat());
    std::fs::write(&measured, call("")).unwrap();
    assert!(fails(&args, 1).contains("faster than its GPU"));
    // `kernels` prices FP8 GEMMs where the profile has FP8, and names the item otherwise.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("k.json");
    for (shape, hw, needle) in [
        (
            r#"[{"op":"gemm","m":8,"n":8,"k":8,"dtype":"fp4"}]"#,
            "dgx-h100",
            "[0].dtype",
        ),
        (
            r#"[{"op":"gemm","m":8,"n":8,"k":8,"dtype":"fp8"}]"#,
            "dgx-a100-80gb",
            "peak_fp8",
        ),
    ] {
        std::fs::write(&input, shape).unwrap();
        let args = ["kernels", "--hw", hw, "--input", input.to_str().unwrap()];
        let err = fails(&args, 1);
        assert!(err.contains(needle), "{err}");
    }
    let json = |dtype: &str| {
        crate::common::cli_json(&with(&["--hw", "dgx-h100", "--linear-dtype", dtype]))
    };
    let (b, f) = (json("bf16"), json("fp8"));
    assert_eq!(f["linear_dtype"], "fp8");
    assert!(b.get("linear_dtype").is_none());
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    let mfu = |v: &serde_json::Value| v["mfu"].as_f64().unwrap();
    assert!(step(&f) < 0.9 * step(&b), "{} {}", step(&f), step(&b));
    // Same FLOPs over a shorter step, counted against the FP8 peak (1978.9 against 989.4).
    let expect = mfu(&b) * step(&b) / step(&f) * 989.4 / 1978.9;
    assert!(
        (mfu(&f) / expect - 1.0).abs() < 1e-6,
        "{} {expect}",
        mfu(&f)
    );
}
