//! When the process allocator (mimalloc, the binary's global allocator) hands freed memory back
//! to the OS.
//!
//! The binary returns freed memory at once ([`purge_at_once`]): a burst of large replies freed
//! together (a hostile server's endless streams, 40 in flight) must not hold the peak RSS above
//! what is live. A forward pass of the in-process model is the opposite case: every token
//! allocates and frees the same large buffers (a 256k-vocabulary model's logits are 1 MiB, and
//! candle allocates one per element-wise op), so returning them at once makes the next token
//! fault the same pages back in, zeroed by the kernel — a fifth of `chatgate serve`'s CPU on a
//! Gemma-2 stand-in went to page faults. While a generation runs ([`KeepFreedPages`]), freed
//! pages are kept for a second, then purged as usual.
//!
//! Transparent huge pages are off for the binary ([`no_transparent_huge_pages`]). mimalloc
//! advises the kernel to back its memory with 2 MiB pages, so a freed and purged stretch faults
//! back in as a whole huge page, zeroed, however little of it the next allocation touches: with
//! the kernel's THP in `madvise` mode (Debian's default), a gate against a Gemma-2 stand-in spent
//! half its CPU in `clear_page_erms` under `do_huge_pmd_anonymous_page`, and with THP off the
//! same gate took 9 s of CPU instead of 12–14 (`MIMALLOC_ALLOW_THP=0`, the same switch).
//!
//! Without mimalloc as the global allocator (the library linked into another program, the
//! tests), these calls set an option of an allocator nobody uses: harmless.
use std::os::raw::c_long;
use std::sync::Mutex;

/// `mi_option_purge_delay` in mimalloc.h's `mi_option_e` (v2 and v3 alike; the Rust bindings
/// do not name it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed pages are kept while a generation runs: far longer than one token takes, so a
/// token's buffers are reused by the next.
const KEEP_WHILE_GENERATING_MS: c_long = 1000;

/// Generations running now, and the delay to restore when the last one ends.
static GENERATING: Mutex<(usize, c_long)> = Mutex::new((0, 0));

fn purge_delay() -> c_long {
    // SAFETY: reads one of mimalloc's documented options; no pointer is involved.
    unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
}

fn set_purge_delay(ms: c_long) {
    // SAFETY: sets one of mimalloc's documented options to a documented value; no pointer is
    // involved and the allocator reads options on every purge.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ms) };
}

/// No transparent huge pages for this process (see the module's docs), unless the user set
/// mimalloc's own switch (`MIMALLOC_ALLOW_THP`). mimalloc reads that option once, before `main`,
/// and had already advised huge pages for the memory it reserved then, so the process-wide
/// `PR_SET_THP_DISABLE` is what takes effect for every later fault. Processes this one starts
/// (a suite's `[client] command`) inherit it: it changes how fast their memory is zeroed,
/// nothing they compute.
pub fn no_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: PR_SET_THP_DISABLE takes an integer flag and no pointer; an error (a kernel
    // without it) leaves THP as it was, which is only slower.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Return freed memory to the OS at once (mimalloc's default waits 10 ms).
pub fn purge_at_once() {
    set_purge_delay(0);
}

/// Keeps freed pages for reuse while it lives (see the module's docs). Nested and concurrent
/// guards count; the last one dropped restores the delay the first one found.
pub struct KeepFreedPages(());

impl KeepFreedPages {
    pub fn new() -> KeepFreedPages {
        let mut g = GENERATING.lock().unwrap_or_else(|e| e.into_inner());
        if g.0 == 0 {
            g.1 = purge_delay();
            set_purge_delay(KEEP_WHILE_GENERATING_MS);
        }
        g.0 += 1;
        KeepFreedPages(())
    }
}

impl Default for KeepFreedPages {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for KeepFreedPages {
    fn drop(&mut self) {
        let mut g = GENERATING.lock().unwrap_or_else(|e| e.into_inner());
        g.0 = g.0.saturating_sub(1);
        if g.0 == 0 {
            set_purge_delay(g.1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_is_raised_while_any_generation_runs_and_restored_after_the_last() {
        purge_at_once();
        assert_eq!(purge_delay(), 0);
        let a = KeepFreedPages::new();
        let b = KeepFreedPages::new();
        assert_eq!(purge_delay(), KEEP_WHILE_GENERATING_MS);
        drop(a);
        assert_eq!(purge_delay(), KEEP_WHILE_GENERATING_MS, "one still runs");
        drop(b);
        assert_eq!(purge_delay(), 0);
    }
}
