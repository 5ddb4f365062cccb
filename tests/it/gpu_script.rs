//! `scripts/gpu-check.sh` on a machine without a GPU: its flow checked with a fake
//! `nvidia-smi` and a fake `metp-sim` that record what they were asked, so a broken step,
//! argument or packing shows up in CI rather than in a short, paid slot on a GPU machine.
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn executable(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A folder with a fake `nvidia-smi` (one H200) and a fake `metp-sim` that records its calls,
/// prints a JSON object for `run` and its arguments for `gpu-check table`.
fn fakes() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    executable(
        &dir.path().join("nvidia-smi"),
        "#!/bin/bash\ncase \"$1\" in -L) echo 'GPU 0: NVIDIA H200 (UUID: GPU-fake)';; \
         --query-gpu*) echo 'NVIDIA H200';; *) echo fake;; esac\n",
    );
    executable(
        &dir.path().join("metp-sim"),
        "#!/bin/bash\necho \"$*\" >> \"$(dirname \"$0\")/calls.txt\"\n\
         case \"$1\" in --version) echo 'metp-sim fake';;\n\
         run) echo '{}';;\n\
         gpu-check) echo \"TABLE $*\";; esac\n",
    );
    dir
}

fn script(fakes: &Path, only: &str, out: &Path) -> std::process::Output {
    let path = format!(
        "{}:{}",
        fakes.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .arg("scripts/gpu-check.sh")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PATH", path)
        .env("GPU_CHECK_ONLY", only)
        .env("GPU_CHECK_PACK", "1")
        .env("METP_SIM_BIN", fakes.join("metp-sim"))
        .env("OUT", out)
        .output()
        .unwrap()
}

/// Units only: the eight units run with the committed profile (two of them grouped-query
/// attention, METP and TP), the table gets every run file, and the outputs are packed down to
/// summary, table and one archive.
#[test]
fn gpu_check_units_only_runs_eight_units_tables_them_and_packs() {
    let f = fakes();
    let out = f.path().join("out");
    let o = script(f.path(), "units", &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let calls = std::fs::read_to_string(f.path().join("calls.txt")).unwrap();
    let runs: Vec<&str> = calls.lines().filter(|l| l.starts_with("run ")).collect();
    assert_eq!(runs.len(), 8, "{calls}");
    let gqa: Vec<&&str> = runs.iter().filter(|r| r.contains("--kv-heads 8")).collect();
    assert_eq!(gqa.len(), 2, "{calls}");
    for (r, method) in gqa.iter().zip(["metp", "tp"]) {
        assert!(
            r.contains(&format!("--method {method}")) && r.contains("--unit attention"),
            "{r}"
        );
        assert!(r.contains("--heads 32"), "{r}");
    }
    for r in &runs {
        assert!(r.contains("--backend cuda"), "{r}");
        assert!(
            r.contains("reports/gpu/nvidia-h200-2026-11-30/profile-units.json"),
            "{r}"
        );
    }
    let table = calls
        .lines()
        .find(|l| l.starts_with("gpu-check table"))
        .unwrap();
    assert_eq!(table.matches("--units").count(), 8, "{table}");
    let mut left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["gpu-check.tgz", "summary.txt", "table.txt"]);
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(summary.contains("TABLE gpu-check table"), "{summary}");
}

/// An unknown mode is a usage error (exit 2) naming the modes, before anything runs.
#[test]
fn gpu_check_refuses_an_unknown_mode() {
    let f = fakes();
    let o = script(f.path(), "kernels", &f.path().join("out"));
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("GPU_CHECK_ONLY='kernels'"), "{stderr}");
    assert!(!f.path().join("calls.txt").exists());
}

/// A folder with fakes for a node of `gpus` H200s: `nvidia-smi`, a recording `metp-sim`, a
/// GPU test binary listing two tests, and a `python3` that has torch when `torch` — its
/// torchrun records its arguments and writes scripts/gpu-dist.py's outputs from synthetic raw
/// results with the real python3 (`--format`), as rank 0 would.
fn node_fakes(gpus: usize, torch: bool, real_python: &str) -> tempfile::TempDir {
    let dir = fakes();
    let list: String = (0..gpus)
        .map(|i| format!("echo 'GPU {i}: NVIDIA H200 (UUID: GPU-fake{i})'; "))
        .collect();
    executable(
        &dir.path().join("nvidia-smi"),
        &format!(
            "#!/bin/bash\ncase \"$1\" in -L) {list};; \
             --query-gpu*) echo 'NVIDIA H200';; *) echo fake;; esac\n"
        ),
    );
    executable(
        &dir.path().join("it-tests"),
        "#!/bin/bash\nif [ \"$2\" = --list ]; then echo 'gpu::gpu_units_fake: test'; \
         else echo 'test gpu::gpu_units_fake ... ok'; fi\n",
    );
    let raw = crate::gpu_dist::synthetic_raw(&crate::gpu_dist::plan_of(8));
    std::fs::write(dir.path().join("raw.json"), raw.to_string()).unwrap();
    executable(
        &dir.path().join("python3"),
        &format!(
            "#!/bin/bash\nd=$(dirname \"$0\")\n\
             if [ \"$1\" = -c ]; then case \"$2\" in *torch*) exit {};; *) exit 0;; esac; fi\n\
             if [ \"$1 $2\" = '-m torch.distributed.run' ]; then\n\
               echo \"torchrun $*\" >> \"$d/calls.txt\"\n\
               while [ $# -gt 0 ] && [ \"$1\" != --out ]; do shift; done\n\
               exec {real_python} scripts/gpu-dist.py --format \"$d/raw.json\" --out \"$2\"\n\
             fi\nexit 1\n",
            if torch { 0 } else { 1 }
        ),
    );
    dir
}

