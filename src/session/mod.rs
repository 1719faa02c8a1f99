//! A running scenario, with or without a window: the engine every face drives
//! (the window, `run`'s streaming consumers, `bench --stream`).
//!
//! - [`protocol`]: the commands a driver sends and the frames and status it
//!   gets back;
//! - [`Worker`]: the solver thread and its loop (apply a command, advance a
//!   chunk of steps), over an engine that loads scenarios and publishes frames;
//! - [`History`]: the time series of the plots (steadiness, forces with the
//!   Strouhal detector, the probe);
//! - [`select`]: which solver runs a scenario.

mod engine;
mod error;
mod history;
pub mod protocol;
mod publisher;
pub mod select;
mod worker;

pub use error::{one_line, SessionError};
pub use history::{oscillation_frequency, History, HISTORY};
pub use protocol::{Command, Frame, LoopTiming, Mailbox, Status};
pub use select::{Backend, Choice, Gpus, SelectError, Selected};
pub use worker::{Start, Worker};
