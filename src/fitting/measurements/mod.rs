//! Kernel and link measurements as a file: the format of `../shared/gpu-data/h200-2026-11-30.json`
//! (timings taken with PyTorch on one H200), extended with what the CUDA backend of
//! `calibrate` measures (attention calls of any shape, point-to-point messages, collectives,
//! compute slowdown under traffic) and with what `scripts/gpu-dist.py` measures under torchrun
//! on several GPUs (ring steps of all ranks at once: [`P2pSample::ranks`]; every GPU's GEMMs,
//! GPU r as measurement session r). `calibrate --fit FILE` fits a profile's kernel model from
//! such a file; `kernels --input FILE --compare` prices every entry and reports the error.
//!
//! Every time is seconds per call as measured (for the shared file: the median of 10 calls
//! timed with CUDA events, launch included). Optional fields default as the shared file
//! implies: attention `head_dim` 128, `q_tokens` = `kv_tokens` = `s`, `kv_heads` = `heads`.
//!
//! Depends on `config` (the strict JSON reader), `schedule`'s kernel shapes, `backend`'s
//! `Timing` and `error`; never on `calibrate`, `sim` or the fit it feeds.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::backend::Timing;
use crate::error::{Error, Result};
use crate::schedule::{Attention, AttnPass, KernelShape};

/// One file of measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelMeasurements {
    /// How the figures were taken, in words.
    pub what: String,
    /// `YYYY-MM-DD`.
    pub date: String,
    /// The device measured ("NVIDIA H200").
    pub device: String,
    /// The software that ran the kernels ("torch 2.11.0+cu130", "metp-sim 0.2.0 cuda").
    pub software: String,
    /// Streaming multiprocessors of the device, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_count: Option<u64>,
    /// What a time includes: `isolated` (default: one call timed with events around it, launch
    /// latency included, as the shared file's were) or `device` (the kernel alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// GEMMs.
    #[serde(default)]
    pub gemm: Vec<GemmSample>,
    /// Fused attention calls, forward and (where measured) backward.
    #[serde(default)]
    pub attention: Vec<AttentionSample>,
    /// Device-local copies and element-wise passes.
    #[serde(default)]
    pub copy: Vec<CopySample>,
    /// Host time of one eager op (the per-call overhead a framework adds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager_op_s: Option<f64>,
    /// Point-to-point messages between two devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub p2p: Vec<P2pSample>,
    /// Collectives over several devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collectives: Vec<CollectiveSample>,
    /// A GEMM timed alone and while communication runs on the same device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlap: Vec<OverlapSample>,
}

/// The GEMMs of `files` joined, each file's sessions numbered after the previous files' (the
/// first file's stay 0, 1, …), so that each file keeps a clock of its own in the fit.
fn sessions_numbered(files: &[KernelMeasurements]) -> Vec<GemmSample> {
    let mut out = Vec::new();
    let mut offset = 0;
    for f in files {
        out.extend(f.gemm.iter().map(|g| {
            let session = offset + g.session.unwrap_or(0);
            GemmSample {
                session: (session > 0).then_some(session),
                ..g.clone()
            }
        }));
        offset += f.gemm_sessions();
    }
    out
}

/// One measured kernel: its shape and time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// What ran.
    pub shape: KernelShape,
    /// Seconds per call.
    pub measured_s: f64,
    /// The measurement session it comes from (0: the file's first; see [`GemmSample::session`]).
    pub session: u32,
}

/// An m×k by k×n bf16 matrix product (fp32 accumulation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmSample {
    /// Rows of the product.
    pub m: u64,
    /// Columns of the product.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// 2mnk (informative; recomputed by readers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops: Option<f64>,
    /// Seconds per call.
    pub s: f64,
    /// Which measurement session timed it, when a file joins several (`gpu-check merge` numbers
    /// the files it joins 0, 1, …; absent = 0, the first). GEMMs only: two H200 sessions timed
    /// the same square GEMMs 15–21% apart while their attention calls and copies agreed within
    /// 5% — the tensor-core clock a session runs at (power and thermal state, the board) moves
    /// GEMMs, which run closest to the power limit — so the fit gives every later session one
    /// clock factor of its own against the first (`kernel_fit`). `scripts/gpu-dist.py` numbers
    /// the GPUs of one node so (GPU r: session r): each board runs at a clock of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u32>,
}

