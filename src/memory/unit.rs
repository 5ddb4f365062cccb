//! The unit inventory: what one device holds, moment by moment, while it runs one METP
//! computing unit (DESIGN §1) — the attention unit (two-level loop: head groups outer, K/V ring
//! inner) or the MLP unit (one-level ring of weight-shard pairs) — forward and backward.
//!
//! The layer inventory ([`super::inventory`]) adds a phase's transients as if they were all
//! live at once; a device never holds them all at once. This module lists, for every *moment*
//! of the unit — the live set right before a release that follows allocations, where the live
//! bytes reach a local maximum — the tensors the device holds (named, with bytes and kind), and
//! takes the peak as the largest moment. It is the single source of truth for a unit's memory:
//! the executed runtime (`crate::exec`) measures exactly these peaks, byte for byte, on every
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

use super::layer::prod;
use super::{Block, Kind, Phase, Tensor};
use crate::config::{Activation, WeightExchange, Workload};
use Kind::{Static, Stored, Transient};

/// Which computing unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Self-attention with QKV and output projections: `O = softmax(QKᵀ)V`, then `O·W_o`.
    Attention,
    /// MLP: `GeLU(X·W1)·W2` (or SwiGLU with a third matrix).
    Mlp,
}

impl Unit {
    /// Forward and backward phase of the unit.
    pub fn phases(self) -> [Phase; 2] {
        match self {
            Unit::Attention => [Phase::FwdAttention, Phase::BwdAttention],
            Unit::Mlp => [Phase::FwdMlp, Phase::BwdMlp],
        }
    }
}

/// Problem sizes of one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnitShape {
    /// Micro-batch.
    pub b: u64,
    /// Sequence length.
    pub s: u64,
    /// Hidden size.
    pub h: u64,
    /// Attention heads.
    pub a: u64,
    /// MLP width.
    pub f: u64,
    /// Devices.
    pub p: u64,
}

/// One METP unit with its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnitSpec {
    /// Unit.
    pub unit: Unit,
    /// Sizes.
    pub shape: UnitShape,
    /// Causal attention with contiguous sequence blocks (device i holds tokens i·c..(i+1)·c):
    /// blocks above the diagonal are skipped (their K/V still travel).
    pub causal: bool,
    /// Fused attention blocks (nothing of a block in device memory) instead of unfused.
    pub fused: bool,
    /// Receive buffers per traveling tensor: 1 or 2.
    pub recv_buffers: u64,
    /// How attention weight shards reach the devices (no effect on what a device holds).
    pub weight_exchange: WeightExchange,
    /// Head groups G of the outer attention loop (a multiple of p; p by default).
    pub head_groups: u64,
    /// K/V heads (`a` for multi-head attention).
    pub kv_heads: u64,
    /// MLP activation.
    pub activation: Activation,
    /// Q, K, V stored for backward instead of recomputed.
    pub store_qkv: bool,
    /// The MLP activation input stored for backward instead of recomputed.
    pub store_mlp_act: bool,
}

impl UnitSpec {
    /// A unit with the runtime's defaults: non-causal, fused, double buffered, ring weight
    /// exchange, G = p, multi-head attention, GeLU, Q/K/V and the activation input recomputed.
    pub fn new(unit: Unit, shape: UnitShape) -> UnitSpec {
        UnitSpec {
            unit,
            shape,
            causal: false,
            fused: true,
            recv_buffers: 2,
            weight_exchange: WeightExchange::Ring,
            head_groups: shape.p,
            kv_heads: shape.a,
            activation: Activation::Gelu,
            store_qkv: false,
            store_mlp_act: false,
        }
    }

    /// The unit of one layer of a METP workload. Causal attention with zig-zag (load-balanced)
    /// blocks is taken as non-causal: every step then computes a block, at most (s/p)² — with
    /// contiguous blocks the last device does too, so both have the same largest working set.
    pub fn from_workload(w: &Workload, unit: Unit) -> UnitSpec {
        let m = &w.model;
        let o = &w.options;
        UnitSpec {
            unit,
            shape: UnitShape {
                b: w.micro_batch,
                s: w.seq,
                h: m.hidden,
                a: m.heads,
                f: m.ffn_hidden,
                p: w.p,
            },
            causal: o.causal && !o.causal_zigzag,
            fused: o.flash,
            recv_buffers: o.metp.recv_buffers,
            weight_exchange: o.metp.weight_exchange,
            head_groups: o.metp.head_groups.unwrap_or(w.p),
            kv_heads: m.kv_heads,
            activation: m.activation,
            store_qkv: o.metp.store_qkv,
            store_mlp_act: o.metp.store_mlp_act,
        }
    }

