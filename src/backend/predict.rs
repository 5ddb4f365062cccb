//! Predicted time of an executed unit from a hardware profile, priced ring step by ring step
//! (what `calibrate` and `run` compare with the measured time).
//!
//! Each device's program (`backend::cpu::units`, or the CUDA units: [`Runtime`]) is written down as a timeline of serial segments and ring
//! steps, each a list of kernels — GEMMs of the exact shapes the runtime multiplies, fused
//! attention blocks, element-wise passes (GeLU, copies, accumulator set-up) — and messages.
//! Kernels are priced by the cost model's kernel model ([`CostModel::kernel_s`]: the shape of
//! each call), messages as `α + bytes/B`. A ring step with double buffering lasts
//! `max(C, M)` — `C + σ·M` when the compute C is longer than the transfers M posted before it
//! (σ = the profile's overlap slowdown) — plus the transfers that can only start after the
//! compute (the traveling dK/dV and MLP gradient accumulators); with one receive buffer it
//! lasts `C + M`. Weight-shard fetches of the attention outer loop are exposed where the
//! runtime's relay order makes them so (see [`weight_wait_hops`]); a ring all-reduce (TP) is
//! `2(p−1)` blocking steps of `α + (bytes/p)/B`. The unit's time is the largest device total
//! (devices differ under a causal mask).
//!
//! Not modelled: thread start-up, allocation, and the small per-row work the runtime does
//! outside the listed kernels. Depends on `config`, `cost`, `backend::unit` and the backend's
//! shapes (plain data); never on `backend::cpu` or `backend::cuda`: the programs are written
//! down here, not run.

use serde::Serialize;

use super::{AttnCall, GemmShape, Pass, Runtime};
use crate::backend::unit::device::{Link, Phase};
use crate::backend::unit::{ExecMethod, RunSpec, Unit};
use crate::config::{Hardware, WeightExchange};
use crate::cost::CostModel;
use crate::schedule::KernelShape;

/// One kernel of a timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Work {
    /// A GEMM.
    Gemm(GemmShape),
    /// A fused attention call.
    Attention(AttnCall, Pass),
    /// An element-wise pass moving this many bytes (4 per bf16 element: read and write).
    Elementwise(u64),
    /// A plain copy of a contiguous buffer moving this many bytes.
    Copy(u64),
}

impl Work {
    /// The kernel shape the cost model prices.
    pub fn shape(&self) -> KernelShape {
        match *self {
            Work::Gemm(g) => KernelShape::gemm(g.m as u64, g.n as u64, g.k as u64),
            Work::Attention(a, pass) => KernelShape::Attention(a.shape(pass)),
            Work::Elementwise(bytes) => KernelShape::Elementwise { bytes },
            Work::Copy(bytes) => KernelShape::Copy { bytes },
        }
    }
}

/// A contiguous copy of `elements` values.
fn cp(elements: usize) -> Work {
    Work::Copy(4 * elements as u64)
}

/// Element-wise work over `elements` values.
fn ew(elements: usize) -> Work {
    Work::Elementwise(4 * elements as u64)
}

/// A part of a device's timeline.
#[derive(Debug, Clone)]
enum Seg {
    /// Kernels one after the other, then `wait_s_factor` exposed messages of `bytes`.
    Serial {
        work: Vec<Work>,
        /// Exposed messages: (count, bytes each).
        exposed: Vec<(f64, u64)>,
    },
    /// One ring step.
    Step {
        phase: Phase,
        group: usize,
        step: usize,
        work: Vec<Work>,
        /// Messages posted before the compute (overlapped with it when double buffered).
        before: Vec<u64>,
        /// Messages that can start only after the compute.
        after: Vec<u64>,
    },
    /// A blocking ring all-reduce of `bytes` (TP).
    AllReduce { bytes: u64, elements: usize },
    /// Where the forward pass ends.
    EndForward,
}

