/// The SFT pass allocates and frees small vectors and strings for every row on every core
/// (tokenizer encodings, rendered prompts): glibc's malloc spent a third of its time there.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h's `mi_option_e` (v2 and v3 alike; the Rust bindings
/// do not name it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() {
    // Return freed memory to the OS at once instead of after mimalloc's default 10 ms: a burst
    // of large replies freed together (a hostile server's endless streams, 40 in flight) must
    // not hold the process's peak RSS above what is live.
    // SAFETY: sets one of mimalloc's documented options to a documented value; no pointer is
    // involved and the allocator reads options on every purge.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    chatgate::template::quiet_caught_panics();
    let cli = chatgate::cli::docs::parse();
    std::process::exit(chatgate::cli::run(cli));
}
