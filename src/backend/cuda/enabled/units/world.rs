//! The p virtual devices of one unit run, stepped together from one host thread: each device's
//! program is written as phases over all devices (sends before the posts that match them,
//! receives in the order their data exists), so each device allocates and releases exactly as
//! its CPU-runtime counterpart (`backend::cpu::device`) does, while the GPU work of all devices is
//! enqueued asynchronously — on one GPU into one compute stream (the devices run one after
//! the other), with several GPUs onto each device's own.

use std::collections::BTreeMap;
use std::rc::Rc;

use cudarc::driver::CudaEvent;
use half::bf16;

use crate::backend::unit::device::{Dtype, Mat, Phase, StepTime, Tag};

use super::super::gpu::{Gpu, Op, Ty};
use super::super::mem::{Buf, DevicePool, GpuCount, Phys, Tally};
use super::super::xfer::{Link, Mailbox, Part, Pending};
use super::super::{gpu_err, Result};

/// One virtual device.
pub(crate) struct Dev {
    pub gpu: Rc<Gpu>,
    pub tally: Tally,
}

/// Timing events recorded at one moment, one per GPU in use.
pub(crate) type Marks = Vec<CudaEvent>;

struct StepMarks {
    phase: Phase,
    group: u32,
    step: u32,
    start: Rc<Marks>,
    compute_end: Rc<Marks>,
    end: Rc<Marks>,
}

/// The devices of one run, their messages and timing.
pub(crate) struct World {
    pub devs: Vec<Dev>,
    dev_gpus: Vec<Rc<Gpu>>,
    gpus: Vec<Rc<Gpu>>,
    /// Index into `gpus` of each device's GPU.
    gpu_of: Vec<usize>,
    link: Link,
    mail: Mailbox,
    start: Option<Rc<Marks>>,
    steps: Vec<StepMarks>,
}

impl World {
    /// Devices on `dev_gpus` (device i on `dev_gpus[i]`, its buffers from `pools[i]`, a pool
    /// on that GPU, or from the GPU's default allocator when `None`), messages over `link`.
    pub fn new(dev_gpus: Vec<Rc<Gpu>>, pools: Vec<Option<Rc<DevicePool>>>, link: Link) -> World {
        let mut gpus: Vec<Rc<Gpu>> = Vec::new();
        let mut gpu_of = Vec::new();
        for g in &dev_gpus {
            match gpus.iter().position(|x| Rc::ptr_eq(x, g)) {
                Some(k) => gpu_of.push(k),
                None => {
                    gpus.push(g.clone());
                    gpu_of.push(gpus.len() - 1);
                }
            }
        }
        let counts: Vec<Rc<std::cell::RefCell<GpuCount>>> =
            gpus.iter().map(|_| Rc::default()).collect();
        let devs = dev_gpus
            .iter()
            .zip(pools)
            .enumerate()
            .map(|(i, (g, pool))| Dev {
                gpu: g.clone(),
                tally: Tally::new(Rc::clone(&counts[gpu_of[i]]), pool),
            })
            .collect();
        World {
            devs,
            dev_gpus,
            gpus,
            gpu_of,
            link,
            mail: Mailbox::default(),
            start: None,
            steps: Vec::new(),
        }
    }

    /// Devices.
    pub fn p(&self) -> usize {
        self.devs.len()
    }

    /// The distinct GPUs in use.
    pub fn gpus(&self) -> &[Rc<Gpu>] {
        &self.gpus
    }

    /// The GPU of device `i`.
    pub fn gpu(&self, i: usize) -> &Rc<Gpu> {
        &self.devs[i].gpu
    }

    /// A tracked buffer of device `i`, uninitialised (about to be overwritten).
    pub fn buf(&self, i: usize, name: &'static str, dtype: Dtype, elems: usize) -> Result<Buf> {
        let d = &self.devs[i];
        Buf::new(&d.gpu, &d.tally, name, dtype, elems, false)
    }

    /// A tracked zero-filled buffer of device `i`.
    pub fn zeros(&self, i: usize, name: &'static str, dtype: Dtype, elems: usize) -> Result<Buf> {
        let d = &self.devs[i];
        Buf::new(&d.gpu, &d.tally, name, dtype, elems, true)
    }

    /// A tracked fp32 buffer of device `i` filled with `v`.
    pub fn filled(&self, i: usize, name: &'static str, elems: usize, v: f32) -> Result<Buf> {
        let b = self.buf(i, name, Dtype::Fp32, elems)?;
        self.gpu(i).fill(b.ptr(), v, elems)?;
        Ok(b)
    }

    /// Untracked device memory on device `i`'s GPU holding `data` (inputs staged before the
    /// timed run).
    pub fn stage(&self, i: usize, data: &[bf16]) -> Result<Rc<Phys>> {
        let g = self.gpu(i);
        let bytes = std::mem::size_of_val(data);
        let ptr = g.alloc(bytes)?;
        let phys = Rc::new(Phys {
            gpu: g.clone(),
            ptr,
            bytes,
        });
        g.upload(ptr, data)?;
        Ok(phys)
    }

