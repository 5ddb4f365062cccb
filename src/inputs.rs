//! The files this process has read, remembered by identity, so that no command writes over one
//! of its own inputs: every input file is read through `config::read_text_capped`, which
//! records it here ([`note`]), and every output is checked here before any work and again
//! when it is written (`atomic::check_output_file`, `atomic::write_atomic`).
//!
//! A file is the same file when its canonical path is, or — for hard links and paths that
//! cannot be canonicalised the same way — when its device and inode are (Unix). Depends on
//! nothing else in the crate.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One file read: its canonical path and, on Unix, its device and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    canonical: Option<PathBuf>,
    inode: Option<(u64, u64)>,
}

static READ: Mutex<Vec<(PathBuf, Identity)>> = Mutex::new(Vec::new());

fn read_files() -> std::sync::MutexGuard<'static, Vec<(PathBuf, Identity)>> {
    READ.lock().unwrap_or_else(|e| e.into_inner())
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

/// Records `path` as read by this process (a regular file; anything else is ignored).
pub fn note(path: &Path) {
    if let Some(id) = identity(path) {
        let mut read = read_files();
        if !read.iter().any(|(_, known)| *known == id) {
            read.push((path.to_path_buf(), id));
        }
    }
}

/// The input `path` is, as it was named when it was read, if it is one: the same canonical
/// path or the same device and inode as a file this process has read.
pub fn input_at(path: &Path) -> Option<PathBuf> {
    let id = identity(path)?;
    read_files()
        .iter()
        .find(|(_, known)| same(known, &id))
        .map(|(p, _)| p.clone())
}

fn same(a: &Identity, b: &Identity) -> bool {
    (a.canonical.is_some() && a.canonical == b.canonical)
        || (a.inode.is_some() && a.inode == b.inode)
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

    /// A file read is found again by its path, a symbolic link to it and a hard link to it;
    /// another file is not.
    #[test]
    fn inputs_are_known_by_path_link_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let b = dir.path().join("b.json");
        std::fs::write(&a, b"{}").unwrap();
        std::fs::write(&b, b"{}").unwrap();
        note(&a);
        assert_eq!(input_at(&a), Some(a.clone()));
        assert_eq!(input_at(&dir.path().join("./a.json")), Some(a.clone()));
        assert_eq!(input_at(&b), None);
        #[cfg(unix)]
        {
            let sym = dir.path().join("sym.json");
            std::os::unix::fs::symlink(&a, &sym).unwrap();
            assert_eq!(input_at(&sym), Some(a.clone()));
            let hard = dir.path().join("hard.json");
            std::fs::hard_link(&a, &hard).unwrap();
            assert_eq!(input_at(&hard), Some(a.clone()));
            assert!(same_file(&hard, &sym));
        }
        assert!(!same_file(&a, &b));
        assert_eq!(input_at(&dir.path().join("missing.json")), None);
    }
}
