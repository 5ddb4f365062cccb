//! The CPU backend: virtual devices, one thread each ([`device`]), METP's and TP's units on them
//! ([`units`]), its f32 nalgebra kernels, and its channels as links — unthrottled, or throttled
//! to a chosen bandwidth and latency (`--link-bandwidth`, `--link-latency`). [`CpuBackend`]
//! measures them for `calibrate` and `run`.
//!
//! Kernels are timed on all `devices` threads at once (each thread its own data, started
//! together), because that is how a unit runs: p devices share the host's cores and memory.
//! Each figure is the median per-call time over every thread's repetitions. Messages are timed
//! by ping-pong between two devices (half the round trip, through `Device::send` and
//! `Device::recv`, so the receive-buffer allocation and the copy are included). The slowdown
//! is a GEMM timed alone and while a peer streams messages into its device.
//!
//! Times are the kernels' own (`Timing::Device`: a kernel is a function call, there is no host
//! issuing ahead of a device). In the kernel model a virtual device is one "SM": it runs one
//! tile after another (`gpu.sm_count` = 1), with small tiles (see `calibrate::profile`).
//!
//! Depends on the backend's trait and shared parts (`backend::unit`, `backend::repeat`),
//! `config` and `memory`; never on `backend::cuda`, `backend::mock`, `fitting` or `calibrate`.

pub mod device;
pub mod units;

use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::backend::cpu::device::{run_devices, Device};
use crate::backend::cpu::units::attention::BlockBench;
use crate::backend::cpu::units::run_unit;
use crate::backend::repeat::median;
use crate::backend::unit::device::{Dtype, Link, Mat, Tag};
use crate::backend::unit::mlp::gelu_f32;
use crate::backend::unit::rng::SplitMix64;
use crate::backend::unit::{random_mat, RunReport, RunSpec};
use crate::backend::{AttnCall, Backend, GemmShape, Pass, SlowdownSample, Timing};
use crate::config::UnitSupport;
use crate::error::{Error, Result};

/// The CPU backend.
#[derive(Debug, Clone)]
pub struct CpuBackend {
    devices: usize,
    link: Option<Link>,
    min_time: Duration,
    min_reps: usize,
}

/// The host's 1-minute load average (Linux), if readable.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// How much slower each device computes with `p` devices than with the `calibrated` devices a
/// profile was measured with, when devices outnumber the cores and share them:
/// `max(1, p/cores) / max(1, calibrated/cores)`.
pub fn contention_scale(p: usize, calibrated: usize) -> f64 {
    let c = cores() as f64;
    (p as f64 / c).max(1.0) / (calibrated as f64 / c).max(1.0)
}

impl CpuBackend {
    /// A backend measuring on `devices` threads at once; `quick` shortens every measurement.
    pub fn new(devices: usize, link: Option<Link>, quick: bool) -> Result<CpuBackend> {
        if devices == 0 {
            return Err(Error::arg("--devices", "must be positive"));
        }
        if let Some(l) = link {
            if !(l.bandwidth_bytes_per_s.is_finite() && l.bandwidth_bytes_per_s > 0.0) {
                return Err(Error::arg("--link-bandwidth", "must be a positive number"));
            }
            if !(l.latency_s.is_finite() && l.latency_s >= 0.0) {
                return Err(Error::arg(
                    "--link-latency",
                    "must be a non-negative number",
                ));
            }
        }
        Ok(CpuBackend {
            devices,
            link,
            min_time: Duration::from_millis(if quick { 4 } else { 40 }),
            min_reps: if quick { 3 } else { 5 },
        })
    }

