//! The attention unit's programs on the CPU's virtual devices: METP's two-level loop
//! ([`metp`]) and Megatron TP ([`tp`]) over the block kernels of `block.rs`, as
//! `backend::unit::attention` describes them.

use std::collections::VecDeque;

use nalgebra::DMatrixView;

use crate::backend::cpu::device::{
    accumulator_hop, data_hop, gemm_tn, tr_mul, Device, Hop, Pending, Tracked,
};
use crate::backend::unit::attention::{qkv_shard, AttnCfg, AttnData, AttnOut};
use crate::backend::unit::attention::{visibility, Visibility};
use crate::backend::unit::device::{Dtype, Mat, Phase, Tag};
use crate::backend::unit::rng::SplitMix64;
use crate::backend::unit::{local_rows, random_mat, Shape, WeightExchange};
use crate::error::Result;

type MatView<'a> = DMatrixView<'a, f32>;
const BF16: Dtype = Dtype::Bf16;
const FP32: Dtype = Dtype::Fp32;

mod block;
mod metp;
mod tp;

pub use block::BlockBench;
pub use metp::metp;
pub use tp::tp;