/// A step's predicted timing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepPrediction {
    /// Ring.
    pub phase: Phase,
    /// Head group (attention) or 0.
    pub group: u32,
    /// Ring step.
    pub step: u32,
    /// Compute seconds.
    pub compute_s: f64,
    /// Transfer seconds (before and after the compute).
    pub transfer_s: f64,
    /// Step duration.
    pub duration_s: f64,
}

/// A unit's predicted time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// The slowest device's total.
    pub time_s: f64,
    /// That device's compute seconds.
    pub compute_s: f64,
    /// That device's exposed communication seconds (`time − compute`).
    pub exposed_communication_s: f64,
    /// The slowest device.
    pub critical_device: usize,
    /// Its ring steps (METP).
    pub steps: Vec<StepPrediction>,
}

/// Knobs of a prediction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PredictOptions {
    /// The link the run uses (a CPU throttle); `None`: the profile's intra-node link.
    pub link: Option<Link>,
    /// Multiplies every compute time (CPU: more virtual devices than cores share them).
    pub compute_scale: f64,
    /// Price the forward pass only (backends that run forward units).
    pub forward_only: bool,
    /// Multiplies every message time (emulated devices sharing one copy stream).
    pub transfer_scale: f64,
    /// Whose program the devices run (the kernels differ where the runtimes differ).
    pub runtime: Runtime,
}

impl Default for PredictOptions {
    fn default() -> Self {
        PredictOptions {
            link: None,
            compute_scale: 1.0,
            forward_only: false,
            transfer_scale: 1.0,
            runtime: Runtime::Cpu,
        }
    }
}

/// How many weight-shard messages device `i` waits for, exposed, before head group `g`
/// (attention outer loop), following the runtime's order: the owner sends its shard at the
/// group (one group ahead with two buffers, and group 0 at the start); with ring exchange
/// every device relays a shard when it reaches that group, so a device whose predecessor is
/// not the owner waits one hop even when double buffered (group 0: one hop per device
/// between it and the owner).
pub fn weight_wait_hops(i: usize, g: usize, p: usize, rb: usize, ex: WeightExchange) -> f64 {
    if g == i || p < 2 {
        return 0.0;
    }
    let hops = ((i + p - g) % p) as f64;
    match (ex, rb) {
        (WeightExchange::Broadcast, 2) => f64::from(u8::from(g == 0)),
        (WeightExchange::Broadcast, _) => 1.0,
        (WeightExchange::Ring, 2) if g == 0 => hops,
        (WeightExchange::Ring, 2) if i == g + 1 => 0.0,
        (WeightExchange::Ring, 2) => 1.0,
        (WeightExchange::Ring, _) => hops,
    }
}

fn visible(causal: bool, i: usize, j: usize) -> bool {
    !causal || j <= i
}

