//! The tracked allocator: every buffer a virtual device holds is a [`Buf`] — real device
//! memory ([`Phys`]) plus an entry in its device's [`Tally`] under a name and a modelled dtype
//! — so `tracked_peak_bytes` is read from the allocations the backend really makes, as the CPU
//! runtime's `Tracked` buffers do (same names, same dtypes, same order of allocations and
//! releases; `crate::memory::unit` predicts the peaks), and `measured_peak_bytes` is the
//! driver's count of the same allocations (below).
//!
//! A buffer's bytes stop counting when its holder drops it or hands it out ([`Buf::untrack`],
//! the CPU's `into_inner`). Its memory is freed when nothing refers to it any more: a message
//! in flight (sent, not yet copied by the receiver) keeps its source alive, as the CPU
//! runtime's channel holds sent data, without counting it for anybody. Each GPU also counts the
//! bytes of all its virtual devices together ([`Tally::gpu_high_bytes`]), next to the driver's
//! own high-water mark.
//!
//! **Measured beside tracked.** Each virtual device allocates its buffers from a memory pool of
//! its own ([`DevicePool`], `cuMemPoolCreate`, kept by the backend across runs so that a timed
//! run reuses memory it already mapped), and the driver keeps that pool's used-memory
//! high-water mark (`CU_MEMPOOL_ATTR_USED_MEM_HIGH`, reset when the timed run begins). That
//! mark is the device's *measured* peak: exact at every allocation and free the driver orders
//! (no sampling), in the driver's bytes — each allocation as the pool rounds it, a buffer
//! counted from its allocation until its stream-ordered free, so a message in flight counts for
//! its sender and an output handed out counts until it is fetched. The tally is its *tracked*
//! peak. Not in either: the CUDA context, cuBLAS's workspace, NCCL's buffers (a profile's
//! `reserved`) and the inputs the harness stages outside the run (`World::stage`, from the
//! GPU's default pool).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use crate::backend::unit::device::{Dtype, Mem};

use cudarc::driver::sys as dsys;

use super::gpu::Gpu;
use super::Result;

/// One virtual device's memory pool on its GPU: the driver counts the bytes allocated from it
/// and their high-water mark. Destroyed when the last holder goes (the driver frees its memory
/// once nothing allocated from it is left).
pub(crate) struct DevicePool {
    gpu: Rc<Gpu>,
    handle: dsys::CUmemoryPool,
}

impl DevicePool {
    /// A new pool on `gpu`; `None` when the GPU has no memory pools.
    pub fn new(gpu: &Rc<Gpu>) -> Result<Option<Rc<DevicePool>>> {
        Ok(gpu.new_pool()?.map(|handle| {
            Rc::new(DevicePool {
                gpu: gpu.clone(),
                handle,
            })
        }))
    }

    fn get(&self, attr: dsys::CUmemPool_attribute) -> Result<u64> {
        self.gpu.pool_get_on(self.handle, attr)
    }

    /// Restarts the high-water mark of used bytes from the bytes in use now.
    pub fn reset_high(&self) -> Result<()> {
        self.gpu.pool_set_on(
            self.handle,
            dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            0,
        )
    }

    /// The driver's high-water mark of bytes allocated from the pool since the last reset.
    pub fn high_bytes(&self) -> Result<u64> {
        self.get(dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH)
    }

    /// Bytes the pool holds reserved but not allocated (reusable by its next run).
    pub fn idle_bytes(&self) -> Result<u64> {
        let reserved = self.get(dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?;
        let used = self.get(dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?;
        Ok(reserved.saturating_sub(used))
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        self.gpu.alloc_from(self.handle, bytes)
    }
}

impl Drop for DevicePool {
    fn drop(&mut self) {
        self.gpu.destroy_pool(self.handle);
    }
}

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
    /// The device's own memory pool, which its buffers come from (`None`: the GPU's default
    /// allocator).
    pool: Option<Rc<DevicePool>>,
}

impl Tally {
    /// A device's tally, counted also in `gpu`'s total; its buffers come from `pool`.
    pub fn new(gpu: Rc<RefCell<GpuCount>>, pool: Option<Rc<DevicePool>>) -> Tally {
        Tally {
            mem: Mem::default(),
            gpu,
            pool,
        }
    }

    /// The driver's high-water mark of the device's pool since the timed run began.
    pub fn allocator_high_bytes(&self) -> Result<Option<u64>> {
        self.pool.as_ref().map(|p| p.high_bytes()).transpose()
    }

    /// Restarts the device pool's high-water mark (the timed run begins).
    pub fn reset_allocator_high(&self) -> Result<()> {
        match &self.pool {
            Some(p) => p.reset_high(),
            None => Ok(()),
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
        let ptr = match &tally.pool {
            Some(pool) => pool.alloc(bytes)?,
            None => gpu.alloc(bytes)?,
        };
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
