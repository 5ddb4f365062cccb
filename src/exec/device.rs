//! Virtual devices: one OS thread each, point-to-point channels between them, and a live-bytes
//! counter fed by every buffer the device holds.
//!
//! **Byte accounting.** Every buffer a device holds is a [`Tracked`] value: creating one adds
//! its bytes to the device's live count (and to the count of its name), dropping it subtracts
//! them, and the device records its high-water mark together with the per-name breakdown at
//! that moment. Bytes are counted in the *modelled* dtype ([`Dtype`]: 2 bytes per bf16
//! activation or weight element, 4 per fp32 accumulator or log-sum-exp element) although the
//! CPU computes in f32 — the same convention as the inventory in `crate::memory`.
//!
//! **Messages.** A send copies the data into the channel; data in flight is held by nobody (it
//! models the wire and the communication library's internal staging). A receive is *posted*
//! first ([`Device::post`]): posting allocates the receive buffer — the real double-buffer
//! slot — and [`Device::wait`] later fills it. Posting the next receive before computing with
//! the current buffer is what double buffering means here, and it is what the byte count sees.
//! Messages are matched by (source, [`Tag`]), so their arrival order does not matter.
//!
//! **Link throttle.** With a [`Link`], a message's transfer starts when the data has been sent,
//! the receive has been posted (rendezvous, as NCCL send/recv does) and the link from its
//! sender is free (one link per ordered device pair, full duplex), and it completes
//! `latency + bytes / bandwidth` later; the receiver sleeps in `wait` until then. A receive
//! posted before a compute step therefore overlaps its transfer with that compute (double
//! buffering), one posted after it does not. The sender never blocks. Bytes on the wire are
//! counted in the modelled dtype.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nalgebra::{DMatrix, Dyn, Matrix, Storage, StorageMut};
use serde::Serialize;

use crate::error::{Error, Result};

/// The matrix type the devices compute with.
pub type Mat = DMatrix<f32>;

/// A transposed view of `a` (no copy: swapped strides).
fn tr(a: &Mat) -> nalgebra::MatrixView<'_, f32, Dyn, Dyn, Dyn, Dyn> {
    nalgebra::MatrixView::from_slice_with_strides_generic(
        a.as_slice(),
        Dyn(a.ncols()),
        Dyn(a.nrows()),
        Dyn(a.nrows()),
        Dyn(1),
    )
}

/// `c = α·aᵀ·b + β·c`. Through nalgebra's blocked GEMM (matrixmultiply) on a transposed view of
/// `a` when every dimension exceeds 5 — nalgebra's own threshold for that path — else through
/// `gemm_tr` (dot-product loops; its small-size path assumes unit row strides). Same result
/// as `gemm_tr` up to f32 summation order, several times faster, and the kernel the
/// calibration times.
pub fn gemm_tn<SC, SB>(
    c: &mut Matrix<f32, Dyn, Dyn, SC>,
    alpha: f32,
    a: &Mat,
    b: &Matrix<f32, Dyn, Dyn, SB>,
    beta: f32,
) where
    SC: StorageMut<f32, Dyn, Dyn>,
    SB: Storage<f32, Dyn, Dyn>,
{
    if a.nrows() > 5 && a.ncols() > 5 && c.nrows() > 5 && c.ncols() > 5 {
        c.gemm(alpha, &tr(a), b, beta);
    } else {
        c.gemm_tr(alpha, a, b, beta);
    }
}

/// `aᵀ·b` as a new matrix, through [`gemm_tn`].
pub fn tr_mul(a: &Mat, b: &Mat) -> Mat {
    let mut out = Mat::zeros(a.ncols(), b.ncols());
    gemm_tn(&mut out, 1.0, a, b, 0.0);
    out
}

/// How long a device waits for one message before it declares the run failed (a peer died or a
/// schedule bug left a receive without its send).
const RECV_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a blocked receive checks whether another device has failed.
const ABORT_POLL: Duration = Duration::from_millis(20);

/// The dtype a buffer models (the CPU always computes in f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 2 bytes per element: activations, weights, K/V blocks, score blocks.
    Bf16,
    /// 4 bytes per element: accumulators, log-sum-exp, main gradients.
    Fp32,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bf16 => 2,
            Dtype::Fp32 => 4,
        }
    }
}

#[derive(Debug, Default)]
struct MemState {
    live: u64,
    peak: u64,
    live_by_name: BTreeMap<&'static str, u64>,
    peak_by_name: BTreeMap<&'static str, u64>,
    allocations: u64,
}

