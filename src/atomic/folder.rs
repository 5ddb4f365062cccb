//! An output folder one run owns: a lock that refuses a second run into the same folder, and a
//! manifest written last, so a reader can tell a finished folder from an interrupted one.
//!
//! - **Lock** ([`LOCK_NAME`]): created with `O_EXCL` and holding the owner's process id. A
//!   second run into the folder is refused in one line naming the owner; a lock whose process
//!   no longer exists (the run was killed with SIGKILL) is taken over.
//! - **Manifest** ([`MANIFEST_NAME`]): `{tool, version, command, status, files}`. Written as
//!   `running` when the folder is opened (replacing a finished run's manifest, so old files
//!   beside new ones are never mistaken for one result), and last as `complete` with every file
//!   the run wrote and its size; `failed` when the run stops with an error, `interrupted` on
//!   SIGINT/SIGTERM (`super::install_interrupt_cleanup`). No process id or time in it: the same
//!   command gives the same manifest.
//! - **Stale files**: a run into a folder an earlier run wrote removes, when it finishes, the
//!   files the earlier manifest lists and this run did not write again (a sweep over other
//!   degrees leaves no old plots behind). Until then — and in a `running`, `failed` or
//!   `interrupted` manifest — `files` lists every file metp-sim may have left in the folder,
//!   the earlier run's and this one's so far, so that the next run can remove them. Only
//!   plain relative paths inside the folder are ever removed, never a folder, never one of the
//!   command's inputs: the manifest is a file read from disk like any other.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

use super::{check_output_dir, to_json, write_atomic};
use crate::error::{Error, Result};

/// The lock file's name in an output folder.
pub const LOCK_NAME: &str = ".metp-sim.lock";
/// The manifest's name in an output folder.
pub const MANIFEST_NAME: &str = "manifest.json";

/// What a folder holds and whether the run that wrote it finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    /// `metp-sim`.
    pub tool: &'static str,
    /// The crate version that wrote the folder.
    pub version: &'static str,
    /// The command line, without the program's path.
    pub command: Vec<String>,
    /// `running`, `complete`, `failed` or `interrupted`.
    pub status: &'static str,
    /// Files written by this run (relative to the folder) with their sizes, in the order
    /// written, in a `complete` manifest; in any other, every file an earlier run or this one
    /// may have left in the folder (module docs).
    pub files: Vec<ManifestFile>,
}

/// One file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManifestFile {
    /// Path relative to the folder.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
}

/// Folders this process holds, for the interrupt handler: (folder, manifest as running).
static OPEN: Mutex<Vec<(PathBuf, Manifest)>> = Mutex::new(Vec::new());

