//! Messages between virtual devices and NCCL.
//!
//! **The mailbox** gives the units the CPU runtime's message semantics (`crate::backend::cpu::units::device`):
//! a device *sends* parts of its buffers under a tag, the receiver *posts* a receive (its
//! receive buffers are allocated and counted from that moment) and later *waits* for it. The
//! transfer is issued when both the send and the post exist (rendezvous) — on one GPU a
//! device-to-device copy on the communication stream (the stated emulation of a link: HBM
//! bandwidth, serialised on one stream), with several GPUs an NCCL send/recv pair in one
//! group on the two GPUs' communication streams. The transfer first waits for the work
//! enqueued on the compute streams so far (the data being sent and the receive buffer's
//! allocation); a wait makes the compute streams of both ends wait for its completion, and
//! only then drops the reference that kept the sent buffer's memory alive.
//!
//! **NCCL** ([`Nccl`]): communicators over a list of GPUs of this one process
//! (`ncclCommInitAll`), used from one thread with group calls; the measurements' send/recv
//! pairs and collectives (all-to-all as grouped send/recv, as nccl-tests does).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use cudarc::driver::CudaEvent;
use cudarc::nccl::{result as nres, sys as nsys};

use crate::backend::unit::device::Tag;

use super::gpu::Gpu;
use super::mem::{Buf, Phys};
use super::{gpu_err, nccl_err, Error, Result};

/// NCCL communicators over some GPUs, rank r on `gpus[r]`, on their communication streams.
pub(crate) struct Nccl {
    comms: Vec<nsys::ncclComm_t>,
    pub gpus: Vec<Rc<Gpu>>,
}

impl Nccl {
    /// Communicators over `gpus` (ncclCommInitAll).
    pub fn new(gpus: &[Rc<Gpu>]) -> Result<Nccl> {
        let n = gpus.len();
        let mut comms = vec![std::ptr::null_mut(); n];
        let ordinals: Vec<i32> = gpus.iter().map(|g| g.ordinal as i32).collect();
        // SAFETY: `comms` has room for n handles; `ordinals` lists n devices.
        unsafe { nres::comm_init_all(comms.as_mut_ptr(), n as i32, ordinals.as_ptr()) }
            .map_err(|e| nccl_err(&format!("ncclCommInitAll over GPUs {ordinals:?}"), e))?;
        Ok(Nccl {
            comms,
            gpus: gpus.to_vec(),
        })
    }

    /// Ranks.
    pub fn ranks(&self) -> usize {
        self.comms.len()
    }

    fn stream(&self, r: usize) -> nsys::cudaStream_t {
        self.gpus[r].comm.cu_stream() as nsys::cudaStream_t
    }

    /// Enqueues `bytes` from rank `src` (at `sp`) to rank `dst` (at `dp`) as one group.
    pub fn send_recv(&self, src: usize, dst: usize, sp: u64, dp: u64, bytes: usize) -> Result<()> {
        nres::group_start().map_err(|e| nccl_err("group start", e))?;
        // SAFETY: both buffers hold `bytes`; the communicators and streams are alive.
        let r = unsafe {
            nres::send(
                sp as *const _,
                bytes,
                nsys::ncclDataType_t::ncclUint8,
                dst as i32,
                self.comms[src],
                self.stream(src),
            )
            .and_then(|_| {
                nres::recv(
                    dp as *mut _,
                    bytes,
                    nsys::ncclDataType_t::ncclUint8,
                    src as i32,
                    self.comms[dst],
                    self.stream(dst),
                )
            })
        };
        let end = nres::group_end();
        r.map_err(|e| nccl_err("send/recv", e))?;
        end.map_err(|e| nccl_err("group end", e))?;
        Ok(())
    }

