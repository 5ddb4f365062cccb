//! The unit inventory (`memory::unit`) is the one source of a METP unit's memory: the executed
//! runtime's measured high-water mark equals it on every device, byte for byte; leaving out any
//! of its tensors breaks that; its fast peak search agrees with the full list of moments; and the
//! layer inventory's METP transient phases are its phase peaks.

use crate::common::inventory;
use metp_sim::backend::cpu::units::run_unit;
use metp_sim::backend::unit::{ExecMethod, RunSpec};
use metp_sim::config::{
    Activation, MethodId, MetpOptions, Model, Norm, Options, Recompute, WeightExchange,
};
use metp_sim::memory::unit::{moments, phases};
use metp_sim::memory::{phase_peaks, unit_inventory, Kind, Phase, Unit, UnitShape, UnitSpec};

use crate::common::workload;

fn ushape(b: u64, s: u64, h: u64, a: u64, f: u64, p: u64) -> UnitShape {
    let u = |x: u64| x as usize;
    UnitShape {
        b: u(b),
        s: u(s),
        h: u(h),
        a: u(a),
        f: u(f),
        p: u(p),
    }
}

/// The METP unit both the inventory and the runtime read (one spec type).
fn spec_of(
    unit: Unit,
    sh: UnitShape,
    causal: bool,
    fused: bool,
    rb: u64,
    ex: WeightExchange,
) -> UnitSpec {
    let mut spec = UnitSpec::new(unit, ExecMethod::Metp, sh);
    spec.causal = causal;
    spec.fused = fused;
    spec.metp.recv_buffers = rb;
    spec.metp.weight_exchange = ex;
    spec
}

fn run_spec(
    unit: Unit,
    sh: UnitShape,
    causal: bool,
    fused: bool,
    rb: u64,
    ex: WeightExchange,
) -> RunSpec {
    let mut spec = RunSpec::of(spec_of(unit, sh, causal, fused, rb, ex));
    spec.seed = (sh.p * 31 + sh.s) as u64;
    spec
}

/// Shapes per degree: one where the attention blocks and activations dominate (s/p ≫ h/a), one
/// where the weight shards dominate (h ≫ s/p), b = 1 and 2.
fn shapes(p: u64) -> [UnitShape; 2] {
    [
        ushape(2, 4 * p, 2 * p, p, 2 * p, p),
        ushape(1, p, 4 * p, 2 * p, 3 * p, p),
    ]
}

const EXCHANGES: [WeightExchange; 2] = [WeightExchange::Ring, WeightExchange::Broadcast];