    /// A tracked bf16 buffer of device `i` holding `data` (uploaded now, outside any timing).
    pub fn upload(&self, i: usize, name: &'static str, data: &[bf16]) -> Result<Buf> {
        let b = self.buf(i, name, Dtype::Bf16, data.len())?;
        self.gpu(i).upload(b.ptr(), data)?;
        Ok(b)
    }

    /// A tracked bf16 buffer of device `i` copied (device to device) from a staged input.
    pub fn copy_staged(&self, i: usize, name: &'static str, src: &Phys) -> Result<Buf> {
        let b = self.buf(i, name, Dtype::Bf16, src.bytes / 2)?;
        let g = self.gpu(i);
        g.copy(b.ptr(), src.ptr, src.bytes, &g.compute)?;
        Ok(b)
    }

    /// Device `i` sends `parts` to `dst`.
    pub fn send(&mut self, i: usize, dst: usize, tag: Tag, parts: Vec<Part>) -> Result<()> {
        self.mail
            .send(&self.link, &self.dev_gpus, i, dst, tag, parts)
    }

    /// Device `i` posts a receive from `src` into new buffers named `name` of the given
    /// (elements, dtype).
    pub fn post(
        &mut self,
        i: usize,
        src: usize,
        tag: Tag,
        name: &'static str,
        shapes: &[(usize, Dtype)],
    ) -> Result<Pending> {
        let bufs = shapes
            .iter()
            .map(|&(n, d)| self.buf(i, name, d, n))
            .collect::<Result<Vec<_>>>()?;
        self.mail
            .post(&self.link, &self.dev_gpus, i, src, tag, bufs)
    }

    /// Completes a posted receive.
    pub fn wait(&mut self, p: Pending) -> Result<Vec<Buf>> {
        self.mail.wait(p)
    }

    /// Posts and completes a receive.
    pub fn recv(
        &mut self,
        i: usize,
        src: usize,
        tag: Tag,
        name: &'static str,
        shapes: &[(usize, Dtype)],
    ) -> Result<Vec<Buf>> {
        let p = self.post(i, src, tag, name, shapes)?;
        self.wait(p)
    }

    /// Row-major GEMM on device `i` (see [`Gpu::gemm`]).
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        i: usize,
        mnk: (usize, usize, usize),
        a: Op,
        b: Op,
        c: Op,
        c_ty: Ty,
        alpha: f32,
        beta: f32,
        batch: usize,
    ) -> Result<()> {
        self.gpu(i).gemm(mnk, a, b, c, c_ty, alpha, beta, batch)
    }

    /// Timing events on every GPU's compute stream, now.
    pub fn mark(&self) -> Result<Rc<Marks>> {
        Ok(Rc::new(
            self.gpus
                .iter()
                .map(|g| g.event(&g.compute, true))
                .collect::<Result<Vec<_>>>()?,
        ))
    }

    /// Starts the timed run: every GPU synchronised, then a start mark.
    pub fn begin(&mut self) -> Result<()> {
        for g in &self.gpus {
            g.sync()?;
            g.reset_pool_high()?;
        }
        for d in &self.devs {
            d.tally.reset_allocator_high()?;
        }
        self.start = Some(self.mark()?);
        Ok(())
    }

    /// Records ring step `step` of `group` in `phase` for every device.
    pub fn step(
        &mut self,
        phase: Phase,
        group: usize,
        step: usize,
        start: &Rc<Marks>,
        compute_end: &Rc<Marks>,
        end: &Rc<Marks>,
    ) {
        self.steps.push(StepMarks {
            phase,
            group: group as u32,
            step: step as u32,
            start: start.clone(),
            compute_end: compute_end.clone(),
            end: end.clone(),
        });
    }

    /// Ends the run: a final mark, every GPU synchronised, every message matched. Returns the
    /// run's seconds (the longest GPU) and each device's ring steps.
    pub fn finish(&mut self) -> Result<(f64, Vec<Vec<StepTime>>)> {
        let end = self.mark()?;
        for g in &self.gpus {
            g.sync()?;
        }
        self.mail.check_empty()?;
        let start = self
            .start
            .clone()
            .ok_or_else(|| gpu_err("unit", "finished before it began"))?;
        let since = |m: &Marks, k: usize| -> Result<f64> {
            let ms = start[k]
                .elapsed_ms(&m[k])
                .map_err(|e| gpu_err("event elapsed time", e))?;
            Ok(f64::from(ms) / 1e3)
        };
        let mut total: f64 = 0.0;
        for k in 0..self.gpus.len() {
            total = total.max(since(&end, k)?);
        }
        let mut per_dev = vec![Vec::new(); self.p()];
        for s in &self.steps {
            for (i, steps) in per_dev.iter_mut().enumerate() {
                let k = self.gpu_of[i];
                steps.push(StepTime {
                    phase: s.phase,
                    group: s.group,
                    step: s.step,
                    start_s: since(&s.start, k)?,
                    compute_end_s: since(&s.compute_end, k)?,
                    end_s: since(&s.end, k)?,
                });
            }
        }
        Ok((total, per_dev))
    }

    /// The high-water mark of all devices of GPU `k` together.
    pub fn gpu_tracked_high(&self, k: usize) -> u64 {
        self.devs
            .iter()
            .zip(&self.gpu_of)
            .find(|(_, &g)| g == k)
            .map(|(d, _)| d.tally.gpu_high_bytes())
            .unwrap_or(0)
    }

    /// Devices on GPU `k`.
    pub fn devices_on(&self, k: usize) -> usize {
        self.gpu_of.iter().filter(|&&g| g == k).count()
    }

    /// Each device's tracked peak, breakdown at the peak, and bytes still held.
    pub fn memory(&self) -> Vec<(u64, BTreeMap<String, u64>, u64)> {
        self.devs
            .iter()
            .map(|d| (d.tally.peak(), d.tally.peak_breakdown(), d.tally.live()))
            .collect()
    }

    /// Each device's measured peak: its pool's high-water mark since [`World::begin`] (the
    /// driver's count; `None` without a pool). Read after the GPUs are synchronised.
    pub fn allocator_highs(&self) -> Result<Vec<Option<u64>>> {
        self.devs
            .iter()
            .map(|d| d.tally.allocator_high_bytes())
            .collect()
    }

    /// The devices on GPU `k`'s measured peaks added up (`None` if any has no pool).
    pub fn gpu_allocator_high(&self, k: usize, highs: &[Option<u64>]) -> Option<u64> {
        self.gpu_of
            .iter()
            .zip(highs)
            .filter(|(&g, _)| g == k)
            .map(|(_, h)| *h)
            .sum()
    }
}

