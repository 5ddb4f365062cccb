//! Finding the libraries and the GPUs before anything else: cudarc panics when a library is
//! missing, so each is probed with `sys::is_culib_present()` (the same names cudarc loads:
//! `libX.so`, then `libX.so.<major>` of the bindings, …) and a missing one becomes one clear
//! error. NCCL is optional (needed only with two GPUs or more).

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::CudaContext;

use super::{unavailable, Result};

/// What the probe found.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// GPUs the driver reports.
    pub devices: usize,
    /// GPU 0's name.
    pub name: String,
    /// GPU 0's compute capability.
    pub cc: (i32, i32),
    /// GPU 0's streaming multiprocessors.
    pub sm_count: u64,
    /// libnccl.so loadable.
    pub nccl: bool,
}

/// Checks the driver, NVRTC and cuBLAS libraries and asks the driver for its devices.
pub(crate) fn find() -> Result<Found> {
    // SAFETY: each call only tries to open a shared library by name.
    let present = |f: unsafe fn() -> bool| unsafe { f() };
    if !present(cudarc::driver::sys::is_culib_present) {
        return Err(unavailable(
            "no NVIDIA driver: libcuda.so (or libcuda.so.1) was not found — install the driver, \
             run on a GPU machine, or add the driver's folder to LD_LIBRARY_PATH",
        ));
    }
    for (lib, ok) in [
        (
            "NVRTC (libnvrtc.so / libnvrtc.so.12 / libnvrtc.so.13)",
            present(cudarc::nvrtc::sys::is_culib_present),
        ),
        (
            "cuBLAS (libcublas.so / libcublas.so.12 / libcublas.so.13)",
            present(cudarc::cublas::sys::is_culib_present),
        ),
    ] {
        if !ok {
            return Err(unavailable(format!(
                "{lib} was not found: add the CUDA runtime libraries' folder to LD_LIBRARY_PATH \
                 (scripts/gpu-check.sh makes unversioned links for CUDA 12 and 13 names)"
            )));
        }
    }
    let n = CudaContext::device_count()
        .map_err(|e| unavailable(format!("the driver reports no usable device: {e}")))?;
    if n < 1 {
        return Err(unavailable("the driver reports no CUDA device"));
    }
    let ctx = CudaContext::new(0).map_err(|e| unavailable(format!("GPU 0: {e}")))?;
    let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
    let cc = ctx
        .compute_capability()
        .map_err(|e| unavailable(format!("GPU 0 compute capability: {e}")))?;
    let sm_count = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(|e| unavailable(format!("GPU 0 multiprocessors: {e}")))? as u64;
    Ok(Found {
        devices: n as usize,
        name,
        cc,
        sm_count,
        nccl: present(cudarc::nccl::sys::is_culib_present),
    })
}
