//! markdown report of a gate run.
