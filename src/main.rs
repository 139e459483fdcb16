/// The SFT pass allocates and frees small vectors and strings for every row on every core
/// (tokenizer encodings, rendered prompts): glibc's malloc spent a third of its time there.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Freed memory goes back to the OS at once, except while the in-process model generates,
    // and comes back in small pages (chatgate::allocator says why).
    chatgate::allocator::purge_at_once();
    chatgate::allocator::no_transparent_huge_pages();
    pin_candle_threads();
    chatgate::template::quiet_caught_panics();
    let cli = chatgate::cli::docs::parse();
    std::process::exit(chatgate::cli::run(cli));
}

/// candle sizes its F32 matrix products from `RAYON_NUM_THREADS`, else from the physical core
/// count, which candle 0.11 reads from /proc/cpuinfo on *every* matrix product (a few percent of
/// a decode step on 2 cores; the file grows with the core count). Reading it once here and
/// setting the variable gives candle the same number without the reads. A user's own setting
/// wins. Runs before any thread starts, so no other thread reads the environment meanwhile.
///
/// rayon's global pool (the SFT pass) would read the variable too; it is built first with
/// rayon's own default, one thread per logical CPU, so setting it changes nothing there.
fn pin_candle_threads() {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    let candle = candle_core::utils::get_num_threads();
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::env::set_var("RAYON_NUM_THREADS", candle.to_string());
    // Err only when a pool was built already: then there is nothing to keep.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(logical)
        .build_global();
}
