//! The `flowscope` binary: see `flowscope --help`.

fn main() {
    // Through `ranks::exit`: under `mpirun` the ranks end together, or an
    // error of one ends them all.
    let code = flowscope::cli::main();
    flowscope::system::ranks::exit(code, code != flowscope::cli::exit::ERROR);
}
