//! The kernels (`kernels/*.cu`, see [`crate::backend::cuda::sources`]) compiled by NVRTC for
//! the GPU's architecture — once per process and architecture — and loaded into each GPU's
//! context. The flash kernels get the dynamic shared memory they need (above the default
//! 48 KiB for the backward kernel).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute_enum as CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use crate::backend::cuda::sources;

use super::{gpu_err, unavailable, Result};

/// The NVRTC options for virtual architecture `arch` (`compute_90`).
fn options(arch: &str) -> CompileOptions {
    CompileOptions {
        options: vec![
            format!("--gpu-architecture={arch}"),
            "--std=c++17".into(),
            "--use_fast_math".into(),
        ],
        ..Default::default()
    }
}

/// The PTX of every kernel for virtual architecture `arch` (`compute_80`, `compute_90`, …).
/// Needs only libnvrtc (no driver, no GPU): the tests compile every kernel this way.
pub fn compile_ptx(arch: &str) -> Result<String> {
    // SAFETY: only tries to open the library by name.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(unavailable(
            "NVRTC (libnvrtc.so, libnvrtc.so.12 or libnvrtc.so.13) was not found: add the CUDA \
             runtime libraries' folder to LD_LIBRARY_PATH",
        ));
    }
    let ptx = compile_ptx_with_opts(sources::program(), options(arch))
        .map_err(|e| gpu_err(&format!("NVRTC compiling the kernels for {arch}"), e))?;
    Ok(ptx.to_src())
}

/// PTX per architecture, compiled once per process.
fn cached_ptx(arch: &str) -> Result<String> {
    static CACHE: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache
        .lock()
        .map_err(|_| gpu_err("PTX cache", "poisoned"))?
        .get(arch)
    {
        return Ok(p.clone());
    }
    let ptx = compile_ptx(arch)?;
    cache
        .lock()
        .map_err(|_| gpu_err("PTX cache", "poisoned"))?
        .insert(arch.to_string(), ptx.clone());
    Ok(ptx)
}

/// The loaded kernels of one context.
pub(crate) struct Kernels {
    pub gelu_fwd: CudaFunction,
    pub gelu_bwd: CudaFunction,
    pub swiglu_fwd: CudaFunction,
    pub swiglu_bwd: CudaFunction,
    pub random_bf16: CudaFunction,
    pub scale_bf16: CudaFunction,
    pub f32_to_bf16: CudaFunction,
    pub fill_f32: CudaFunction,
    pub add_f32: CudaFunction,
    pub add_bf16: CudaFunction,
    pub empty: CudaFunction,
    pub softmax_rows: CudaFunction,
    pub probs_from_lse: CudaFunction,
    pub grad_scores: CudaFunction,
    pub lse_merge: CudaFunction,
    pub attn_delta: CudaFunction,
    pub flash_fwd_d64: CudaFunction,
    pub flash_fwd_d128: CudaFunction,
    pub flash_bwd_d64: CudaFunction,
    pub flash_bwd_d128: CudaFunction,
}

impl Kernels {
    /// Compiles (once per architecture) and loads every kernel into `ctx`. Needs compute
    /// capability 8.0 or newer (bf16 tensor-core MMA).
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Kernels> {
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| gpu_err("compute capability", e))?;
        if major < 8 {
            return Err(unavailable(format!(
                "GPU {} has compute capability {major}.{minor}; the attention kernels need 8.0 \
                 or newer (bf16 tensor-core MMA)",
                ctx.ordinal()
            )));
        }
        let arch = format!("compute_{major}{minor}");
        let ptx = cached_ptx(&arch)?;
        let module = ctx
            .load_module(Ptx::from_src(ptx))
            .map_err(|e| gpu_err(&format!("loading the {arch} kernels"), e))?;
        let f = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| gpu_err(&format!("kernel {name}"), e))
        };
        let k = Kernels {
            gelu_fwd: f("gelu_fwd")?,
            gelu_bwd: f("gelu_bwd")?,
            swiglu_fwd: f("swiglu_fwd")?,
            swiglu_bwd: f("swiglu_bwd")?,
            random_bf16: f("random_bf16")?,
            scale_bf16: f("scale_bf16")?,
            f32_to_bf16: f("f32_to_bf16")?,
            fill_f32: f("fill_f32")?,
            add_f32: f("add_f32")?,
            add_bf16: f("add_bf16")?,
            empty: f("empty_kernel")?,
            softmax_rows: f("softmax_rows")?,
            probs_from_lse: f("probs_from_lse")?,
            grad_scores: f("grad_scores")?,
            lse_merge: f("lse_merge")?,
            attn_delta: f("attn_delta")?,
            flash_fwd_d64: f("flash_fwd_d64")?,
            flash_fwd_d128: f("flash_fwd_d128")?,
            flash_bwd_d64: f("flash_bwd_d64")?,
            flash_bwd_d128: f("flash_bwd_d128")?,
        };
        let optin = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(|e| gpu_err("shared memory per block", e))? as usize;
        for (func, d, bytes) in [
            (&k.flash_fwd_d64, 64, sources::flash_fwd_smem_bytes(64)),
            (&k.flash_fwd_d128, 128, sources::flash_fwd_smem_bytes(128)),
            (&k.flash_bwd_d64, 64, sources::flash_bwd_smem_bytes(64)),
            (&k.flash_bwd_d128, 128, sources::flash_bwd_smem_bytes(128)),
        ] {
            if bytes > optin {
                return Err(unavailable(format!(
                    "the attention kernels for head dimension {d} need {bytes} bytes of shared \
                     memory per block; GPU {} allows {optin}",
                    ctx.ordinal()
                )));
            }
            func.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
            .map_err(|e| gpu_err("dynamic shared memory of the attention kernels", e))?;
        }
        Ok(k)
    }
}
