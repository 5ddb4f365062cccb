//! The library's one error type.
//!
//! Every error carries enough context (file, field, value) to be printed as one line that tells
//! the user what is wrong and where. The CLI maps [`Error::exit_code`] to the process status.
//! Depends on nothing else in the crate.

use std::path::PathBuf;

/// A number read from a file, as an error message shows it: as written up to a million, in
/// scientific notation beyond (a tampered 1e308 is one short word in a one-line error, not
/// 309 digits).
pub fn shown(x: f64) -> String {
    if x.abs() < 1e6 || !x.is_finite() {
        format!("{x}")
    } else {
        format!("{x:.3e}")
    }
}

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in metp-sim, with context.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A named model or hardware profile does not exist.
    #[error("unknown {what} '{name}'; available: {available}")]
    UnknownName {
        /// "model" or "hardware profile".
        what: &'static str,
        /// The name as given.
        name: String,
        /// Comma-separated list of the names that exist.
        available: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file is not valid JSON or does not match its schema.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What serde reported (includes line and column).
        message: String,
    },
    /// A value in a file is out of range or inconsistent.
    #[error("{}: field '{field}': {message}", path.display())]
    InvalidField {
        /// The file.
        path: PathBuf,
        /// The field, dotted (`gpu.memory_bytes.value`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A command-line value is malformed (bad range, bad size suffix, …).
    #[error("{flag}: {message}")]
    InvalidArgument {
        /// The flag, e.g. `--seq`.
        flag: String,
        /// What is wrong.
        message: String,
    },
    /// A workload cannot run: a degree that does not divide the heads, a sequence that does not
    /// divide by the degree, more devices than the profile has, …
    #[error("{method} with p = {p}: {message}")]
    InvalidConfig {
        /// Method id.
        method: String,
        /// Degree.
        p: u64,
        /// The reason.
        message: String,
    },
    /// A parallel run on the virtual devices failed (a device stopped, a message never came).
    #[error("execution failed: {message}")]
    Execution {
        /// What went wrong.
        message: String,
    },
    /// An output file exists and the command was not told to overwrite it.
    #[error("{} exists; pass --force to overwrite it", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A backend cannot run here (no driver, a missing library, built without its feature).
    #[error("backend {backend}: {message}")]
    Unavailable {
        /// Backend name (`cuda`).
        backend: &'static str,
        /// Why, and what to do.
        message: String,
    },
    /// A calibration measurement or fit failed.
    #[error("calibration: {message}")]
    Calibration {
        /// What went wrong.
        message: String,
    },
    /// A plot could not be drawn or its format is not supported.
    #[error("{}: {message}", path.display())]
    Plot {
        /// The plot file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A task graph breaks the rules the simulator relies on (unmatched send/recv, collective
    /// members that disagree, freeing more memory than is live, …).
    #[error("invalid task graph: {message}")]
    InvalidGraph {
        /// What is wrong, naming the task(s).
        message: String,
    },
    /// The work an input implies is beyond one of the tool's limits (`config::limits`): what is
    /// too large, the limit, and what to change — refused before the work starts.
    #[error("too large: {message}")]
    TooLarge {
        /// What, the estimate, the limit and the advice.
        message: String,
    },
    /// Shard files that do not join into one study's result (`merge`): a part holding other
    /// points or counts than its place in the study says.
    #[error("merge: {message}")]
    Merge {
        /// Which part and what is wrong.
        message: String,
    },
    /// A result is not a number the tool may report (an MFU above 1, an infinity, a NaN): the
    /// inputs are outside what the model describes.
    #[error("impossible result: {message}")]
    Impossible {
        /// Which number, its value and the likely cause.
        message: String,
    },
    /// An output path cannot be written (a parent is a file, the path is a folder).
    #[error("{}: {message}", path.display())]
    Output {
        /// The output path.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// An output folder is in use by another run (its lock file names the process).
    #[error("{}: {message}", path.display())]
    Busy {
        /// The folder.
        path: PathBuf,
        /// Who holds it and what to do.
        message: String,
    },
    /// A command ran to the end and wrote what it writes, but a check it was asked to make
    /// failed (`validate --runs --check`: a run out of its tolerance). `report` is what it
    /// prints on stdout all the same.
    #[error("{message}")]
    CheckFailed {
        /// The command's output, printed before the error line.
        report: String,
        /// What failed, in one line.
        message: String,
    },
    /// A task graph deadlocked in the simulator: tasks remained but nothing could progress.
    #[error("deadlock: {message}")]
    Deadlock {
        /// How many tasks were left and which stream heads were stuck on what.
        message: String,
    },
}

impl Error {
    /// Process exit status for this error: 2 for usage errors, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::InvalidArgument { .. } => 2,
            _ => 1,
        }
    }

    /// Shorthand for an [`Error::InvalidArgument`].
    pub fn arg(flag: &str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            flag: flag.to_string(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn numbers_in_messages_stay_short() {
        assert_eq!(shown(245.5), "245.5");
        assert_eq!(shown(-1.0), "-1");
        assert_eq!(shown(1e308), "1.000e308");
        assert_eq!(shown(f64::NAN), "NaN");
    }
}
