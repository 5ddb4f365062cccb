//! The attention unit on the GPU, forward and backward: METP's two-level loop (head groups
//! outer, K/V ring inner, weight shards by ring relay or broadcast, one or two receive
//! buffers) and Megatron TP — ports of `crate::backend::cpu::units::attention` with the same buffers under
//! the same names, allocated and released in the same order on every device. A ring step's
//! block is the fused kernel (flash_fwd / flash_bwd, merging through the log-sum-exp) or,
//! unfused, the materialised scores, probabilities and block output of cuBLAS batched GEMMs and
//! the row kernels.
//!
//! Layouts (row-major): a device's W_qkv shard is [Q | K | V] as three h × h/p blocks, one
//! after the other, and its Q, K, V activations likewise three R × h/p blocks (R local rows),
//! so that a K/V block is one contiguous region; the QKV projection is one batched GEMM over
//! the three parts.

use crate::memory::names;
use std::collections::VecDeque;

use crate::backend::unit::attention::{AttnCfg, AttnData, AttnOut};
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

/// W_qkv columns of head group `g` as three h × hg row-major blocks.
fn qkv_shard(w: &Mat, h: usize, hg: usize, g: usize) -> Vec<half::bf16> {
    let mut v = Vec::with_capacity(3 * h * hg);
    for part in 0..3 {
        v.extend(rm(&w.columns(part * h + g * hg, hg).into_owned()));
    }
    v
}

/// The three-block QKV layout back to an h × 3hg matrix `[Q | K | V]`.
fn from_parts(m: &Mat, rows: usize, hg: usize) -> Mat {
    // `m` is (3·rows) × hg: part p is rows p·rows .. (p+1)·rows.
    let mut out = Mat::zeros(rows, 3 * hg);
    for part in 0..3 {
        out.columns_mut(part * hg, hg)
            .copy_from(&m.rows(part * rows, rows));
    }
    out
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

/// The QKV projection `[Q;K;V] = X·W_qkv` as one GEMM batched over the three parts.
fn project_qkv(
    w: &World,
    i: usize,
    (rows, h, hg): (usize, usize, usize),
    x: &Buf,
    wqkv: u64,
    qkv: &Buf,
) -> Result<()> {
    w.gemm(
        i,
        (rows, hg, h),
        Op::n(x.ptr(), h).strided(0),
        Op::n(wqkv, hg).strided(h * hg),
        Op::n(qkv.ptr(), hg).strided(rows * hg),
        Ty::Bf16,
        1.0,
        0.0,
        3,
    )
}

/// K and V of the current block: the own (parts 1 and 2 of QKV) or the received buffers.
fn kv_of(qkv: &Buf, rows: usize, hg: usize, cur: &Option<Vec<Buf>>) -> (u64, u64) {
    match cur {
        Some(c) => (c[0].ptr(), c[1].ptr()),
        None => (qkv.at(rows * hg), qkv.at(2 * rows * hg)),
    }
}

fn kv_parts(qkv: &Buf, rows: usize, hg: usize, cur: &Option<Vec<Buf>>) -> Vec<Part> {
    match cur {
        Some(c) => vec![Part::all(&c[0]), Part::all(&c[1])],
        None => vec![
            Part::of(qkv, rows * hg, rows * hg),
            Part::of(qkv, 2 * rows * hg, rows * hg),
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
    pub fn fetch(&self, rows: usize, h: usize, hg: usize) -> Result<AttnOut> {
        Ok(AttnOut {
            out: download(&self.out, BF, rows, h)?,
            dx: download(&self.dx, BF, rows, h)?,
            dwqkv: from_parts(&download(&self.dwqkv, FP, 3 * h, hg)?, h, hg),
            dwo: download(&self.dwo, FP, hg, h)?,
        })
    }
}

mod metp;
mod tp;

pub(super) use metp::metp;
pub(super) use tp::tp;
