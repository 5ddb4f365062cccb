//! [`CudaBackend`]: the [`Backend`] of `calibrate --backend cuda` and `run --backend cuda`.
//!
//! **Timing.** Every kernel measurement times calls alone: both streams synchronised, a
//! `CU_EVENT_DEFAULT` event, the call, another event (the launch is inside the interval, as
//! in the shared H200 file); warm-ups first (1–2), then the median of 3–25 repetitions, fewer
//! for longer calls (`calibrate::budget::repetitions`). Inputs are pseudo-random bf16 values, not zeros.
//! Messages and collectives between GPUs are timed as nccl-tests does: back-to-back calls
//! between host-side synchronisations of all ranks. The per-op host overhead is the host time
//! of one kernel launch (2 000 launches of an empty kernel).
//!
//! **One GPU** — a stated emulation: a message is a device-to-device copy on a second stream
//! (HBM bandwidth, not a link); the slowdown of a GEMM is measured under such copies; units
//! run their p virtual devices one after the other on GPU 0 (predictions scale compute and
//! transfers by p: [`Backend::compute_scale`], [`Backend::transfer_scale`]). With p GPUs and
//! NCCL, device i of a unit runs on GPU i and its ring messages are NCCL send/recv.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use crate::backend::busbw;
use crate::backend::repeat::median;
use crate::backend::repeat::{repetitions, warmups};
use crate::backend::unit::{RunReport, RunSpec};
use crate::backend::{AttnCall, Backend, GemmShape, Pass, SlowdownSample, Timing};
use crate::config::UnitSupport;

use super::gpu::{Gpu, Op, Ty};
use super::mem::Phys;
use super::ops::DevMat;
use super::probe::{find, Found};
use super::units::{Placement, Units};
use super::xfer::{Link, Nccl};
use super::{gpu_err, unavailable, Error, Result};

/// Said wherever the backend runs on several GPUs, until a run on a multi-GPU node has been
/// committed under `reports/gpu/` (the committed runs had one H200: the code below that places
/// devices on GPUs 1… and drives NCCL between them has compiled, never run).
const MULTI_GPU_UNTESTED: &str = "NOT YET TESTED: this backend's multi-GPU path (a device per \
                                  GPU, NCCL between them) has never run on more than one GPU";

/// The CUDA backend.
pub struct CudaBackend {
    found: Found,
    gpus: Vec<Option<Rc<Gpu>>>,
    devices: usize,
    quick: bool,
    nccl: HashMap<Vec<usize>, Rc<Nccl>>,
    nccl_note: String,
    units: Units,
    seed: u64,
}

/// Untracked device memory for a measurement, freed on drop.
struct Scratch(Phys);

impl Scratch {
    fn new(gpu: &Rc<Gpu>, bytes: usize) -> Result<Scratch> {
        let ptr = gpu.alloc(bytes)?;
        Ok(Scratch(Phys {
            gpu: gpu.clone(),
            ptr,
            bytes,
        }))
    }
    fn ptr(&self) -> u64 {
        self.0.ptr
    }
}

impl CudaBackend {
    /// Probes, opens GPU 0 and compiles the kernels; `devices` virtual devices for units.
    pub fn new(devices: usize, quick: bool) -> Result<CudaBackend> {
        if devices == 0 {
            return Err(Error::arg("--devices", "must be positive"));
        }
        let found = find()?;
        let gpu0 = Rc::new(Gpu::new(0)?);
        let mut gpus = vec![None; found.devices];
        gpus[0] = Some(gpu0);
        let nccl_note = if found.devices >= 2 && !found.nccl {
            " (libnccl.so not found: messages between GPUs are not measured)".to_string()
        } else {
            String::new()
        };
        Ok(CudaBackend {
            found,
            gpus,
            devices,
            quick,
            nccl: HashMap::new(),
            nccl_note,
            units: Units::default(),
            seed: 1,
        })
    }

