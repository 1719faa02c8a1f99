//! The `flowscope` binary: see `flowscope --help`.

fn main() {
    // Through `ranks::exit`: under `mpirun` the ranks end together.
    flowscope::system::ranks::exit(flowscope::cli::main());
}
