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

/// Units only: the six units run with the committed profile, the table gets every run file,
/// and the outputs are packed down to summary, table and one archive.
#[test]
fn gpu_check_units_only_runs_six_units_tables_them_and_packs() {
    let f = fakes();
    let out = f.path().join("out");
    let o = script(f.path(), "units", &out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let calls = std::fs::read_to_string(f.path().join("calls.txt")).unwrap();
    let runs: Vec<&str> = calls.lines().filter(|l| l.starts_with("run ")).collect();
    assert_eq!(runs.len(), 6, "{calls}");
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
    assert_eq!(table.matches("--units").count(), 6, "{table}");
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
