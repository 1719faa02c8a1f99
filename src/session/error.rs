//! Why a session command failed or a run paused itself. The causes stay
//! attached (no early `to_string`), and [`one_line`] prints the chain where a
//! driver shows it.

use std::path::PathBuf;

use super::select::SelectError;
use crate::io::checkpoint::CheckpointError;
use crate::scenario::ScenarioError;
use crate::solver::SolverError;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Select(#[from] SelectError),
    #[error(transparent)]
    Solver(#[from] SolverError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The run stopped itself: the solver's statistics say where.
    #[error("paused")]
    Unstable(#[source] SolverError),
    /// A frame showed a blow-up the statistics had not seen yet.
    #[error("paused: the fields of step {step} hold NaN or speeds above {limit}; lower the Reynolds number or the lattice speed")]
    UnstableFrame { step: u64, limit: f32 },
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A value the driver sent that cannot be used.
    #[error("{0}")]
    Input(String),
    #[error("could not start the solver thread")]
    Thread(#[source] std::io::Error),
}

/// An error and its causes in one line, "error: cause: cause". A cause
/// already spelled out in its parent's message is not repeated.
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let part = c.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_keeps_every_cause_once() {
        let e = SessionError::Unstable(SolverError::InvalidParams("τ".into()));
        assert_eq!(one_line(&e), "paused: invalid parameter: τ");
        let e = SessionError::Write {
            path: "out/x.vti".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
        };
        assert_eq!(one_line(&e), "cannot write out/x.vti: no such directory");
        let e = SessionError::Checkpoint(CheckpointError::Io {
            what: "read",
            path: "a.ckpt".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        });
        assert_eq!(one_line(&e), "cannot read checkpoint a.ckpt: gone");
    }
}
