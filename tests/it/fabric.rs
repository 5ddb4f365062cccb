//! The topology description (issue 11) leaves every existing profile's results where they
//! were: a sweep over the five bundled 8-GPU profiles (and a 16-GPU ring across two DGX-H100
//! nodes) gives the bytes the build before it gave. `tests/data/baseline/*.sweep.json` were
//! written by `metp-sim sweep --hw H --seq 4k,64k --p 2,8` (and `--hw dgx-h100 --nodes 2 --p 16
//! --seq 64k`), and checked point for point against the full default sweeps (4k…512k, p = 1…8;
//! 16k…256k at p = 8, 16 on two nodes) of commit fd5bc6f, the commit before the topology.
//! Kernel model v2 (branch `kmodel`) moved these profiles' kernel prices; the files were then
//! rewritten by the kmodel build before it met the topology (commit 0143be2), and the merged
//! build reproduces them byte for byte — the topology still moves nothing. The H200 refit
//! with a clock per measurement session (issue 8) rewrote the dgx-h100, hgx-h200 and
//! two-node files with the same commands (steps −0.2% to −6.0%; the A100 files did not move).
//! Gradients in their dtype (issue 21: fp32 by default, so ZeRO-3's gradient reduce-scatter
//! and its gradient bucket doubled from the bf16 bytes they had been given) rewrote every file
//! with the same commands: ulysses, ring and rsa +0.4 GB peak (the bucket), steps +0.1% to
//! +2.5%; tp, tp-sp and metp at dp = 1 did not move.
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
        outer: vec![Default::default()],
        micro_batch: 1,
        micro_batches: None,
        options: Options::default(),
        timing: Timing::Simulated(LinkModel::MaxMin),
    };
    sweep_json(&sweep::run(&spec, &|_| {}), &spec)
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
        assert!(
            hf.source.contains("Hugging Face config.json"),
            "{}",
            hf.source
        );
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
    assert!(
        err.contains("num_local_experts") && err.contains("mixture-of-experts"),
        "{err}"
    );
}

fn point(hw: metp_sim::config::Hardware, method: MethodId, p: u64, seq: u64) -> sweep::Point {
    let spec = SweepSpec {
        models: vec![load_model("llama2-7b").unwrap()],
        hardware: vec![hw],
        methods: vec![method],
        degrees: vec![p],
        seqs: vec![seq],
        outer: vec![Default::default()],
        micro_batch: 1,
        micro_batches: None,
        options: Options::default(),
        timing: Timing::Simulated(LinkModel::MaxMin),
    };
    sweep::run(&spec, &|_| {}).points.remove(0)
}

/// The issue-11 profiles load and sweep: every method gives a finite step time and an MFU
/// below 1 at p = 8, s = 16k, and METP fits where TP's full activations do not at 128k.
#[test]
fn the_new_fabric_profiles_load_and_sweep() {
    for hw in [
        "mi300x-8",
        "mi325x-8",
        "b200-8",
        "gb200-nvl72",
        "a100-cluster-2to1",
    ] {
        let hardware = load_hardware(hw).unwrap();
        for m in MethodId::ALL {
            let pt = point(hardware.clone(), m, 8, 16384);
            if pt.reason.is_some() {
                continue; // a method this degree cannot run (its reason is the sweep's)
            }
            let t = pt.step_time_s.unwrap();
            let mfu = pt.mfu.unwrap();
            assert!(t.is_finite() && t > 0.0, "{hw} {m:?}: {t}");
            assert!(mfu > 0.0 && mfu < 1.0, "{hw} {m:?}: MFU {mfu}");
        }
        let metp = point(hardware.clone(), MethodId::Metp, 8, 131072);
        let tp = point(hardware, MethodId::Tp, 8, 131072);
        assert_eq!(metp.fits, Some(true), "{hw}: METP at 128k");
        assert!(metp.peak_bytes < tp.peak_bytes, "{hw}");
    }
}

/// On the xGMI mesh METP's ring gets one 48 GB/s link per hop while RCCL's collectives use all
/// seven: the same METP step on the same GPUs behind a switch with the mesh's per-GPU total
/// (7 × 48 = 336 GB/s) moves its rings 7× faster. Ring traffic is the K/V and weight blocks, so
/// the mesh's communication time must be close to 7× the switch's (latencies and the MLP's
/// weight broadcast, which is direct on the mesh, keep it from being exactly 7).
#[test]
fn a_ring_on_the_xgmi_mesh_uses_one_link_per_hop() {
    let mesh = load_hardware("mi300x-8").unwrap();
    let mut switch = mesh.clone();
    switch.intra_node.kind = metp_sim::config::IntraNodeKind::Nvswitch;
    switch.intra_node.link_bytes_per_s_per_direction = None;
    let on_mesh = point(mesh, MethodId::Metp, 8, 131072);
    let on_switch = point(switch, MethodId::Metp, 8, 131072);
    let ratio = on_mesh.communication_s.unwrap() / on_switch.communication_s.unwrap();
    assert!(
        ratio > 4.0 && ratio < 7.5,
        "mesh / switch communication: {ratio}"
    );
    assert!(on_mesh.exposed_communication_s > on_switch.exposed_communication_s);
}

/// A 2:1 spine slows a ring that crosses leaves: 32 GPUs over 4 nodes, two per leaf, against
/// the same cluster with a non-blocking fabric.
#[test]
fn an_oversubscribed_spine_slows_rings_that_cross_leaves() {
    let spine = load_hardware("a100-cluster-2to1").unwrap();
    let mut flat = spine.clone();
    flat.inter_node.spine = None;
    let slow = point(spine, MethodId::Ring, 32, 131072);
    let fast = point(flat, MethodId::Ring, 32, 131072);
    assert!(
        slow.communication_s.unwrap() > fast.communication_s.unwrap() * 1.2,
        "{:?} vs {:?}",
        slow.communication_s,
        fast.communication_s
    );
}
