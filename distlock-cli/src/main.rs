//! The `distlock` command-line tool: run a command while holding a lock.

#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
