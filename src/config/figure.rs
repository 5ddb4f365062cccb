//! [`Figure`]: a number of a profile with its source — what every measured or derived figure of
//! a hardware profile and its kernel model is. Its own file so that `hardware.rs` and
//! `kernel_model.rs` both use it without using each other the other way.

use serde::{Deserialize, Serialize};

/// A number with the place it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    /// The number, in the unit the field name carries.
    pub value: f64,
    /// Datasheet, paper, measurement or derivation.
    pub source: String,
}