    /// Enqueues one collective `op` over all ranks, buffers `send[r]` / `recv[r]` on rank r,
    /// `count` bf16 elements per the library call (see `busbw::call_count`).
    pub fn collective(&self, op: &str, send: &[u64], recv: &[u64], count: usize) -> Result<()> {
        let n = self.ranks();
        let bf16 = nsys::ncclDataType_t::ncclBfloat16;
        let sum = nsys::ncclRedOp_t::ncclSum;
        nres::group_start().map_err(|e| nccl_err("group start", e))?;
        let mut r = Ok(nres::NcclStatus::Success);
        for rank in 0..n {
            let (s, d, c, st) = (
                send[rank] as *const _,
                recv[rank] as *mut _,
                self.comms[rank],
                self.stream(rank),
            );
            // SAFETY: the buffers hold what `count` implies for the op (callers size them by
            // busbw::call_count); communicators and streams are alive.
            r = unsafe {
                match op {
                    "all-reduce" => nres::all_reduce(s, d, count, bf16, sum, c, st),
                    "all-gather" => nres::all_gather(s, d, count, bf16, c, st),
                    "reduce-scatter" => nres::reduce_scatter(s, d, count, bf16, sum, c, st),
                    "all-to-all" => {
                        let mut q = Ok(nres::NcclStatus::Success);
                        for peer in 0..n {
                            let off = (peer * count * 2) as u64;
                            q = nres::send(
                                (send[rank] + off) as *const _,
                                count,
                                bf16,
                                peer as i32,
                                c,
                                st,
                            )
                            .and_then(|_| {
                                nres::recv(
                                    (recv[rank] + off) as *mut _,
                                    count,
                                    bf16,
                                    peer as i32,
                                    c,
                                    st,
                                )
                            });
                            if q.is_err() {
                                break;
                            }
                        }
                        q
                    }
                    _ => {
                        let _ = nres::group_end();
                        return Err(Error::Calibration {
                            message: format!("unknown collective '{op}'"),
                        });
                    }
                }
            };
            if r.is_err() {
                break;
            }
        }
        let end = nres::group_end();
        r.map_err(|e| nccl_err(op, e))?;
        end.map_err(|e| nccl_err("group end", e))?;
        Ok(())
    }

    /// Waits for every rank's streams.
    pub fn sync(&self) -> Result<()> {
        for g in &self.gpus {
            g.sync()?;
        }
        Ok(())
    }

    /// Median seconds of `iters` back-to-back calls of `f` (after two warm-up calls), timed on
    /// the host around synchronisations of every rank — as nccl-tests times.
    pub fn time(&self, iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
        for _ in 0..2 {
            f()?;
        }
        self.sync()?;
        let mut times = Vec::new();
        for _ in 0..3 {
            let t0 = Instant::now();
            for _ in 0..iters.max(1) {
                f()?;
            }
            self.sync()?;
            times.push(t0.elapsed().as_secs_f64() / iters.max(1) as f64);
        }
        Ok(crate::backend::repeat::median(&mut times))
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        for g in &self.gpus {
            let _ = g.sync();
        }
        for &c in &self.comms {
            // SAFETY: each communicator is destroyed once, after its streams finished.
            let _ = unsafe { nres::comm_destroy(c) };
        }
    }
}

/// How messages between virtual devices travel.
pub(crate) enum Link {
    /// All devices on one GPU: copies on its communication stream.
    Copy,
    /// Device r on rank r of these communicators.
    Nccl(Rc<Nccl>),
}

/// A part of a message: bytes of some buffer's memory (kept alive while in flight).
pub(crate) struct Part {
    pub phys: Rc<Phys>,
    pub offset: usize,
    pub bytes: usize,
}

impl Part {
    /// Elements `start .. start + n` of `b`.
    pub fn of(b: &Buf, start: usize, n: usize) -> Part {
        let e = b.dtype.bytes() as usize;
        Part {
            phys: b.phys.clone(),
            offset: start * e,
            bytes: n * e,
        }
    }
    /// All of `b`.
    pub fn all(b: &Buf) -> Part {
        Part::of(b, 0, b.elems)
    }
}

/// An issued transfer: completion events on the communication streams, the memory it reads.
struct Issued {
    done: Vec<(Rc<Gpu>, CudaEvent)>,
    keep: Vec<Rc<Phys>>,
}

type Token = Rc<RefCell<Option<Issued>>>;

struct Posted {
    dst: Vec<(u64, usize)>,
    token: Token,
}

/// A posted receive: its buffers exist (and count) already.
pub(crate) struct Pending {
    key: (usize, usize, Tag),
    bufs: Vec<Buf>,
    token: Token,
}

/// Sends and posted receives not yet matched, by (source, destination, tag).
#[derive(Default)]
pub(crate) struct Mailbox {
    sent: HashMap<(usize, usize, Tag), Vec<Part>>,
    posted: HashMap<(usize, usize, Tag), Posted>,
}

impl Mailbox {
    /// Device `src` sends `parts` to `dst`.
    pub fn send(
        &mut self,
        link: &Link,
        gpus: &[Rc<Gpu>],
        src: usize,
        dst: usize,
        tag: Tag,
        parts: Vec<Part>,
    ) -> Result<()> {
        let key = (src, dst, tag);
        if self.sent.contains_key(&key) {
            return Err(gpu_err(
                "ring",
                format!("{tag:?} from {src} to {dst} sent twice"),
            ));
        }
        match self.posted.remove(&key) {
            Some(p) => {
                let issued = issue(link, gpus, src, dst, &parts, &p.dst)?;
                *p.token.borrow_mut() = Some(issued);
            }
            None => {
                self.sent.insert(key, parts);
            }
        }
        Ok(())
    }

