//! GPU checks of the CUDA backend: built only with `--features cuda`. The NVRTC check needs
//! only libnvrtc (no driver); the others first probe for a driver and a device. Each prints
//! "skipped: …" and passes when what it needs is missing, so a green run is not a GPU check
//! unless its output says otherwise. `scripts/gpu-check.sh` runs them on a GPU machine
//! (`--test-threads=1 --nocapture`).
#![cfg(feature = "cuda")]

use crate::skipped;
use metp_sim::backend::cuda::{compile_ptx, flash_selftest, open, probe, sources};
use metp_sim::backend::unit::{ExecMethod, RunSpec, Shape, Unit};
use metp_sim::backend::{AttnCall, Backend, GemmShape, Pass};
use metp_sim::config::WeightExchange;

/// The backend, or `None` after printing why the test is skipped.
fn backend(p: usize) -> Option<Box<dyn Backend>> {
    match probe() {
        Ok(found) => eprintln!("cuda: {found}"),
        Err(e) => {
            skipped(format_args!("no usable GPU here ({e})"));
            return None;
        }
    }
    match open(p, true) {
        Ok(b) => Some(b),
        Err(e) => panic!("the probe passed but the backend does not open: {e}"),
    }
}

#[test]
fn gpu_nvrtc_compiles_every_kernel_for_sm80_and_sm90() {
    for arch in ["compute_80", "compute_90"] {
        let ptx = match compile_ptx(arch) {
            Ok(p) => p,
            Err(e) if e.to_string().contains("NVRTC") && e.to_string().contains("not found") => {
                skipped(format_args!("{e}"));
                return;
            }
            Err(e) => panic!("{arch}: {e}"),
        };
        for k in sources::KERNELS {
            assert!(
                ptx.contains(&format!(".entry {k}(")),
                "{arch}: kernel {k} missing from the PTX"
            );
        }
        // The fused kernels use bf16 tensor-core MMA.
        assert!(ptx.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
        if let Ok(dir) = std::env::var("METP_PTX_DIR") {
            let path = std::path::Path::new(&dir).join(format!("metp-kernels-{arch}.ptx"));
            std::fs::write(&path, &ptx).unwrap();
            eprintln!("wrote {}", path.display());
        }
        eprintln!(
            "{arch}: {} kernels compiled, {} bytes of PTX",
            sources::KERNELS.len(),
            ptx.len()
        );
    }
}

#[test]
fn gpu_flash_attention_matches_the_reference() {
    if backend(1).is_none() {
        return;
    }
    for (batch, heads, q, kv, d, causal) in [
        (2, 2, 80, 80, 64, false),
        (2, 2, 80, 80, 64, true),
        (1, 1, 64, 150, 128, false),
        (1, 1, 64, 150, 128, true),
        (1, 2, 130, 70, 128, true),
        (1, 3, 1, 33, 64, true),
        (1, 4, 256, 256, 128, true),
    ] {
        let call = AttnCall {
            batch,
            heads,
            q_tokens: q,
            kv_tokens: kv,
            head_dim: d,
            causal,
        };
        let c = flash_selftest(call, 7).unwrap();
        eprintln!("{call:?}: {c:?}");
        // bf16 operands (and bf16 P, dS into the MMAs): ~2e-3 on the host emulator.
        for (what, e, tol) in [
            ("out", c.out, 1e-2),
            ("lse", c.lse, 2e-2),
            ("dq", c.dq, 2e-2),
            ("dk", c.dk, 2e-2),
            ("dv", c.dv, 2e-2),
        ] {
            assert!(e.is_finite() && e <= tol, "{call:?} {what}: {e}");
        }
    }
}

#[test]
fn gpu_kernels_time_positive_and_scale_with_size() {
    let Some(mut b) = backend(2) else { return };
    let small = b.gemm_s(GemmShape::new(256, 256, 256)).unwrap();
    let large = b.gemm_s(GemmShape::new(4096, 4096, 4096)).unwrap();
    eprintln!(
        "bf16 GEMM 256³ {small:.3e} s, 4096³ {large:.3e} s = {:.1} TFLOP/s",
        GemmShape::new(4096, 4096, 4096).flops() / large / 1e12
    );
    assert!(small > 0.0 && large > small, "{small} {large}");
    let call = |causal| AttnCall {
        batch: 1,
        heads: 16,
        q_tokens: 4096,
        kv_tokens: 4096,
        head_dim: 128,
        causal,
    };
    let f = b.attention_s(call(false), Pass::Forward).unwrap();
    let bw = b.attention_s(call(false), Pass::Backward).unwrap();
    let fc = b.attention_s(call(true), Pass::Forward).unwrap();
    let tf = |t: f64| call(false).flops(Pass::Forward) / t / 1e12;
    eprintln!(
        "attention 16 heads × 4096², d 128: forward {f:.3e} s ({:.0} TFLOP/s), backward {bw:.3e} s \
         ({:.2}× forward), causal forward {fc:.3e} s ({:.2}×)",
        tf(f),
        bw / f,
        fc / f
    );
    assert!(f > 0.0 && bw > f, "{f} {bw}");
    // The causal kernel skips the key tiles above the diagonal: half the work.
    assert!(fc < 0.8 * f, "causal {fc} vs full {f}");
    let e = b.elementwise_s(1 << 28).unwrap();
    let c = b.copy_s(1 << 28).unwrap();
    eprintln!(
        "256 MiB moved: copy {c:.3e} s ({:.2} TB/s), element-wise {e:.3e} s",
        (1u64 << 28) as f64 / c / 1e12
    );
    assert!(e > 0.0 && c > 0.0);
    let t1 = b.transfer_s(1 << 20).unwrap();
    let t2 = b.transfer_s(1 << 26).unwrap();
    assert!(t2 > t1, "{t1} {t2}");
    let h = b.host_overhead_s().unwrap().unwrap();
    eprintln!("host overhead per launch {h:.2e} s");
    assert!(h > 0.0 && h < 1e-3);
    match b.p2p_s(0, 1, 1 << 24).unwrap() {
        Some(t) => {
            eprintln!("NCCL 16 MiB GPU 0 → 1: {t:.3e} s");
            let ar = b.collective_s("all-reduce", 2, 1 << 24).unwrap().unwrap();
            eprintln!("NCCL all-reduce 16 MiB over 2 GPUs: {ar:.3e} s");
        }
        None => skipped(format_args!(
            "one GPU (or no NCCL): no messages between GPUs"
        )),
    }
}

fn shape(h: usize, a: usize) -> Shape {
    Shape {
        b: 1,
        s: 512,
        h,
        a,
        f: 4 * h,
        p: 2,
    }
}

/// Runs `spec`, checks it against the reference and (METP) its memory against the inventory.
fn check_unit(b: &mut dyn Backend, spec: &RunSpec, failures: &mut Vec<String>) {
    let name = format!(
        "{:?} {:?} {:?} kv_heads={} causal={} fused={} rb={} {:?} h={}",
        spec.unit,
        spec.method,
        spec.activation,
        spec.kv_heads,
        spec.causal,
        spec.fused,
        spec.metp.recv_buffers,
        spec.metp.weight_exchange,
        spec.shape.h
    );
    let r = match b.run_unit(spec) {
        Ok(r) => r,
        Err(e) => {
            failures.push(format!("{name}: {e}"));
            return;
        }
    };
    eprintln!(
        "{name}: error {:.2e} ({:?}), {:.3e} s, peak {} B measured, {} B tracked (inventory \
         {:?}), GPU view {:?}",
        r.max_rel_error,
        r.errors,
        r.measured_time_s,
        r.measured_peak_bytes,
        r.tracked_peak_bytes,
        r.inventory_peak_bytes,
        r.gpu_memory
    );
    // bf16 operands and outputs: about 3 significant digits.
    if r.max_rel_error.is_nan() || r.max_rel_error >= 2e-2 {
        failures.push(format!(
            "{name}: error {:.3e} ({:?})",
            r.max_rel_error, r.errors
        ));
    }
    if r.measured_time_s.is_nan() || r.measured_time_s <= 0.0 {
        failures.push(format!("{name}: time {}", r.measured_time_s));
    }
    for d in &r.devices {
        // The driver's high-water mark of the device's own pool sees every tracked buffer.
        if let Some(high) = d.allocator_peak_bytes {
            if high < d.peak_bytes {
                failures.push(format!(
                    "{name}: device {} pool high-water {high} B below its tracked peak {} B",
                    d.rank, d.peak_bytes
                ));
            }
        }
        if d.end_live_bytes != 0 {
            failures.push(format!(
                "{name}: device {} ended holding {} B",
                d.rank, d.end_live_bytes
            ));
        }
        if let Some(inv) = d.inventory_peak_bytes {
            if inv != d.peak_bytes {
                failures.push(format!(
                    "{name}: device {} peak {} B, inventory {inv} B ({:?})",
                    d.rank, d.peak_bytes, d.peak_breakdown
                ));
            }
        }
    }
}

#[test]
fn gpu_units_match_the_reference_and_the_inventory() {
    let Some(mut b) = backend(2) else { return };
    let mut failures = Vec::new();
    for unit in [Unit::Attention, Unit::Mlp] {
        for method in [ExecMethod::Metp, ExecMethod::Tp] {
            for causal in [false, true] {
                for fused in [true, false] {
                    if unit == Unit::Mlp && (causal || !fused) {
                        continue;
                    }
                    let mut spec = RunSpec::new(unit, method, shape(256, 4));
                    spec.causal = causal;
                    spec.fused = fused;
                    check_unit(b.as_mut(), &spec, &mut failures);
                }
            }
        }
    }
    // METP's options: one receive buffer, broadcast weight exchange; head dimension 128.
    for (rb, ex) in [
        (1, WeightExchange::Ring),
        (2, WeightExchange::Broadcast),
        (1, WeightExchange::Broadcast),
    ] {
        for unit in [Unit::Attention, Unit::Mlp] {
            let mut spec = RunSpec::new(unit, ExecMethod::Metp, shape(256, 4));
            spec.metp.recv_buffers = rb;
            spec.metp.weight_exchange = ex;
            spec.causal = unit == Unit::Attention;
            check_unit(b.as_mut(), &spec, &mut failures);
        }
    }
    let spec = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape(512, 4));
    check_unit(b.as_mut(), &spec, &mut failures);
    // Grouped-query attention (4 query heads on 2 K/V heads, one per device): METP and TP,
    // causal or not, fused (the kernels' rep, shared dK/dV by atomics) or unfused (the head
    // batches of layout::head_batches); METP's other options; head dimension 128.
    for method in [ExecMethod::Metp, ExecMethod::Tp] {
        for causal in [false, true] {
            for fused in [true, false] {
                let mut spec = RunSpec::new(Unit::Attention, method, shape(256, 4));
                spec.kv_heads = 2;
                spec.causal = causal;
                spec.fused = fused;
                check_unit(b.as_mut(), &spec, &mut failures);
            }
        }
    }
    for (rb, ex, h) in [
        (1, WeightExchange::Ring, 256),
        (1, WeightExchange::Broadcast, 256),
        (2, WeightExchange::Ring, 512),
    ] {
        let mut spec = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape(h, 4));
        spec.kv_heads = 2;
        spec.causal = true;
        spec.metp.recv_buffers = rb;
        spec.metp.weight_exchange = ex;
        check_unit(b.as_mut(), &spec, &mut failures);
    }
    // SwiGLU MLP (the CPU runtime's program): METP with one and two receive buffers, and TP.
    for (method, rb) in [
        (ExecMethod::Metp, 2),
        (ExecMethod::Metp, 1),
        (ExecMethod::Tp, 2),
    ] {
        let mut spec = RunSpec::new(Unit::Mlp, method, shape(256, 4));
        spec.activation = metp_sim::config::Activation::Swiglu;
        spec.metp.recv_buffers = rb;
        check_unit(b.as_mut(), &spec, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn gpu_units_with_four_devices() {
    let Some(mut b) = backend(4) else { return };
    let mut failures = Vec::new();
    let sh = Shape {
        b: 1,
        s: 512,
        h: 512,
        a: 8,
        f: 1024,
        p: 4,
    };
    for unit in [Unit::Attention, Unit::Mlp] {
        for method in [ExecMethod::Metp, ExecMethod::Tp] {
            let mut spec = RunSpec::new(unit, method, sh);
            spec.causal = unit == Unit::Attention;
            check_unit(b.as_mut(), &spec, &mut failures);
        }
    }
    // Grouped-query attention: 8 query heads on 4 K/V heads (one per device), METP fused and
    // TP unfused.
    for (method, fused) in [(ExecMethod::Metp, true), (ExecMethod::Tp, false)] {
        let mut spec = RunSpec::new(Unit::Attention, method, sh);
        spec.kv_heads = 4;
        spec.causal = true;
        spec.fused = fused;
        check_unit(b.as_mut(), &spec, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn gpu_refuses_what_it_cannot_run() {
    let Some(mut b) = backend(2) else { return };
    // Head dimension 32: the fused kernel has 64 and 128 only.
    let spec = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape(128, 4));
    let e = b.run_unit(&spec).unwrap_err().to_string();
    assert!(e.contains("head dimension"), "{e}");
    // Unfused runs any head dimension.
    let mut spec = spec;
    spec.fused = false;
    assert!(b.run_unit(&spec).unwrap().max_rel_error < 2e-2);
    // An option its units do not implement (`Backend::support`): one line naming it.
    let mut spec = RunSpec::new(Unit::Attention, ExecMethod::Metp, shape(256, 4));
    spec.metp.store_qkv = true;
    let e = b.run_unit(&spec).unwrap_err().to_string();
    assert!(
        e.contains("--metp-store-qkv") && e.lines().count() == 1,
        "{e}"
    );
}

/// The twelve attention calls of the shared H200 file (PyTorch's FlashAttention), timed with
/// this backend's kernel: a side-by-side table in the log (the speed is reported, not asserted;
/// only sanity is).
#[test]
fn gpu_flash_speed_against_the_shared_h200_figures() {
    let Some(mut b) = backend(1) else { return };
    let text = include_str!("../../hardware-profiles/measurements/h200-pytorch-2026-11-30.json");
    let shared: serde_json::Value = serde_json::from_str(text).unwrap();
    eprintln!(
        "{:>4} {:>6} {:>6} | {:>10} {:>10} {:>6} | {:>10} {:>10} {:>6} | ours TFLOP/s fwd",
        "b", "s", "causal", "FA fwd_s", "ours", "ratio", "FA bwd_s", "ours", "ratio"
    );
    for a in shared["attention"].as_array().unwrap() {
        let g = |k: &str| a[k].as_u64().unwrap() as usize;
        let causal = a["causal"].as_bool().unwrap();
        let call = AttnCall {
            batch: g("b"),
            heads: g("heads"),
            q_tokens: g("s"),
            kv_tokens: g("s"),
            head_dim: 128,
            causal,
        };
        let f = b.attention_s(call, Pass::Forward).unwrap();
        let bw = b.attention_s(call, Pass::Backward).unwrap();
        let (ff, fb) = (a["fwd_s"].as_f64().unwrap(), a["bwd_s"].as_f64().unwrap());
        eprintln!(
            "{:>4} {:>6} {:>6} | {ff:>10.3e} {f:>10.3e} {:>6.2} | {fb:>10.3e} {bw:>10.3e} {:>6.2} | {:.0}",
            call.batch,
            call.q_tokens,
            causal,
            f / ff,
            bw / fb,
            call.flops(Pass::Forward) / f / 1e12
        );
        assert!(f > 0.0 && bw > 0.0 && f.is_finite() && bw.is_finite());
    }
}
