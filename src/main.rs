use clap::Parser;

fn main() {
    chatgate::template::quiet_caught_panics();
    let cli = chatgate::cli::Cli::parse();
    std::process::exit(chatgate::cli::run(cli));
}
