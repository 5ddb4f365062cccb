//! Writing outputs so that a failed, interrupted or concurrent run never leaves a half-written
//! or mixed result: every file is written to a temporary beside the target, flushed and renamed
//! into place; output paths are checked before any work; temporaries are removed on SIGINT and
//! SIGTERM ([`install_interrupt_cleanup`]); and a command that writes a folder holds a lock on
//! it and writes a manifest last ([`OutputFolder`]). Also the JSON form every output uses.
//! No output replaces a file the command read ([`crate::inputs`]): the check is part of the
//! output-path check before the work and of every write. Used by every module that writes
//! outputs (reports, plots, calibrated profiles). Depends only on `error` and `inputs`; never
//! on `config` or the modules that write through it.

mod folder;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};

pub use folder::{Manifest, OutputFolder, LOCK_NAME, MANIFEST_NAME};

/// Files to remove if the process is interrupted: temporaries being written, and the locks of
/// output folders (with their manifests, marked interrupted).
static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn temporaries() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    TEMPORARIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers `path` for removal on interrupt.
pub(crate) fn register_temporary(path: &Path) {
    temporaries().push(path.to_path_buf());
}

/// Forgets `path` (it was renamed into place or removed).
pub(crate) fn unregister_temporary(path: &Path) {
    let mut t = temporaries();
    if let Some(i) = t.iter().rposition(|p| p == path) {
        t.swap_remove(i);
    }
}

/// Removes every registered temporary and releases every output folder this process holds
/// (its manifest marked `interrupted`); returns how many files were removed. Called by the
/// interrupt handler; safe to call at any time.
pub fn remove_temporaries() -> usize {
    folder::interrupt_all();
    let paths = std::mem::take(&mut *temporaries());
    paths
        .iter()
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count()
}

/// Installs, once, a handler for SIGINT and SIGTERM (and SIGHUP) that removes the temporaries
/// and releases the output folders of this process ([`remove_temporaries`]), says so on stderr
/// in one line and exits with status 130. Without it, an interrupted run leaves
/// `.NAME.tmp-PID` files and a lock behind.
pub fn install_interrupt_cleanup() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // A second handler (a library user's own) wins; then cleanup is theirs to call.
        let _ = ctrlc::set_handler(|| {
            let n = remove_temporaries();
            eprintln!("interrupted: removed {n} temporary file(s); outputs written so far are complete files, and an output folder's manifest says `interrupted`");
            std::process::exit(130);
        });
    });
}

/// Checks, before any work, that `path` can be written as a file: it is not a folder, and no
/// part of the way to it that exists is a file ("not a directory" rather than the system's
/// "File exists" from creating the folders later).
pub fn check_output_file(path: &Path) -> Result<()> {
    let path = &link_target(path)?;
    if path.is_dir() {
        return Err(Error::Output {
            path: path.to_path_buf(),
            message: "is a directory; give a file name".into(),
        });
    }
    // A file is written beside its target and renamed over it: over a device or a pipe (or a
    // link to one, /dev/stdout) that would replace the device's name with a file.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return Err(Error::Output {
            path: path.to_path_buf(),
            message: "is not a regular file (a device or a pipe); give a file name".into(),
        });
    }
    check_not_input(path)?;
    check_parents(path)
}

/// Where writing `path` lands: `path` itself, or — when it is a symbolic link — the file the
/// link names (followed link by link, up to 40), so that the file is replaced, never the link:
/// renaming over a link would replace the link (`/dev/stdout` with a regular file).
pub fn link_target(path: &Path) -> Result<PathBuf> {
    let mut at = path.to_path_buf();
    for _ in 0..40 {
        // /dev/stdout, /dev/fd/N: a descriptor of this process, not a file to replace.
        if at.starts_with("/proc") || at.starts_with("/dev/fd") {
            return Err(Error::Output {
                path: path.to_path_buf(),
                message: "is a file descriptor of this process (/dev/stdout, /dev/fd/N), not a \
                          file; give a file name"
                    .into(),
            });
        }
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&at).map_err(|source| Error::Io {
                    path: at.clone(),
                    source,
                })?;
                at = match at.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(at),
        }
    }
    Err(Error::Output {
        path: path.to_path_buf(),
        message: "too many levels of symbolic links".into(),
    })
}

