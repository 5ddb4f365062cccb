//! Writing output files so that a failed or interrupted run never leaves a half-written one:
//! write a temporary file beside the target, flush it, then rename it into place; and the JSON
//! form every output uses. Used by every module that writes outputs (reports, plots, calibrated
//! profiles). Depends only on `error`.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Writes `contents` to `path` through a temporary file in the same folder and a rename, so a
/// failed or interrupted run never leaves a half-written file.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
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
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok(())
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
