//! The tracked allocator: every buffer a virtual device holds is a [`Buf`] — real device
//! memory ([`Phys`]) plus an entry in its device's [`Tally`] under a name and a modelled dtype
//! — so `measured_peak_bytes` is read from the allocations the backend really makes, as the CPU
//! runtime's `Tracked` buffers do (same names, same dtypes, same order of allocations and
//! releases; `crate::memory::unit` predicts the peaks).
//!
//! A buffer's bytes stop counting when its holder drops it or hands it out ([`Buf::untrack`],
//! the CPU's `into_inner`). Its memory is freed when nothing refers to it any more: a message
//! in flight (sent, not yet copied by the receiver) keeps its source alive, as the CPU
//! runtime's channel holds sent data, without counting it for anybody. Each GPU also counts the
//! bytes of all its virtual devices together ([`Tally::gpu_high_bytes`]), next to the driver's
//! own high-water mark.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use crate::backend::unit::device::{Dtype, Mem};

use super::gpu::Gpu;
use super::Result;

/// Bytes all virtual devices of one GPU hold together.
#[derive(Debug, Default)]
pub(crate) struct GpuCount {
    live: u64,
    high: u64,
}

/// One virtual device's live bytes, high-water mark and breakdown by name at that mark (the
/// CPU runtime's [`Mem`], the same accounting), also counted in its GPU's total.
#[derive(Clone)]
pub(crate) struct Tally {
    mem: Mem,
    gpu: Rc<RefCell<GpuCount>>,
}

impl Tally {
    /// A device's tally, counted also in `gpu`'s total.
    pub fn new(gpu: Rc<RefCell<GpuCount>>) -> Tally {
        Tally {
            mem: Mem::default(),
            gpu,
        }
    }

    fn alloc(&self, name: &'static str, bytes: u64) {
        self.mem.alloc(name, bytes);
        let mut g = self.gpu.borrow_mut();
        g.live += bytes;
        g.high = g.high.max(g.live);
    }

    fn free(&self, name: &'static str, bytes: u64) {
        self.mem.free(name, bytes);
        self.gpu.borrow_mut().live -= bytes;
    }

    /// High-water mark.
    pub fn peak(&self) -> u64 {
        self.mem.peak()
    }

    /// Bytes held now.
    pub fn live(&self) -> u64 {
        self.mem.live()
    }

    /// Bytes per name at the high-water mark.
    pub fn peak_breakdown(&self) -> BTreeMap<String, u64> {
        self.mem.stats().peak_breakdown
    }

    /// The high-water mark of all virtual devices of this device's GPU together.
    pub fn gpu_high_bytes(&self) -> u64 {
        self.gpu.borrow().high
    }
}

/// Device memory; freed (ordered after the GPU's compute stream) when the last reference goes.
pub(crate) struct Phys {
    pub gpu: Rc<Gpu>,
    pub ptr: u64,
    pub bytes: usize,
}

impl Drop for Phys {
    fn drop(&mut self) {
        self.gpu.free(self.ptr);
    }
}

/// A buffer a virtual device holds: `elems` elements of `dtype`, counted while it lives.
pub(crate) struct Buf {
    pub phys: Rc<Phys>,
    pub name: &'static str,
    pub dtype: Dtype,
    pub elems: usize,
    tally: Option<Tally>,
}

impl Buf {
    /// Allocates `elems` elements of `dtype` on `gpu`, counted in `tally` as `name`; zeroed
    /// when `zero` (on the compute stream).
    pub fn new(
        gpu: &Rc<Gpu>,
        tally: &Tally,
        name: &'static str,
        dtype: Dtype,
        elems: usize,
        zero: bool,
    ) -> Result<Buf> {
        let bytes = elems * dtype.bytes() as usize;
        let ptr = gpu.alloc(bytes)?;
        let phys = Rc::new(Phys {
            gpu: gpu.clone(),
            ptr,
            bytes,
        });
        if zero && bytes > 0 {
            gpu.zero(ptr, bytes, &gpu.compute)?;
        }
        tally.alloc(name, bytes as u64);
        Ok(Buf {
            phys,
            name,
            dtype,
            elems,
            tally: Some(tally.clone()),
        })
    }

    /// Device address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        self.phys.ptr + (i * self.dtype.bytes() as usize) as u64
    }

    /// Device address of element 0.
    pub fn ptr(&self) -> u64 {
        self.phys.ptr
    }

    /// Bytes counted for this buffer.
    pub fn bytes(&self) -> u64 {
        self.elems as u64 * self.dtype.bytes()
    }

    /// Stops counting the buffer (handed out of the device, as the CPU's `into_inner`); the
    /// memory stays until the returned handle goes.
    pub fn untrack(mut self) -> Rc<Phys> {
        if let Some(t) = self.tally.take() {
            t.free(self.name, self.bytes());
        }
        self.phys.clone()
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Some(t) = self.tally.take() {
            t.free(self.name, self.bytes());
        }
    }
}