/// One device's live-bytes counter (shared by the device's [`Tracked`] buffers; never leaves
/// the device's thread).
#[derive(Clone, Default)]
pub struct Mem(Rc<RefCell<MemState>>);

impl Mem {
    fn alloc(&self, name: &'static str, bytes: u64) {
        let mut s = self.0.borrow_mut();
        s.live += bytes;
        s.allocations += 1;
        *s.live_by_name.entry(name).or_insert(0) += bytes;
        if s.live > s.peak {
            s.peak = s.live;
            s.peak_by_name = s
                .live_by_name
                .iter()
                .filter(|(_, &b)| b > 0)
                .map(|(&k, &v)| (k, v))
                .collect();
        }
    }

    fn free(&self, name: &'static str, bytes: u64) {
        let mut s = self.0.borrow_mut();
        s.live -= bytes;
        if let Some(b) = s.live_by_name.get_mut(name) {
            *b -= bytes;
        }
    }

    /// Bytes held now.
    pub fn live(&self) -> u64 {
        self.0.borrow().live
    }

    /// High-water mark so far.
    pub fn peak(&self) -> u64 {
        self.0.borrow().peak
    }

    fn stats(&self) -> MemStats {
        let s = self.0.borrow();
        MemStats {
            peak_bytes: s.peak,
            end_live_bytes: s.live,
            allocations: s.allocations,
            peak_breakdown: s
                .peak_by_name
                .iter()
                .map(|(&k, &v)| (k.to_string(), v))
                .collect(),
        }
    }
}

/// A device's memory record.
#[derive(Debug, Clone, Serialize)]
pub struct MemStats {
    /// High-water mark of the tracked bytes.
    pub peak_bytes: u64,
    /// Bytes still tracked when the device's program returned (its outputs are handed back
    /// untracked, so this should be 0).
    pub end_live_bytes: u64,
    /// Number of tracked allocations.
    pub allocations: u64,
    /// Live bytes per buffer name at the high-water mark.
    pub peak_breakdown: BTreeMap<String, u64>,
}

/// Something whose elements can be counted (what a [`Tracked`] holds).
pub trait Buffer {
    /// Elements held.
    fn elements(&self) -> usize;
    /// An empty value (left behind by [`Tracked::into_inner`]).
    fn empty() -> Self;
}

impl Buffer for Mat {
    fn elements(&self) -> usize {
        self.len()
    }
    fn empty() -> Self {
        Mat::zeros(0, 0)
    }
}

impl Buffer for Vec<Mat> {
    fn elements(&self) -> usize {
        self.iter().map(|m| m.len()).sum()
    }
    fn empty() -> Self {
        Vec::new()
    }
}

/// A buffer a device holds: its bytes count while it lives.
pub struct Tracked<T: Buffer> {
    value: T,
    name: &'static str,
    dtype: Dtype,
    bytes: u64,
    mem: Mem,
}

impl<T: Buffer> Tracked<T> {
    /// Name of the buffer (the inventory's tensor name where one exists).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Modelled dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Bytes counted for this buffer.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Hands the value out of the device (its bytes stop counting).
    pub fn into_inner(mut self) -> T {
        std::mem::replace(&mut self.value, T::empty())
    }
}

impl<T: Buffer> std::ops::Deref for Tracked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Buffer> std::ops::DerefMut for Tracked<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Buffer> Drop for Tracked<T> {
    fn drop(&mut self) {
        self.mem.free(self.name, self.bytes);
    }
}

/// What a message is, so that receives match sends whatever the arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// An attention weight shard (W_qkv\[g\], W_o\[g\]) for head group `g`.
    AttnWeights {
        /// Backward pass.
        bwd: bool,
        /// Head group.
        g: u32,
    },
    /// A K/V block for head group `g`, arriving for ring step `t`.
    Kv {
        /// Backward pass.
        bwd: bool,
        /// Head group.
        g: u32,
        /// Ring step it is used in.
        t: u32,
    },
    /// fp32 dK/dV accumulators for head group `g`, arriving for ring step `t` (`t = p`: the
    /// final hop back to the owner).
    Dkv {
        /// Head group.
        g: u32,
        /// Ring step.
        t: u32,
    },
    /// A device's fp32 contribution to the weight gradient of head group `g`, sent to its owner.
    AttnWeightGrad {
        /// Head group.
        g: u32,
    },
    /// An MLP shard pair (W1\[j\], W2\[j\]) arriving for ring step `t`.
    MlpWeights {
        /// Backward pass.
        bwd: bool,
        /// Ring step.
        t: u32,
    },
    /// fp32 MLP gradient accumulators arriving for ring step `t` (`t = p`: final hop).
    MlpGrad {
        /// Ring step.
        t: u32,
    },
    /// A calibration message (ping-pong and streaming probes of `crate::calibrate`).
    Probe {
        /// Which probe message.
        id: u32,
    },
    /// One step of a ring all-reduce.
    AllReduce {
        /// Which all-reduce of the run.
        id: u32,
        /// Step (reduce-scatter then all-gather).
        step: u32,
    },
}

