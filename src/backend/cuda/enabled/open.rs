//! The backend's two entry points: [`probe`] (what is there, in one line) and [`open`].

use super::probe::find as find_libraries;
use super::{CudaBackend, Result};
use crate::backend::Backend;

/// Checks the libraries and the devices; returns a one-line description.
pub fn probe() -> Result<String> {
    let f = find_libraries()?;
    Ok(format!(
        "{} x {} (compute capability {}.{}, {} SMs){}",
        f.devices,
        f.name,
        f.cc.0,
        f.cc.1,
        f.sm_count,
        if f.nccl {
            ", NCCL found"
        } else {
            ", no NCCL (libnccl.so)"
        }
    ))
}

/// Opens the backend: `devices` virtual devices for the units; `quick` shortens measurements.
pub fn open(devices: usize, quick: bool) -> Result<Box<dyn Backend>> {
    Ok(Box::new(CudaBackend::new(devices, quick)?))
}
