//! The `flowscope` binary: see `flowscope --help`.

fn main() {
    std::process::exit(flowscope::cli::main());
}
