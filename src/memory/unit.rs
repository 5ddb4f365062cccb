//! The unit inventory: what one device holds, moment by moment, while it runs one METP
//! computing unit (DESIGN §1) — the attention unit (two-level loop: head groups outer, K/V ring
//! inner) or the MLP unit (one-level ring of weight-shard pairs) — forward and backward.
//!
//! The layer inventory ([`super::inventory`]) adds a phase's transients as if they were all
//! live at once; a device never holds them all at once. This module lists, for every *moment*
//! of the unit — the live set right before a release that follows allocations, where the live
//! bytes reach a local maximum — the tensors the device holds (named, with bytes and kind), and
//! takes the peak as the largest moment. It is the single source of truth for a unit's memory:
//! the executed runtime (`backend::cpu::units`) measures exactly these peaks, byte for byte, on every
//! device, and the layer inventory's METP transients are, per phase, the transients of the
//! moment with the most transient bytes here.
//!
//! # What a device holds (device i of p; c = s/p local tokens, R = b·c local rows)
//!
//! G head groups (G = p unless `head_groups` says otherwise; a multiple of p); device i owns
//! the k = G/p consecutive groups i·k .. (i+1)·k − 1. Per group: h_g = h/G query columns,
//! a_g = a/G heads, K/V width w_kv (= h_g for multi-head attention), Q|K|V width
//! q = h_g + 2·w_kv. bf16 tensors count 2 bytes per element, fp32 ones 4.
//!
//! ```text
//! attention                                                      kind
//! WS   = 2·(h·q + h_g·h)  one group's W_qkv[g] and W_o[g]         static (own k), transient (received)
//! GS   = 2·WS             fp32 gradient of one group's shard     static (own k), transient (others')
//! X    = 2·R·h            attn.input                             stored
//! O_g  = 2·R·h_g          attn.group_outputs, one group          stored (grows group by group)
//! L_g  = 4·R·a_g          attn.lse, one group (fp32)             stored (grows group by group)
//! OUT  = 2·R·h            attn.output_sum (forward)              transient
//! DOUT = DX = 2·R·h       grad.layer_output, grad.layer_input    transient (backward)
//! QKV  = 2·R·q            attn.qkv_group (recomputed)            transient
//! ACC  = 4·R·h_g          attn.output_acc_fp32 (running output)  transient
//! KV   = 2·2·R·w_kv       comm.kv_recv, one K/V block            transient
//! DKV  = 2·4·R·w_kv       attn.dkv_acc_fp32 (own), comm.dkv_recv_fp32 (traveling)
//! BLK  = 2·b·a_g·c²       one block of the group's heads: scores, probabilities, their
//!                         gradient, score gradient (unfused only)
//! BL   = 4·R·a_g          attn.block_lse_fp32 (unfused forward)
//! OB   = 2·R·h_g          attn.block_out (unfused forward)
//! DOG  = 2·R·h_g          attn.grad_group_output, dO of one group
//! DEL  = 4·R·a_g          attn.delta_fp32, rowsum(dO∘O)
//! DQ   = 4·R·h_g          attn.dq_acc_fp32
//! DQKV = 2·R·q            grad.qkv_group
//!
//! MLP (f_p = f/p; m = 2 matrices for GeLU, 3 for SwiGLU; u = 1 for GeLU, 2 for SwiGLU)
//! WS = 2·m·h·f_p  mlp.weights (own), mlp.weight_recv (traveling)
//! GS = 2·WS       main gradient, mlp.weight_grad_acc_fp32 (own accumulator),
//!                 mlp.weight_grad_recv_fp32 (traveling accumulators)
//! X = OUT = DOUT = DX = 2·R·h;  HP = DH = 2·u·R·f_p (activation input, its gradient);
//! A = 2·R·f_p (activation output)
//! ```
//!
//! # When (the order of allocations and releases)
//!
//! **Attention forward**, group g: the shard W\[g\] (nothing if own; else a receive buffer —
//! posted during group g−1 when double buffered); with two receive buffers the receive of
//! W\[g+1\] is posted now (if foreign); then QKV, ACC and the group's log-sum-exp. Ring step t
//! (key block j = i − t mod p; causal: visible iff j ≤ i, i.e. t ≤ i): the current K/V block
//! (the own columns of QKV at t = 0, a receive buffer after); with two buffers the next block's
//! receive is posted before computing; unfused: scores, block log-sum-exp, probabilities
//! (scores released), block output (probabilities released); then the current block is
//! released (one buffer: before receiving the next). After the ring: O\[i,g\] (stored), ACC,
//! QKV and the shard released.
//!
//! **Attention backward**, group g: DOUT and DX for the whole unit; the shard as in forward;
//! DOG, QKV, DEL, DQ and the own fp32 dK/dV accumulators. Ring step t: with two buffers the next
//! K/V block and the next dK/dV are posted; unfused: probabilities, their gradient, score
//! gradient (the probability gradient released first); with one buffer the current K/V and
//! dK/dV are released before the next ones are received. After p steps and the final hop the
//! dK/dV of the own block is back: DQKV is formed, DQ, dK/dV and DEL released; weight
//! gradients go to the shard's owner: a non-owner forms its fp32 contribution (GS) and sends
//! it; the owner receives the p−1 contributions through min(rb, p−1) receive buffers.
//!
//! **MLP**, ring step t: forward — the current pair (own at t = 0), the next posted (two
//! buffers), HP then A (HP released); backward — the traveling pair and fp32 accumulator (own
//! at t = 0), the next of each posted (two buffers), HP, A, DH.
//!
//! Messages in flight are held by nobody (the wire and the communication library's staging), so
//! the weight exchange — ring relay or broadcast from the owner — does not change what a
//! device holds: a relay forwards from the receive buffer it computes with, an owner sends from
//! its own shard. Degree effects fall out of the schedule: at p = 1 nothing travels (the
//! backward still holds its own dK/dV accumulator); at p = 2 only one foreign shard and one
//! foreign K/V block exist, so double buffering never holds two; a device never receives its
//! own shard.
//!
//! # Peaks
//!
//! [`unit_inventory`] reports each device's peak moment (the first in program order that
//! reaches its high-water mark) and, per phase, the moment with the most transient bytes over
//! all devices — the moment the layer inventory takes its METP transients from (stored
//! tensors are counted whole there, for every layer, so the transient part is what a phase
//! adds). Only moments that can be the largest of their kind are visited. The make-up of a
//! moment depends on the group only through whether the current and next shards are foreign
//! or own (and through the stored outputs, which grow with g), and on the step only through
//! t = 0, 0 < t < p−1, t = p−1 and visibility (t ≤ i): for a device's peak the first and last
//! group and step of each stretch where these stay the same are visited, for a phase's largest
//! working set one of each, on the devices where it can occur (every MLP device holds the
//! same; in attention the last device sees every causal block and, with devices 0, 1 and p−2,
//! every combination of own and foreign shards). [`moments`] lists every moment of a device,
//! and the tests check that both searches give the peaks the full lists give.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::{Kind, Phase, Tensor};

