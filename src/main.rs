//! `metp-sim` binary: parse arguments, run, map errors to exit codes. All logic is in the library.

fn main() {
    std::process::exit(metp_sim::cli::main());
}
