//! Finding and loading model and hardware files by name or path.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::{Hardware, Model};
use crate::error::{Error, Result};

/// Which bundled folder a name is looked up in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// `models/`
    Model,
    /// `hardware-profiles/`
    Hardware,
}

impl DataKind {
    fn folder(self) -> &'static str {
        match self {
            DataKind::Model => "models",
            DataKind::Hardware => "hardware-profiles",
        }
    }
    fn what(self) -> &'static str {
        match self {
            DataKind::Model => "model",
            DataKind::Hardware => "hardware profile",
        }
    }
}

/// The folder holding `models/` and `hardware-profiles/`: `$METP_SIM_DATA` if set, else the
/// current directory if it has both, else the source tree the binary was built from.
pub fn data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("METP_SIM_DATA") {
        return PathBuf::from(dir);
    }
    let cwd = PathBuf::from(".");
    if cwd.join("models").is_dir() && cwd.join("hardware-profiles").is_dir() {
        return cwd;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Names (file stems) available in a bundled folder, sorted.
pub fn list_names(kind: DataKind) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir().join(kind.folder()))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "json")
                .then(|| p.file_stem()?.to_str().map(str::to_string))
                .flatten()
        })
        .collect();
    names.sort();
    names
}

/// Resolves `NAME|PATH`: an existing path (or anything with a `/` or `.json`) is a path,
/// anything else a stem in the bundled folder.
pub fn resolve(kind: DataKind, name_or_path: &str) -> Result<PathBuf> {
    let as_path = Path::new(name_or_path);
    if name_or_path.contains('/') || name_or_path.ends_with(".json") || as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    let candidate = data_dir()
        .join(kind.folder())
        .join(format!("{name_or_path}.json"));
    if candidate.is_file() {
        return Ok(candidate);
    }
    Err(Error::UnknownName {
        what: kind.what(),
        name: name_or_path.to_string(),
        available: list_names(kind).join(", "),
    })
}

/// Reads a text file of at most [`MAX_INPUT_FILE_BYTES`](super::limits::MAX_INPUT_FILE_BYTES):
/// a larger regular file is refused from its size, before it is read; one whose size is not
/// known (a pipe, a device such as `/dev/zero`) after reading one byte past the limit, never
/// read whole.
pub fn read_text(path: &Path) -> Result<String> {
    read_text_capped(path, super::limits::MAX_INPUT_FILE_BYTES)
}

/// [`read_text`] with another bound (`max` bytes), for files larger than a model's: shard files
/// ([`MAX_SHARD_FILE_BYTES`](super::limits::MAX_SHARD_FILE_BYTES)).
pub fn read_text_capped(path: &Path, max: u64) -> Result<String> {
    use std::io::Read;
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    // What the path is, before it is opened: opening a named pipe waits for a writer.
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        return Err(Error::Parse {
            path: path.to_path_buf(),
            message: "is a directory, not a file".into(),
        });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            return Err(Error::Parse {
                path: path.to_path_buf(),
                message: "is a socket, not a file".into(),
            });
        }
        if meta.file_type().is_fifo() {
            let bytes = read_pipe(path, max)?;
            crate::inputs::note(path);
            return String::from_utf8(bytes).map_err(|e| Error::Parse {
                path: path.to_path_buf(),
                message: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
            });
        }
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // A regular file's size is known before anything is read: a large one is refused without
    // reading it. The capped read below is for the rest (pipes, devices such as /dev/zero).
    let too_large = |len: String| Error::Parse {
        path: path.to_path_buf(),
        message: format!(
            "{len}larger than {} MiB, the most such a file may hold (config::limits)",
            max >> 20
        ),
    };
    if meta.is_file() && meta.len() > max {
        return Err(too_large(format!("{} bytes, ", meta.len())));
    }
    crate::inputs::note(path);
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(too_large(String::new()));
    }
    String::from_utf8(bytes).map_err(|e| Error::Parse {
        path: path.to_path_buf(),
        message: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
    })
}

/// Longest an input pipe may stay silent before it is refused.
pub const PIPE_SILENCE_S: u64 = 60;

/// A named pipe's bytes, at most `max` (plus one, to tell a larger input): opened without
/// waiting for a writer (a pipe nobody writes to reads as empty) and read until its writer
/// closes it; refused when it sends nothing for [`PIPE_SILENCE_S`].
#[cfg(unix)]
fn read_pipe(path: &Path, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 1 << 16];
    let mut last = std::time::Instant::now();
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Ok(bytes),
            Ok(n) => {
                bytes.extend_from_slice(&chunk[..n]);
                if bytes.len() as u64 > max {
                    return Err(Error::Parse {
                        path: path.to_path_buf(),
                        message: format!(
                            "larger than {} MiB, the most such a file may hold (config::limits)",
                            max >> 20
                        ),
                    });
                }
                last = std::time::Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if last.elapsed().as_secs() >= PIPE_SILENCE_S {
                    return Err(Error::Parse {
                        path: path.to_path_buf(),
                        message: format!(
                            "a pipe that sent nothing for {PIPE_SILENCE_S} s; refused"
                        ),
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
}

/// Parses JSON text into `T`, naming the field a type error is in, and refusing anything after
/// the value (a second object, trailing words).
pub fn parse_json<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    let parse = |message: String| Error::Parse {
        path: path.to_path_buf(),
        message,
    };
    // serde_path_to_error names the field a type error is in ("hidden: invalid value …").
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        // A syntax error inside an unnamed key comes back as the path "?": not a field.
        parse(if field.is_empty() || field == "." || field == "?" {
            inner.to_string()
        } else {
            format!("field '{field}': {inner}")
        })
    })?;
    de.end()
        .map_err(|e| parse(format!("content after the JSON value: {e}")))?;
    Ok(value)
}

/// Reads a JSON file into `T` ([`read_text`], then [`parse_json`]).
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    parse_json(path, &read_text(path)?)
}

/// Loads and validates a model by name or path: a model file (`models/*.json`), or a Hugging
/// Face `config.json` (a file with a `model_type`; see [`super::hf`]).
pub fn load_model(name_or_path: &str) -> Result<Model> {
    let path = resolve(DataKind::Model, name_or_path)?;
    // Read once: a pipe (`--model <(…)`) gives its bytes once.
    let text = read_text(&path)?;
    let raw: serde_json::Value = parse_json(&path, &text)?;
    if super::hf::is_hf_config(&raw) {
        return super::hf::from_hf_config(&raw, &path);
    }
    let model: Model = parse_json(&path, &text)?;
    model.validate(&path)?;
    Ok(model)
}

/// Loads and validates a hardware profile by name or path.
pub fn load_hardware(name_or_path: &str) -> Result<Hardware> {
    let path = resolve(DataKind::Hardware, name_or_path)?;
    let hw: Hardware = read_json(&path)?;
    hw.validate(&path)?;
    Ok(hw)
}
