//! The files a command has read, remembered by identity, so that no command writes over one of
//! its own inputs: every input file is read through `config::read_text_capped`, which records it
//! here ([`note`]), and every output is checked here before any work and again when it is
//! written (`atomic::check_output_file`, `atomic::write_atomic`).
//!
//! A file is the same file when its canonical path is, or — for hard links and paths that
//! cannot be canonicalised the same way — when its device and inode are (Unix), as long as the
//! path it was read by still names that inode (a file deleted since, whose inode the system
//! gave to a new file, is not an input). The record is the command's: the command line turns it
//! on ([`track`], `cli::main`); a library caller that reads and then writes files of its own in
//! one process is not held to it. Depends on nothing else in the crate.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// One file read: its canonical path and, on Unix, its device and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    canonical: Option<PathBuf>,
    inode: Option<(u64, u64)>,
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> Option<(u64, u64)> {
    None
}

fn identity(path: &Path) -> Option<Identity> {
    // Following symbolic links: a link to an input is the input.
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        // Devices and pipes (/dev/zero, /dev/stdin) are not files an output could replace.
        return None;
    }
    Some(Identity {
        canonical: std::fs::canonicalize(path).ok(),
        inode: inode(&meta),
    })
}

fn same(a: &Identity, b: &Identity) -> bool {
    (a.canonical.is_some() && a.canonical == b.canonical)
        || (a.inode.is_some() && a.inode == b.inode)
}

/// Files read, as they were named and by identity.
#[derive(Debug, Default)]
struct Registry {
    read: Vec<(PathBuf, Identity)>,
}

impl Registry {
    fn note(&mut self, path: &Path) {
        if let Some(id) = identity(path) {
            if !self.read.iter().any(|(_, known)| *known == id) {
                self.read.push((path.to_path_buf(), id));
            }
        }
    }

    fn input_at(&self, path: &Path) -> Option<PathBuf> {
        let id = identity(path)?;
        self.read
            .iter()
            // Still the file it was when read: its path names the same inode.
            .filter(|(p, known)| identity(p).is_some_and(|now| now == *known))
            .find(|(_, known)| same(known, &id))
            .map(|(p, _)| p.clone())
    }
}

static TRACKING: AtomicBool = AtomicBool::new(false);
static READ: Mutex<Registry> = Mutex::new(Registry { read: Vec::new() });

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    READ.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts recording the files this process reads: one command's inputs (`cli::main`).
pub fn track() {
    TRACKING.store(true, Ordering::SeqCst);
}

/// Records `path` as read (a regular file; anything else is ignored), when recording.
pub fn note(path: &Path) {
    if TRACKING.load(Ordering::SeqCst) {
        registry().note(path);
    }
}

/// The input `path` is, as it was named when it was read, if it is one: the same canonical
/// path or the same device and inode as a file this command has read.
pub fn input_at(path: &Path) -> Option<PathBuf> {
    if !TRACKING.load(Ordering::SeqCst) {
        return None;
    }
    registry().input_at(path)
}

/// Whether two paths name the same existing file (canonical path, or device and inode).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (identity(a), identity(b)) {
        (Some(x), Some(y)) => same(&x, &y),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file read is found again by its path, another spelling of it, a symbolic link and a
    /// hard link to it; another file is not, nor a new file that got a deleted input's inode.
    #[test]
    fn inputs_are_known_by_path_link_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let b = dir.path().join("b.json");
        std::fs::write(&a, b"{}").unwrap();
        std::fs::write(&b, b"{}").unwrap();
        let mut r = Registry::default();
        r.note(&a);
        assert_eq!(r.input_at(&a), Some(a.clone()));
        assert_eq!(r.input_at(&dir.path().join("./a.json")), Some(a.clone()));
        assert_eq!(r.input_at(&b), None);
        #[cfg(unix)]
        {
            let sym = dir.path().join("sym.json");
            std::os::unix::fs::symlink(&a, &sym).unwrap();
            assert_eq!(r.input_at(&sym), Some(a.clone()));
            let hard = dir.path().join("hard.json");
            std::fs::hard_link(&a, &hard).unwrap();
            assert_eq!(r.input_at(&hard), Some(a.clone()));
            assert!(same_file(&hard, &sym));
        }
        assert!(!same_file(&a, &b));
        assert_eq!(r.input_at(&dir.path().join("missing.json")), None);
        // Deleted: whatever file later has its inode is not the input.
        let mut r = Registry::default();
        r.note(&b);
        std::fs::remove_file(&b).unwrap();
        std::fs::write(dir.path().join("c.json"), b"{}").unwrap();
        assert_eq!(r.input_at(&dir.path().join("c.json")), None);
    }
}