#[test]
fn measured_high_water_equals_the_unit_inventory_on_every_device() {
    let mut runs = 0;
    for p in [1u64, 2, 3, 4, 5, 7] {
        for sh in shapes(p) {
            for causal in [false, true] {
                for fused in [true, false] {
                    for rb in [1, 2] {
                        for ex in EXCHANGES {
                            let units: &[Unit] = if causal || !fused || ex == EXCHANGES[1] {
                                &[Unit::Attention]
                            } else {
                                &[Unit::Attention, Unit::Mlp]
                            };
                            for &unit in units {
                                let r = run_unit(&run_spec(unit, sh, causal, fused, rb, ex))
                                    .unwrap_or_else(|e| panic!("{unit:?} {sh:?}: {e}"));
                                let inv = unit_inventory(&spec_of(unit, sh, causal, fused, rb, ex))
                                    .unwrap();
                                let label = format!(
                                    "{unit:?} {sh:?} causal={causal} fused={fused} rb={rb} {ex:?}"
                                );
                                assert_eq!(
                                    r.measured_peak_bytes as u128, inv.peak_bytes,
                                    "{label}"
                                );
                                assert_eq!(r.devices.len() as u64, p);
                                for d in &r.devices {
                                    assert_eq!(
                                        d.peak_bytes as u128,
                                        inv.device_peak_bytes(d.rank as u64),
                                        "{label}: device {} ({})",
                                        d.rank,
                                        inv.devices[d.rank]
                                    );
                                }
                                runs += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(runs, 6 * 2 * (16 + 2));
}

/// Leaving any tensor out of the unit inventory makes it disagree with the measurement: on the
/// device with the largest peak, removing one name from every moment lowers the peak.
#[test]
fn every_tensor_of_the_peak_moment_is_needed() {
    for (unit, sh, fused, rb) in [
        (Unit::Attention, ushape(2, 12, 6, 3, 6, 3), false, 2),
        (Unit::Attention, ushape(1, 3, 12, 6, 9, 3), true, 1),
        (Unit::Mlp, ushape(2, 12, 6, 3, 6, 3), true, 2),
        (Unit::Mlp, ushape(1, 4, 8, 2, 8, 2), true, 1),
    ] {
        let ex = WeightExchange::Broadcast;
        let spec = spec_of(unit, sh, false, fused, rb, ex);
        let r = run_unit(&run_spec(unit, sh, false, fused, rb, ex)).unwrap();
        let inv = unit_inventory(&spec).unwrap();
        assert_eq!(r.measured_peak_bytes as u128, inv.peak_bytes);
        let top = r.devices.iter().max_by_key(|d| d.peak_bytes).unwrap().rank as u64;
        let all = moments(&spec, top).unwrap();
        let names = &inv.devices[top as usize].tensors;
        assert!(names.len() >= 5, "{names:?}");
        for t in names {
            let without = all
                .iter()
                .map(|m| m.bytes() - m.by_name().get(t.name).copied().unwrap_or(0))
                .max()
                .unwrap();
            assert_ne!(
                without, r.measured_peak_bytes as u128,
                "{unit:?} {sh:?}: the peak does not need {}",
                t.name
            );
        }
    }
}

/// The peak search visits only the groups and steps next to where a moment's make-up changes;
/// the full list of moments (every group, every step, every device) gives the same peaks —
/// for head groups G = p, 2p, 3p, grouped-query attention, SwiGLU, stored Q/K/V or activation
/// input.
#[test]
fn peak_search_agrees_with_every_moment() {
    let mut cases = 0;
    for p in 1u64..=8 {
        for k in [1u64, 2, 3] {
            let g = k * p;
            for (causal, fused, rb, store, gqa) in [
                (false, true, 2, false, false),
                (true, false, 2, false, false),
                (true, true, 1, false, true),
                (false, false, 1, true, false),
                (true, false, 2, true, true),
            ] {
                let a = 2 * g;
                let sh = ushape(1 + p % 2, 2 * p, 2 * a, a, 2 * p, p);
                for unit in [Unit::Attention, Unit::Mlp] {
                    if unit == Unit::Mlp && k > 1 {
                        continue;
                    }
                    let mut spec = UnitSpec {
                        kv_heads: if gqa { a as usize / 2 } else { a as usize },
                        activation: if gqa {
                            Activation::Swiglu
                        } else {
                            Activation::Gelu
                        },
                        ..spec_of(unit, sh, causal, fused, rb, WeightExchange::Ring)
                    };
                    spec.metp.head_groups = Some(g);
                    spec.metp.store_qkv = store;
                    spec.metp.store_mlp_act = store;
                    let inv = unit_inventory(&spec).unwrap();
                    let fast = phase_peaks(&spec).unwrap();
                    let mut phase_max = [0u128; 2];
                    for rank in 0..p {
                        let all = moments(&spec, rank).unwrap();
                        let peak = all.iter().map(|m| m.bytes()).max().unwrap();
                        // The device's peak moment is the first one at its high-water mark.
                        let first = all.iter().find(|m| m.bytes() == peak).unwrap();
                        assert_eq!(&inv.devices[rank as usize], first, "{spec:?} device {rank}");
                        for m in &all {
                            let i = (m.phase == phases(unit)[1]) as usize;
                            phase_max[i] = phase_max[i].max(m.bytes_of(Kind::Transient));
                        }
                    }
                    for (i, ph) in phases(unit).into_iter().enumerate() {
                        assert_eq!(
                            inv.transient_peak_bytes(ph),
                            phase_max[i],
                            "{spec:?} {ph:?}"
                        );
                        let f = fast.iter().find(|m| m.phase == ph).unwrap();
                        assert_eq!(f.bytes_of(Kind::Transient), phase_max[i], "{spec:?} {ph:?}");
                    }
                    cases += 1;
                }
            }
        }
    }
    assert!(cases > 100);
}

fn model(h: u64, a: u64, kv: u64, f: u64, activation: Activation) -> Model {
    Model {
        name: "unit".into(),
        layers: 3,
        hidden: h,
        heads: a,
        kv_heads: kv,
        ffn_hidden: f,
        vocab: 1000,
        activation,
        norm: Norm::Layernorm,
        dropout: true,
        tied_embeddings: true,
        biases: Default::default(),
        sliding_window: None,
        rotary: false,
        source: "test".into(),
    }
}

/// The layer inventory's METP transients, phase by phase, are the unit inventory's phase
/// peaks: the same tensors (names and bytes) and so the same sums — attention and MLP, forward
/// and backward, for every degree, flash or not, causal, one or two buffers, head groups,
/// grouped-query attention, SwiGLU, stored Q/K/V and activation input. Full recomputation adds
/// the re-materialised activations to both backward phases; nothing else differs.
#[test]
fn layer_inventory_metp_phases_are_the_unit_phase_peaks() {
    let mut checked = 0;
    for p in [1u64, 2, 3, 4, 8, 16] {
        for (h, a, kv, act) in [
            (1024, 16, 16, Activation::Gelu),
            (2048, 32, 8, Activation::Swiglu),
        ] {
            for (flash, causal, zigzag, rb, groups, store, rec) in [
                (true, false, false, 2, 1, false, Recompute::None),
                (false, false, false, 2, 1, false, Recompute::None),
                (false, true, false, 1, 1, false, Recompute::Selective),
                (false, true, true, 2, 2, true, Recompute::None),
                (true, true, true, 1, 2, false, Recompute::None),
                (false, false, false, 2, 1, false, Recompute::Full),
            ] {
                let options = Options {
                    flash,
                    causal,
                    causal_zigzag: zigzag,
                    recompute: rec,
                    metp: MetpOptions {
                        recv_buffers: rb,
                        head_groups: Some(groups * p),
                        store_qkv: store,
                        store_mlp_act: store,
                        weight_exchange: WeightExchange::Broadcast,
                    },
                    ..Options::default()
                };
                let m = model(h, a, kv, 4 * h, act);
                let w = workload(m, MethodId::Metp, p, 8192, options);
                let Ok(inv) = inventory(&w) else {
                    continue; // e.g. head groups beyond the heads
                };
                let label = format!("p={p} h={h} {options:?}");
                for unit in [Unit::Attention, Unit::Mlp] {
                    let unit_inv = unit_inventory(&UnitSpec::from_workload(&w, unit)).unwrap();
                    for ph in phases(unit) {
                        let moment = unit_inv.phase_peak(ph).unwrap();
                        let mut want: Vec<(&str, u128)> = moment
                            .tensors
                            .iter()
                            .filter(|t| t.kind == Kind::Transient)
                            .map(|t| (t.name, t.bytes()))
                            .collect();
                        if rec == Recompute::Full && ph == phases(unit)[1] {
                            // Re-materialised stored activations (layer-level).
                            want.extend(
                                inv.tensors
                                    .iter()
                                    .filter(|t| {
                                        t.kind == Kind::Transient
                                            && t.phases == [Phase::BwdAttention, Phase::BwdMlp]
                                            && !moment.tensors.iter().any(|u| {
                                                u.kind == Kind::Transient && u.name == t.name
                                            })
                                    })
                                    .map(|t| (t.name, t.bytes())),
                            );
                        }
                        let mut got: Vec<(&str, u128)> = inv
                            .tensors
                            .iter()
                            .filter(|t| t.kind == Kind::Transient && t.phases.contains(&ph))
                            .map(|t| (t.name, t.bytes()))
                            .collect();
                        want.sort();
                        got.sort();
                        assert_eq!(got, want, "{label} {ph:?}");
                        if rec != Recompute::Full {
                            assert_eq!(
                                inv.transient_bytes(ph),
                                unit_inv.transient_peak_bytes(ph),
                                "{label} {ph:?}"
                            );
                        }
                        checked += 1;
                    }
                }
                // Static and stored: the unit's own shards are the layer's per-layer weight
                // share (multi-head attention, G = p: no replicated K/V heads), its backward
                // stored tensors the layer's stored attention and MLP inputs, group outputs and
                // log-sum-exp.
                if kv == a && groups == 1 && rec == Recompute::None {
                    let wm = &w.model;
                    let attn =
                        unit_inventory(&UnitSpec::from_workload(&w, Unit::Attention)).unwrap();
                    let bwd = attn.phase_peak(Phase::BwdAttention).unwrap();
                    let by = bwd.by_name();
                    assert_eq!(
                        by["attn.weights"],
                        2 * wm.attention_params_per_layer() as u128 / p as u128
                    );
                    assert_eq!(
                        by["optimizer.main_grads_fp32"],
                        4 * wm.attention_params_per_layer() as u128 / p as u128
                    );
                    for t in bwd.tensors.iter().filter(|t| t.kind == Kind::Stored) {
                        let layer = inv
                            .tensors
                            .iter()
                            .find(|l| l.name == t.name && l.kind == Kind::Stored)
                            .unwrap_or_else(|| panic!("{} not stored in the layer", t.name));
                        assert_eq!(layer.bytes_each, t.bytes(), "{label} {}", t.name);
                    }
                }
            }
        }
    }
    // (Grouped-query cases with more head groups than K/V heads are refused, issue 21.)
    assert!(checked >= 200, "{checked}");
}