fn node_script(fakes: &Path, only: &str, args: &[&str], out: &Path) -> std::process::Output {
    let path = format!(
        "{}:{}",
        fakes.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .arg("scripts/gpu-check.sh")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PATH", path)
        .env("GPU_CHECK_ONLY", only)
        .env("METP_SIM_BIN", fakes.join("metp-sim"))
        .env("METP_SIM_TEST_BIN", fakes.join("it-tests"))
        .env("OUT", out)
        .output()
        .unwrap()
}

/// The real python3's path, or None (the caller says skipped).
fn real_python() -> Option<String> {
    let o = Command::new("sh")
        .args(["-c", "command -v python3"])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !p.is_empty()).then_some(p)
}

/// `--gpus 8` on an 8-GPU node: torchrun runs scripts/gpu-dist.py on 8 ranks in place of the
/// one-GPU PyTorch kernels, its measurement file is fitted (`calibrate --fit … --out
/// profile-dist.json`), the calibration and its units use the 8 GPUs, and the summary carries
/// the measurement's own summary.
#[test]
fn gpu_check_with_eight_gpus_measures_with_torchrun_and_fits_it() {
    let Some(py) = real_python() else {
        crate::skipped("no python3 to format scripts/gpu-dist.py's outputs");
        return;
    };
    let f = node_fakes(8, true, &py);
    let out = f.path().join("out");
    let o = node_script(f.path(), "", &["--gpus", "8"], &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap_or_default();
    assert!(o.status.success(), "{stderr}\n{summary}");
    let calls = std::fs::read_to_string(f.path().join("calls.txt")).unwrap();
    let torchrun = calls.lines().find(|l| l.starts_with("torchrun")).unwrap();
    assert!(
        torchrun.contains("--nproc_per_node 8 scripts/gpu-dist.py"),
        "{torchrun}"
    );
    let fit = format!(
        "calibrate --fit {}/dist-measurements.json --base hgx-h200 --out {}/profile-dist.json",
        out.display(),
        out.display()
    );
    assert!(calls.contains(&fit), "{calls}");
    assert!(
        calls.contains("calibrate --fit-links") && calls.contains("nccl-tests-sendrecv.log"),
        "{calls}"
    );
    assert!(
        calls.contains("calibrate --backend cuda --devices 8"),
        "{calls}"
    );
    assert!(!summary.contains("pytorch-kernels"), "{summary}");
    // The fake calibration wrote no measurement file: nothing to split (torchrun's file is
    // not the calibration's).
    assert!(
        summary.contains("split, fit, compare: skipped"),
        "{summary}"
    );
    assert!(summary.contains("gpu-dist: 8 rank(s) (nccl)"), "{summary}");
    assert!(summary.contains("using 8 (--gpus)"), "{summary}");
    for file in [
        "dist-measurements.json",
        "dist-gemm-per-gpu.json",
        "nccl-tests-sendrecv.log",
        "nccl-tests-all_gather.log",
        "nccl-tests-reduce_scatter.log",
    ] {
        assert!(out.join(file).exists(), "{file}");
    }
}

/// Asking for more GPUs than the node lists, or for a count that is not one, stops at once;
/// GPU_CHECK_ONLY=dist needs two GPUs or more, and without torch it fails in one line.
#[test]
fn gpu_check_refuses_gpu_counts_it_cannot_honour() {
    let f = node_fakes(8, false, "python3");
    let out = f.path().join("out");
    let o = node_script(f.path(), "", &["--gpus", "16"], &out);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--gpus 16, but nvidia-smi lists 8"));
    let o = node_script(f.path(), "", &["--gpus", "two"], &out);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("got 'two'"));
    let o = node_script(f.path(), "dist", &[], &out);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--gpus N with N >= 2"));
    assert!(!f.path().join("calls.txt").exists());
    let o = node_script(f.path(), "dist", &["--gpus", "2"], &out);
    assert_eq!(o.status.code(), Some(1));
    let summary = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(
        summary.contains("dist: FAILED: python3 cannot import torch"),
        "{summary}"
    );
}