/// Row-major bf16 copy of a matrix.
pub(crate) fn rm(m: &Mat) -> Vec<bf16> {
    let mut v = Vec::with_capacity(m.len());
    for r in 0..m.nrows() {
        for c in 0..m.ncols() {
            v.push(bf16::from_f32(m[(r, c)]));
        }
    }
    v
}

/// A rows × cols matrix from device memory holding it row-major in `dtype`.
pub(crate) fn download(phys: &Phys, dtype: Dtype, rows: usize, cols: usize) -> Result<Mat> {
    let n = rows * cols;
    match dtype {
        Dtype::Bf16 => {
            let mut v = vec![bf16::ZERO; n];
            phys.gpu.download(&mut v, phys.ptr)?;
            Ok(Mat::from_fn(rows, cols, |r, c| v[r * cols + c].to_f32()))
        }
        Dtype::Fp32 => {
            let mut v = vec![0f32; n];
            phys.gpu.download(&mut v, phys.ptr)?;
            Ok(Mat::from_fn(rows, cols, |r, c| v[r * cols + c]))
        }
    }
}

impl World {
    /// Sums each device's `m[i]` (bf16, `n` elements) over all devices in place with a ring
    /// all-reduce, exactly as `Device::all_reduce_sum` does: reduce-scatter then all-gather,
    /// p − 1 steps each, chunk k = [k·n/p, (k+1)·n/p); each incoming chunk lands in a
    /// `comm.allreduce_recv` buffer freed after use.
    pub fn all_reduce_sum(&mut self, m: &[Buf], id: u32) -> Result<()> {
        let p = self.p();
        if p == 1 {
            return Ok(());
        }
        let n = m[0].elems;
        let chunk = |k: usize| (k * n / p, (k + 1) * n / p);
        let bf = Dtype::Bf16;
        for step in 0..p - 1 {
            let tag = Tag::AllReduce {
                id,
                step: step as u32,
            };
            for i in 0..p {
                let (a, b) = chunk((i + p - step) % p);
                self.send(i, (i + 1) % p, tag, vec![Part::of(&m[i], a, b - a)])?;
            }
            for i in 0..p {
                let (a, b) = chunk((i + 2 * p - step - 1) % p);
                let got = self.recv(
                    i,
                    (i + p - 1) % p,
                    tag,
                    "comm.allreduce_recv",
                    &[(b - a, bf)],
                )?;
                self.gpu(i).add_bf16(m[i].at(a), got[0].ptr(), b - a)?;
            }
        }
        for step in 0..p - 1 {
            let tag = Tag::AllReduce {
                id,
                step: (p - 1 + step) as u32,
            };
            for i in 0..p {
                let (a, b) = chunk((i + 1 + p - step) % p);
                self.send(i, (i + 1) % p, tag, vec![Part::of(&m[i], a, b - a)])?;
            }
            for i in 0..p {
                let (a, b) = chunk((i + p - step) % p);
                let got = self.recv(
                    i,
                    (i + p - 1) % p,
                    tag,
                    "comm.allreduce_recv",
                    &[(b - a, bf)],
                )?;
                let g = self.gpu(i);
                g.copy(m[i].at(a), got[0].ptr(), 2 * (b - a), &g.compute)?;
            }
        }
        Ok(())
    }
}
