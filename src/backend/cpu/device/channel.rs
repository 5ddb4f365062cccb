//! Point-to-point messages between virtual devices: tags, posted receives (the receive
//! buffer counts from the moment it is posted), the optional link throttle, and a ring
//! all-reduce built on them.

use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use super::{exec_error, Device, Mat, Tag, Tracked};
use crate::backend::unit::device::Dtype;
use crate::error::{Error, Result};
use crate::memory::names;

/// How long a device waits for one message before it declares the run failed (a peer died or a
/// schedule bug left a receive without its send).
const RECV_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a blocked receive checks whether another device has failed.
const ABORT_POLL: Duration = Duration::from_millis(20);

pub(super) struct Msg {
    src: usize,
    tag: Tag,
    parts: Vec<Mat>,
    bytes: u64,
    sent_at: Instant,
}

/// A posted receive: its buffers are allocated (and counted) from the moment it is posted.
pub struct Pending {
    src: usize,
    tag: Tag,
    slots: Vec<Tracked<Mat>>,
    posted_at: Instant,
}

/// When this process first waited on a throttled link, and how long its throttled links may
/// last from then ([`crate::config::limits::MAX_THROTTLE_WAIT_S`]): one budget for the whole
/// command, however many runs it makes (an on-the-fly calibration makes dozens).
fn throttle_budget() -> (Instant, f64) {
    static FIRST: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    (
        *FIRST.get_or_init(Instant::now),
        crate::config::limits::MAX_THROTTLE_WAIT_S,
    )
}

impl Device {
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
            let wire_s = msg.bytes as f64 / l.bandwidth_bytes_per_s;
            // Checked before sleeping: a link slow enough never to finish stops the command at
            // the first message that would end past its throttle budget, instead of sleeping
            // for hours.
            let (first, max) = throttle_budget();
            let now = Instant::now();
            let done_s =
                start.saturating_duration_since(first).as_secs_f64() + wire_s + l.latency_s;
            if !(done_s.is_finite() && done_s <= max) {
                return Err(Error::TooLarge {
                    message: format!(
                        "device {}: a message of {} bytes on the throttled link ({:e} bytes/s, \
                         {} s latency) would arrive {:.3e} s after the first throttled message, \
                         past the {max} s of throttled links one command may use; raise \
                         --link-bandwidth or lower --link-latency",
                        self.rank, msg.bytes, l.bandwidth_bytes_per_s, l.latency_s, done_s
                    ),
                });
            }
            let wire = Duration::from_secs_f64(wire_s);
            self.link_free[src] = start + wire;
            let done = start + wire + Duration::from_secs_f64(l.latency_s);
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
                names::COMM_ALLREDUCE_RECV,
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
            let got = self.recv(prev, tag, names::COMM_ALLREDUCE_RECV, &[(b - a, 1, dtype)])?;
            m.as_mut_slice()[a..b].copy_from_slice(got[0].as_slice());
        }
        Ok(())
    }
}
