//! One GPU: its context, a compute and a communication stream, a cuBLAS handle on the compute
//! stream, the NVRTC kernels, and raw device memory. cudarc's per-buffer event tracking is
//! switched off: the units order their streams themselves with events (`xfer`), so no hidden
//! event is recorded or waited on inside a timed region.

use std::sync::Arc;

use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::sys::{self as dsys, CUdevice_attribute, CUevent_flags};
use cudarc::driver::{result as dres, CudaContext, CudaEvent, CudaStream};

use super::nvrtc::Kernels;
use super::{gpu_err, Result};

/// Matrix element types of a GEMM operand or result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    /// bf16.
    Bf16,
    /// fp32.
    F32,
}

impl Ty {
    fn cuda(self) -> blas_sys::cudaDataType {
        match self {
            Ty::Bf16 => blas_sys::cudaDataType::CUDA_R_16BF,
            Ty::F32 => blas_sys::cudaDataType::CUDA_R_32F,
        }
    }
}

/// A row-major matrix operand of a GEMM: device pointer, row stride (elements), whether the
/// product uses its transpose, and (batched GEMMs) the distance between consecutive matrices.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    pub ptr: u64,
    pub ld: usize,
    pub t: bool,
    pub stride: usize,
}

impl Op {
    /// A plain operand.
    pub fn n(ptr: u64, ld: usize) -> Op {
        Op {
            ptr,
            ld,
            t: false,
            stride: 0,
        }
    }
    /// A transposed operand.
    pub fn t(ptr: u64, ld: usize) -> Op {
        Op {
            ptr,
            ld,
            t: true,
            stride: 0,
        }
    }
    /// The same operand, batched `stride` elements apart.
    pub fn strided(self, stride: usize) -> Op {
        Op { stride, ..self }
    }
}

/// One GPU and what runs on it.
pub(crate) struct Gpu {
    /// Device ordinal.
    pub ordinal: usize,
    /// Its primary context.
    pub ctx: Arc<CudaContext>,
    /// Kernels and GEMMs.
    pub compute: Arc<CudaStream>,
    /// Transfers (copies or NCCL).
    pub comm: Arc<CudaStream>,
    blas: CudaBlas,
    /// The compiled kernels.
    pub k: Kernels,
    /// Stream-ordered allocation (cuMemAllocAsync) available.
    async_alloc: bool,
}

