//! The one fit of a hardware profile's kernel model to measurements, and measured kernels
//! priced against a profile.

pub mod fit;
mod fit_params;
pub mod kernel_fit;
mod link_fit;
pub mod measurements;
pub mod price;
pub mod sessions;