    /// GPU `i`, opened on first use.
    fn gpu(&mut self, i: usize) -> Result<Rc<Gpu>> {
        if i >= self.gpus.len() {
            return Err(unavailable(format!("there is no GPU {i}")));
        }
        if self.gpus[i].is_none() {
            self.gpus[i] = Some(Rc::new(Gpu::new(i)?));
        }
        Ok(self.gpus[i].clone().expect("opened above"))
    }

    fn gpu0(&self) -> Rc<Gpu> {
        self.gpus[0].clone().expect("GPU 0 is opened by new()")
    }

    /// NCCL over the listed GPUs (cached); `None` without NCCL or with fewer GPUs.
    fn nccl_over(&mut self, list: &[usize]) -> Result<Option<Rc<Nccl>>> {
        if !self.found.nccl || list.iter().any(|&g| g >= self.found.devices) || list.len() < 2 {
            return Ok(None);
        }
        // Buffers come from each GPU's stream-ordered pool, which does not grant peer access:
        // NCCL must not read a peer's user buffer directly within this process (NCCL's
        // documented switch for such allocations).
        if std::env::var_os("NCCL_P2P_DIRECT_DISABLE").is_none() {
            std::env::set_var("NCCL_P2P_DIRECT_DISABLE", "1");
        }
        if let Some(n) = self.nccl.get(list) {
            return Ok(Some(n.clone()));
        }
        let gpus = list
            .iter()
            .map(|&g| self.gpu(g))
            .collect::<Result<Vec<_>>>()?;
        let n = Rc::new(Nccl::new(&gpus)?);
        self.nccl.insert(list.to_vec(), n.clone());
        Ok(Some(n))
    }

    /// Whether units with `p` devices run one device per GPU over NCCL.
    fn spread(&self, p: usize) -> bool {
        p >= 2 && self.found.nccl && self.found.devices >= p
    }

    fn placement(&mut self, p: usize) -> Result<Placement> {
        if self.spread(p) {
            let list: Vec<usize> = (0..p).collect();
            if let Some(n) = self.nccl_over(&list)? {
                return Ok(Placement {
                    gpus: n.gpus.clone(),
                    link: Link::Nccl(n),
                });
            }
        }
        let g = self.gpu0();
        Ok(Placement {
            gpus: vec![g; p],
            link: Link::Copy,
        })
    }

    fn next_seed(&mut self) -> u64 {
        self.seed += 1;
        self.seed
    }

    /// A buffer of `elems` random bf16 values on `gpu`.
    fn random(&mut self, gpu: &Rc<Gpu>, elems: usize) -> Result<Scratch> {
        let s = Scratch::new(gpu, 2 * elems)?;
        let seed = self.next_seed();
        gpu.random_bf16(s.ptr(), seed, elems)?;
        Ok(s)
    }

    /// Median seconds of `f` timed alone on `gpu` (see the module docs).
    fn median_of(&self, gpu: &Gpu, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
        // The first call may load the kernel (lazy module loading) or set up cuBLAS: the
        // repetitions are chosen from the fastest warm-up.
        let mut call_s = gpu.time(&mut f)?;
        for _ in 1..warmups(call_s) {
            call_s = call_s.min(gpu.time(&mut f)?);
        }
        let reps = repetitions(call_s, self.quick);
        let mut v = (0..reps)
            .map(|_| gpu.time(&mut f))
            .collect::<Result<Vec<f64>>>()?;
        Ok(median(&mut v))
    }

    fn gemm_on(
        &self,
        gpu: &Gpu,
        g: GemmShape,
        a: &Scratch,
        b: &Scratch,
        c: &Scratch,
    ) -> Result<()> {
        gpu.gemm(
            (g.m, g.n, g.k),
            Op::n(a.ptr(), g.k),
            Op::n(b.ptr(), g.n),
            Op::n(c.ptr(), g.n),
            Ty::Bf16,
            1.0,
            0.0,
            1,
        )
    }