/// A fused attention call over `b` sequences × `heads` heads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionSample {
    /// Sequences in the call.
    pub b: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads (GQA); default `heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<u64>,
    /// Sequence length when queries and keys are the same length (the shared file's form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s: Option<u64>,
    /// Query tokens per sequence (default `s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q_tokens: Option<u64>,
    /// Key/value tokens per sequence (default `s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_tokens: Option<u64>,
    /// Head dimension (default 128).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<u64>,
    /// Causal mask (queries and keys aligned at the end, as FlashAttention does).
    pub causal: bool,
    /// Forward FLOPs as counted by the file's author (informative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fwd_flops: Option<f64>,
    /// Seconds per forward call.
    pub fwd_s: f64,
    /// Seconds per backward call (forward + backward minus forward), when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bwd_s: Option<f64>,
}

impl AttentionSample {
    /// Query tokens per sequence.
    pub fn q(&self) -> u64 {
        self.q_tokens.or(self.s).unwrap_or(0)
    }
    /// Key/value tokens per sequence.
    pub fn kv(&self) -> u64 {
        self.kv_tokens.or(self.s).unwrap_or(0)
    }
    /// Head dimension.
    pub fn d(&self) -> u64 {
        self.head_dim.unwrap_or(128)
    }
}

/// A device-local copy (`copy_s`) and an element-wise pass (`mul_s`) over `bytes`
/// (the buffer size: a copy reads and writes it once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopySample {
    /// Buffer size.
    pub bytes: u64,
    /// Seconds per device-to-device copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_s: Option<f64>,
    /// Seconds per element-wise multiply (one input, one output of `bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mul_s: Option<f64>,
}

/// One message between two devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2pSample {
    /// Sending device.
    pub from: u32,
    /// Receiving device.
    pub to: u32,
    /// Message size.
    pub bytes: u64,
    /// Seconds per message.
    pub s: f64,
    /// How it was carried ("nccl", "copy-emulation").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// A multi-rank sample: the message was one of a ring step in which all `ranks` ranks sent
    /// one to their successor at once (METP's ring step, nccl-tests' `sendrecv`;
    /// `scripts/gpu-dist.py`), and `s` is the step's time, the slowest rank's. Absent: one
    /// message between two devices alone. The fit takes both alike: the simulator carries each
    /// message of a ring step on its own ports, `α + bytes/B`, as one alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<u32>,
}

/// `Err` saying why a ring step's rank count does not hold its sender and receiver (a
/// multi-rank sample, [`P2pSample::ranks`]).
fn p2p_ranks_ok(p: &P2pSample) -> std::result::Result<(), String> {
    let Some(n) = p.ranks else { return Ok(()) };
    let most = crate::config::limits::MAX_GPUS;
    if n < 2 || u64::from(n) > most {
        return Err(format!(
            "must be between 2 and {most} (the ranks of one ring step)"
        ));
    }
    if p.from >= n || p.to >= n || p.from == p.to {
        return Err(format!(
            "a ring step of {n} ranks cannot carry a message from rank {} to rank {}",
            p.from, p.to
        ));
    }
    Ok(())
}

/// One collective, timed as nccl-tests does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveSample {
    /// `all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`, `broadcast`.
    pub op: String,
    /// Ranks taking part.
    pub ranks: u32,
    /// Buffer size as nccl-tests defines it for the op.
    pub bytes: u64,
    /// Seconds per call.
    pub s: f64,
    /// nccl-tests' bus bandwidth (algorithm bandwidth × the op's factor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_bytes_per_s: Option<f64>,
}

