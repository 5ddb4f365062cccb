//! The attention unit on the GPU, forward and backward: METP's two-level loop (head groups
//! outer, K/V ring inner, weight shards by ring relay or broadcast, one or two receive
//! buffers) and Megatron TP — ports of `crate::backend::cpu::units::attention` with the same buffers under
//! the same names, allocated and released in the same order on every device. A ring step's
//! block is the fused kernel (flash_fwd / flash_bwd, merging through the log-sum-exp) or,
//! unfused, the materialised scores, probabilities and block output of cuBLAS batched GEMMs and
//! the row kernels.
//!
//! Layouts (row-major, `backend::cuda::layout`): a device's W_qkv shard is [Q | K | V] as three
//! blocks one after the other (h × h/p, then h × wkv twice; wkv = h/p without grouped-query
//! attention), and its Q, K, V activations likewise three blocks of R rows (R local rows), so
//! that a K/V block is one contiguous region; the QKV projection is one GEMM batched over the
//! parts of one width. Grouped-query attention: query head k of a group attends with its K/V
//! head k/rep (rep = a/kv_heads) — the fused kernels take rep, the unfused block batches its
//! GEMMs by it.

use crate::memory::names;
use std::collections::VecDeque;

use crate::backend::cuda::layout::QkvParts;
use crate::backend::unit::attention::{qkv_shard as unit_qkv_shard, AttnCfg, AttnData, AttnOut};
use crate::backend::unit::device::{Dtype, Mat, Phase, Tag};
use crate::backend::unit::local_rows;

use super::super::gpu::{Op, Ty};
use super::super::mem::{Buf, Phys};
use super::super::ops::DevMat;
use super::super::xfer::{Part, Pending};
use super::super::Result;
use super::blocks::{block_bwd, block_fwd, visibility, BlockIo, BwdIo, Visibility};
use super::fetch::{weights, Fetch};
use super::world::{download, rm, World};
use crate::backend::AttnCall;

const BF: Dtype = Dtype::Bf16;
const FP: Dtype = Dtype::Fp32;

/// Head group `g`'s W_qkv shard (the CPU runtime's, `unit::attention::qkv_shard`) in the
/// stacked layout, bf16.
fn qkv_shard(w: &Mat, cfg: &AttnCfg, g: usize) -> Vec<half::bf16> {
    QkvParts::of(cfg)
        .stack(&unit_qkv_shard(w, cfg, g))
        .into_iter()
        .map(half::bf16::from_f32)
        .collect()
}

/// The buffer in an optional slot (a released slot is a schedule bug).
fn some(b: &Option<Buf>) -> Result<&Buf> {
    b.as_ref()
        .ok_or_else(|| super::super::gpu_err("unit", "a buffer was used after its release"))
}

/// Takes the buffer out of an optional slot.
fn take(b: &mut Option<Buf>) -> Result<Buf> {
    b.take()
        .ok_or_else(|| super::super::gpu_err("unit", "a buffer was released twice"))
}

/// The QKV projection `[Q;K;V] = X·W_qkv`: one GEMM batched over the parts of one width (all
/// three, or Q and then K, V under grouped-query attention).
fn project_qkv(
    w: &World,
    i: usize,
    (rows, h, parts): (usize, usize, QkvParts),
    x: &Buf,
    wqkv: u64,
    qkv: &Buf,
) -> Result<()> {
    for (first, n, width) in parts.batches() {
        w.gemm(
            i,
            (rows, width, h),
            Op::n(x.ptr(), h).strided(0),
            Op::n(wqkv + 2 * parts.offset(first, h) as u64, width).strided(h * width),
            Op::n(qkv.at(parts.offset(first, rows)), width).strided(rows * width),
            Ty::Bf16,
            1.0,
            0.0,
            n,
        )?;
    }
    Ok(())
}

