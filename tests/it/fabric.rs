//! The topology description (issue 11) leaves every existing profile's results where they
//! were: a sweep over the five bundled 8-GPU profiles (and a 16-GPU ring across two DGX-H100
//! nodes) gives the bytes the build before it gave. `tests/data/baseline/*.sweep.json` were
//! written by `metp-sim sweep --hw H --seq 4k,64k --p 2,8` (and `--hw dgx-h100 --nodes 2 --p 16
//! --seq 64k`), and checked point for point against the full default sweeps (4k…512k, p = 1…8;
//! 16k…256k at p = 8, 16 on two nodes) of commit fd5bc6f, the commit before the topology.
//! The claims report's own test (`validate.rs`) keeps `reports/claims/` unmoved the same way.

use metp_sim::config::{load_hardware, load_model, MethodId, Options};
use metp_sim::evaluate::Timing;
use metp_sim::report::sweep_json;
use metp_sim::sim::LinkModel;
use metp_sim::sweep::{self, SweepSpec};

fn sweep_of(hw: &str, nodes: u64, degrees: Vec<u64>, seqs: Vec<u64>) -> String {
    let mut hardware = load_hardware(hw).unwrap();
    hardware.nodes = nodes;
    let spec = SweepSpec {
        models: vec![load_model("llama2-7b").unwrap()],
        hardware: vec![hardware],
        methods: MethodId::ALL.to_vec(),
        degrees,
        seqs,
        micro_batch: 1,
        options: Options::default(),
        timing: Timing::Simulated(LinkModel::MaxMin),
    };
    sweep_json(&sweep::run(&spec, &|_| {}))
}

#[test]
fn existing_profiles_sweep_exactly_as_before_the_topology() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/baseline");
    let mut cases: Vec<(String, String)> = [
        "dgx-a100-40gb",
        "dgx-a100-80gb",
        "a100-80gb-pcie",
        "dgx-h100",
        "hgx-h200",
    ]
    .iter()
    .map(|h| {
        (
            format!("{h}.sweep.json"),
            sweep_of(h, 1, vec![2, 8], vec![4096, 65536]),
        )
    })
    .collect();
    cases.push((
        "dgx-h100-2nodes.sweep.json".into(),
        sweep_of("dgx-h100", 2, vec![16], vec![65536]),
    ));
    for (file, fresh) in cases {
        let committed = std::fs::read_to_string(root.join(&file)).unwrap();
        assert!(
            fresh == committed,
            "{file}: the sweep moved on an existing profile"
        );
    }
}

/// `--model` takes a Hugging Face config.json: LLaMA-2 7B (MHA) and two GQA models
/// (Llama 3 8B, LLaMA-2 70B: 8 K/V heads) map onto the bundled model files' fields exactly.
#[test]
fn hf_configs_map_onto_the_bundled_models_exactly() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf");
    for (dir, bundled) in [
        ("Llama-2-7b-hf", "llama2-7b"),
        ("Meta-Llama-3-8B", "llama3-8b"),
        ("Llama-2-70b-hf", "llama2-70b"),
    ] {
        let path = root.join(dir).join("config.json");
        let hf = load_model(path.to_str().unwrap()).unwrap();
        let mut want = load_model(bundled).unwrap();
        assert!(hf.source.contains("Hugging Face config.json"), "{}", hf.source);
        want.name = hf.name.clone();
        want.source = hf.source.clone();
        assert_eq!(hf, want, "{dir}");
    }
    // The name comes from `_name_or_path`, else the folder.
    let named = load_model(root.join("Llama-2-7b-hf/config.json").to_str().unwrap()).unwrap();
    assert_eq!(named.name, "meta-llama/Llama-2-7b-hf");
    let folder = load_model(root.join("Meta-Llama-3-8B/config.json").to_str().unwrap()).unwrap();
    assert_eq!(folder.name, "Meta-Llama-3-8B");
}

/// An unmappable config is one line naming the file and the field, exit 1.
#[test]
fn an_unmappable_hf_config_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(
        &path,
        r#"{"model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096,
           "num_attention_heads": 32, "num_hidden_layers": 32, "intermediate_size": 14336,
           "vocab_size": 32000, "num_local_experts": 8}"#,
    )
    .unwrap();
    let out = assert_cmd::Command::cargo_bin("metp-sim")
        .unwrap()
        .args(["memory", "--model"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("model_type") && err.contains("mixtral"), "{err}");
}