/// A GEMM alone and while communication of `traffic_bytes` messages runs on its device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlapSample {
    /// The GEMM.
    pub m: u64,
    /// The GEMM.
    pub n: u64,
    /// The GEMM.
    pub k: u64,
    /// Size of each concurrent message.
    pub traffic_bytes: u64,
    /// What carried the traffic ("nccl", "copy-emulation").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// Seconds per GEMM alone.
    pub alone_s: f64,
    /// Seconds per GEMM with the traffic running.
    pub with_traffic_s: f64,
}

impl KernelMeasurements {
    /// Whether the best GEMM rate was measured on the plateau: the best rate among the three
    /// largest GEMMs (by FLOPs) is within `tolerance` of the best rate overall and the largest
    /// two are within `tolerance` of each other. The statement, for the profile's source.
    pub fn gemm_plateau(&self, tolerance: f64) -> String {
        let mut rates: Vec<(f64, f64)> = self
            .gemm
            .iter()
            .map(|g| {
                let f = 2.0 * g.m as f64 * g.n as f64 * g.k as f64;
                (f, f / g.s)
            })
            .collect();
        if rates.len() < 3 {
            return format!(
                "too few GEMMs ({}) to tell whether the best rate measured is the plateau",
                rates.len()
            );
        }
        rates.sort_by(|a, b| a.0.total_cmp(&b.0));
        let best = rates.iter().map(|r| r.1).fold(0.0, f64::max);
        let n = rates.len();
        let top: Vec<f64> = rates[n - 3..].iter().map(|r| r.1).collect();
        let top_best = top.iter().cloned().fold(0.0, f64::max);
        let flat = (top[2] - top[1]).abs() <= tolerance * top[2];
        if top_best >= (1.0 - tolerance) * best && flat {
            format!(
                "the best rate measured, {best:.3e} FLOP/s, is the plateau: the largest GEMMs \
                 ({:.2e} and {:.2e} FLOPs) ran within {:.0}% of each other",
                rates[n - 2].0,
                rates[n - 1].0,
                100.0 * tolerance
            )
        } else {
            format!(
                "the best rate measured, {best:.3e} FLOP/s, is NOT a plateau: the largest GEMMs \
                 ran at {:.3e} and {:.3e} FLOP/s — larger sizes would be faster",
                top[1], top[2]
            )
        }
    }

    /// Reads and checks a measurement file (strict JSON: unknown fields and trailing content
    /// are errors; every time positive and finite; every size positive).
    pub fn read(path: &Path) -> Result<KernelMeasurements> {
        let m: KernelMeasurements = crate::config::read_json(path)?;
        m.validate(path)?;
        Ok(m)
    }

