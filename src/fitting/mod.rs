//! The fit: kernel measurements as a file, the one fit of a hardware profile's kernel model
//! (and links, slowdown, measurement sessions) to such a file, and lists of kernels priced with
//! a profile against measured times — what `calibrate` (fit what it measured, `--fit FILE`) and
//! `kernels` (price, `--compare`) share.
//!
//! - [`measurements`]: the measurement file (the shared H200 format, extended);
//! - [`bounds`]: what no GPU run can produce, refused in the measurement files and kernel lists
//!   read from disk (shapes, times, rates against any profile and against the one fitted onto
//!   or priced with, repeats, links);
//! - [`kernel_fit`]: the fit of the kernel model to a file ([`kernel_fit::fit_profile`]), its
//!   parameter groups and scales (`fit_params.rs`) and the link's fit (`link_fit.rs`);
//! - [`sessions`]: a clock factor per measurement session (GEMMs of later sessions);
//! - [`price`]: a list of kernels priced with a profile, against measured times (`kernels`);
//! - [`fit`]: least-squares tools (the link line, the slowdown, the simplex search,
//!   Levenberg–Marquardt).
//!
//! The files use each other one way: `kernel_fit` → `price` → `sessions` → `measurements`.
//! Depends on `backend` (how a backend's times were taken, the tiles of its own CUDA kernels, the
//! median), `config`, `cost` (the kernel model it fits), `schedule` (kernel shapes) and `error`;
//! never on `calibrate`, `report` or `cli`: a fit reads a file, it measures nothing.

pub mod bounds;
pub mod fit;
mod fit_params;
pub mod kernel_fit;
mod link_fit;
pub mod measurements;
pub mod price;
pub mod sessions;
