//! junit report of a gate run.