    /// `Err` with a reason unless the sizes and options describe a unit METP can run.
    pub fn check(&self) -> Result<(), String> {
        let UnitShape { b, s, h, a, f, p } = self.shape;
        for (what, v) in [("degree p", p), ("micro-batch b", b), ("sequence s", s)] {
            if v == 0 {
                return Err(format!("{what} must be positive"));
            }
        }
        if h == 0 {
            return Err("hidden h must be positive".into());
        }
        if !(1..=2).contains(&self.recv_buffers) {
            return Err(format!(
                "receive buffers must be 1 or 2, not {}",
                self.recv_buffers
            ));
        }
        if !s.is_multiple_of(p) {
            return Err(format!("sequence length ({s}) is not divisible by p = {p}"));
        }
        match self.unit {
            Unit::Attention => {
                let g = self.head_groups;
                if a == 0 || !h.is_multiple_of(a) {
                    return Err(format!("hidden ({h}) is not divisible by heads ({a})"));
                }
                if g == 0 || !g.is_multiple_of(p) {
                    return Err(format!(
                        "head groups ({g}) must be a positive multiple of p = {p}"
                    ));
                }
                if !a.is_multiple_of(g) {
                    return Err(format!("heads ({a}) is not divisible by head groups ({g})"));
                }
                let kv = self.kv_heads;
                if kv == 0 || !(kv.is_multiple_of(g) || g.is_multiple_of(kv)) {
                    return Err(format!(
                        "kv_heads ({kv}) must divide head groups ({g}) or be divisible by it"
                    ));
                }
            }
            Unit::Mlp => {
                if f == 0 || !f.is_multiple_of(p) {
                    return Err(format!("MLP width ({f}) is not divisible by p = {p}"));
                }
            }
        }
        Ok(())
    }
}

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

