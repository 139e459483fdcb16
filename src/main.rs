use clap::Parser;

/// The SFT pass allocates and frees small vectors and strings for every row on every core
/// (tokenizer encodings, rendered prompts): glibc's malloc spent a third of its time there.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    chatgate::template::quiet_caught_panics();
    let cli = chatgate::cli::Cli::parse();
    std::process::exit(chatgate::cli::run(cli));
}