    /// Checks every entry against what a GPU run can produce (`super::bounds`: shapes, times,
    /// rates, one shape timed twice, messages and collectives, texts); names the first bad
    /// one, as the file names it (`gemm[3].s`).
    pub fn validate(&self, path: &Path) -> Result<()> {
        use super::bounds::{self, check_words};
        use crate::config::limits::{MAX_MEASUREMENT_SESSIONS, MAX_NAME_CHARS, MAX_TEXT_CHARS};
        let refused = |(field, message): bounds::Refusal| Error::InvalidField {
            path: path.to_path_buf(),
            field,
            message,
        };
        let refuse = |field: String, message: String| Err(refused((field, message)));
        for (field, text, max) in [
            ("what", &self.what, MAX_TEXT_CHARS),
            ("date", &self.date, MAX_NAME_CHARS),
            ("device", &self.device, MAX_NAME_CHARS),
            ("software", &self.software, MAX_NAME_CHARS),
        ] {
            check_words(field, text, max).map_err(refused)?;
        }
        if let Some(n) = self.sm_count.filter(|&n| n == 0 || n > 1_000_000) {
            return refuse("sm_count".into(), format!("{n}; from 1 to 10^6"));
        }
        for (i, g) in self.gemm.iter().enumerate() {
            if g.session.unwrap_or(0) >= MAX_MEASUREMENT_SESSIONS {
                return refuse(
                    format!("gemm[{i}].session"),
                    format!(
                        "must be below {MAX_MEASUREMENT_SESSIONS} (the sessions a file may join)"
                    ),
                );
            }
            if g.flops.is_some_and(|f| !(f.is_finite() && f >= 0.0)) {
                return refuse(format!("gemm[{i}].flops"), "not a FLOP count".into());
            }
        }
        for (i, a) in self.attention.iter().enumerate() {
            if a.fwd_flops.is_some_and(|f| !(f.is_finite() && f >= 0.0)) {
                return refuse(
                    format!("attention[{i}].fwd_flops"),
                    "not a FLOP count".into(),
                );
            }
        }
        for (i, c) in self.copy.iter().enumerate() {
            // Before `samples()` doubles it (a copy moves its buffer twice).
            if c.bytes == 0 || c.bytes as f64 > crate::config::limits::MAX_KERNEL_BYTES {
                return refuse(
                    format!("copy[{i}].bytes"),
                    format!("{}; from 1 to 2^40", c.bytes),
                );
            }
        }
        // The slowdown experiment times its GEMM its own way (and beside traffic, slower on
        // purpose): not a repeat of the GEMM grid's.
        bounds::check_kernels(&self.timed_kernels(), |entry| {
            !entry.starts_with("overlap[")
        })
        .map_err(refused)?;
        if let Some(t) = self.eager_op_s {
            bounds::check_host_op(t).map_err(|why| refused(("eager_op_s".into(), why)))?;
        }
        for (i, p) in self.p2p.iter().enumerate() {
            let entry = format!("p2p[{i}]");
            if let Some(v) = &p.via {
                check_words(&format!("{entry}.via"), v, MAX_NAME_CHARS).map_err(refused)?;
            }
            bounds::check_message(&entry, p.from, p.to, p.bytes, p.s).map_err(refused)?;
            p2p_ranks_ok(p).map_err(|why| refused((format!("{entry}.ranks"), why)))?;
        }
        for (i, c) in self.collectives.iter().enumerate() {
            let entry = format!("collectives[{i}]");
            bounds::check_collective(&entry, &c.op, c.ranks, c.bytes, c.s, c.bus_bytes_per_s)
                .map_err(refused)?;
        }
        for (i, o) in self.overlap.iter().enumerate() {
            if let Some(v) = &o.via {
                check_words(&format!("overlap[{i}].via"), v, MAX_NAME_CHARS).map_err(refused)?;
            }
            if o.traffic_bytes == 0
                || o.traffic_bytes as f64 > crate::config::limits::MAX_KERNEL_BYTES
            {
                return refuse(
                    format!("overlap[{i}].traffic_bytes"),
                    format!("{}; from 1 to 2^40", o.traffic_bytes),
                );
            }
        }
        Ok(())
    }

    /// Checks every timed kernel against the profile `hw` the file is fitted onto
    /// (`super::bounds::check_against`: no faster than its GPU).
    pub fn check_against(&self, hw: &crate::config::Hardware, path: &Path) -> Result<()> {
        super::bounds::check_kernels_against(hw, &self.timed_kernels()).map_err(
            |(field, message)| Error::InvalidField {
                path: path.to_path_buf(),
                field,
                message,
            },
        )
    }

    /// Every timed kernel of the file — (entry, shape, seconds), in file order, each entry
    /// named as the file names it (`attention[2].bwd_s`): [`KernelMeasurements::samples`] and
    /// the slowdown experiment's GEMMs.
    pub fn timed_kernels(&self) -> Vec<(String, KernelShape, f64)> {
        let mut names = Vec::new();
        names.extend((0..self.gemm.len()).map(|i| format!("gemm[{i}].s")));
        for (i, a) in self.attention.iter().enumerate() {
            names.push(format!("attention[{i}].fwd_s"));
            if a.bwd_s.is_some() {
                names.push(format!("attention[{i}].bwd_s"));
            }
        }
        for (i, c) in self.copy.iter().enumerate() {
            for (field, present) in [("copy_s", c.copy_s.is_some()), ("mul_s", c.mul_s.is_some())] {
                if present {
                    names.push(format!("copy[{i}].{field}"));
                }
            }
        }
        // `samples()` lists them in this order.
        let mut v: Vec<(String, KernelShape, f64)> = names
            .into_iter()
            .zip(self.samples())
            .map(|(n, s)| (n, s.shape, s.measured_s))
            .collect();
        for (i, o) in self.overlap.iter().enumerate() {
            let shape = KernelShape::gemm(o.m, o.n, o.k);
            v.push((format!("overlap[{i}].alone_s"), shape, o.alone_s));
            v.push((
                format!("overlap[{i}].with_traffic_s"),
                shape,
                o.with_traffic_s,
            ));
        }
        v
    }

