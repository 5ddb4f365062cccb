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
