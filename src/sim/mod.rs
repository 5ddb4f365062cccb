//! Discrete-event simulator (in progress): the event queue and the max-min fair bandwidth
//! solver. Never depends on `analytic` or `cli`.

pub mod maxmin;
pub mod queue;

pub use queue::{ps_to_secs, secs_to_ps, SimTime};
