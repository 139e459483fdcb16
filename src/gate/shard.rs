//! One shard's share of a gate run (`--shard K/N`): which prompts and requests it owns, and that
//! shard 1 also runs the chains. What a shard writes and how the parts merge is `merge.rs`.
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Shard `k` of `n` (1-based), as `--shard K/N` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub k: usize,
    pub n: usize,
}

impl Shard {
    /// Whether item `i` (a replay prompt, a latency request) is this shard's.
    pub fn owns(&self, i: usize) -> bool {
        i % self.n == self.k - 1
    }
    /// Shard 1 also runs the offline and online chains.
    pub fn runs_chain(&self) -> bool {
        self.k == 1
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Shard, String> {
        let bad = || format!("--shard takes K/N with 1 ≤ K ≤ N ≤ 10000 (e.g. 2/3), got {s:?}");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (usize, usize) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if k == 0 || n == 0 || k > n || n > 10_000 {
            return Err(bad());
        }
        Ok(Shard { k, n })
    }
}
