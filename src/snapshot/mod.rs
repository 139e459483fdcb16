//! Reviewed replay snapshots: insta-compatible `.snap` files under `snapshots/<suite>/`, pending
//! changes as `.snap.new` beside them (never over the accepted file), comparators, diffs.
mod compare;
pub use compare::Comparator;
