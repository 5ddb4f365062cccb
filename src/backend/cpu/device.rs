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

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use nalgebra::{Dyn, Matrix, Storage, StorageMut};

use crate::backend::unit::device::{CommStats, Dtype, Link, Mat, Mem, Phase, StepTime, Tag};
use crate::error::Error;

mod channel;
mod hop;
mod threads;
mod tracked;

use channel::Msg;
pub use channel::Pending;
pub(crate) use hop::{accumulator_hop, data_hop, Hop};
pub use threads::{run_devices, DeviceRun};
pub use tracked::{Buffer, Tracked};

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
}

/// The error of a failed parallel run.
pub fn exec_error(message: impl Into<String>) -> Error {
    Error::Execution {
        message: message.into(),
    }
}

#[cfg(test)]
mod tests;