/// A CPU link model: a message takes `latency_s + bytes / bandwidth_bytes_per_s` from the moment
/// it has been sent, its receive posted and its link is free.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Link {
    /// Bytes per second per direction of one device pair.
    pub bandwidth_bytes_per_s: f64,
    /// Seconds added to every message.
    pub latency_s: f64,
}

struct Msg {
    src: usize,
    tag: Tag,
    parts: Vec<Mat>,
    bytes: u64,
    sent_at: Instant,
}

/// Communication counters of one device.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CommStats {
    /// Messages sent.
    pub messages_sent: u64,
    /// Bytes sent, in the modelled dtypes.
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Seconds spent blocked in receives (including throttle sleeps).
    pub wait_s: f64,
}

/// Which ring a [`StepTime`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// METP attention forward, inner K/V ring.
    FwdAttention,
    /// METP attention backward, inner K/V + dK/dV ring.
    BwdAttention,
    /// METP MLP forward, weight ring.
    FwdMlp,
    /// METP MLP backward, weight + gradient-accumulator ring.
    BwdMlp,
}

/// Timestamps of one ring step on one device, in seconds since the device's program started.
/// A step starts before its sends, computes, then completes the receives the next step needs:
/// `end_s − compute_end_s` is the time the device waited on them (exposed communication, plus
/// the copies of the sends that follow the compute in backward).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTime {
    /// Ring.
    pub phase: Phase,
    /// Head group (attention) or 0 (MLP).
    pub group: u32,
    /// Ring step, 0..p.
    pub step: u32,
    /// Step start.
    pub start_s: f64,
    /// End of the step's compute.
    pub compute_end_s: f64,
    /// Step end (the next step's data received).
    pub end_s: f64,
}

impl StepTime {
    /// Seconds of compute (and the copies of the sends before it).
    pub fn compute_s(&self) -> f64 {
        self.compute_end_s - self.start_s
    }
    /// Seconds after the compute until the step could end.
    pub fn wait_s(&self) -> f64 {
        self.end_s - self.compute_end_s
    }
    /// Step duration.
    pub fn duration_s(&self) -> f64 {
        self.end_s - self.start_s
    }
}

/// A posted receive: its buffers are allocated (and counted) from the moment it is posted.
pub struct Pending {
    src: usize,
    tag: Tag,
    slots: Vec<Tracked<Mat>>,
    posted_at: Instant,
}

/// One virtual device: its rank, its memory counter and its channel endpoints.
pub struct Device {
    /// This device's index, 0..p.
    pub rank: usize,
    /// Number of devices.
    pub p: usize,
    mem: Mem,
    senders: Vec<Sender<Msg>>,
    rx: Receiver<Msg>,
    stash: HashMap<(usize, Tag), Msg>,
    link: Option<Link>,
    /// When the link from each sender is next free (receiver side).
    link_free: Vec<Instant>,
    comm: CommStats,
    /// Set when any device fails, so that the others stop waiting.
    abort: Arc<AtomicBool>,
    /// When the device's program started.
    started: Instant,
    /// Ring-step timestamps recorded by the programs.
    steps: Vec<StepTime>,
}

/// Sets the shared abort flag if its thread unwinds (a panic in a device program).
struct AbortOnPanic(Arc<AtomicBool>);

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

impl Device {
    /// Next device on the ring.
    pub fn next(&self) -> usize {
        (self.rank + 1) % self.p
    }

    /// Previous device on the ring.
    pub fn prev(&self) -> usize {
        (self.rank + self.p - 1) % self.p
    }

    /// The memory counter.
    pub fn mem(&self) -> &Mem {
        &self.mem
    }