/// Device `i`'s timeline for a spec, forward and backward; [`predict`] drops the backward
/// segments (those after `Seg::EndForward`) for forward-only backends.
fn timeline(spec: &RunSpec, i: usize, runtime: Runtime) -> Vec<Seg> {
    let sh = spec.shape;
    // Kernels only the CPU runtime runs: its sends' copies into the channel and its gradient
    // adds (the CUDA units send on another stream and accumulate in the GEMM).
    let cpu = runtime == Runtime::Cpu;
    let cpu_only = |w: Work| if cpu { vec![w] } else { vec![] };
    let (b, s, h, p) = (sh.b, sh.s, sh.h, sh.p);
    let rb = spec.metp.recv_buffers as usize;
    let mut v = Vec::new();
    let serial = |work: Vec<Work>| Seg::Serial {
        work,
        exposed: vec![],
    };
    match (spec.unit, spec.method) {
        (Unit::Attention, ExecMethod::Metp) => {
            let (hg, ag, d, c) = (sh.hg(), sh.ag(), sh.d(), sh.c());
            let r = b * c;
            let blk = AttnCall::block(b, c, ag, d);
            let kv_bytes = (2 * 2 * r * hg) as u64;
            let dkv_bytes = (2 * 4 * r * hg) as u64;
            let w_bytes = (2 * (h * 3 * hg + hg * h)) as u64;
            let gs_bytes = 2 * w_bytes;
            v.push(serial(vec![
                ew(r * h),
                ew(4 * h * hg),
                cp(4 * h * hg + r * h),
            ]));
            for bwd in [false, true] {
                for g in 0..p {
                    let hops = weight_wait_hops(i, g, p, rb, spec.metp.weight_exchange);
                    let mut pre = vec![];
                    if bwd {
                        pre.push(ew(hg * h));
                        pre.push(Work::Gemm(GemmShape::new(r, hg, h)));
                    }
                    pre.push(Work::Gemm(GemmShape::new(r, 3 * hg, h)));
                    if bwd {
                        pre.push(ew(r * hg));
                        pre.push(cp(3 * r * hg));
                    } else {
                        pre.push(cp(r * hg + r * ag));
                    }
                    v.push(Seg::Serial {
                        work: pre,
                        exposed: vec![(hops, w_bytes)],
                    });
                    for t in 0..p {
                        let j = (i + p - t) % p;
                        let mut work = vec![];
                        let mut before = vec![];
                        if t + 1 < p {
                            work.extend(cpu_only(ew(2 * r * hg)));
                            before.push(kv_bytes);
                        }
                        if visible(spec.causal, i, j) {
                            let pass = if bwd { Pass::Backward } else { Pass::Forward };
                            work.push(Work::Attention(blk, pass));
                        }
                        let mut after = vec![];
                        if bwd && p > 1 {
                            work.extend(cpu_only(cp(2 * r * hg)));
                            after.push(dkv_bytes);
                        }
                        v.push(Seg::Step {
                            phase: if bwd {
                                Phase::BwdAttention
                            } else {
                                Phase::FwdAttention
                            },
                            group: g,
                            step: t,
                            work,
                            before,
                            after,
                        });
                    }
                    if !bwd {
                        v.push(serial(vec![
                            cp(r * hg),
                            Work::Gemm(GemmShape::new(r, h, hg)),
                        ]));
                    } else {
                        let owner_adds = if g == i { p - 1 } else { 0 };
                        v.push(Seg::Serial {
                            work: vec![
                                ew(3 * r * hg),
                                ew(3 * h * hg),
                                Work::Gemm(GemmShape::new(r, h, 3 * hg)),
                                Work::Gemm(GemmShape::new(h, 3 * hg, r)),
                                Work::Gemm(GemmShape::new(hg, h, r)),
                                ew(owner_adds * 4 * h * hg),
                            ],
                            exposed: vec![(f64::from(u8::from(g == i && p > 1)), gs_bytes)],
                        });
                    }
                }
                if !bwd {
                    v.push(Seg::EndForward);
                    v.push(serial(vec![ew(r * h), cp(r * h)]));
                }
            }
        }
        (Unit::Mlp, ExecMethod::Metp) => {
            let (fp, c) = (sh.fp(), sh.c());
            let r = b * c;
            let ws = (2 * 2 * h * fp) as u64;
            let gsb = 2 * ws;
            v.push(serial(vec![
                ew(r * h),
                ew(2 * h * fp),
                cp(r * h + 2 * h * fp),
            ]));
            for bwd in [false, true] {
                for t in 0..p {
                    let mut work = vec![];
                    let mut before = vec![];
                    let mut after = vec![];
                    if t + 1 < p {
                        work.extend(cpu_only(cp(2 * h * fp)));
                        before.push(ws);
                    }
                    work.push(Work::Gemm(GemmShape::new(r, fp, h)));
                    work.push(ew(r * fp));
                    if bwd {
                        work.extend(cpu_only(ew(h * fp)));
                        work.push(Work::Gemm(GemmShape::new(r, fp, h)));
                        work.push(ew(r * fp));
                        work.push(Work::Gemm(GemmShape::new(fp, h, r)));
                        work.push(Work::Gemm(GemmShape::new(h, fp, r)));
                        work.extend(cpu_only(ew(h * fp)));
                        work.push(Work::Gemm(GemmShape::new(r, h, fp)));
                        if p > 1 {
                            work.extend(cpu_only(cp(2 * h * fp)));
                            after.push(gsb);
                        }
                    } else {
                        work.push(Work::Gemm(GemmShape::new(r, h, fp)));
                    }
                    v.push(Seg::Step {
                        phase: if bwd { Phase::BwdMlp } else { Phase::FwdMlp },
                        group: 0,
                        step: t,
                        work,
                        before,
                        after,
                    });
                }
                if !bwd {
                    v.push(Seg::EndForward);
                    v.push(serial(vec![ew(r * h), cp(r * h)]));
                }
            }
            v.push(serial(vec![ew(2 * h * fp)]));
        }
        (Unit::Attention, ExecMethod::Tp) => {
            let (hg, ag, d) = (sh.hg(), sh.ag(), sh.d());
            let r = b * s;
            let blk = AttnCall::block(b, s, ag, d);
            let mut first = cpu_only(cp(r * h));
            first.extend(cpu_only(ew(4 * h * hg)));
            first.push(Work::Gemm(GemmShape::new(r, 3 * hg, h)));
            v.push(serial(
                [
                    first,
                    vec![
                        cp(r * hg + r * ag),
                        Work::Attention(blk, Pass::Forward),
                        ew(r * hg),
                        Work::Gemm(GemmShape::new(r, h, hg)),
                    ],
                ]
                .concat(),
            ));
            v.push(Seg::AllReduce {
                bytes: (2 * r * h) as u64,
                elements: r * h,
            });
            v.push(Seg::EndForward);
            v.push(serial(vec![
                cp(r * h),
                Work::Gemm(GemmShape::new(r, hg, h)),
                Work::Gemm(GemmShape::new(hg, h, r)),
                ew(r * hg),
                cp(3 * r * hg),
                Work::Attention(blk, Pass::Backward),
                ew(3 * r * hg),
                Work::Gemm(GemmShape::new(h, 3 * hg, r)),
                Work::Gemm(GemmShape::new(r, h, 3 * hg)),
            ]));
            v.push(Seg::AllReduce {
                bytes: (2 * r * h) as u64,
                elements: r * h,
            });
        }
        (Unit::Mlp, ExecMethod::Tp) => {
            let fp = sh.fp();
            let r = b * s;
            let mut first = cpu_only(cp(r * h));
            first.extend(cpu_only(ew(2 * h * fp)));
            first.push(Work::Gemm(GemmShape::new(r, fp, h)));
            first.extend([ew(r * fp), Work::Gemm(GemmShape::new(r, h, fp))]);
            v.push(serial(first));
            v.push(Seg::AllReduce {
                bytes: (2 * r * h) as u64,
                elements: r * h,
            });
            v.push(Seg::EndForward);
            v.push(serial(vec![
                cp(r * h),
                Work::Gemm(GemmShape::new(r, fp, h)),
                ew(r * fp),
                Work::Gemm(GemmShape::new(fp, h, r)),
                Work::Gemm(GemmShape::new(h, fp, r)),
                Work::Gemm(GemmShape::new(r, h, fp)),
            ]));
            v.push(Seg::AllReduce {
                bytes: (2 * r * h) as u64,
                elements: r * h,
            });
        }
    }
    v
}