    /// Device `dst` posts a receive from `src` into `bufs`.
    pub fn post(
        &mut self,
        link: &Link,
        gpus: &[Rc<Gpu>],
        dst: usize,
        src: usize,
        tag: Tag,
        bufs: Vec<Buf>,
    ) -> Result<Pending> {
        let key = (src, dst, tag);
        let token: Token = Rc::default();
        let targets: Vec<(u64, usize)> =
            bufs.iter().map(|b| (b.ptr(), b.bytes() as usize)).collect();
        match self.sent.remove(&key) {
            Some(parts) => {
                *token.borrow_mut() = Some(issue(link, gpus, src, dst, &parts, &targets)?);
            }
            None => {
                if self.posted.contains_key(&key) {
                    return Err(gpu_err(
                        "ring",
                        format!("{tag:?} from {src} to {dst} posted twice"),
                    ));
                }
                self.posted.insert(
                    key,
                    Posted {
                        dst: targets,
                        token: token.clone(),
                    },
                );
            }
        }
        Ok(Pending { key, bufs, token })
    }

    /// Completes a posted receive: the compute streams of both ends wait for the transfer.
    pub fn wait(&mut self, p: Pending) -> Result<Vec<Buf>> {
        let issued = p.token.borrow_mut().take();
        let Some(issued) = issued else {
            let (src, dst, tag) = p.key;
            return Err(gpu_err(
                "ring",
                format!("device {dst} waits for {tag:?} from device {src}, which was never sent"),
            ));
        };
        for (gpu, ev) in &issued.done {
            gpu.wait(&gpu.compute, ev)?;
        }
        drop(issued.keep);
        Ok(p.bufs)
    }

    /// Fails if a message was sent but never received, or a receive posted but never sent.
    pub fn check_empty(&self) -> Result<()> {
        if let Some((src, dst, tag)) = self.sent.keys().next() {
            return Err(gpu_err(
                "ring",
                format!("{tag:?} from {src} to {dst} was never received"),
            ));
        }
        if let Some((src, dst, tag)) = self.posted.keys().next() {
            return Err(gpu_err(
                "ring",
                format!("device {dst} posted {tag:?} from {src}, never sent"),
            ));
        }
        Ok(())
    }
}

/// Issues the transfer of `parts` from device `src` into `dst` targets.
fn issue(
    link: &Link,
    gpus: &[Rc<Gpu>],
    src: usize,
    dst: usize,
    parts: &[Part],
    targets: &[(u64, usize)],
) -> Result<Issued> {
    if parts.len() != targets.len() || parts.iter().zip(targets).any(|(p, t)| p.bytes != t.1) {
        return Err(gpu_err(
            "ring",
            format!(
                "message from {src} to {dst}: parts of {:?} bytes into buffers of {:?} bytes",
                parts.iter().map(|p| p.bytes).collect::<Vec<_>>(),
                targets.iter().map(|t| t.1).collect::<Vec<_>>()
            ),
        ));
    }
    let keep: Vec<Rc<Phys>> = parts.iter().map(|p| p.phys.clone()).collect();
    let (gs, gd) = (&gpus[src], &gpus[dst]);
    let done = match link {
        Link::Copy => {
            // One GPU: the copy stream waits for what compute has enqueued so far.
            let ready = gd.event(&gd.compute, false)?;
            gd.wait(&gd.comm, &ready)?;
            if !Rc::ptr_eq(gs, gd) {
                let r2 = gs.event(&gs.compute, false)?;
                gd.wait(&gd.comm, &r2)?;
            }
            for (p, t) in parts.iter().zip(targets) {
                gd.copy(t.0, p.phys.ptr + p.offset as u64, p.bytes, &gd.comm)?;
            }
            vec![(gd.clone(), gd.event(&gd.comm, false)?)]
        }
        Link::Nccl(n) => {
            let rs = gs.event(&gs.compute, false)?;
            gs.wait(&gs.comm, &rs)?;
            let rd = gd.event(&gd.compute, false)?;
            gd.wait(&gd.comm, &rd)?;
            for (p, t) in parts.iter().zip(targets) {
                n.send_recv(src, dst, p.phys.ptr + p.offset as u64, t.0, p.bytes)?;
            }
            vec![
                (gd.clone(), gd.event(&gd.comm, false)?),
                (gs.clone(), gs.event(&gs.comm, false)?),
            ]
        }
    };
    Ok(Issued { done, keep })
}