mod attention;
mod mlp;
mod moments;

use crate::config::ExecMethod;
pub use crate::config::{Unit, UnitShape, UnitSpec};
use moments::{sum, Collect, DevicePeak, PhasePeaks, Sink};

/// Where in the unit a moment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct At {
    /// Head group of the outer attention loop.
    pub group: Option<u64>,
    /// Ring step.
    pub step: Option<u64>,
    /// What was just allocated.
    pub event: &'static str,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(g) = self.group {
            write!(f, "g={g} ")?;
        }
        if let Some(t) = self.step {
            write!(f, "t={t} ")?;
        }
        write!(f, "{}", self.event)
    }
}

/// Everything one device holds at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moment {
    /// Device.
    pub rank: u64,
    /// Phase of the unit (forward or backward).
    pub phase: Phase,
    /// Where.
    pub at: At,
    /// One tensor per name (all buffers of that name together), static, then stored, then
    /// transient; transients carry `phases = [phase]`.
    pub tensors: Vec<Tensor>,
}

impl Moment {
    /// All bytes held.
    pub fn bytes(&self) -> u128 {
        sum(self.tensors.iter().map(|t| t.bytes()))
    }

    /// Bytes of one kind.
    pub fn bytes_of(&self, kind: Kind) -> u128 {
        sum(self
            .tensors
            .iter()
            .filter(|t| t.kind == kind)
            .map(|t| t.bytes()))
    }

    /// Bytes per tensor name.
    pub fn by_name(&self) -> BTreeMap<&'static str, u128> {
        self.tensors.iter().map(|t| (t.name, t.bytes())).collect()
    }
}

impl fmt::Display for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {} {} {}: {} bytes",
            self.rank,
            self.phase.name(),
            self.at,
            self.bytes()
        )
    }
}

