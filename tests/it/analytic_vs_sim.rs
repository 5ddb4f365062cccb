//! The analytic model and the simulator price the same step plans independently (closed forms
//! vs. events on streams and links); with ideal links they must agree within 1%, and the
//! simulated memory high-water mark must equal the inventory's peak byte for byte.

use metp_sim::analytic;
use metp_sim::config::{load_hardware, load_model, MethodId, Options, WeightExchange, Workload};
use metp_sim::sim::{simulate_workload, LinkModel};

fn check(w: &Workload, label: &str) {
    let est = analytic::estimate(w).unwrap_or_else(|e| panic!("{label}: {e}"));
    let sim = simulate_workload(w, LinkModel::Ideal, false).unwrap();
    let rel = sim.result.step_time_s / est.step_time_s - 1.0;
    assert!(
        rel.abs() < 0.01,
        "{label}: simulated {:.6} s vs analytic {:.6} s ({:+.2}%)",
        sim.result.step_time_s,
        est.step_time_s,
        100.0 * rel
    );
    assert_eq!(
        sim.result.max_memory_high_water_bytes(),
        sim.inventory_peak_bytes,
        "{label}: simulated high-water vs inventory peak"
    );
    assert_eq!(est.peak_bytes, sim.inventory_peak_bytes);
}

#[test]
fn ideal_links_agree_within_one_percent_on_a_grid() {
    for (model, hw) in [("llama2-7b", "dgx-a100-80gb"), ("gpt3-1.3b", "dgx-h100")] {
        let mut m = load_model(model).unwrap();
        // Two layers keep the test fast; every layer is identical, so the agreement per layer
        // is what is being checked.
        m.layers = 2;
        let hardware = load_hardware(hw).unwrap();
        for method in MethodId::ALL {
            for p in [2u64, 4, 8] {
                for seq in [4096u64, 32768] {
                    for (causal, flash) in [(false, true), (true, false)] {
                        let options = Options {
                            causal,
                            flash,
                            ..Options::default()
                        };
                        let w = Workload {
                            model: m.clone(),
                            hardware: hardware.clone(),
                            method,
                            p,
                            dp: 1,
                            seq,
                            micro_batch: 1,
                            micro_batches: 1,
                            options,
                        };
                        if metp_sim::memory::inventory(&w).is_err() {
                            continue; // e.g. heads not divisible
                        }
                        check(
                            &w,
                            &format!(
                                "{model} {hw} {method} p={p} s={seq} causal={causal} flash={flash}"
                            ),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn metp_variants_agree_when_compute_bound() {
    // The ring relay's pipelining is approximated in closed form; above the overlap threshold
    // (local sequence ≥ F/B) the approximation is within 1%.
    let mut m = load_model("llama2-7b").unwrap();
    m.layers = 2;
    let hardware = load_hardware("dgx-a100-80gb").unwrap();
    for (exchange, buffers, contiguous) in [
        (WeightExchange::Ring, 2, false),
        (WeightExchange::Broadcast, 1, false),
        (WeightExchange::Broadcast, 2, true),
    ] {
        for p in [4u64, 8] {
            let mut options = Options {
                causal: contiguous,
                causal_zigzag: !contiguous,
                ..Options::default()
            };
            options.metp.weight_exchange = exchange;
            options.metp.recv_buffers = buffers;
            let w = Workload {
                model: m.clone(),
                hardware: hardware.clone(),
                method: MethodId::Metp,
                p,
                dp: 1,
                seq: 65536,
                micro_batch: 1,
                micro_batches: 2,
                options,
            };
            check(
                &w,
                &format!("metp {exchange:?} buffers={buffers} contiguous={contiguous} p={p}"),
            );
        }
    }
}

#[test]
fn data_parallel_and_zero_agree() {
    let mut m = load_model("gpt3-1.3b").unwrap();
    m.layers = 2;
    let mut hardware = load_hardware("dgx-a100-80gb").unwrap();
    hardware.nodes = 2;
    for method in [
        MethodId::Metp,
        MethodId::Ulysses,
        MethodId::Ring,
        MethodId::TpSp,
    ] {
        let w = Workload {
            model: m.clone(),
            hardware: hardware.clone(),
            method,
            p: 8,
            dp: 2,
            seq: 32768,
            micro_batch: 1,
            micro_batches: 1,
            options: Options::default(),
        };
        check(&w, &format!("{method} p=8 dp=2 over two nodes"));
    }
}
