//! Stub of the CUDA backend for builds without the `cuda` feature.

use crate::backend::Backend;
use crate::error::{Error, Result};

/// The error every CUDA entry point returns in this build.
pub fn unavailable() -> Error {
    Error::Unavailable {
        backend: "cuda",
        message: "metp-sim was built without the `cuda` feature; rebuild with --features cuda \
                  on a machine with an NVIDIA driver"
            .into(),
    }
}

/// Always fails: this build has no CUDA backend.
pub fn probe() -> Result<String> {
    Err(unavailable())
}

/// Always fails: this build has no CUDA backend.
pub fn open(_devices: usize, _quick: bool) -> Result<Box<dyn Backend>> {
    Err(unavailable())
}