impl Gpu {
    /// Opens GPU `ordinal` and loads the kernels compiled for it.
    pub fn new(ordinal: usize) -> Result<Gpu> {
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| gpu_err(&format!("context on GPU {ordinal}"), e))?;
        // SAFETY: called before anything is allocated in this context; every buffer's stream
        // order is kept by explicit events from here on.
        unsafe { ctx.disable_event_tracking() };
        let attr = |a| {
            ctx.attribute(a)
                .map_err(|e| gpu_err(&format!("attribute {a:?} of GPU {ordinal}"), e))
        };
        let async_alloc =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)? != 0;
        let compute = ctx.new_stream().map_err(|e| gpu_err("compute stream", e))?;
        let comm = ctx.new_stream().map_err(|e| gpu_err("copy stream", e))?;
        let blas = CudaBlas::new(compute.clone()).map_err(|e| gpu_err("cuBLAS handle", e))?;
        let k = Kernels::load(&ctx)?;
        let gpu = Gpu {
            ordinal,
            ctx,
            compute,
            comm,
            blas,
            k,
            async_alloc,
        };
        if async_alloc {
            // Keep freed memory in the pool (no release at each synchronisation), so that a
            // timed run's allocations do not map memory again.
            gpu.pool_set(
                dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                u64::MAX,
            )?;
        }
        Ok(gpu)
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| gpu_err("bind context", e))
    }

    /// Total device memory.
    pub fn total_bytes(&self) -> u64 {
        self.ctx.total_mem().map(|b| b as u64).unwrap_or(0)
    }

    /// Bytes in use on the device (`cuMemGetInfo`: total − free), all processes included.
    pub fn used_bytes(&self) -> Result<u64> {
        let (free, total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| gpu_err("cuMemGetInfo", e))?;
        Ok((total - free) as u64)
    }

    fn pool(&self) -> Result<dsys::CUmemoryPool> {
        self.bind()?;
        let mut pool = std::ptr::null_mut();
        // SAFETY: out-pointer to a pool handle; the device handle belongs to this context.
        unsafe { dsys::cuDeviceGetDefaultMemPool(&mut pool, self.ctx.cu_device()) }
            .result()
            .map_err(|e| gpu_err("default memory pool", e))?;
        Ok(pool)
    }

    fn pool_set(&self, attr: dsys::CUmemPool_attribute, value: u64) -> Result<()> {
        let pool = self.pool()?;
        self.pool_set_on(pool, attr, value)
    }

    /// Sets a u64 attribute of `pool` (this GPU's).
    pub fn pool_set_on(
        &self,
        pool: dsys::CUmemoryPool,
        attr: dsys::CUmemPool_attribute,
        value: u64,
    ) -> Result<()> {
        self.bind()?;
        let mut v = value;
        // SAFETY: the attributes set here take a u64 (cuuint64_t).
        unsafe { dsys::cuMemPoolSetAttribute(pool, attr, &mut v as *mut u64 as *mut _) }
            .result()
            .map_err(|e| gpu_err("memory pool attribute", e))
    }

    /// Resets the stream-ordered allocator's high-water mark of bytes in use.
    pub fn reset_pool_high(&self) -> Result<()> {
        if self.async_alloc {
            self.pool_set(dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
        }
        Ok(())
    }

    /// The stream-ordered allocator's high-water mark of bytes in use since the last reset
    /// (the driver's own count, allocation granularity included); `None` without memory pools.
    pub fn pool_high_bytes(&self) -> Result<Option<u64>> {
        if !self.async_alloc {
            return Ok(None);
        }
        let pool = self.pool()?;
        let mut v: u64 = 0;
        // SAFETY: USED_MEM_HIGH is a u64 attribute.
        unsafe {
            dsys::cuMemPoolGetAttribute(
                pool,
                dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                &mut v as *mut u64 as *mut _,
            )
        }
        .result()
        .map_err(|e| gpu_err("memory pool high-water", e))?;
        Ok(Some(v))
    }

    /// A u64 attribute of `pool` (this GPU's): used or reserved bytes, now or at the mark.
    pub fn pool_get_on(
        &self,
        pool: dsys::CUmemoryPool,
        attr: dsys::CUmemPool_attribute,
    ) -> Result<u64> {
        self.bind()?;
        let mut v: u64 = 0;
        // SAFETY: the attributes read here are u64 (cuuint64_t).
        unsafe { dsys::cuMemPoolGetAttribute(pool, attr, &mut v as *mut u64 as *mut _) }
            .result()
            .map_err(|e| gpu_err("memory pool attribute", e))?;
        Ok(v)
    }

    /// A memory pool of its own on this GPU (device memory, no export handles), keeping what
    /// is freed into it (release threshold: all); `None` without memory pools.
    pub fn new_pool(&self) -> Result<Option<dsys::CUmemoryPool>> {
        if !self.async_alloc {
            return Ok(None);
        }
        self.bind()?;
        let props = dsys::CUmemPoolProps {
            allocType: dsys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            handleTypes: dsys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            location: dsys::CUmemLocation {
                type_: dsys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.ordinal as i32,
            },
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: 0,
            usage: 0,
            reserved: [0; 54],
        };
        let mut pool = std::ptr::null_mut();
        // SAFETY: out-pointer to a pool handle; the properties are fully initialised.
        unsafe { dsys::cuMemPoolCreate(&mut pool, &props) }
            .result()
            .map_err(|e| {
                gpu_err(
                    &format!("creating a memory pool on GPU {}", self.ordinal),
                    e,
                )
            })?;
        self.pool_set_on(
            pool,
            dsys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            u64::MAX,
        )?;
        Ok(Some(pool))
    }

    /// Destroys `pool` (its memory goes back once nothing allocated from it is left).
    pub fn destroy_pool(&self, pool: dsys::CUmemoryPool) {
        if self.bind().is_ok() {
            // SAFETY: `pool` was created by `new_pool` on this GPU and is destroyed once.
            let _ = unsafe { dsys::cuMemPoolDestroy(pool) };
        }
    }

    /// `bytes` of device memory from `pool`, ordered on the compute stream (never zero-sized);
    /// freed by [`Gpu::free`] like any other.
    pub fn alloc_from(&self, pool: dsys::CUmemoryPool, bytes: usize) -> Result<u64> {
        self.bind()?;
        let n = bytes.max(16);
        let mut ptr: dsys::CUdeviceptr = 0;
        // SAFETY: out-pointer to a device address; `pool` is this GPU's.
        unsafe { dsys::cuMemAllocFromPoolAsync(&mut ptr, n, pool, self.compute.cu_stream()) }
            .result()
            .map_err(|e| gpu_err(&format!("allocating {n} bytes on GPU {}", self.ordinal), e))?;
        Ok(ptr)
    }

    /// `bytes` of device memory, ordered on the compute stream (never zero-sized).
    pub fn alloc(&self, bytes: usize) -> Result<u64> {
        self.bind()?;
        let n = bytes.max(16);
        // SAFETY: a plain allocation; the pointer is freed by `free`.
        let r = unsafe {
            if self.async_alloc {
                dres::malloc_async(self.compute.cu_stream(), n)
            } else {
                dres::malloc_sync(n)
            }
        };
        r.map_err(|e| gpu_err(&format!("allocating {n} bytes on GPU {}", self.ordinal), e))
    }

    /// Frees `ptr` after everything enqueued on the compute stream so far.
    pub fn free(&self, ptr: u64) {
        if self.bind().is_err() {
            return;
        }
        // SAFETY: `ptr` came from `alloc` and is freed once (Phys's drop).
        let _ = unsafe {
            if self.async_alloc {
                dres::free_async(ptr, self.compute.cu_stream())
            } else {
                dres::free_sync(ptr)
            }
        };
    }

    /// Zeroes `bytes` at `ptr` on `stream`.
    pub fn zero(&self, ptr: u64, bytes: usize, stream: &CudaStream) -> Result<()> {
        self.bind()?;
        // SAFETY: `ptr` holds at least `bytes`.
        unsafe { dres::memset_d8_async(ptr, 0, bytes, stream.cu_stream()) }
            .map_err(|e| gpu_err("memset", e))
    }

    /// Copies `bytes` from `src` to `dst` on `stream`.
    pub fn copy(&self, dst: u64, src: u64, bytes: usize, stream: &CudaStream) -> Result<()> {
        self.bind()?;
        // SAFETY: both pointers hold at least `bytes` (checked by the callers).
        unsafe { dres::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }
            .map_err(|e| gpu_err("device copy", e))
    }

    /// Uploads `data` to `dst` and waits for it.
    pub fn upload<T>(&self, dst: u64, data: &[T]) -> Result<()> {
        self.bind()?;
        // SAFETY: `dst` holds at least size_of_val(data) bytes; synchronised before `data` may
        // go away.
        unsafe { dres::memcpy_htod_async(dst, data, self.compute.cu_stream()) }
            .map_err(|e| gpu_err("upload", e))?;
        self.sync()
    }

    /// Downloads `out.len()` elements from `src` after the compute stream's work.
    pub fn download<T>(&self, out: &mut [T], src: u64) -> Result<()> {
        self.bind()?;
        // SAFETY: `src` holds at least size_of_val(out) bytes; synchronised before return.
        unsafe { dres::memcpy_dtoh_async(out, src, self.compute.cu_stream()) }
            .map_err(|e| gpu_err("download", e))?;
        self.sync()
    }

    /// Waits for both streams.
    pub fn sync(&self) -> Result<()> {
        self.compute
            .synchronize()
            .map_err(|e| gpu_err("synchronise compute stream", e))?;
        self.comm
            .synchronize()
            .map_err(|e| gpu_err("synchronise copy stream", e))
    }

    /// An event recorded on `stream`; `timing` for one that `elapsed_ms` can read.
    pub fn event(&self, stream: &CudaStream, timing: bool) -> Result<CudaEvent> {
        let flags = if timing {
            CUevent_flags::CU_EVENT_DEFAULT
        } else {
            CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        stream
            .record_event(Some(flags))
            .map_err(|e| gpu_err("record event", e))
    }

    /// `stream` waits for `event` (which may belong to this GPU's other stream).
    pub fn wait(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        stream.wait(event).map_err(|e| gpu_err("stream wait", e))
    }

    /// Seconds of `f` on the compute stream, timed alone: both streams synchronised, an event
    /// before and after (the launch is inside the interval).
    pub fn time(&self, f: impl FnOnce() -> Result<()>) -> Result<f64> {
        self.sync()?;
        let start = self.event(&self.compute, true)?;
        f()?;
        let end = self.event(&self.compute, true)?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(|e| gpu_err("event elapsed time", e))?;
        Ok(f64::from(ms) / 1e3)
    }

    /// Row-major `C (m×n) = α·op(A)·op(B) + β·C` on the compute stream, bf16 operands, fp32
    /// accumulation, C in `c_ty`; `batch` matrices when > 1 (each operand's `stride` apart).
    /// Issued to the column-major library as `Cᵀ = op(B)ᵀ·op(A)ᵀ`.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        (m, n, k): (usize, usize, usize),
        a: Op,
        b: Op,
        c: Op,
        c_ty: Ty,
        alpha: f32,
        beta: f32,
        batch: usize,
    ) -> Result<()> {
        if m == 0 || n == 0 || k == 0 || batch == 0 {
            return Ok(());
        }
        let big = |x: usize| i32::try_from(x).is_err();
        if [m, n, k, a.ld, b.ld, c.ld, batch].into_iter().any(big) {
            return Err(gpu_err(
                "cuBLAS gemm",
                format!("a dimension of {m}×{n}×{k} (batch {batch}) exceeds 32 bits"),
            ));
        }
        self.bind()?;
        let op = |t: bool| {
            if t {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (al, be) = (alpha, beta);
        let compute = blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
        let algo = blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
        let h = *self.blas.handle();
        // SAFETY: the callers pass buffers of at least the sizes the shapes, strides and
        // batch imply; alpha/beta are host floats (compute type 32F).
        let r = unsafe {
            if batch == 1 {
                blas::gemm_ex(
                    h,
                    op(b.t),
                    op(a.t),
                    n as i32,
                    m as i32,
                    k as i32,
                    &al as *const f32 as *const _,
                    b.ptr as *const _,
                    Ty::Bf16.cuda(),
                    b.ld as i32,
                    a.ptr as *const _,
                    Ty::Bf16.cuda(),
                    a.ld as i32,
                    &be as *const f32 as *const _,
                    c.ptr as *mut _,
                    c_ty.cuda(),
                    c.ld as i32,
                    compute,
                    algo,
                )
            } else {
                blas::gemm_strided_batched_ex(
                    h,
                    op(b.t),
                    op(a.t),
                    n as i32,
                    m as i32,
                    k as i32,
                    &al as *const f32 as *const _,
                    b.ptr as *const _,
                    Ty::Bf16.cuda(),
                    b.ld as i32,
                    b.stride as i64,
                    a.ptr as *const _,
                    Ty::Bf16.cuda(),
                    a.ld as i32,
                    a.stride as i64,
                    &be as *const f32 as *const _,
                    c.ptr as *mut _,
                    c_ty.cuda(),
                    c.ld as i32,
                    c.stride as i64,
                    batch as i32,
                    compute,
                    algo,
                )
            }
        };
        r.map_err(|e| gpu_err(&format!("cuBLAS gemm {m}×{n}×{k} (batch {batch})"), e))
    }
}
