//! Hugging Face configs (issue 21, item 3), each a real `config.json` in tests/data/hf:
//! biases counted, sliding windows modelled exactly where they do not bind and refused beyond,
//! mixture-of-experts refused in one line, and only the fields an architecture has read.

use crate::common::{inventory, workload};
use metp_sim::config::{load_model, LinearBiases, MethodId, Options};
use metp_sim::memory::names;
use metp_sim::search::max_seq;

fn hf(dir: &str) -> metp_sim::Result<metp_sim::config::Model> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf");
    load_model(root.join(dir).join("config.json").to_str().unwrap())
}

/// Qwen2-7B: 28 layers of h = 3584 attention with 4 K/V heads of d = 128 (3584 · (2·3584 +
/// 2·512) = 29,360,128), a SwiGLU MLP of f = 18944 (3 · 3584 · 18944 = 203,685,888), two
/// RMSNorms (7168); a final norm (3584); untied 152064 × 3584 embedding and head — 7,615,487,488
/// without biases, plus Q, K and V biases of 3584 + 2·512 = 4608 per layer (129,024 in all):
/// 7,615,616,512, the count Hugging Face reports. Its `sliding_window` is not read
/// (`use_sliding_window` is false).
#[test]
fn qwen2_counts_its_qkv_biases() {
    let m = hf("Qwen2-7B").unwrap();
    assert_eq!(
        m.biases,
        LinearBiases {
            qkv: true,
            ..Default::default()
        }
    );
    assert_eq!(m.total_params(), 7_615_616_512);
    assert_eq!(m.sliding_window, None);
}

/// Mistral-7B-v0.1 maps (7,241,732,096 parameters: 32 × (41,943,040 + 176,160,768 + 8192) +
/// 4096 + 2 · 32000 · 4096) with its 4096-token window: full attention is exact up to the
/// window, so 4096 tokens run and 8192 are refused in one line, and the longest sequence says
/// the window bounds it.
#[test]
fn mistral_v01_runs_up_to_its_window_and_not_beyond() {
    let m = hf("Mistral-7B-v0.1").unwrap();
    assert_eq!(m.sliding_window, Some(4096));
    assert_eq!(m.total_params(), 7_241_732_096);
    let w = workload(m.clone(), MethodId::Metp, 8, 4096, Options::default());
    assert!(inventory(&w).is_ok());
    let e = workload(m.clone(), MethodId::Metp, 8, 8192, Options::default())
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("longer than")
            && e.contains("sliding attention window of 4096")
            && !e.contains('\n'),
        "{e}"
    );
    let row = max_seq(&w, MethodId::Metp, 8);
    assert_eq!(row.max_seq, Some(4096));
    assert!(row.reason.unwrap().contains("sliding attention window"));
}

/// Mixtral (a real mixture-of-experts config) is refused in one line naming the field, exit 1.
#[test]
fn mixtral_is_refused_as_mixture_of_experts() {
    let e = hf("Mixtral-8x7B-v0.1").unwrap_err().to_string();
    assert!(
        e.contains("num_local_experts") && e.contains("mixture-of-experts") && !e.contains('\n'),
        "{e}"
    );
}

/// GPT-NeoX-20B: every linear has a bias and both LayerNorms a weight and a bias. Per layer
/// 4h² + 4h (Q, K, V, output and their biases), 2hf + f + h (MLP), 4h (norms): with h = 6144,
/// f = 24576, 453,064,704; × 44 layers, a final LayerNorm (2h) and untied 50432 × 6144
/// embedding and head: 20,554,567,680. GPT-NeoX has no grouped-query attention, so a
/// `num_key_value_heads` in its file is not read; with tp the output and second MLP biases
/// (row-parallel) stay whole on every device.
#[test]
fn gpt_neox_counts_its_biases_and_reads_no_kv_heads() {
    let m = hf("gpt-neox-20b").unwrap();
    assert_eq!(m.total_params(), 20_554_567_680);
    assert_eq!((m.heads, m.kv_heads), (64, 64));
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf");
    let mut v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("gpt-neox-20b/config.json")).unwrap(),
    )
    .unwrap();
    v["num_key_value_heads"] = 8.into();
    let path = dir.path().join("config.json");
    std::fs::write(&path, v.to_string()).unwrap();
    assert_eq!(load_model(path.to_str().unwrap()).unwrap().kv_heads, 64);
    let (l, h, f) = (44u128, 6144u128, 24576u128);
    let inv = inventory(&workload(m, MethodId::Tp, 8, 2048, Options::default())).unwrap();
    let bytes = |name: &str| inv.tensors.iter().find(|t| t.name == name).unwrap().bytes();
    assert_eq!(
        bytes(names::ATTN_WEIGHTS),
        2 * (l * (4 * h * h + 3 * h) / 8 + l * h)
    );
    assert_eq!(
        bytes(names::MLP_WEIGHTS),
        2 * (l * (2 * h * f + f) / 8 + l * h)
    );
}