/// Every moment of device `rank`, in program order.
pub fn moments(spec: &UnitSpec, rank: u64) -> Result<Vec<Moment>, String> {
    spec.check()?;
    if rank >= spec.shape.p {
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
    for rank in 0..spec.shape.p {
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
    spec.check()?;
    let p = spec.shape.p;
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

// ---------------------------------------------------------------------------------------------
// Live sets and where their moments go.

fn sum(it: impl Iterator<Item = u128>) -> u128 {
    it.fold(0u128, |a, b| a.saturating_add(b))
}

type Entry = (&'static str, Kind, u128);

/// Room for the distinct tensor names a device holds at once (under 20, in the attention
/// backward; `Held::push` panics rather than lose one).
const MAX_NAMES: usize = 24;

/// Tensors held, one entry per name, in order of first allocation (a fixed array: states are
/// copied for every ring step visited, so they stay off the heap).
#[derive(Clone, Copy)]
struct Held {
    items: [Entry; MAX_NAMES],
    len: usize,
}

impl Held {
    fn new() -> Held {
        Held {
            items: [("", Kind::Static, 0); MAX_NAMES],
            len: 0,
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.items[..self.len].iter()
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.iter().position(|e| e.0 == name)
    }

    fn push(&mut self, e: Entry) {
        assert!(self.len < MAX_NAMES, "more than {MAX_NAMES} tensor names");
        self.items[self.len] = e;
        self.len += 1;
    }

    fn remove(&mut self, k: usize) {
        self.items.copy_within(k + 1..self.len, k);
        self.len -= 1;
    }
}

/// What a device holds while a piece of the unit runs.
#[derive(Clone)]
struct Live {
    rank: u64,
    phase: Phase,
    at: At,
    held: Held,
    /// Something was allocated since the last release: the live set is at a local maximum
    /// until the next release.
    rising: bool,
}

impl Live {
    fn new(rank: u64, phase: Phase, group: Option<u64>, step: Option<u64>) -> Live {
        Live {
            rank,
            phase,
            at: At {
                group,
                step,
                event: "start",
            },
            held: Held::new(),
            rising: false,
        }
    }

    /// Holds `bytes` more of `name` (reconstructing a state; not an event).
    fn add(&mut self, name: &'static str, kind: Kind, bytes: u128) {
        if bytes == 0 {
            return;
        }
        match self.held.position(name) {
            Some(k) => {
                let e = &mut self.held.items[k];
                e.2 = e.2.saturating_add(bytes);
            }
            None => self.held.push((name, kind, bytes)),
        }
    }

    /// Stops holding `bytes` of `name` (reconstructing a state; not an event).
    fn remove(&mut self, name: &'static str, bytes: u128) {
        if let Some(k) = self.held.position(name) {
            let e = &mut self.held.items[k];
            debug_assert!(e.2 >= bytes, "{name}: releasing more than held");
            e.2 = e.2.saturating_sub(bytes);
            if e.2 == 0 {
                self.held.remove(k);
            }
        } else {
            debug_assert!(bytes == 0, "{name}: released but not held");
        }
    }

    fn alloc(&mut self, name: &'static str, kind: Kind, bytes: u128) {
        self.add(name, kind, bytes);
        self.rising = true;
    }

    fn free(&mut self, name: &'static str, bytes: u128, sink: &mut dyn Sink) {
        if self.rising {
            sink.moment(self);
            self.rising = false;
        }
        self.remove(name, bytes);
    }

    fn finish(&mut self, sink: &mut dyn Sink) {
        if self.rising {
            sink.moment(self);
            self.rising = false;
        }
    }

    fn event(&mut self, event: &'static str) {
        self.at.event = event;
    }

    fn total(&self) -> u128 {
        sum(self.held.iter().map(|e| e.2))
    }

    fn transient(&self) -> u128 {
        sum(self
            .held
            .iter()
            .filter(|e| e.1 == Kind::Transient)
            .map(|e| e.2))
    }

    fn moment(&self, unit: Unit) -> Moment {
        let mut tensors: Vec<Tensor> = self
            .held
            .iter()
            .map(|&(name, kind, bytes)| Tensor {
                name,
                block: if name.starts_with("optimizer.") {
                    Block::Optimizer
                } else if unit == Unit::Attention {
                    Block::Attention
                } else {
                    Block::Mlp
                },
                kind,
                bytes_each: bytes,
                count: 1,
                replicated: false,
                per_layer: false,
                phases: if kind == Kind::Transient {
                    vec![self.phase]
                } else {
                    Vec::new()
                },
            })
            .collect();
        tensors.sort_by_key(|t| t.kind);
        Moment {
            rank: self.rank,
            phase: self.phase,
            at: self.at,
            tensors,
        }
    }
}

trait Sink {
    fn moment(&mut self, live: &Live);
}

struct Collect {
    unit: Unit,
    out: Vec<Moment>,
}

impl Sink for Collect {
    fn moment(&mut self, live: &Live) {
        self.out.push(live.moment(self.unit));
    }
}

/// The first moment with the most bytes.
#[derive(Default)]
struct DevicePeak {
    best: Option<(u128, Live)>,
}

impl Sink for DevicePeak {
    fn moment(&mut self, live: &Live) {
        let bytes = live.total();
        if self.best.as_ref().is_none_or(|b| bytes > b.0) {
            self.best = Some((bytes, live.clone()));
        }
    }
}

/// Per phase, the first moment with the most transient bytes.
#[derive(Default)]
struct PhasePeaks {
    best: Vec<(u128, Live)>,
}

impl PhasePeaks {
    fn moments(&self, unit: Unit) -> Vec<Moment> {
        let mut out: Vec<Moment> = self.best.iter().map(|(_, l)| l.moment(unit)).collect();
        out.sort_by_key(|m| m.phase);
        out
    }
}

impl Sink for PhasePeaks {
    fn moment(&mut self, live: &Live) {
        let bytes = live.transient();
        match self.best.iter_mut().find(|b| b.1.phase == live.phase) {
            Some(b) if bytes > b.0 => *b = (bytes, live.clone()),
            Some(_) => {}
            None => self.best.push((bytes, live.clone())),
        }
    }
}

/// The values of `at` in `0..n`, in order.
fn exactly(n: u64, at: &[i128]) -> Vec<u64> {
    near_by(n, at, 0)
}

/// The values in `0..n` at distance at most 1 from one of `around`, in order.
fn near(n: u64, around: &[i128]) -> Vec<u64> {
    near_by(n, around, 1)
}

fn near_by(n: u64, around: &[i128], by: i128) -> Vec<u64> {
    let mut v: Vec<u64> = around
        .iter()
        .flat_map(|&x| (x - by)..=(x + by))
        .filter(|&y| y >= 0 && y < n as i128)
        .map(|y| y as u64)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

// ---------------------------------------------------------------------------------------------
// The units.

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
        Unit::Attention => attention(spec, rank, visit, sink),
        Unit::Mlp => mlp(spec, rank, visit, sink),
    }
}

const KV: &str = "comm.kv_recv";
const DKV_OWN: &str = "attn.dkv_acc_fp32";
const DKV_RECV: &str = "comm.dkv_recv_fp32";
const W_RECV: &str = "attn.weight_recv";

/// Bytes of the attention unit's tensors (see the module docs).
struct AttnSizes {
    ws: u128,
    gs: u128,
    x: u128,
    og: u128,
    lg: u128,
    qkv: u128,
    acc: u128,
    kv: u128,
    dkv: u128,
    blk: u128,
    bl: u128,
    ob: u128,
    dog: u128,
    del: u128,
    dq: u128,
    dqkv: u128,
}

impl AttnSizes {
    fn new(spec: &UnitSpec) -> AttnSizes {
        let UnitShape { b, s, h, a, p, .. } = spec.shape;
        let (b, s, h, a, p) = (b as u128, s as u128, h as u128, a as u128, p as u128);
        let g = spec.head_groups as u128;
        let kv_heads = spec.kv_heads as u128;
        let c = s / p;
        let r = b * c;
        let d = h / a;
        let (hg, ag) = (h / g, a / g);
        // K/V heads are split while there are enough, then replicated (one per group).
        let wkv = if kv_heads >= g { kv_heads / g } else { 1 } * d;
        let q = hg + 2 * wkv;
        let ws = prod(&[2, h, q]).saturating_add(prod(&[2, hg, h]));
        AttnSizes {
            ws,
            gs: ws.saturating_mul(2),
            x: prod(&[2, r, h]),
            og: prod(&[2, r, hg]),
            lg: prod(&[4, r, ag]),
            qkv: prod(&[2, r, q]),
            acc: prod(&[4, r, hg]),
            kv: prod(&[2, 2, r, wkv]),
            dkv: prod(&[2, 4, r, wkv]),
            blk: prod(&[2, b, ag, c, c]),
            bl: prod(&[4, r, ag]),
            ob: prod(&[2, r, hg]),
            dog: prod(&[2, r, hg]),
            del: prod(&[4, r, ag]),
            dq: prod(&[4, r, hg]),
            dqkv: prod(&[2, r, q]),
        }
    }
}

fn attention(spec: &UnitSpec, i: u64, visit: Visit, sink: &mut dyn Sink) {
    let z = AttnSizes::new(spec);
    let p = spec.shape.p;
    let gn = spec.head_groups;
    let k = gn / p;
    let rb = spec.recv_buffers;
    let foreign = |g: u64| g / k != i;
    // With two buffers, the receive of W[g+1] is posted while group g runs.
    let posts_next = |g: u64| rb == 2 && g + 1 < gn && foreign(g + 1);
    let pending_at = |g: u64| g > 0 && posts_next(g - 1);
    let visible = |t: u64| !spec.causal || t <= i;
    let (qkv_name, qkv_kind) = if spec.store_qkv {
        ("attn.qkv", Stored)
    } else {
        ("attn.qkv_group", Transient)
    };
    // The current and next shards are own or foreign, and the stored outputs grow, in
    // stretches starting at 0, i·k − 1, i·k, (i+1)·k − 1, (i+1)·k and G − 1; the steps at 0,
    // 1 (the middle of the ring), i + 1 (causal: first hidden block) and p − 1.
    let (lo, hi) = ((i * k) as i128, ((i + 1) * k) as i128);
    let starts = [0, lo - 1, lo, hi - 1, hi, gn as i128 - 1];
    let step_starts = [0, 1, i as i128 + 1, p as i128 - 1];
    let (groups, steps): (Vec<u64>, Vec<u64>) = match visit {
        Visit::All => ((0..gn).collect(), (0..p).collect()),
        Visit::Totals => (near(gn, &starts), near(p, &step_starts)),
        Visit::Transients => (exactly(gn, &starts), exactly(p, &step_starts)),
    };
    let kk = k as u128;
    let base = |live: &mut Live| {
        live.add("attn.weights", Static, kk * z.ws);
        live.add("optimizer.main_grads_fp32", Static, kk * z.gs);
        live.add("attn.input", Stored, z.x);
    };
    // The shard of group g: held if posted during g−1, received now if foreign, and the next
    // one posted.
    let acquire = |live: &mut Live, g: u64| {
        if pending_at(g) {
            live.add(W_RECV, Transient, z.ws);
        }
        live.event("weights");
        if foreign(g) && !pending_at(g) {
            live.alloc(W_RECV, Transient, z.ws);
        }
        if posts_next(g) {
            live.alloc(W_RECV, Transient, z.ws);
        }
    };

    // ---------------- forward ----------------
    for &g in &groups {
        let gg = g as u128;
        let mut st = Live::new(i, Phase::FwdAttention, Some(g), None);
        base(&mut st);
        st.add("attn.output_sum", Transient, z.x);
        st.add("attn.group_outputs", Stored, gg * z.og);
        st.add("attn.lse", Stored, gg * z.lg);
        if spec.store_qkv {
            st.add("attn.qkv", Stored, gg * z.qkv);
        }
        acquire(&mut st, g);
        st.event("QKV, running output, log-sum-exp");
        st.alloc(qkv_name, qkv_kind, z.qkv);
        st.alloc("attn.output_acc_fp32", Transient, z.acc);
        st.alloc("attn.lse", Stored, z.lg);
        for &t in &steps {
            let mut s = st.clone();
            s.at.step = Some(t);
            s.event("ring step");
            let cur = p > 1 && t >= 1;
            if cur {
                s.add(KV, Transient, z.kv);
            }
            s.rising = true;
            let more = t + 1 < p;
            if more && rb == 2 {
                s.alloc(KV, Transient, z.kv);
            }
            if visible(t) && !spec.fused {
                s.event("block scores, log-sum-exp, probabilities");
                s.alloc("attn.block_scores", Transient, z.blk);
                s.alloc("attn.block_lse_fp32", Transient, z.bl);
                s.alloc("attn.block_probs", Transient, z.blk);
                s.free("attn.block_scores", z.blk, sink);
                s.event("block log-sum-exp, probabilities, output");
                s.alloc("attn.block_out", Transient, z.ob);
                s.free("attn.block_probs", z.blk, sink);
                s.free("attn.block_out", z.ob, sink);
                s.free("attn.block_lse_fp32", z.bl, sink);
            }
            if more {
                if cur {
                    s.free(KV, z.kv, sink);
                }
                if rb == 1 {
                    s.event("K/V block received");
                    s.alloc(KV, Transient, z.kv);
                }
            }
            s.finish(sink);
        }
        // After the ring (the last K/V block released): the group's output is stored.
        let mut s = st.clone();
        s.rising = false;
        s.event("group output");
        s.alloc("attn.group_outputs", Stored, z.og);
        s.free("attn.output_acc_fp32", z.acc, sink);
        if !spec.store_qkv {
            s.free(qkv_name, z.qkv, sink);
        }
        if foreign(g) {
            s.free(W_RECV, z.ws, sink);
        }
        s.finish(sink);
    }

    // ---------------- backward ----------------
    let all = gn as u128;
    for &g in &groups {
        let mut st = Live::new(i, Phase::BwdAttention, Some(g), None);
        base(&mut st);
        st.add("attn.group_outputs", Stored, all * z.og);
        st.add("attn.lse", Stored, all * z.lg);
        if spec.store_qkv {
            st.add("attn.qkv", Stored, all * z.qkv);
        }
        st.add("grad.layer_output", Transient, z.x);
        st.add("grad.layer_input", Transient, z.x);
        acquire(&mut st, g);
        st.event("dO, QKV, D, dQ, dK/dV");
        st.alloc("attn.grad_group_output", Transient, z.dog);
        if !spec.store_qkv {
            st.alloc(qkv_name, Transient, z.qkv);
        }
        st.alloc("attn.delta_fp32", Transient, z.del);
        st.alloc("attn.dq_acc_fp32", Transient, z.dq);
        st.alloc(DKV_OWN, Transient, z.dkv);
        for &t in &steps {
            let mut s = st.clone();
            s.at.step = Some(t);
            s.event("ring step");
            let cur = p > 1 && t >= 1;
            // From step 1 the traveling dK/dV of another block replaces the own accumulator.
            let dkv_name = if cur {
                s.remove(DKV_OWN, z.dkv);
                s.add(DKV_RECV, Transient, z.dkv);
                s.add(KV, Transient, z.kv);
                DKV_RECV
            } else {
                DKV_OWN
            };
            s.rising = true;
            let more = t + 1 < p;
            if rb == 2 && p > 1 {
                if more {
                    s.alloc(KV, Transient, z.kv);
                }
                s.alloc(DKV_RECV, Transient, z.dkv);
            }
            if visible(t) && !spec.fused {
                s.event("block probabilities, their gradient, score gradient");
                s.alloc("attn.block_probs", Transient, z.blk);
                s.alloc("attn.block_grad_probs", Transient, z.blk);
                s.alloc("attn.block_grad_scores", Transient, z.blk);
                s.free("attn.block_grad_probs", z.blk, sink);
                s.free("attn.block_grad_scores", z.blk, sink);
                s.free("attn.block_probs", z.blk, sink);
            }
            if p > 1 {
                if rb == 1 {
                    if cur {
                        s.free(KV, z.kv, sink);
                    }
                    s.free(dkv_name, z.dkv, sink);
                    if more {
                        s.event("K/V block received");
                        s.alloc(KV, Transient, z.kv);
                    }
                    s.event("dK/dV received");
                    s.alloc(DKV_RECV, Transient, z.dkv);
                } else {
                    // The posted buffers become the current ones.
                    if cur {
                        s.free(KV, z.kv, sink);
                    }
                    s.free(dkv_name, z.dkv, sink);
                }
            }
            s.finish(sink);
        }
        // After p steps and the final hop: the own block's dK/dV is back.
        let mut s = st.clone();
        let dkv_name = if p > 1 {
            s.remove(DKV_OWN, z.dkv);
            s.add(DKV_RECV, Transient, z.dkv);
            DKV_RECV
        } else {
            DKV_OWN
        };
        s.rising = false;
        s.event("dQKV");
        s.alloc("grad.qkv_group", Transient, z.dqkv);
        s.free("attn.dq_acc_fp32", z.dq, sink);
        s.free(dkv_name, z.dkv, sink);
        s.free("attn.delta_fp32", z.del, sink);
        if !foreign(g) {
            // The owner adds the p − 1 contributions through `rb` receive buffers.
            s.event("weight-gradient receives");
            let n = p - 1;
            let (mut posted, mut queued) = (0, 0);
            for _ in 0..n {
                while queued < rb && posted < n {
                    s.alloc("attn.weight_grad_recv_fp32", Transient, z.gs);
                    queued += 1;
                    posted += 1;
                }
                s.free("attn.weight_grad_recv_fp32", z.gs, sink);
                queued -= 1;
            }
        } else {
            s.event("weight-gradient contribution");
            s.alloc("attn.weight_grad_contrib_fp32", Transient, z.gs);
            s.free("attn.weight_grad_contrib_fp32", z.gs, sink);
        }
        s.free("grad.qkv_group", z.dqkv, sink);
        s.free("attn.grad_group_output", z.dog, sink);
        if !spec.store_qkv {
            s.free(qkv_name, z.qkv, sink);
        }
        if foreign(g) {
            s.free(W_RECV, z.ws, sink);
        }
        s.finish(sink);
    }
}

const MW_RECV: &str = "mlp.weight_recv";
const MG_OWN: &str = "mlp.weight_grad_acc_fp32";
const MG_RECV: &str = "mlp.weight_grad_recv_fp32";

fn mlp(spec: &UnitSpec, i: u64, visit: Visit, sink: &mut dyn Sink) {
    let UnitShape { b, s, h, f, p, .. } = spec.shape;
    let (bb, hh, pp) = (b as u128, h as u128, p as u128);
    let r = bb * (s as u128 / pp);
    let fp = f as u128 / pp;
    let (mats, u) = match spec.activation {
        Activation::Gelu => (2, 1),
        Activation::Swiglu => (3, 2),
    };
    let ws = prod(&[2, mats, hh, fp]);
    let gs = ws.saturating_mul(2);
    let x = prod(&[2, r, hh]);
    let hp = prod(&[2, u, r, fp]);
    let act = prod(&[2, r, fp]);
    let dh = prod(&[2, u, r, fp]);
    let rb = spec.recv_buffers;
    let (hp_name, hp_kind) = if spec.store_mlp_act {
        ("mlp.act_input", Stored)
    } else {
        ("mlp.act_input_block", Transient)
    };
    // Steps 0, 1 .. p−2 and p − 1 differ in the buffers they hold (and with a stored
    // activation input, the stored part grows with t).
    let steps: Vec<u64> = match visit {
        Visit::All => (0..p).collect(),
        Visit::Totals => near(p, &[0, 1, p as i128 - 1]),
        Visit::Transients => exactly(p, &[0, 1, p as i128 - 1]),
    };
    let base = |live: &mut Live| {
        live.add("mlp.weights", Static, ws);
        live.add("optimizer.main_grads_fp32", Static, gs);
        live.add("mlp.input", Stored, x);
    };

    // ---------------- forward ----------------
    for &t in &steps {
        let mut s = Live::new(i, Phase::FwdMlp, None, Some(t));
        base(&mut s);
        s.add("mlp.output_sum", Transient, x);
        if spec.store_mlp_act {
            s.add(hp_name, Stored, (t as u128).saturating_mul(hp));
        }
        let cur = p > 1 && t >= 1;
        if cur {
            s.add(MW_RECV, Transient, ws);
        }
        s.rising = true;
        s.event("ring step");
        let more = t + 1 < p;
        if more && rb == 2 {
            s.alloc(MW_RECV, Transient, ws);
        }
        s.event("activation input and output");
        s.alloc(hp_name, hp_kind, hp);
        s.alloc("mlp.act_output_block", Transient, act);
        if !spec.store_mlp_act {
            s.free(hp_name, hp, sink);
        }
        s.free("mlp.act_output_block", act, sink);
        if more {
            if cur {
                s.free(MW_RECV, ws, sink);
            }
            if rb == 1 {
                s.event("weights received");
                s.alloc(MW_RECV, Transient, ws);
            }
        }
        s.finish(sink);
    }

    // ---------------- backward ----------------
    for &t in &steps {
        let mut s = Live::new(i, Phase::BwdMlp, None, Some(t));
        base(&mut s);
        if spec.store_mlp_act {
            s.add(hp_name, Stored, pp.saturating_mul(hp));
        }
        s.add("grad.layer_output", Transient, x);
        s.add("grad.layer_input", Transient, x);
        let cur = p > 1 && t >= 1;
        // The own accumulator at step 0; another device's, traveling, after.
        let dw_name = if cur { MG_RECV } else { MG_OWN };
        s.add(dw_name, Transient, gs);
        if cur {
            s.add(MW_RECV, Transient, ws);
        }
        s.rising = true;
        s.event("ring step");
        let more = t + 1 < p;
        if rb == 2 && p > 1 {
            if more {
                s.alloc(MW_RECV, Transient, ws);
            }
            s.alloc(MG_RECV, Transient, gs);
        }
        s.event("activation input, output and gradient");
        if !spec.store_mlp_act {
            s.alloc(hp_name, Transient, hp);
        }
        s.alloc("mlp.act_output_block", Transient, act);
        s.alloc("grad.mlp_act_block", Transient, dh);
        if !spec.store_mlp_act {
            s.free(hp_name, hp, sink);
        }
        s.free("mlp.act_output_block", act, sink);
        s.free("grad.mlp_act_block", dh, sink);
        if p > 1 {
            if rb == 1 {
                if cur {
                    s.free(MW_RECV, ws, sink);
                }
                s.free(dw_name, gs, sink);
                if more {
                    s.event("weights received");
                    s.alloc(MW_RECV, Transient, ws);
                }
                s.event("gradient accumulator received");
                s.alloc(MG_RECV, Transient, gs);
            } else {
                if cur {
                    s.free(MW_RECV, ws, sink);
                }
                s.free(dw_name, gs, sink);
            }
        }
        s.finish(sink);
    }
}
