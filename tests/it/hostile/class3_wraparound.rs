//! Class 3 — silent wraparound in configuration sums: reserved bytes of 1e308 wrapped the
//! reserved total below the default; `--nodes 2^61` made "8 GPUs per node × nodes" wrap to 0.
//! Every size field is bounded and every product of user numbers checked.

use super::{bundled, refuses, write};

#[test]
fn byte_fields_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    for field in ["cuda_context_bytes", "nccl_bytes"] {
        let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
        hw["reserved"][field]["value"] = 1e308.into();
        let path = write(dir.path(), &format!("{field}.json"), &hw);
        let e = refuses(&["memory", "--hw", &path], 1);
        assert!(
            e.contains(&format!("reserved.{field}.value")) && e.contains("2^60"),
            "{e}"
        );
    }
    let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
    hw["gpu"]["memory_bytes"]["value"] = 1.5.into();
    let path = write(dir.path(), "frac.json", &hw);
    refuses(&["memory", "--hw", &path], 1);
}

#[test]
fn node_and_gpu_counts_are_checked_not_wrapped() {
    // 8 × 2^61 = 2^64 wrapped to 0.
    let e = refuses(&["simulate", "--nodes", "2305843009213693952"], 2);
    assert!(e.contains("--nodes") && e.contains("1048576 GPUs"), "{e}");
    refuses(&["memory", "--nodes", "0"], 2);
    // p × dp beyond any cluster.
    let e = refuses(
        &["memory", "--dp", "4611686018427387904", "--nodes", "131072"],
        1,
    );
    assert!(e.contains("(dp)") && e.contains("2^20"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
    hw["gpus_per_node"] = 1_000_000u64.into();
    let path = write(dir.path(), "gpn.json", &hw);
    let e = refuses(&["memory", "--hw", &path], 1);
    assert!(e.contains("gpus_per_node"), "{e}");
}

#[test]
fn model_sizes_and_tokens_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    // h = 2^32 made h² wrap in 64 bits.
    let mut m = bundled("models", "llama2-7b");
    m["hidden"] = (1u64 << 32).into();
    m["heads"] = 32.into();
    m["kv_heads"] = 32.into();
    let path = write(dir.path(), "wide.json", &m);
    let e = refuses(&["memory", "--model", &path], 1);
    assert!(e.contains("'hidden'"), "{e}");
    // Within every field's bound, but 2^50 parameters or more.
    let mut m = bundled("models", "llama2-7b");
    m["hidden"] = (1u64 << 24).into();
    m["heads"] = (1u64 << 14).into();
    m["kv_heads"] = (1u64 << 14).into();
    m["ffn_hidden"] = (1u64 << 26).into();
    m["layers"] = (1u64 << 20).into();
    let path = write(dir.path(), "huge.json", &m);
    let e = refuses(&["memory", "--model", &path], 1);
    assert!(e.contains("parameters") && e.contains("2^50"), "{e}");
    // s × b beyond 2^40 tokens per micro-batch; tokens per step beyond 2^53.
    let e = refuses(
        &["memory", "--seq", "1099511627776", "--micro-batch", "8"],
        1,
    );
    assert!(e.contains("s × b"), "{e}");
    let e = refuses(
        &[
            "simulate",
            "--seq",
            "1g",
            "--micro-batch",
            "1024",
            "--global-batch",
            "134217728",
        ],
        1,
    );
    assert!(e.contains("micro-batches per step"), "{e}");
    // dp × micro-batch of the global batch is checked.
    let e = refuses(
        &[
            "simulate",
            "--dp",
            "18446744073709551615",
            "--micro-batch",
            "2",
            "--global-batch",
            "4",
        ],
        2,
    );
    assert!(e.contains("--global-batch"), "{e}");
}