    /// A file with no entries yet: what, date, device and software as given, times `isolated`
    /// (the default), SM count unknown.
    pub fn empty(what: &str, date: &str, device: &str, software: &str) -> KernelMeasurements {
        KernelMeasurements {
            what: what.to_string(),
            date: date.to_string(),
            device: device.to_string(),
            software: software.to_string(),
            sm_count: None,
            timing: None,
            gemm: vec![],
            attention: vec![],
            copy: vec![],
            eager_op_s: None,
            p2p: vec![],
            collectives: vec![],
            overlap: vec![],
        }
    }

    /// How the times were taken (`isolated` unless the file says otherwise).
    pub fn timing(&self) -> Timing {
        self.timing.unwrap_or(Timing::Isolated)
    }

    /// Every kernel time in the file as a shape and a time, in file order: GEMMs, attention
    /// forward and backward, copies and element-wise passes (a copy or pass over an N-byte
    /// buffer moves 2N bytes).
    pub fn samples(&self) -> Vec<Sample> {
        let mut v = Vec::new();
        for g in &self.gemm {
            v.push(Sample {
                shape: KernelShape::gemm(g.m, g.n, g.k),
                measured_s: g.s,
                session: g.session.unwrap_or(0),
            });
        }
        for a in &self.attention {
            let call = |pass| {
                KernelShape::Attention(Attention {
                    batch: a.b,
                    heads: a.heads,
                    kv_heads: a.kv_heads.unwrap_or(a.heads),
                    q_tokens: a.q(),
                    kv_tokens: a.kv(),
                    head_dim: a.d(),
                    causal: a.causal,
                    pass,
                })
            };
            v.push(Sample {
                shape: call(AttnPass::Fwd),
                measured_s: a.fwd_s,
                session: 0,
            });
            if let Some(t) = a.bwd_s {
                v.push(Sample {
                    shape: call(AttnPass::Bwd),
                    measured_s: t,
                    session: 0,
                });
            }
        }
        for c in &self.copy {
            if let Some(t) = c.copy_s {
                v.push(Sample {
                    shape: KernelShape::Copy { bytes: 2 * c.bytes },
                    measured_s: t,
                    session: 0,
                });
            }
            if let Some(t) = c.mul_s {
                v.push(Sample {
                    shape: KernelShape::Elementwise { bytes: 2 * c.bytes },
                    measured_s: t,
                    session: 0,
                });
            }
        }
        v
    }

    /// Splits the file: entry i of each kind (GEMMs, attention calls, copy sizes, messages,
    /// collectives, slowdown samples) is held out when `i % every == every − 1` — every
    /// `every`-th, starting with the `every`-th, so held-out entries are spread over the sizes —
    /// and kept for the fit otherwise. Both parts keep the host overhead. Returns (fit, held
    /// out). Deterministic.
    pub fn split(&self, every: usize) -> Result<(KernelMeasurements, KernelMeasurements)> {
        if every < 2 {
            return Err(Error::arg("--every", "must be at least 2"));
        }
        fn part<T: Clone>(v: &[T], every: usize, held: bool) -> Vec<T> {
            v.iter()
                .enumerate()
                .filter(|(i, _)| (i % every == every - 1) == held)
                .map(|(_, x)| x.clone())
                .collect()
        }
        let make = |held: bool| KernelMeasurements {
            what: format!(
                "{} [{}: every {every}th entry of each kind {} (metp-sim gpu-check split)]",
                self.what,
                if held { "held-out part" } else { "fit part" },
                if held { "kept" } else { "removed" }
            ),
            gemm: part(&self.gemm, every, held),
            attention: part(&self.attention, every, held),
            copy: part(&self.copy, every, held),
            p2p: part(&self.p2p, every, held),
            collectives: part(&self.collectives, every, held),
            overlap: part(&self.overlap, every, held),
            ..self.clone()
        };
        Ok((make(false), make(true)))
    }