    /// Times `call` on every device thread at once; returns the median seconds per call.
    fn concurrent<S>(
        &self,
        setup: impl Fn(usize) -> S + Sync,
        call: impl Fn(&mut S) + Sync,
    ) -> Result<f64> {
        let n = self.devices;
        let barrier = Barrier::new(n);
        let mut all: Vec<f64> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|t| {
                    let (setup, call, barrier) = (&setup, &call, &barrier);
                    let (min_time, min_reps) = (self.min_time, self.min_reps);
                    scope.spawn(move || {
                        let mut state = setup(t);
                        call(&mut state);
                        barrier.wait();
                        let start = Instant::now();
                        let mut times = Vec::new();
                        while times.len() < min_reps
                            || (start.elapsed() < min_time && times.len() < 10_000)
                        {
                            let t0 = Instant::now();
                            call(&mut state);
                            times.push(t0.elapsed().as_secs_f64());
                        }
                        times
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        if all.is_empty() {
            return Err(Error::Calibration {
                message: "a measurement thread failed".into(),
            });
        }
        Ok(median(&mut all))
    }

    fn message_reps(&self, bytes: u64) -> usize {
        let est = match self.link {
            Some(l) => l.latency_s + bytes as f64 / l.bandwidth_bytes_per_s,
            None => 1e-6 + bytes as f64 / 2e9,
        };
        let want = self.min_time.as_secs_f64() / (2.0 * est);
        (want as usize).clamp(self.min_reps, 40)
    }
}

fn payload(bytes: u64) -> Mat {
    Mat::zeros((bytes.div_ceil(2)).max(1) as usize, 1)
}

fn probe(id: usize) -> Tag {
    Tag::Probe { id: id as u32 }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }
    fn support(&self) -> UnitSupport {
        units::SUPPORT
    }

    fn device(&self) -> String {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        format!(
            "CPU virtual device: one thread of {model} ({} cores), f32 nalgebra kernels, {} build",
            cores(),
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        )
    }

    fn devices(&self) -> usize {
        self.devices
    }

    fn memory_bytes(&self) -> u64 {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
            .map(|kb| kb * 1024)
            .unwrap_or(1 << 30)
    }

    fn link(&self) -> Option<Link> {
        self.link
    }

    fn gemm_s(&mut self, g: GemmShape) -> Result<f64> {
        self.concurrent(
            |t| {
                let mut rng = SplitMix64::new(7 + t as u64);
                (
                    random_mat(g.m, g.k, 1.0, &mut rng),
                    random_mat(g.k, g.n, 1.0, &mut rng),
                    Mat::zeros(g.m, g.n),
                )
            },
            |(a, b, c)| c.gemm(1.0, a, b, 0.0),
        )
    }

    fn attention_s(&mut self, a: AttnCall, pass: Pass) -> Result<f64> {
        // The runtime's attention block (units::attention) is square and unmasked: a ring
        // step's block. Other shapes are not what the CPU units run.
        if a.q_tokens != a.kv_tokens || a.causal {
            return Err(Error::Calibration {
                message: format!(
                    "cpu backend: attention calls are the runtime's square unmasked blocks; \
                     asked for {} queries × {} keys{}",
                    a.q_tokens,
                    a.kv_tokens,
                    if a.causal { ", causal" } else { "" }
                ),
            });
        }
        self.concurrent(
            |t| BlockBench::new(a.batch, a.q_tokens, a.heads, a.head_dim, 11 + t as u64),
            |bench| match pass {
                Pass::Forward => bench.forward(),
                Pass::Backward => bench.backward(),
            },
        )
    }

    fn elementwise_s(&mut self, bytes: u64) -> Result<f64> {
        let n = (bytes / 4).max(1) as usize;
        self.concurrent(
            |t| random_mat(n, 1, 2.0, &mut SplitMix64::new(13 + t as u64)),
            |x| {
                let y = x.map(gelu_f32);
                std::hint::black_box(y);
            },
        )
    }

    fn copy_s(&mut self, bytes: u64) -> Result<f64> {
        let n = (bytes / 4).max(1) as usize;
        self.concurrent(
            |t| random_mat(n, 1, 1.0, &mut SplitMix64::new(19 + t as u64)),
            |x| {
                std::hint::black_box(x.clone());
            },
        )
    }

    fn transfer_s(&mut self, bytes: u64) -> Result<f64> {
        let reps = self.message_reps(bytes);
        let warm = 2;
        let data = payload(bytes);
        let shape = [(data.nrows(), 1, Dtype::Bf16)];
        let (runs, _) = run_devices(2, self.link, |dev: &mut Device| {
            let mut times = Vec::new();
            for r in 0..warm + reps {
                if dev.rank == 0 {
                    let t0 = Instant::now();
                    dev.send(1, probe(2 * r), vec![(data.clone(), Dtype::Bf16)])?;
                    dev.recv(1, probe(2 * r + 1), "probe.recv", &shape)?;
                    if r >= warm {
                        times.push(t0.elapsed().as_secs_f64() / 2.0);
                    }
                } else {
                    dev.recv(0, probe(2 * r), "probe.recv", &shape)?;
                    dev.send(0, probe(2 * r + 1), vec![(data.clone(), Dtype::Bf16)])?;
                }
            }
            Ok(times)
        })?;
        let mut t: Vec<f64> = runs.into_iter().flat_map(|r| r.output).collect();
        Ok(median(&mut t))
    }

    fn slowdown(&mut self, g: GemmShape, bytes: u64) -> Result<SlowdownSample> {
        const GO: usize = 1_000_000;
        const COUNT: usize = 1_000_001;
        const MAX_MESSAGES: usize = 64;
        let bytes = bytes.clamp(2, 1 << 18);
        let data = payload(bytes);
        let shape = [(data.nrows(), 1, Dtype::Bf16)];
        let reps = self.min_reps.max(3);
        let (runs, _) = run_devices(2, self.link, |dev: &mut Device| {
            if dev.rank == 1 {
                let mut rng = SplitMix64::new(17);
                let a = random_mat(g.m, g.k, 1.0, &mut rng);
                let b = random_mat(g.k, g.n, 1.0, &mut rng);
                let mut c = Mat::zeros(g.m, g.n);
                let timed = |c: &mut Mat| {
                    let mut v: Vec<f64> = (0..reps)
                        .map(|_| {
                            let t0 = Instant::now();
                            c.gemm(1.0, &a, &b, 0.0);
                            t0.elapsed().as_secs_f64()
                        })
                        .collect();
                    median(&mut v)
                };
                c.gemm(1.0, &a, &b, 0.0);
                let alone = timed(&mut c);
                let span = Mat::from_element(1, 1, (alone * reps as f64) as f32);
                dev.send(0, probe(GO), vec![(span, Dtype::Fp32)])?;
                let with = timed(&mut c);
                let count = dev.recv(0, probe(COUNT), "probe.recv", &[(1, 1, Dtype::Fp32)])?;
                let count = count[0][(0, 0)] as usize;
                for k in 0..count {
                    dev.recv(0, probe(k), "probe.recv", &shape)?;
                }
                Ok(vec![alone, with])
            } else {
                let span = dev.recv(1, probe(GO), "probe.recv", &[(1, 1, Dtype::Fp32)])?;
                let span = Duration::from_secs_f64(f64::from(span[0][(0, 0)]).max(1e-4));
                let t0 = Instant::now();
                let mut sent = 0;
                while t0.elapsed() < span && sent < MAX_MESSAGES {
                    dev.send(1, probe(sent), vec![(data.clone(), Dtype::Bf16)])?;
                    sent += 1;
                }
                let count = Mat::from_element(1, 1, sent as f32);
                dev.send(1, probe(COUNT), vec![(count, Dtype::Fp32)])?;
                Ok(vec![])
            }
        })?;
        let v: Vec<f64> = runs.into_iter().flat_map(|r| r.output).collect();
        match v.as_slice() {
            [alone, with] => Ok(SlowdownSample {
                alone_s: *alone,
                with_transfer_s: *with,
            }),
            _ => Err(Error::Calibration {
                message: "slowdown measurement returned no sample".into(),
            }),
        }
    }

    fn compute_scale(&self, p: usize, profile_devices: usize) -> f64 {
        contention_scale(p, profile_devices)
    }

    fn timing(&self) -> Timing {
        Timing::Device
    }

    fn run_unit(&mut self, spec: &RunSpec) -> Result<RunReport> {
        let mut s = *spec;
        if s.link.is_none() {
            s.link = self.link;
        }
        run_unit(&s)
    }
}
