//! Collectives as the steps NCCL and RCCL run, so their traffic shares links with
//! point-to-point flows. The collective library's plan — algorithm, protocol, steps, and who
//! sends what in each — is the cost model's ([`crate::cost::collective`], reached through
//! [`super::Network::plan`]); the engine charges each step its latency, then starts the step's
//! transfers together as flows, and starts the next step when the last has arrived. With
//! [`super::LinkModel::Ideal`] a step's flows share the links they have in common equally and
//! nothing else; with [`super::LinkModel::MaxMin`] every flow in flight shares every link. An
//! uncontended collective takes the plan's time under either model (tested below and, over
//! every bundled profile, in `tests/it/analytic_vs_sim.rs`).

pub use crate::cost::pattern::Transfer;

#[cfg(test)]
mod tests;