    /// Seconds since the device's program started (the clock of [`StepTime`]).
    pub fn now_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Records one ring step's timestamps.
    pub fn record_step(
        &mut self,
        phase: Phase,
        group: usize,
        step: usize,
        start_s: f64,
        compute_end_s: f64,
    ) {
        let end_s = self.now_s();
        self.steps.push(StepTime {
            phase,
            group: group as u32,
            step: step as u32,
            start_s,
            compute_end_s,
            end_s,
        });
    }

    /// Starts tracking `value` as buffer `name` of dtype `dtype`.
    pub fn track<T: Buffer>(&self, name: &'static str, dtype: Dtype, value: T) -> Tracked<T> {
        let bytes = value.elements() as u64 * dtype.bytes();
        self.mem.alloc(name, bytes);
        Tracked {
            value,
            name,
            dtype,
            bytes,
            mem: self.mem.clone(),
        }
    }

    /// A zero-filled tracked matrix.
    pub fn zeros(
        &self,
        name: &'static str,
        dtype: Dtype,
        rows: usize,
        cols: usize,
    ) -> Tracked<Mat> {
        self.track(name, dtype, Mat::zeros(rows, cols))
    }

    /// Sends `parts` to `dst` (never blocks; the data is owned by the channel until received).
    pub fn send(&mut self, dst: usize, tag: Tag, parts: Vec<(Mat, Dtype)>) -> Result<()> {
        let bytes: u64 = parts.iter().map(|(m, d)| m.len() as u64 * d.bytes()).sum();
        let msg = Msg {
            src: self.rank,
            tag,
            parts: parts.into_iter().map(|(m, _)| m).collect(),
            bytes,
            sent_at: Instant::now(),
        };
        self.senders[dst].send(msg).map_err(|_| {
            exec_error(format!(
                "device {} could not send {tag:?} to device {dst}: it has stopped",
                self.rank
            ))
        })?;
        self.comm.messages_sent += 1;
        self.comm.bytes_sent += bytes;
        Ok(())
    }

    /// Posts a receive from `src`: allocates one receive buffer per `(rows, cols, dtype)`,
    /// all named `name`.
    pub fn post(
        &self,
        src: usize,
        tag: Tag,
        name: &'static str,
        shapes: &[(usize, usize, Dtype)],
    ) -> Pending {
        Pending {
            src,
            tag,
            slots: shapes
                .iter()
                .map(|&(r, c, d)| self.zeros(name, d, r, c))
                .collect(),
            posted_at: Instant::now(),
        }
    }

    /// Completes a posted receive: blocks until the message is there (and, with a link
    /// throttle, has arrived), fills the posted buffers and returns them.
    pub fn wait(&mut self, pending: Pending) -> Result<Vec<Tracked<Mat>>> {
        let Pending {
            src,
            tag,
            mut slots,
            posted_at,
        } = pending;
        let t0 = Instant::now();
        let msg = self.take(src, tag)?;
        if let Some(l) = self.link {
            // The transfer runs once both sides are ready and the link is free.
            let start = msg.sent_at.max(posted_at).max(self.link_free[src]);
            let wire = Duration::from_secs_f64(msg.bytes as f64 / l.bandwidth_bytes_per_s);
            self.link_free[src] = start + wire;
            let done = start + wire + Duration::from_secs_f64(l.latency_s);
            let now = Instant::now();
            if done > now {
                std::thread::sleep(done - now);
            }
        }
        self.comm.wait_s += t0.elapsed().as_secs_f64();
        if msg.parts.len() != slots.len() {
            return Err(exec_error(format!(
                "device {} expected {} parts in {tag:?} from {src}, got {}",
                self.rank,
                slots.len(),
                msg.parts.len()
            )));
        }
        for (slot, part) in slots.iter_mut().zip(msg.parts) {
            if slot.shape() != part.shape() {
                return Err(exec_error(format!(
                    "device {} expected a {:?} matrix in {tag:?} from {src}, got {:?}",
                    self.rank,
                    slot.shape(),
                    part.shape()
                )));
            }
            self.comm.bytes_received += part.len() as u64 * slot.dtype().bytes();
            **slot = part;
        }
        Ok(slots)
    }

    /// Posts and completes a receive at once (no buffer is held before the data is needed).
    pub fn recv(
        &mut self,
        src: usize,
        tag: Tag,
        name: &'static str,
        shapes: &[(usize, usize, Dtype)],
    ) -> Result<Vec<Tracked<Mat>>> {
        let pending = self.post(src, tag, name, shapes);
        self.wait(pending)
    }