/// The peaks of one unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitInventory {
    /// The unit.
    pub spec: UnitSpec,
    /// Each device's peak moment (index = rank): the first, in program order, at its
    /// high-water mark.
    pub devices: Vec<Moment>,
    /// The largest device peak.
    pub peak_bytes: u128,
    /// Forward and backward: the moment with the most transient bytes over all devices (the
    /// first in rank and program order on ties), as [`phase_peaks`] finds it.
    pub phases: Vec<Moment>,
}

impl UnitInventory {
    /// Peak bytes of device `rank`.
    pub fn device_peak_bytes(&self, rank: u64) -> u128 {
        self.devices
            .get(rank as usize)
            .map(Moment::bytes)
            .unwrap_or(0)
    }

    /// The moment with the most transient bytes in `phase`.
    pub fn phase_peak(&self, phase: Phase) -> Option<&Moment> {
        self.phases.iter().find(|m| m.phase == phase)
    }

    /// The most transient bytes live at once in `phase` (0 if the unit has no such phase).
    pub fn transient_peak_bytes(&self, phase: Phase) -> u128 {
        self.phase_peak(phase)
            .map(|m| m.bytes_of(Kind::Transient))
            .unwrap_or(0)
    }
}

/// The forward and backward phase of a unit.
pub fn phases(unit: Unit) -> [Phase; 2] {
    match unit {
        Unit::Attention => [Phase::FwdAttention, Phase::BwdAttention],
        Unit::Mlp => [Phase::FwdMlp, Phase::BwdMlp],
    }
}

/// `Err` unless `spec` is a valid METP unit (the inventory describes METP's units).
fn check(spec: &UnitSpec) -> Result<(), String> {
    if spec.method != ExecMethod::Metp {
        return Err(format!(
            "the unit inventory describes METP units, not {}",
            spec.method.id()
        ));
    }
    spec.check().map_err(|e| e.to_string())
}

/// Every moment of device `rank`, in program order.
pub fn moments(spec: &UnitSpec, rank: u64) -> Result<Vec<Moment>, String> {
    check(spec)?;
    if rank >= spec.shape.p as u64 {
        return Err(format!("device {rank} of p = {}", spec.shape.p));
    }
    let mut sink = Collect {
        unit: spec.unit,
        out: Vec::new(),
    };
    run(spec, rank, Visit::All, &mut sink);
    Ok(sink.out)
}

/// Every device's peak and each phase's largest transient working set.
pub fn unit_inventory(spec: &UnitSpec) -> Result<UnitInventory, String> {
    let phases = phase_peaks(spec)?;
    let mut devices = Vec::new();
    for rank in 0..spec.shape.p as u64 {
        let mut sink = DevicePeak::default();
        run(spec, rank, Visit::Totals, &mut sink);
        let (_, live) = sink.best.expect("every device has a moment");
        devices.push(live.moment(spec.unit));
    }
    let peak_bytes = devices.iter().map(Moment::bytes).max().unwrap_or(0);
    Ok(UnitInventory {
        spec: *spec,
        devices,
        peak_bytes,
        phases,
    })
}

/// Forward and backward: the moment with the most transient bytes (as [`UnitInventory::phases`]),
/// found on the devices that can hold it (attention: 0, 1, p−2, p−1; MLP: 0) and one group and
/// step of each stretch where the make-up of a moment stays the same, so it costs the same at
/// any p.
pub fn phase_peaks(spec: &UnitSpec) -> Result<Vec<Moment>, String> {
    check(spec)?;
    let p = spec.shape.p as u64;
    // Every device runs the same MLP; in attention the last device computes every causal block
    // and, with the first ones, meets every combination of own and foreign shards.
    let candidates = match spec.unit {
        Unit::Attention => vec![0, 1, p.saturating_sub(2), p - 1],
        Unit::Mlp => vec![0],
    };
    let mut ranks: Vec<u64> = candidates.into_iter().filter(|&r| r < p).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut phases = PhasePeaks::default();
    for rank in ranks {
        run(spec, rank, Visit::Transients, &mut phases);
    }
    Ok(phases.moments(spec.unit))
}

/// Which groups and steps to visit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Visit {
    /// All of them.
    All,
    /// Enough to find every device's peak: the first and last group and step of every stretch
    /// over which a moment's make-up stays the same (the stored outputs grow with the group).
    Totals,
    /// Enough to find the largest transient working sets: one group and step of every such
    /// stretch.
    Transients,
}

fn run(spec: &UnitSpec, rank: u64, visit: Visit, sink: &mut dyn Sink) {
    match spec.unit {
        Unit::Attention => attention::attention(spec, rank, visit, sink),
        Unit::Mlp => mlp::mlp(spec, rank, visit, sink),
    }
}
