//! The contracts every layer above shares: a finding and its boundary and severity, the list of
//! check ids, and the gate's whole report (what every renderer reads). Nothing here imports
//! the rest of the crate: producers (the chain, the replay, latency) and renderers (reports)
//! meet on these types.
pub mod checks;
pub mod finding;
pub mod report;

pub use finding::{Boundary, Finding, Findings, Severity};
pub use report::{
    GateReport, LatencyRow, LatencyTotals, LatencyVerdict, Outcome, PhaseTime, PromptResult,
    PromptStatus,
};
