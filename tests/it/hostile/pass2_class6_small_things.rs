//! Issue 22, class 6 — the rest: shard files over the size limit were read (up to 256 MiB each)
//! before they were refused; `plan --seq` above the limit rejected every configuration and
//! exited 0; a 256-character profile name (within its limit) broke `validate`'s and `sweep`'s
//! default folder names; a mesh profile whose per-pair link exceeds the GPU's total bandwidth
//! was accepted; a sweep into a reused folder left the old run's plots beside the new ones.

use std::path::Path;

use super::{bundled, command, refuses, small_sweep, succeeds, write};

/// A sparse file of `bytes` (nothing is written to disk).
fn sparse(path: &Path, bytes: u64) {
    std::fs::File::create(path).unwrap().set_len(bytes).unwrap();
}

#[test]
fn shard_files_are_sized_before_they_are_read() {
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("sweep.shard-0-of-1.json");
    sparse(&big, 300 << 20);
    let e = refuses(&["merge", big.to_str().unwrap()], 1);
    // The size comes from the file's metadata: it was not read.
    assert!(e.contains("314572800 bytes, larger than 256 MiB"), "{e}");
    // Five parts of 250 MiB: each within the bound, more than a merge reads in all.
    let d = tmp.path().join("many");
    std::fs::create_dir(&d).unwrap();
    for k in 0..5 {
        sparse(&d.join(format!("sweep.shard-{k}-of-5.json")), 250 << 20);
    }
    let e = refuses(&["merge", d.to_str().unwrap()], 1);
    assert!(e.contains("more than the 1024 MiB one merge reads"), "{e}");
}

#[test]
fn plan_refuses_a_sequence_above_the_limit_up_front() {
    let e = refuses(&["plan", "--gpus", "8", "--seq", "2000000000000"], 2);
    assert!(e.contains("--seq") && e.contains("longest sequence"), "{e}");
}

#[test]
fn a_profile_name_of_the_longest_length_gives_a_default_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let mut hw = bundled("hardware-profiles", "dgx-a100-80gb");
    hw["name"] = "N".repeat(256).into();
    let path = write(tmp.path(), "long.json", &hw);
    // validate's default folder (reports/claims-<profiles>), in a scratch working directory.
    let out = command(&["validate", "--hw", &path, "--svg-only"])
        .current_dir(tmp.path())
        .env("METP_SIM_DATA", env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dirs: Vec<_> = std::fs::read_dir(tmp.path().join("reports"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert!(
        dirs[0].starts_with("claims-nnnn") && dirs[0].len() <= 7 + 96,
        "{dirs:?}"
    );
}

#[test]
fn a_mesh_link_faster_than_the_gpu_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut hw = bundled("hardware-profiles", "mi300x-8");
    let total = hw["intra_node"]["bytes_per_s_per_direction"]["value"]
        .as_f64()
        .unwrap();
    hw["intra_node"]["link_bytes_per_s_per_direction"]["value"] = (total * 1.5).into();
    let path = write(tmp.path(), "mesh.json", &hw);
    let e = refuses(&["memory", "--hw", &path], 1);
    assert!(
        e.contains("link_bytes_per_s_per_direction") && e.contains("more than the GPU's total"),
        "{e}"
    );
    // Seven links of a seventh of the total each cannot carry twice the total.
    hw["intra_node"]["link_bytes_per_s_per_direction"]["value"] = (total / 14.0).into();
    let path = write(tmp.path(), "mesh2.json", &hw);
    let e = refuses(&["memory", "--hw", &path], 1);
    assert!(e.contains("links to the node's other GPUs"), "{e}");
}

#[test]
fn a_reused_folder_keeps_no_plots_of_the_earlier_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out_s = out.to_string_lossy().into_owned();
    let mut two = small_sweep(&out_s, &[]);
    let i = two.iter().position(|a| *a == "--p").unwrap();
    two[i + 1] = "2,4";
    succeeds(&two);
    assert!(out.join("step-time-p4.svg").exists());
    // A file of the user's, and a manifest entry pointing outside the folder: neither is
    // metp-sim's to remove.
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let outside = tmp.path().join("outside.txt");
    std::fs::write(&outside, "keep").unwrap();
    let mpath = out.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    m["files"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"path": "../outside.txt", "bytes": 4}));
    std::fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
    succeeds(&small_sweep(&out_s, &[]));
    assert!(
        !out.join("step-time-p4.svg").exists(),
        "an old plot is left"
    );
    assert!(out.join("step-time-p2.svg").exists());
    assert!(out.join("notes.txt").exists() && outside.exists());
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    assert_eq!(m["status"], "complete");
    // The files listed, not the whole manifest: its command line holds the temporary folder's
    // random name, which can contain "p4" (`/tmp/.tmp4JRyaM`).
    let files = m["files"].as_array().unwrap();
    assert!(
        files
            .iter()
            .all(|f| !f["path"].as_str().unwrap().contains("-p4")),
        "{m}"
    );
}
