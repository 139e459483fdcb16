//! Errors that reach the user. Every variant maps to one exit code of the CLI contract:
//! 2 for bad input (a file, a flag, a template), 3 for an unreachable target.
use std::fmt;
use std::path::{Path, PathBuf};

/// What went wrong, which file it concerns, and what to do about it.
#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    /// The file (or request) the problem is in, when there is one.
    pub file: Option<PathBuf>,
    /// One sentence: what is wrong.
    pub problem: String,
    /// What the user can do about it.
    pub hint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad input: a missing or malformed file, a wrong flag, a template that fails. Exit 2.
    Input,
    /// A target could not be reached or timed out. Exit 3.
    Unreachable,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn input(problem: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Input,
            file: None,
            problem: problem.into(),
            hint: None,
        }
    }
    pub fn in_file(file: impl AsRef<Path>, problem: impl Into<String>) -> Self {
        Error::input(problem).file(file)
    }
    pub fn unreachable(problem: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Unreachable,
            file: None,
            problem: problem.into(),
            hint: None,
        }
    }
    pub fn file(mut self, file: impl AsRef<Path>) -> Self {
        self.file = Some(file.as_ref().to_path_buf());
        self
    }
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    /// Reading `file` failed at the OS level.
    pub fn io(file: impl AsRef<Path>, err: std::io::Error) -> Self {
        let file = file.as_ref();
        let hint = match err.kind() {
            std::io::ErrorKind::NotFound => Some("check the path (relative paths in a suite are resolved from the suite file's folder)"),
            std::io::ErrorKind::PermissionDenied => Some("check the file's permissions"),
            _ => None,
        };
        let e = Error::in_file(file, format!("cannot read: {err}"));
        match hint {
            Some(h) => e.hint(h),
            None => e,
        }
    }
    /// Writing `file` failed at the OS level.
    pub fn write(file: impl AsRef<Path>, err: std::io::Error) -> Self {
        let e = Error::in_file(file, format!("cannot write: {err}"));
        match err.kind() {
            std::io::ErrorKind::NotFound => e.hint("create the folder first, or check the path"),
            std::io::ErrorKind::PermissionDenied => e.hint("check the folder's permissions"),
            _ => e,
        }
    }
    pub fn exit_code(&self) -> i32 {
        match self.kind {
            ErrorKind::Input => 2,
            ErrorKind::Unreachable => 3,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        write!(f, "{}", self.problem)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Read a whole file, naming it on failure.
pub fn read_to_string(path: impl AsRef<Path>) -> Result<String> {
    let path = path.as_ref();
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// Parse JSON from a file, naming the file, line and column on failure.
pub fn read_json(path: impl AsRef<Path>) -> Result<serde_json::Value> {
    let path = path.as_ref();
    let text = read_to_string(path)?;
    serde_json::from_str(&text).map_err(|e| Error::in_file(path, format!("malformed JSON: {e}")))
}