/// `grad += Xᵀ·dQKV` (fp32) over the parts: `dqkv` stacked of `rows` rows, `grad` of h rows;
/// `beta` 1 adds to what `grad` holds, 0 overwrites it.
fn weight_grad_qkv(
    w: &World,
    i: usize,
    (rows, h, parts): (usize, usize, QkvParts),
    x: &Buf,
    dqkv: &Buf,
    grad: &Buf,
    beta: f32,
) -> Result<()> {
    for (first, n, width) in parts.batches() {
        w.gemm(
            i,
            (h, width, rows),
            Op::t(x.ptr(), h).strided(0),
            Op::n(dqkv.at(parts.offset(first, rows)), width).strided(rows * width),
            Op::n(grad.at(parts.offset(first, h)), width).strided(h * width),
            Ty::F32,
            1.0,
            beta,
            n,
        )?;
    }
    Ok(())
}

/// `dX += dQKV·W_qkvᵀ` part by part (`beta` of the first part: 0 overwrites dX, 1 adds).
fn input_grad_qkv(
    w: &World,
    i: usize,
    (rows, h, parts): (usize, usize, QkvParts),
    dqkv: &Buf,
    wqkv: u64,
    dx: &Buf,
    beta: f32,
) -> Result<()> {
    for part in 0..3 {
        let width = parts.width(part);
        w.gemm(
            i,
            (rows, h, width),
            Op::n(dqkv.at(parts.offset(part, rows)), width),
            Op::t(wqkv + 2 * parts.offset(part, h) as u64, width),
            Op::n(dx.ptr(), h),
            Ty::Bf16,
            1.0,
            if part == 0 { beta } else { 1.0 },
            1,
        )?;
    }
    Ok(())
}

/// The fp32 dQ, dK, dV accumulators into the stacked bf16 dQKV.
fn dqkv_to_bf16(
    w: &World,
    i: usize,
    (rows, parts): (usize, QkvParts),
    acc: [&Buf; 3],
    dqkv: &Buf,
) -> Result<()> {
    let gpu = w.gpu(i);
    for (part, a) in acc.iter().enumerate() {
        gpu.to_bf16(
            a.ptr(),
            dqkv.at(parts.offset(part, rows)),
            rows * parts.width(part),
        )?;
    }
    Ok(())
}

/// K and V of the current block: the own (parts 1 and 2 of QKV) or the received buffers.
fn kv_of(qkv: &Buf, rows: usize, parts: QkvParts, cur: &Option<Vec<Buf>>) -> (u64, u64) {
    match cur {
        Some(c) => (c[0].ptr(), c[1].ptr()),
        None => (qkv.at(parts.offset(1, rows)), qkv.at(parts.offset(2, rows))),
    }
}

fn kv_parts(qkv: &Buf, rows: usize, parts: QkvParts, cur: &Option<Vec<Buf>>) -> Vec<Part> {
    match cur {
        Some(c) => vec![Part::all(&c[0]), Part::all(&c[1])],
        None => vec![
            Part::of(qkv, parts.offset(1, rows), rows * parts.kv),
            Part::of(qkv, parts.offset(2, rows), rows * parts.kv),
        ],
    }
}

/// Outputs handed out of the devices (untracked), downloaded after the timed run.
pub(super) struct Handed {
    out: std::rc::Rc<Phys>,
    dx: std::rc::Rc<Phys>,
    dwqkv: std::rc::Rc<Phys>,
    dwo: std::rc::Rc<Phys>,
}

impl Handed {
    /// The device's [`AttnOut`] (rows = its output rows).
    pub fn fetch(&self, rows: usize, h: usize, parts: QkvParts) -> Result<AttnOut> {
        let stacked = download(&self.dwqkv, FP, 1, parts.len(h))?;
        Ok(AttnOut {
            out: download(&self.out, BF, rows, h)?,
            dx: download(&self.dx, BF, rows, h)?,
            dwqkv: parts.unstack(stacked.as_slice(), h),
            dwo: download(&self.dwo, FP, parts.q, h)?,
        })
    }
}

mod metp;
mod tp;

pub(super) use metp::metp;
pub(super) use tp::tp;
