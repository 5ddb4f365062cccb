//! Class 1 — aborts on inputs the tool accepts ("memory allocation of N bytes failed", exit
//! 134): each of the issue's examples now refuses in one line, before building anything, from
//! the estimated size of the task graph (what is too large, the limit, what to change).

use std::time::{Duration, Instant};

use metp_sim::config::{load_hardware, load_model, MethodId};
use metp_sim::evaluate::{Evaluation, SimulateOptions};
use metp_sim::sim::LinkModel;

use super::{bundled, refuses, workload_p8, write};

#[test]
fn the_issues_examples_refuse_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
    hw["inter_node"]["nics_per_node"] = 1_000_000_000u64.into();
    let nics = write(dir.path(), "nics.json", &hw);
    let mut m = bundled("models", "llama2-7b");
    m["layers"] = (1u64 << 20).into();
    let layers = write(dir.path(), "layers.json", &m);

    let t0 = Instant::now();
    let e = refuses(&["simulate", "--hw", &nics, "--nodes", "2", "--p", "16"], 1);
    assert!(e.contains("nics_per_node"), "{e}");
    let e = refuses(&["simulate", "--model", &layers, "--full-sim"], 1);
    assert!(
        e.contains("1048576 layers") && e.contains("2^24 tasks"),
        "{e}"
    );
    // On a fabric where replicas fold (rail-optimised NICs, ring collectives) 1,000 replicas
    // are simulated as one (README "Pipelines, context parallelism and thousands of GPUs");
    // on a full mesh nothing folds and the 8,000 devices are refused from the estimate.
    let e = refuses(
        &[
            "simulate", "--hw", "mi300x-8", "--p", "8", "--dp", "1000", "--nodes", "1000",
        ],
        1,
    );
    assert!(e.contains("8000 devices") && e.contains("--dp"), "{e}");
    let e = refuses(&["simulate", "--global-batch", "65536"], 1);
    assert!(
        e.contains("65536 micro-batch") && e.contains("--global-batch"),
        "{e}"
    );
    let e = refuses(
        &[
            "simulate", "--method", "ring", "--p", "1024", "--nodes", "128",
        ],
        1,
    );
    assert!(e.contains("too large"), "{e}");
    // Refused from the estimate, not after building: all of it in seconds (debug build).
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

/// The issue's `simulate --p 8 --dp 1000 --nodes 1000` (an abort before) now runs: the 1,000
/// replicas fold to one and the gradient rings over them move only the simulated ranks'
/// transfers, so it costs what one replica costs (a shorter sequence keeps the debug build
/// quick; the replicas' count is what matters).
#[test]
fn a_thousand_replicas_simulate_as_one() {
    let out = super::run_within(
        &[
            "simulate", "--p", "8", "--dp", "1000", "--nodes", "1000", "--seq", "8k",
        ],
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("on 8 simulated devices standing for 8000"),
        "{stdout}"
    );
}

/// The library refuses the same way: a workload whose graph exceeds the task limit is an
/// error from `Evaluation::simulate` when every layer must be simulated (`SimDepth::Full`), not
/// an abort; shortened where the simulator proves the layers repeat (the default) and on the
/// fast path, the same model simulates.
#[test]
fn the_guard_is_in_the_evaluation_path() {
    use metp_sim::evaluate::SimDepth;
    let mut model = load_model("llama2-7b").unwrap();
    model.layers = 1 << 20;
    let w = workload_p8(
        model,
        load_hardware("dgx-a100-80gb").unwrap(),
        MethodId::Metp,
    );
    let mut opts = SimulateOptions::full(LinkModel::Ideal);
    opts.depth = SimDepth::Full;
    let e = Evaluation::new(w.clone()).simulate(opts).unwrap_err();
    assert!(matches!(e, metp_sim::Error::TooLarge { .. }), "{e}");
    for depth in [SimDepth::Periodic, SimDepth::Extrapolate] {
        opts.depth = depth;
        let e = Evaluation::new(w.clone()).simulate(opts).unwrap();
        assert!(e.metrics.mfu > 0.0 && e.metrics.mfu <= 1.0);
    }
}