/// Every distinct kernel a unit runs, on any device (what calibration measures so that the
/// profile's tables hold these exact sizes).
pub fn unit_work(spec: &RunSpec) -> Vec<Work> {
    let mut all = std::collections::BTreeSet::new();
    for i in 0..spec.shape.p {
        for seg in timeline(spec, i, Runtime::Cpu) {
            let work = match seg {
                Seg::Serial { work, .. } | Seg::Step { work, .. } => work,
                Seg::AllReduce { elements, .. } => vec![ew(elements / spec.shape.p.max(1))],
                Seg::EndForward => vec![],
            };
            all.extend(
                work.into_iter()
                    .filter(|w| !matches!(w, Work::Elementwise(0) | Work::Copy(_))),
            );
        }
    }
    all.into_iter().collect()
}

/// Prices kernels and messages on a profile.
pub struct Pricer<'a> {
    cost: CostModel<'a>,
    link: Link,
    sigma: f64,
    scale: f64,
    transfer_scale: f64,
}

impl<'a> Pricer<'a> {
    /// A pricer for `hw` with `opts`.
    pub fn new(hw: &'a Hardware, opts: PredictOptions) -> Pricer<'a> {
        let link = opts.link.unwrap_or(Link {
            bandwidth_bytes_per_s: hw.intra_node.bytes_per_s_per_direction.value,
            latency_s: hw.intra_node.p2p_latency_s.value,
        });
        Pricer {
            cost: CostModel::new(hw),
            link,
            sigma: hw.overlap_compute_slowdown_fraction.value,
            scale: opts.compute_scale,
            transfer_scale: opts.transfer_scale,
        }
    }

    /// Seconds of one kernel inside the unit: the cost model's in-stream price at the
    /// calibrated clock — a unit runs for a moment, not the seconds of a training step whose
    /// GEMMs hold the profile's `step_clock_fraction`.
    pub fn work_s(&self, w: Work) -> f64 {
        self.cost.short_run_kernel_s(&w.shape()) * self.scale
    }

    /// Seconds of one message.
    pub fn message_s(&self, bytes: u64) -> f64 {
        (self.link.latency_s + bytes as f64 / self.link.bandwidth_bytes_per_s) * self.transfer_scale
    }
}

/// Predicts a unit's time on a profile.
pub fn predict(spec: &RunSpec, hw: &Hardware, opts: PredictOptions) -> Prediction {
    let pr = Pricer::new(hw, opts);
    let p = spec.shape.p;
    let mut best: Option<Prediction> = None;
    for i in 0..p {
        let (mut total, mut compute) = (0.0, 0.0);
        let mut steps = Vec::new();
        for seg in timeline(spec, i, opts.runtime) {
            match seg {
                Seg::EndForward if opts.forward_only => break,
                Seg::EndForward => {}
                Seg::Serial { work, exposed } => {
                    let c: f64 = work.iter().map(|&w| pr.work_s(w)).sum();
                    let m: f64 = exposed
                        .iter()
                        .map(|&(n, bytes)| {
                            if n > 0.0 {
                                n * pr.message_s(bytes)
                            } else {
                                0.0
                            }
                        })
                        .sum();
                    compute += c;
                    total += c + m;
                }
                Seg::Step {
                    phase,
                    group,
                    step,
                    work,
                    before,
                    after,
                } => {
                    let c: f64 = work.iter().map(|&w| pr.work_s(w)).sum();
                    let mb: f64 = before.iter().map(|&x| pr.message_s(x)).sum();
                    let ma: f64 = after.iter().map(|&x| pr.message_s(x)).sum();
                    let d = if spec.metp.recv_buffers == 2 {
                        let overlapped = if mb > c { mb } else { c + pr.sigma * mb };
                        overlapped + ma
                    } else {
                        c + mb + ma
                    };
                    compute += c;
                    total += d;
                    steps.push(StepPrediction {
                        phase,
                        group: group as u32,
                        step: step as u32,
                        compute_s: c,
                        transfer_s: mb + ma,
                        duration_s: d,
                    });
                }
                Seg::AllReduce { bytes, elements } => {
                    let chunk = bytes / p.max(1) as u64;
                    let e = elements / p.max(1);
                    // Each of the p − 1 reduce-scatter steps adds a received chunk, each of
                    // the p − 1 all-gather steps copies one in: the CPU runtime prices both
                    // per step; the CUDA units run one add (two bf16 read, one written) or one
                    // copy.
                    let work = match opts.runtime {
                        Runtime::Cpu => pr.work_s(cp(e)) + pr.work_s(ew(e)),
                        Runtime::Cuda => {
                            0.5 * (pr.work_s(Work::Elementwise(6 * e as u64)) + pr.work_s(cp(e)))
                        }
                    };
                    // Devices sharing one GPU (CUDA, one after the other): the p chunks of a
                    // step travel one after the other on the copy stream while the compute
                    // stream adds each as soon as it has arrived, so a step lasts the longer of
                    // the p copies and the first copy plus the p adds.
                    let per = match opts.runtime {
                        Runtime::Cpu => pr.message_s(chunk) + work,
                        Runtime::Cuda => {
                            let m = pr.message_s(chunk);
                            m.max(m / opts.transfer_scale.max(1.0) + work)
                        }
                    };
                    let n = 2.0 * (p as f64 - 1.0);
                    compute += n * work;
                    total += n * per;
                }
            }
        }
        if best.as_ref().is_none_or(|b| total > b.time_s) {
            best = Some(Prediction {
                time_s: total,
                compute_s: compute,
                exposed_communication_s: total - compute,
                critical_device: i,
                steps,
            });
        }
    }
    best.unwrap_or(Prediction {
        time_s: 0.0,
        compute_s: 0.0,
        exposed_communication_s: 0.0,
        critical_device: 0,
        steps: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calib_weight_wait_follows_the_relay_order() {
        use WeightExchange::*;
        // Own shard: never waits.
        assert_eq!(weight_wait_hops(2, 2, 4, 2, Ring), 0.0);
        // Group 0, ring: one hop per device between owner 0 and device i.
        assert_eq!(weight_wait_hops(3, 0, 4, 2, Ring), 3.0);
        // Double buffered, predecessor is the owner: sent a group ahead.
        assert_eq!(weight_wait_hops(2, 1, 4, 2, Ring), 0.0);
        assert_eq!(weight_wait_hops(3, 1, 4, 2, Ring), 1.0);
        // Broadcast: one message; hidden after group 0 when double buffered.
        assert_eq!(weight_wait_hops(3, 1, 4, 2, Broadcast), 0.0);
        assert_eq!(weight_wait_hops(3, 1, 4, 1, Broadcast), 1.0);
        assert_eq!(weight_wait_hops(3, 1, 4, 1, Ring), 2.0);
    }
}

#[cfg(test)]
mod forward_tests {
    use super::*;
    use crate::backend::unit::Shape;

    #[test]
    fn calib_forward_only_prices_the_forward_rings_alone() {
        let hw = crate::backend::mock::MockBackend::truth_profile();
        let sh = Shape {
            b: 1,
            s: 64,
            h: 32,
            a: 4,
            f: 128,
            p: 2,
        };
        for unit in [Unit::Attention, Unit::Mlp] {
            for method in [ExecMethod::Metp, ExecMethod::Tp] {
                let spec = RunSpec::new(unit, method, sh);
                let full = predict(&spec, &hw, PredictOptions::default());
                let fwd = predict(
                    &spec,
                    &hw,
                    PredictOptions {
                        forward_only: true,
                        ..Default::default()
                    },
                );
                assert!(
                    fwd.time_s > 0.0 && fwd.time_s < full.time_s,
                    "{unit:?} {method:?}"
                );
                assert!(fwd
                    .steps
                    .iter()
                    .all(|s| matches!(s.phase, Phase::FwdAttention | Phase::FwdMlp)));
            }
        }
    }
}