    /// Several files of one device and one timing as one: their entries in file order, the
    /// host time per eager op the mean of theirs (each file's is stated in `what`).
    pub fn merge(files: &[KernelMeasurements]) -> Result<KernelMeasurements> {
        let Some(first) = files.first() else {
            return Err(Error::arg("--input", "give at least one measurement file"));
        };
        for (i, f) in files.iter().enumerate().skip(1) {
            if f.timing() != first.timing()
                || f.sm_count.is_some() && first.sm_count.is_some() && f.sm_count != first.sm_count
                || f.device != first.device
            {
                return Err(Error::Calibration {
                    message: format!(
                        "measurement file {} is of another device, SM count or timing than the \
                         first ({} vs {}); only files of one device merge",
                        i + 1,
                        f.device,
                        first.device
                    ),
                });
            }
        }
        let sessions: u32 = files.iter().map(|f| f.gemm_sessions()).sum();
        if sessions > crate::config::limits::MAX_MEASUREMENT_SESSIONS {
            return Err(Error::arg(
                "--input",
                format!(
                    "the files join {sessions} measurement sessions; at most {} may be merged",
                    crate::config::limits::MAX_MEASUREMENT_SESSIONS
                ),
            ));
        }
        let ops: Vec<f64> = files.iter().filter_map(|f| f.eager_op_s).collect();
        let what = files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                format!(
                    "[file {} of {}, {} {}{}] {}",
                    i + 1,
                    files.len(),
                    f.date,
                    f.software,
                    f.eager_op_s
                        .map_or(String::new(), |t| format!(", eager op {t:.3e} s")),
                    f.what
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        let mut dates: Vec<&str> = files.iter().map(|f| f.date.as_str()).collect();
        dates.dedup();
        let mut software: Vec<&str> = files.iter().map(|f| f.software.as_str()).collect();
        software.dedup();
        Ok(KernelMeasurements {
            what: format!(
                "merged by metp-sim gpu-check merge ({} files; eager op time: the mean of \
                 theirs): {what}",
                files.len()
            ),
            date: dates.join(", "),
            device: first.device.clone(),
            software: software.join(", "),
            sm_count: files.iter().find_map(|f| f.sm_count),
            timing: first.timing,
            gemm: sessions_numbered(files),
            attention: files.iter().flat_map(|f| f.attention.clone()).collect(),
            copy: files.iter().flat_map(|f| f.copy.clone()).collect(),
            eager_op_s: (!ops.is_empty()).then(|| ops.iter().sum::<f64>() / ops.len() as f64),
            p2p: files.iter().flat_map(|f| f.p2p.clone()).collect(),
            collectives: files.iter().flat_map(|f| f.collectives.clone()).collect(),
            overlap: files.iter().flat_map(|f| f.overlap.clone()).collect(),
        })
    }

    /// The measurement sessions of the file's GEMMs: 1 + the highest [`GemmSample::session`].
    pub fn gemm_sessions(&self) -> u32 {
        self.gemm
            .iter()
            .map(|g| g.session.unwrap_or(0) + 1)
            .max()
            .unwrap_or(1)
    }

    /// Whether the attention calls were this crate's own CUDA kernels (`calibrate --backend
    /// cuda`, software "metp-sim … cuda backend"), not a library's FlashAttention-2: the fit
    /// then prices them with those kernels' tiles (`cuda::sources::attention_model`).
    pub fn own_attention_kernels(&self) -> bool {
        self.software.starts_with("metp-sim") && self.software.contains("cuda")
    }

    /// The file as pretty JSON (what `write` stores).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("measurements serialize");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests;