fn open_folders() -> std::sync::MutexGuard<'static, Vec<(PathBuf, Manifest)>> {
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Marks every folder this process holds `interrupted` and removes its lock (the interrupt
/// handler's part).
pub(super) fn interrupt_all() {
    let open = std::mem::take(&mut *open_folders());
    for (dir, mut m) in open {
        m.status = "interrupted";
        let _ = write_atomic(&dir.join(MANIFEST_NAME), to_json(&m).as_bytes());
        let _ = std::fs::remove_file(dir.join(LOCK_NAME));
    }
}

/// An output folder held by this run (module docs). Record each file written with
/// [`OutputFolder::wrote`], then [`OutputFolder::finish`]; dropped unfinished, the manifest
/// says `failed` and the lock is released.
#[derive(Debug)]
pub struct OutputFolder {
    dir: PathBuf,
    manifest: Manifest,
    /// Files an earlier run's manifest listed (relative, checked), removed at
    /// [`OutputFolder::finish`] unless this run wrote them again.
    previous: Vec<PathBuf>,
    finished: bool,
}

/// The largest manifest read back (an earlier run's): a manifest lists a few hundred files.
const MAX_MANIFEST_BYTES: u64 = 8 << 20;

/// The files an earlier run's manifest in `dir` lists: plain relative paths (no root, no `..`)
/// only, the manifest and the lock left out. A missing, unreadable or foreign manifest lists
/// none.
fn previous_files(dir: &Path) -> Vec<PathBuf> {
    use std::io::Read;
    let path = dir.join(MANIFEST_NAME);
    // A regular file only (following a link): opening a named pipe would wait for a writer.
    if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let Ok(file) = std::fs::File::open(&path) else {
        return Vec::new();
    };
    let mut text = Vec::new();
    if file
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut text)
        .is_err()
        || text.len() as u64 > MAX_MANIFEST_BYTES
    {
        return Vec::new();
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    if v["tool"] != "metp-sim" {
        return Vec::new();
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for f in v["files"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let Some(rel) = f["path"].as_str() else {
            continue;
        };
        let rel = PathBuf::from(rel);
        let plain = rel.components().count() > 0
            && rel
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        let ours = rel == Path::new(MANIFEST_NAME) || rel == Path::new(LOCK_NAME);
        if plain && !ours && !out.contains(&rel) {
            out.push(rel);
        }
    }
    out
}

fn listed(dir: &Path, rel: &Path) -> ManifestFile {
    ManifestFile {
        path: rel.to_string_lossy().into_owned(),
        bytes: std::fs::metadata(dir.join(rel))
            .map(|m| m.len())
            .unwrap_or(0),
    }
}

impl OutputFolder {
    /// Checks `dir`, creates it, takes its lock (refusing a folder another live run holds) and
    /// writes the `running` manifest.
    pub fn open(dir: &Path) -> Result<OutputFolder> {
        OutputFolder::open_as(dir, std::env::args().skip(1).collect())
    }

    /// [`OutputFolder::open`] with the command the manifest records given: `merge` records
    /// the command one unsharded run would have been, so that its folder is that run's, byte
    /// for byte.
    pub fn open_as(dir: &Path, command: Vec<String>) -> Result<OutputFolder> {
        check_output_dir(dir)?;
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        take_lock(dir)?;
        let previous = previous_files(dir);
        let manifest = Manifest {
            tool: "metp-sim",
            version: env!("CARGO_PKG_VERSION"),
            command,
            status: "running",
            files: Vec::new(),
        };
        let folder = OutputFolder {
            dir: dir.to_path_buf(),
            manifest,
            previous,
            finished: false,
        };
        let running = folder.unfinished("running");
        open_folders().push((dir.to_path_buf(), running.clone()));
        write_atomic(&dir.join(MANIFEST_NAME), to_json(&running).as_bytes())?;
        Ok(folder)
    }

    /// The manifest of an unfinished run with `status`: every file an earlier run or this one
    /// may have left in the folder (module docs).
    fn unfinished(&self, status: &'static str) -> Manifest {
        let mut m = self.manifest.clone();
        m.status = status;
        for rel in &self.previous {
            let path = rel.to_string_lossy();
            if !m.files.iter().any(|f| f.path == path) && self.dir.join(rel).exists() {
                m.files.push(listed(&self.dir, rel));
            }
        }
        m
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records a file this run wrote (a path inside the folder).
    pub fn wrote(&mut self, path: &Path) {
        let rel = path.strip_prefix(&self.dir).unwrap_or(path);
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        self.manifest.files.push(ManifestFile {
            path: rel.to_string_lossy().into_owned(),
            bytes,
        });
        let file = listed(&self.dir, rel);
        if let Some((_, m)) = open_folders().iter_mut().find(|(d, _)| d == &self.dir) {
            match m.files.iter_mut().find(|f| f.path == file.path) {
                Some(f) => *f = file,
                None => m.files.push(file),
            }
        }
    }

    /// Removes the files an earlier run left that this one did not write again, writes the
    /// `complete` manifest — last — and releases the lock.
    pub fn finish(mut self) -> Result<()> {
        let dir = self.dir.clone();
        for rel in std::mem::take(&mut self.previous) {
            let path = rel.to_string_lossy();
            if self.manifest.files.iter().any(|f| f.path == path) {
                continue;
            }
            let full = dir.join(&rel);
            let is_file = std::fs::symlink_metadata(&full).is_ok_and(|m| !m.is_dir());
            if is_file && crate::inputs::input_at(&full).is_none() {
                let _ = std::fs::remove_file(&full);
            }
        }
        self.manifest.status = "complete";
        let written = write_atomic(
            &self.dir.join(MANIFEST_NAME),
            to_json(&self.manifest).as_bytes(),
        );
        self.finished = written.is_ok();
        written
    }
}

impl Drop for OutputFolder {
    fn drop(&mut self) {
        if !self.finished {
            let failed = self.unfinished("failed");
            let _ = write_atomic(&self.dir.join(MANIFEST_NAME), to_json(&failed).as_bytes());
        }
        open_folders().retain(|(d, _)| d != &self.dir);
        let _ = std::fs::remove_file(self.dir.join(LOCK_NAME));
    }
}

/// Whether process `pid` exists (Linux `/proc`; elsewhere every holder counts as alive).
fn alive(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The process id a lock file holds (its first bytes only: a lock is a line).
fn read_pid(lock: &Path) -> Option<u32> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(lock)
        .ok()?
        .take(64)
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse().ok()
}

fn take_lock(dir: &Path) -> Result<()> {
    let lock = dir.join(LOCK_NAME);
    let me = std::process::id();
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(mut f) => {
                use std::io::Write;
                return f
                    .write_all(format!("{me}\n").as_bytes())
                    .map_err(|source| Error::Io { path: lock, source });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Ours is a small regular file holding a process id; anything else (a pipe,
                // which would block a read, a folder, a link elsewhere) is not a lock of ours.
                if !std::fs::symlink_metadata(&lock).is_ok_and(|m| m.is_file()) {
                    return Err(Error::Busy {
                        path: dir.to_path_buf(),
                        message: format!(
                            "{LOCK_NAME} is there but is not a lock file metp-sim wrote (not a \
                             regular file); remove it or choose another --out"
                        ),
                    });
                }
                let owner: Option<u32> = read_pid(&lock);
                match owner {
                    Some(pid) if pid != me && alive(pid) => {
                        return Err(Error::Busy {
                            path: dir.to_path_buf(),
                            message: format!(
                                "in use by another metp-sim run (process {pid}, lock {LOCK_NAME}); \
                                 wait for it or choose another --out"
                            ),
                        })
                    }
                    // Left by a run that no longer exists (killed): take it over.
                    _ => {
                        let _ = std::fs::remove_file(&lock);
                    }
                }
            }
            Err(source) => return Err(Error::Io { path: lock, source }),
        }
    }
    Err(Error::Busy {
        path: dir.to_path_buf(),
        message: format!("could not take the lock {LOCK_NAME}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(dir: &Path) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(MANIFEST_NAME)).unwrap()).unwrap()
    }

    /// Running, then complete with the files; the lock is held meanwhile and released after.
    #[test]
    fn a_finished_folder_says_complete_and_lists_its_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let mut f = OutputFolder::open(&dir).unwrap();
        assert_eq!(manifest(&dir)["status"], "running");
        assert!(dir.join(LOCK_NAME).exists());
        write_atomic(&dir.join("a.csv"), b"x,y\n").unwrap();
        f.wrote(&dir.join("a.csv"));
        f.finish().unwrap();
        let m = manifest(&dir);
        assert_eq!(m["status"], "complete");
        assert_eq!(m["files"][0]["path"], "a.csv");
        assert_eq!(m["files"][0]["bytes"], 4);
        assert!(!dir.join(LOCK_NAME).exists());
    }

    /// A folder held by a live process is refused; a lock left by a dead one is taken over; a
    /// run that stops with an error leaves `failed`.
    #[test]
    fn a_busy_folder_is_refused_and_a_stale_lock_taken_over() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        // Process 1 (init) is alive wherever /proc exists.
        std::fs::write(dir.join(LOCK_NAME), "1\n").unwrap();
        if Path::new("/proc/1").exists() {
            let e = OutputFolder::open(dir).unwrap_err().to_string();
            assert!(
                e.contains("in use by another metp-sim run (process 1"),
                "{e}"
            );
        }
        // No process has id u32::MAX - 1.
        std::fs::write(dir.join(LOCK_NAME), format!("{}\n", u32::MAX - 1)).unwrap();
        let f = OutputFolder::open(dir).unwrap();
        drop(f);
        assert_eq!(manifest(dir)["status"], "failed");
        assert!(!dir.join(LOCK_NAME).exists());
    }
}
