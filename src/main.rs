use clap::Parser;

fn main() {
    let cli = chatgate::cli::Cli::parse();
    std::process::exit(chatgate::cli::run(cli));
}