    fn take(&mut self, src: usize, tag: Tag) -> Result<Msg> {
        if let Some(m) = self.stash.remove(&(src, tag)) {
            return Ok(m);
        }
        let start = Instant::now();
        loop {
            match self.rx.recv_timeout(ABORT_POLL) {
                Ok(m) if m.src == src && m.tag == tag => return Ok(m),
                Ok(m) => {
                    self.stash.insert((m.src, m.tag), m);
                }
                Err(RecvTimeoutError::Timeout) => {
                    if self.abort.load(Ordering::SeqCst) {
                        return Err(exec_error(format!(
                            "device {} stopped waiting for {tag:?} from device {src}: another device failed",
                            self.rank
                        )));
                    }
                    if start.elapsed() > RECV_TIMEOUT {
                        return Err(exec_error(format!(
                            "device {} waited {} s for {tag:?} from device {src}",
                            self.rank,
                            RECV_TIMEOUT.as_secs()
                        )));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(exec_error(format!(
                        "device {}: all peers stopped before {tag:?} from device {src} arrived",
                        self.rank
                    )))
                }
            }
        }
    }
}

/// The error of a failed parallel run.
pub fn exec_error(message: impl Into<String>) -> Error {
    Error::Execution {
        message: message.into(),
    }
}

/// What one device's run produced.
pub struct DeviceRun<T> {
    /// The program's result.
    pub output: T,
    /// Memory record.
    pub mem: MemStats,
    /// Communication counters.
    pub comm: CommStats,
    /// Seconds the device's program ran.
    pub busy_s: f64,
    /// Ring-step timestamps the program recorded.
    pub steps: Vec<StepTime>,
}

/// Runs `program` on `p` virtual devices (one thread each) and returns every device's result
/// and the wall time of the whole parallel run. Fails if any device fails, panics, or leaves a
/// message unreceived.
pub fn run_devices<T, F>(
    p: usize,
    link: Option<Link>,
    program: F,
) -> Result<(Vec<DeviceRun<T>>, f64)>
where
    T: Send,
    F: Fn(&mut Device) -> Result<T> + Sync,
{
    if p == 0 {
        return Err(exec_error("no devices"));
    }
    let mut senders = Vec::with_capacity(p);
    let mut receivers = Vec::with_capacity(p);
    for _ in 0..p {
        let (tx, rx) = channel::<Msg>();
        senders.push(tx);
        receivers.push(rx);
    }
    let abort = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    type Joined<T> = (Result<T>, MemStats, CommStats, f64, usize, Vec<StepTime>);
    let joined: Vec<std::thread::Result<Joined<T>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = receivers
            .into_iter()
            .enumerate()
            .map(|(rank, rx)| {
                let senders = senders.clone();
                let program = &program;
                let abort = Arc::clone(&abort);
                scope.spawn(move || {
                    let _guard = AbortOnPanic(Arc::clone(&abort));
                    let t0 = Instant::now();
                    let mut dev = Device {
                        rank,
                        p,
                        mem: Mem::default(),
                        senders,
                        rx,
                        stash: HashMap::new(),
                        link,
                        link_free: vec![t0; p],
                        comm: CommStats::default(),
                        abort,
                        started: t0,
                        steps: Vec::new(),
                    };
                    let out = program(&mut dev);
                    if out.is_err() {
                        dev.abort.store(true, Ordering::SeqCst);
                    }
                    let busy = t0.elapsed().as_secs_f64();
                    // Drop the senders first so that the leftover count below cannot block.
                    dev.senders.clear();
                    let mut leftover = dev.stash.len();
                    let deadline =
                        Instant::now() + Duration::from_secs(if out.is_ok() { 5 } else { 0 });
                    // Peers may still be finishing sends addressed to us; count what arrives.
                    while let Ok(_m) = dev
                        .rx
                        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    {
                        leftover += 1;
                    }
                    let steps = std::mem::take(&mut dev.steps);
                    (out, dev.mem.stats(), dev.comm, busy, leftover, steps)
                })
            })
            .collect();
        drop(senders);
        handles.into_iter().map(|h| h.join()).collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let mut runs = Vec::with_capacity(p);
    let mut first_err = None;
    for (rank, j) in joined.into_iter().enumerate() {
        match j {
            Err(_) => {
                first_err.get_or_insert(exec_error(format!("device {rank} panicked")));
            }
            Ok((Err(e), ..)) => {
                // Prefer the root cause over the peers that stopped because of it.
                let secondary = e.to_string().contains("another device failed");
                match &first_err {
                    Some(f) if !f.to_string().contains("another device failed") || secondary => {}
                    _ => first_err = Some(e),
                }
            }
            Ok((Ok(output), mem, comm, busy_s, leftover, steps)) => {
                if leftover > 0 {
                    first_err.get_or_insert(exec_error(format!(
                        "device {rank} finished with {leftover} message(s) never received"
                    )));
                }
                runs.push(DeviceRun {
                    output,
                    mem,
                    comm,
                    busy_s,
                    steps,
                });
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok((runs, wall)),
    }
}

impl Device {
    /// Sums `m` over all devices in place with a ring all-reduce (reduce-scatter, then
    /// all-gather; p − 1 steps each, chunks of about len/p elements). Each step's incoming chunk
    /// lands in a receive buffer named `comm.allreduce_recv` of dtype `dtype`, freed after use.
    pub fn all_reduce_sum(&mut self, m: &mut Mat, dtype: Dtype, id: u32) -> Result<()> {
        let p = self.p;
        if p == 1 {
            return Ok(());
        }
        let n = m.len();
        let bound = |k: usize| k * n / p;
        let chunk = |k: usize| (bound(k), bound(k + 1));
        let (next, prev, rank) = (self.next(), self.prev(), self.rank);
        for step in 0..p - 1 {
            let (a, b) = chunk((rank + p - step) % p);
            let out = Mat::from_column_slice(b - a, 1, &m.as_slice()[a..b]);
            self.send(
                next,
                Tag::AllReduce {
                    id,
                    step: step as u32,
                },
                vec![(out, dtype)],
            )?;
            let (a, b) = chunk((rank + 2 * p - step - 1) % p);
            let got = self.recv(
                prev,
                Tag::AllReduce {
                    id,
                    step: step as u32,
                },
                "comm.allreduce_recv",
                &[(b - a, 1, dtype)],
            )?;
            for (x, y) in m.as_mut_slice()[a..b].iter_mut().zip(got[0].iter()) {
                *x += *y;
            }
        }
        for step in 0..p - 1 {
            let tag = Tag::AllReduce {
                id,
                step: (p - 1 + step) as u32,
            };
            let (a, b) = chunk((rank + 1 + p - step) % p);
            let out = Mat::from_column_slice(b - a, 1, &m.as_slice()[a..b]);
            self.send(next, tag, vec![(out, dtype)])?;
            let (a, b) = chunk((rank + p - step) % p);
            let got = self.recv(prev, tag, "comm.allreduce_recv", &[(b - a, 1, dtype)])?;
            m.as_mut_slice()[a..b].copy_from_slice(got[0].as_slice());
        }
        Ok(())
    }
}

/// Where one traveling stream of a ring is received: its tag, the name its receive buffer is
/// counted under, and the shapes of its parts.
pub(crate) struct Hop<'a> {
    /// Message tag.
    pub tag: Tag,
    /// Buffer name for the byte count.
    pub name: &'static str,
    /// Shapes of the parts.
    pub shapes: &'a [(usize, usize, Dtype)],
}

/// One hop of a forward ring: take the next step's data from its posted receive, or — with a
/// single receive buffer, where nothing was posted — release the current block and receive.
pub(crate) fn data_hop(
    dev: &mut Device,
    prev: usize,
    data: &mut Option<Vec<Tracked<Mat>>>,
    pending: Option<Pending>,
    hop: &Hop<'_>,
) -> Result<()> {
    let got = match pending {
        Some(pd) => dev.wait(pd)?,
        None => {
            drop(data.take());
            dev.recv(prev, hop.tag, hop.name, hop.shapes)?
        }
    };
    *data = Some(got);
    Ok(())
}

/// One hop of a ring that carries data forward and an fp32 accumulator back to its owner (the
/// backward K/V ring, the backward MLP weight ring): send this step's accumulator to `next`;
/// with one receive buffer, release the data and accumulator first; then take the next step's
/// data (unless this was the last step) and the incoming accumulator, from their posted
/// receives if any.
#[allow(clippy::too_many_arguments)]
pub(crate) fn accumulator_hop(
    dev: &mut Device,
    next: usize,
    prev: usize,
    last: bool,
    single_buffer: bool,
    data: &mut Option<Vec<Tracked<Mat>>>,
    acc: &mut Vec<Tracked<Mat>>,
    next_data: Option<Pending>,
    next_acc: Option<Pending>,
    data_hop: &Hop<'_>,
    acc_hop: &Hop<'_>,
) -> Result<()> {
    let parts = acc.iter().map(|m| (m.clone_owned(), Dtype::Fp32)).collect();
    dev.send(next, acc_hop.tag, parts)?;
    if single_buffer {
        drop(data.take());
        acc.clear();
    }
    if !last {
        let d = match next_data {
            Some(pd) => dev.wait(pd)?,
            None => dev.recv(prev, data_hop.tag, data_hop.name, data_hop.shapes)?,
        };
        *data = Some(d);
    }
    let a = match next_acc {
        Some(pd) => dev.wait(pd)?,
        None => dev.recv(prev, acc_hop.tag, acc_hop.name, acc_hop.shapes)?,
    };
    if last {
        *data = None;
    }
    *acc = a;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_device_failure_stops_the_others_quickly() {
        let t0 = Instant::now();
        let r = run_devices(3, None, |dev| {
            if dev.rank == 1 {
                return Err(exec_error("device 1 gave up"));
            }
            let tag = Tag::MlpGrad { t: 0 };
            dev.recv(1, tag, "x", &[(1, 1, Dtype::Fp32)])?;
            Ok(())
        });
        match r {
            Err(e) => assert!(e.to_string().contains("device 1 gave up"), "{e}"),
            Ok(_) => panic!("expected an error"),
        }
        assert!(t0.elapsed() < Duration::from_secs(10));
        let r = run_devices(2, None, |dev| -> Result<()> {
            if dev.rank == 0 {
                panic!("deliberate test panic");
            }
            dev.recv(0, Tag::MlpGrad { t: 0 }, "x", &[(1, 1, Dtype::Fp32)])?;
            Ok(())
        });
        assert!(matches!(r, Err(Error::Execution { .. })));
    }

    #[test]
    fn exec_gemm_tn_matches_gemm_tr() {
        // Both paths: every dimension above nalgebra's threshold of 5, and a small one.
        for (m, n, k) in [(7usize, 9usize, 11usize), (3, 8, 6), (12, 2, 9)] {
            let a = Mat::from_fn(k, m, |i, j| ((i * 7 + j * 3) % 11) as f32 - 5.0);
            let b = Mat::from_fn(k, n, |i, j| ((i * 5 + j * 2) % 7) as f32 - 3.0);
            let c0 = Mat::from_fn(m, n, |i, j| (i + j) as f32);
            let mut want = c0.clone();
            want.gemm_tr(0.5, &a, &b, 2.0);
            let mut got = c0.clone();
            gemm_tn(&mut got, 0.5, &a, &b, 2.0);
            assert!((&got - &want).norm() <= 1e-4 * want.norm(), "{m}x{n}x{k}");
            assert!((tr_mul(&a, &b) - a.tr_mul(&b)).norm() <= 1e-4 * b.norm() * a.norm());
        }
    }

    #[test]
    fn exec_device_counts_bytes_and_unreceived_messages() {
        let (runs, _) = run_devices(2, None, |dev| {
            let a = dev.zeros("a", Dtype::Bf16, 3, 4); // 24 bytes
            let b = dev.zeros("b", Dtype::Fp32, 2, 2); // 16 bytes
            drop(a);
            let c = dev.track("c", Dtype::Bf16, vec![Mat::zeros(2, 2), Mat::zeros(1, 3)]); // 14
            assert_eq!(dev.mem().live(), 30);
            drop((b, c));
            Ok(dev.mem().peak())
        })
        .unwrap();
        for r in &runs {
            assert_eq!(r.output, 40);
            assert_eq!(r.mem.peak_breakdown.get("a"), Some(&24));
            assert_eq!(r.mem.end_live_bytes, 0);
        }
        let r = run_devices(2, None, |dev| {
            if dev.rank == 0 {
                dev.send(
                    1,
                    Tag::MlpGrad { t: 0 },
                    vec![(Mat::zeros(1, 1), Dtype::Bf16)],
                )?;
            }
            Ok(())
        });
        match r {
            Err(e) => assert!(e.to_string().contains("never received"), "{e}"),
            Ok(_) => panic!("an unreceived message must fail the run"),
        }
    }
}