    /// Iterations of a message or collective of `bytes` for ~20 ms (quick: 5 ms).
    fn iters(&self, bytes: u64) -> usize {
        let per = 2e-5 + bytes as f64 / 5e10;
        let target = if self.quick { 0.005 } else { 0.02 };
        ((target / per).ceil() as usize).clamp(2, 50)
    }

    /// Seconds per copy-emulated message of `bytes` on GPU 0's communication stream.
    fn emulated_message_s(&mut self, bytes: u64) -> Result<f64> {
        let g = self.gpu0();
        let n = bytes.max(2) as usize;
        let src = self.random(&g, n / 2)?;
        let dst = Scratch::new(&g, n)?;
        self.median_of(&g, || {
            // Timed on compute: it joins the copy stream's work.
            g.copy(dst.ptr(), src.ptr(), n, &g.comm)?;
            let done = g.event(&g.comm, false)?;
            g.wait(&g.compute, &done)
        })
    }
}

/// How this backend times, for the measurement file's `what`.
const MEASUREMENT_NOTE: &str = "Each time is the median of repetitions (3 to 25, fewer for \
    longer calls) after 1–2 warm-ups; each call is timed alone with CUDA events \
    (CU_EVENT_DEFAULT) recorded around it after the stream was synchronised, so its launch is \
    included. GEMMs: bf16 cuBLAS gemm_ex with fp32 accumulation, row-major m×k by k×n. \
    Attention: the backend's own FlashAttention-2-style kernel (bf16 tensor-core MMA, fp32 \
    accumulation, online softmax, log-sum-exp output); 'fwd_flops' counts 4·b·heads·d per \
    visible (query, key) pair (causal: bottom-right aligned); 'bwd_s' is the backward kernels \
    alone (the D = rowsum(dO∘O) pre-pass and the fused backward), not forward+backward minus \
    forward. Copies: device-to-device cuMemcpy of 'bytes'; 'mul_s': an element-wise scale of \
    a bf16 buffer of 'bytes' into another. 'eager_op_s': host time to issue one kernel launch \
    (this runtime's per-op overhead, not a framework's). p2p 'via: nccl': NCCL send/recv \
    between two GPUs of one process; 'via: copy-emulation': one GPU only, a device-to-device \
    copy on a second stream (HBM bandwidth, not a link). Collectives: NCCL over the first \
    'ranks' GPUs, 'bytes' and 'bus_bytes_per_s' as nccl-tests define them. Overlap: the GEMM \
    alone and while the traffic runs ('copy-emulation': copies on a second stream of the same \
    GPU).";

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device(&self) -> String {
        let units = if self.spread(self.devices) {
            format!(
                "units: {} devices on GPUs 0–{} over NCCL send/recv; {MULTI_GPU_UNTESTED}",
                self.devices,
                self.devices - 1
            )
        } else {
            format!(
                "units: {} virtual devices run one after the other on GPU 0, messages emulated \
                 by device-to-device copies on a second stream{}",
                self.devices, self.nccl_note
            )
        };
        format!(
            "{} (GPU 0 of {}, compute capability {}.{}, {} SMs; {units})",
            self.found.name,
            self.found.devices,
            self.found.cc.0,
            self.found.cc.1,
            self.found.sm_count
        )
    }

    fn devices(&self) -> usize {
        self.devices
    }

    fn memory_bytes(&self) -> u64 {
        self.gpu0().total_bytes()
    }

    fn sm_count(&self) -> Option<u64> {
        Some(self.found.sm_count)
    }

    fn support(&self) -> UnitSupport {
        super::units::SUPPORT
    }

    /// Calls timed alone with events around them, the launch inside the interval.
    fn timing(&self) -> Timing {
        Timing::Isolated
    }

    fn p2p_via(&self) -> Option<&'static str> {
        Some("nccl")
    }

    /// `transfer_s` is measured only where no NCCL pair is (one GPU): copies on a second
    /// stream, and so is the slowdown under traffic.
    fn transfer_via(&self) -> Option<&'static str> {
        Some("copy-emulation")
    }

    fn measurement_note(&self) -> String {
        MEASUREMENT_NOTE.into()
    }

    fn gemm_s(&mut self, g: GemmShape) -> Result<f64> {
        let gpu = self.gpu0();
        let a = self.random(&gpu, g.m * g.k)?;
        let b = self.random(&gpu, g.k * g.n)?;
        let c = Scratch::new(&gpu, 2 * g.m * g.n)?;
        self.median_of(&gpu, || self.gemm_on(&gpu, g, &a, &b, &c))
    }

    fn attention_s(&mut self, call: AttnCall, pass: Pass) -> Result<f64> {
        let gpu = self.gpu0();
        let geo = call;
        let w = call.heads * call.head_dim;
        let (rq, rk) = (call.batch * call.q_tokens, call.batch * call.kv_tokens);
        let q = self.random(&gpu, rq * w)?;
        let k = self.random(&gpu, rk * w)?;
        let v = self.random(&gpu, rk * w)?;
        let acc = Scratch::new(&gpu, 4 * rq * w)?;
        let lse = Scratch::new(&gpu, 4 * rq * call.heads)?;
        gpu.zero(acc.ptr(), 4 * rq * w, &gpu.compute)?;
        gpu.fill(lse.ptr(), f32::NEG_INFINITY, rq * call.heads)?;
        let fwd = || {
            gpu.flash_fwd(
                &geo,
                DevMat::new(q.ptr(), w),
                DevMat::new(k.ptr(), w),
                DevMat::new(v.ptr(), w),
                DevMat::new(acc.ptr(), w),
                lse.ptr(),
                1,
            )
        };
        match pass {
            // Repeated calls keep merging the same block into (acc, lse): a valid state.
            Pass::Forward => self.median_of(&gpu, fwd),
            Pass::Backward => {
                fwd()?;
                let o = Scratch::new(&gpu, 2 * rq * w)?;
                gpu.to_bf16(acc.ptr(), o.ptr(), rq * w)?;
                let dout = self.random(&gpu, rq * w)?;
                let delta = Scratch::new(&gpu, 4 * rq * call.heads)?;
                let dq = Scratch::new(&gpu, 4 * rq * w)?;
                let dk = Scratch::new(&gpu, 4 * rk * w)?;
                let dv = Scratch::new(&gpu, 4 * rk * w)?;
                for (s, n) in [(&dq, rq), (&dk, rk), (&dv, rk)] {
                    gpu.zero(s.ptr(), 4 * n * w, &gpu.compute)?;
                }
                self.median_of(&gpu, || {
                    gpu.attn_delta(
                        DevMat::new(dout.ptr(), w),
                        DevMat::new(o.ptr(), w),
                        delta.ptr(),
                        rq,
                        call.heads,
                        call.head_dim,
                    )?;
                    gpu.flash_bwd(
                        &geo,
                        DevMat::new(q.ptr(), w),
                        DevMat::new(k.ptr(), w),
                        DevMat::new(v.ptr(), w),
                        DevMat::new(dout.ptr(), w),
                        lse.ptr(),
                        delta.ptr(),
                        DevMat::new(dq.ptr(), w),
                        DevMat::new(dk.ptr(), w),
                        DevMat::new(dv.ptr(), w),
                        1,
                    )
                })
            }
        }
    }

    fn elementwise_s(&mut self, bytes: u64) -> Result<f64> {
        // `bytes` moved: a bf16 input and output of bytes/4 elements each.
        let gpu = self.gpu0();
        let n = (bytes / 4).max(1) as usize;
        let x = self.random(&gpu, n)?;
        let y = Scratch::new(&gpu, 2 * n)?;
        self.median_of(&gpu, || gpu.scale_bf16(x.ptr(), y.ptr(), 1.5, n))
    }

    fn copy_s(&mut self, bytes: u64) -> Result<f64> {
        // `bytes` moved: a buffer of bytes/2 read and written.
        let gpu = self.gpu0();
        let n = (bytes / 2).max(2) as usize;
        let x = self.random(&gpu, n / 2)?;
        let y = Scratch::new(&gpu, n)?;
        self.median_of(&gpu, || gpu.copy(y.ptr(), x.ptr(), n, &gpu.compute))
    }

    fn transfer_s(&mut self, bytes: u64) -> Result<f64> {
        match self.p2p_s(0, 1, bytes)? {
            Some(t) => Ok(t),
            None => self.emulated_message_s(bytes),
        }
    }

    fn slowdown(&mut self, g: GemmShape, bytes: u64) -> Result<SlowdownSample> {
        // One GPU: the GEMM alone, then while copies of `bytes` run back to back on the
        // second stream (covering the repetitions).
        let gpu = self.gpu0();
        let a = self.random(&gpu, g.m * g.k)?;
        let b = self.random(&gpu, g.k * g.n)?;
        let c = Scratch::new(&gpu, 2 * g.m * g.n)?;
        let alone = self.median_of(&gpu, || self.gemm_on(&gpu, g, &a, &b, &c))?;
        let n = bytes.max(1 << 20) as usize;
        let src = self.random(&gpu, n / 2)?;
        let dst = Scratch::new(&gpu, n)?;
        let copy_s = 2.0 * n as f64 / 3e12 + 5e-6;
        let reps = repetitions(alone, self.quick) + 2;
        let copies = ((alone * reps as f64 * 1.5 / copy_s).ceil() as usize).clamp(1, 2000);
        gpu.sync()?;
        for _ in 0..copies {
            gpu.copy(dst.ptr(), src.ptr(), n, &gpu.comm)?;
        }
        let mut with = Vec::new();
        for _ in 0..reps {
            let start = gpu.event(&gpu.compute, true)?;
            self.gemm_on(&gpu, g, &a, &b, &c)?;
            let end = gpu.event(&gpu.compute, true)?;
            with.push(f64::from(start.elapsed_ms(&end).map_err(|e| gpu_err("elapsed", e))?) / 1e3);
        }
        gpu.sync()?;
        Ok(SlowdownSample {
            alone_s: alone,
            with_transfer_s: median(&mut with),
        })
    }

    fn host_overhead_s(&mut self) -> Result<Option<f64>> {
        let gpu = self.gpu0();
        let n = if self.quick { 500 } else { 2000 };
        for _ in 0..50 {
            gpu.empty()?;
        }
        gpu.sync()?;
        let t0 = Instant::now();
        for _ in 0..n {
            gpu.empty()?;
        }
        let issue = t0.elapsed().as_secs_f64() / n as f64;
        gpu.sync()?;
        Ok(Some(issue))
    }

    fn p2p_s(&mut self, from: usize, to: usize, bytes: u64) -> Result<Option<f64>> {
        if from == to {
            return Ok(None);
        }
        let (lo, hi) = (from.min(to), from.max(to));
        let Some(n) = self.nccl_over(&[lo, hi])? else {
            return Ok(None);
        };
        let (rs, rd) = if from < to { (0, 1) } else { (1, 0) };
        let b = bytes.max(1) as usize;
        let src = Scratch::new(&n.gpus[rs], b)?;
        let dst = Scratch::new(&n.gpus[rd], b)?;
        n.sync()?;
        let iters = self.iters(bytes);
        n.time(iters, || n.send_recv(rs, rd, src.ptr(), dst.ptr(), b))
            .map(Some)
    }

    fn collective_s(&mut self, op: &str, ranks: usize, bytes: u64) -> Result<Option<f64>> {
        if ranks < 2 || ranks > self.found.devices {
            return Ok(None);
        }
        let list: Vec<usize> = (0..ranks).collect();
        let Some(n) = self.nccl_over(&list)? else {
            return Ok(None);
        };
        let Some(count) = busbw::call_count(op, ranks, bytes, 2) else {
            return Err(Error::Calibration {
                message: format!("{op} of {bytes} bytes does not split into {ranks} bf16 chunks"),
            });
        };
        let chunk = bytes as usize / ranks;
        let (send_b, recv_b) = match op {
            "all-gather" => (chunk, bytes as usize),
            "reduce-scatter" => (bytes as usize, chunk),
            _ => (bytes as usize, bytes as usize),
        };
        let mut keep = Vec::new();
        let (mut send, mut recv) = (Vec::new(), Vec::new());
        for g in &n.gpus {
            let s = Scratch::new(g, send_b)?;
            let r = Scratch::new(g, recv_b)?;
            g.zero(s.ptr(), send_b, &g.compute)?;
            send.push(s.ptr());
            recv.push(r.ptr());
            keep.push((s, r));
        }
        n.sync()?;
        let iters = self.iters(bytes);
        let t = n.time(iters, || n.collective(op, &send, &recv, count as usize))?;
        drop(keep);
        Ok(Some(t))
    }

    fn slowdown_under_collective(
        &mut self,
        g: GemmShape,
        bytes: u64,
    ) -> Result<Option<SlowdownSample>> {
        let Some(n) = self.nccl_over(&[0, 1])? else {
            return Ok(None);
        };
        let gpu = n.gpus[0].clone();
        let a = self.random(&gpu, g.m * g.k)?;
        let b = self.random(&gpu, g.k * g.n)?;
        let c = Scratch::new(&gpu, 2 * g.m * g.n)?;
        let alone = self.median_of(&gpu, || self.gemm_on(&gpu, g, &a, &b, &c))?;
        let count = (bytes / 2).max(1) as usize;
        let bufs = n
            .gpus
            .iter()
            .map(|x| Scratch::new(x, 2 * count))
            .collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<u64> = bufs.iter().map(|s| s.ptr()).collect();
        for (x, s) in n.gpus.iter().zip(&bufs) {
            x.zero(s.ptr(), 2 * count, &x.compute)?;
        }
        let ar_s = 2.0 * bytes as f64 / 1e11 + 2e-5;
        let reps = repetitions(alone, self.quick) + 2;
        let calls = ((alone * reps as f64 * 1.5 / ar_s).ceil() as usize).clamp(1, 200);
        n.sync()?;
        for _ in 0..calls {
            n.collective("all-reduce", &ptrs, &ptrs, count)?;
        }
        let mut with = Vec::new();
        for _ in 0..reps {
            let start = gpu.event(&gpu.compute, true)?;
            self.gemm_on(&gpu, g, &a, &b, &c)?;
            let end = gpu.event(&gpu.compute, true)?;
            with.push(f64::from(start.elapsed_ms(&end).map_err(|e| gpu_err("elapsed", e))?) / 1e3);
        }
        n.sync()?;
        drop(bufs);
        Ok(Some(SlowdownSample {
            alone_s: alone,
            with_transfer_s: median(&mut with),
        }))
    }

    fn run_unit(&mut self, spec: &RunSpec) -> Result<RunReport> {
        let place = self.placement(spec.shape.p)?;
        let mut units = std::mem::take(&mut self.units);
        let r = units.run(spec, place, &mut |p| self.placement(p));
        self.units = units;
        r
    }

    fn compute_scale(&self, p: usize, _profile_devices: usize) -> f64 {
        if self.spread(p) {
            1.0
        } else {
            // Virtual devices share GPU 0: their kernels run one after the other.
            p as f64
        }
    }

    fn runtime(&self) -> crate::backend::Runtime {
        crate::backend::Runtime::Cuda
    }

    fn transfer_scale(&self, p: usize) -> f64 {
        if self.spread(p) {
            1.0
        } else {
            // Their messages share GPU 0's copy stream.
            p as f64
        }
    }
}
