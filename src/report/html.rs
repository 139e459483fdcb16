//! html report of a gate run.
