//! The client boundary: the requests a real client sent (recorded by `chatgate proxy`) diffed
//! against the suite's `[client]` contract.
use super::{Context, Finding};
use crate::error::Result;

pub fn check(_ctx: &Context) -> Result<Vec<Finding>> {
    Ok(Vec::new())
}