/// Refuses an output that is a file this command read (the same path, a link to it, or the
/// same inode): writing it would destroy the input.
pub fn check_not_input(path: &Path) -> Result<()> {
    match crate::inputs::input_at(path) {
        Some(input) => Err(Error::Output {
            path: path.to_path_buf(),
            message: if input == path {
                "is one of this command's inputs; writing it would destroy it — choose another \
                 output"
                    .into()
            } else {
                format!(
                    "is the same file as the input {}; writing it would destroy it — choose \
                     another output",
                    input.display()
                )
            },
        }),
        None => Ok(()),
    }
}

/// Where `path` would be written: its folder's canonical path joined with its name (the file
/// itself need not exist).
fn target(path: &Path) -> Option<PathBuf> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Some(std::fs::canonicalize(dir).ok()?.join(path.file_name()?))
}

/// Refuses two outputs of one command on the same file (`(flag, path)` pairs): the second
/// would replace the first.
pub fn check_distinct_outputs(outputs: &[(&str, &Path)]) -> Result<()> {
    for (i, (flag, path)) in outputs.iter().enumerate() {
        for (other_flag, other) in &outputs[..i] {
            let same = path == other
                || crate::inputs::same_file(path, other)
                || target(path).is_some_and(|t| Some(t) == target(other));
            if same {
                return Err(Error::arg(
                    flag,
                    format!(
                        "{} is also {other_flag}: one would replace the other",
                        path.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Checks, before any work, that `dir` can be an output folder: it is a folder or does not
/// exist, and no part of the way to it that exists is a file.
pub fn check_output_dir(dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::Output {
            path: dir.to_path_buf(),
            message: "is not a directory (an output folder is expected here)".into(),
        });
    }
    check_parents(dir)
}

fn check_parents(path: &Path) -> Result<()> {
    for anc in path.ancestors().skip(1) {
        if anc.as_os_str().is_empty() {
            continue;
        }
        match std::fs::metadata(anc) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => {
                return Err(Error::Output {
                    path: path.to_path_buf(),
                    message: format!("{} is not a directory", anc.display()),
                })
            }
            // Missing, or below a file (ENOTDIR): look further up. Any other trouble (no
            // permission) the write itself reports.
            Err(_) => continue,
        }
    }
    Ok(())
}

/// Writes `contents` to `path` (to the file it names, if it is a symbolic link) through a
/// temporary file in the same folder and a rename, so a failed or interrupted run never leaves
/// a half-written file (the temporary is removed on
/// failure and, with [`install_interrupt_cleanup`], on SIGINT or SIGTERM).
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    check_output_file(path)?;
    // Through a link, the file it names is replaced (`link_target`).
    let path = &link_target(path)?;
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io)?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    register_temporary(&tmp);
    let result = (|| {
        // A new file, never through whatever is at that name (a link left there would send
        // the bytes to its target).
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    unregister_temporary(&tmp);
    result.map_err(io)
}

/// Serialises to pretty JSON with a trailing newline. Serialisation of our own types cannot fail
/// (no maps with non-string keys), so a failure is reported rather than unwrapped.
pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_string_pretty(value) {
        Ok(mut s) => {
            s.push('\n');
            s
        }
        Err(e) => format!("{{\"error\": \"{e}\"}}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parent that is a file is named as "not a directory", before anything is written.
    #[test]
    fn a_file_in_the_way_is_not_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("afile");
        std::fs::write(&file, b"x").unwrap();
        let e = check_output_file(&file.join("sub/x.svg")).unwrap_err();
        assert!(e.to_string().contains("afile is not a directory"), "{e}");
        let e = write_atomic(&file.join("x.json"), b"{}").unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        assert!(check_output_dir(&file).is_err());
        assert!(check_output_file(dir.path()).is_err());
        assert!(check_output_file(&dir.path().join("new/deeper/x.json")).is_ok());
    }

    /// Temporaries are registered while written and gone after.
    #[test]
    fn temporaries_are_forgotten_once_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        write_atomic(&path, b"hello").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello");
        let tmp_name = format!(".a.txt.tmp-{}", std::process::id());
        assert!(!temporaries().iter().any(|p| p.ends_with(&tmp_name)));
        assert!(!dir.path().join(tmp_name).exists());
    }
}
