//! `distlock completions SHELL`: a completion script made from the command
//! line.

use std::io::Write;

use clap::Command;

use super::args::CompletionsArgs;
use super::{exit, help};

pub(crate) fn print(args: &CompletionsArgs) -> u8 {
    let mut cmd = without_hidden(help::command());
    // Rendered whole first: clap_complete panics on a failed write, and a
    // closed stdout deserves a message instead.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "distlock", &mut script);
    match std::io::stdout().write_all(&script) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("distlock: cannot write the completion script: {e}");
            exit::INTERNAL
        }
    }
}

/// `cmd` without its hidden subcommands, which clap_complete would offer
/// (`__watchdog` is distlock talking to itself, not a user's command). clap
/// cannot remove a subcommand, so the top level is made anew from what
/// completion reads: its name, version, arguments and visible subcommands.
fn without_hidden(cmd: Command) -> Command {
    Command::new("distlock")
        .version(env!("CARGO_PKG_VERSION"))
        .args(cmd.get_arguments().cloned())
        .subcommands(cmd.get_subcommands().filter(|c| !c.is_hide_set()).cloned())
}
