//! `distlock man`: roff man pages made from the command line, with the
//! examples and exit statuses of `--help` as sections of their own.

use std::io::{self, Write};
use std::path::Path;

use clap::Command;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, roman};

use super::args::ManArgs;
use super::{exit, help};

pub(crate) fn main(args: &ManArgs) -> u8 {
    // No `help` subcommand: it would get a line in distlock(1) but no page.
    let mut cmd = help::command().disable_help_subcommand(true);
    // Building names the subcommands as their pages do: distlock-run.
    cmd.build();
    if let Some(dir) = &args.out {
        return match write_all(&cmd, dir) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("distlock: cannot write man pages to {}: {e}", dir.display());
                exit::USAGE
            }
        };
    }
    let page_of = match &args.command {
        None => &cmd,
        Some(name) => match pages(&cmd).find(|c| c.get_name() == name) {
            Some(sub) => sub,
            None => {
                let names: Vec<_> = pages(&cmd).skip(1).map(Command::get_name).collect();
                eprintln!(
                    "distlock: no man page for \"{name}\"; the commands are {}",
                    names.join(", ")
                );
                return exit::USAGE;
            }
        },
    };
    let mut out = Vec::new();
    let written = render(page_of, &mut out).and_then(|()| io::stdout().write_all(&out));
    match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("distlock: cannot write the man page: {e}");
            exit::INTERNAL
        }
    }
}

/// distlock itself, then each command a user runs.
fn pages(cmd: &Command) -> impl Iterator<Item = &Command> {
    std::iter::once(cmd).chain(cmd.get_subcommands().filter(|c| !c.is_hide_set()))
}

fn write_all(cmd: &Command, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for page in pages(cmd) {
        let mut out = Vec::new();
        render(page, &mut out)?;
        std::fs::write(dir.join(man(page).get_filename()), out)?;
    }
    Ok(())
}

fn man(cmd: &Command) -> Man {
    Man::new(cmd.clone())
        .source(format!("distlock {}", env!("CARGO_PKG_VERSION")))
        .manual("distlock manual")
}

/// clap_mangen's page, except that the sections after the options are
/// help.rs's, kept as the lines they are written in (its own would run an
/// example's lines together into one paragraph).
fn render(cmd: &Command, w: &mut dyn Write) -> io::Result<()> {
    let man = man(cmd);
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|c| !c.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    let mut roff = Roff::default();
    for section in help::sections(cmd.get_name()) {
        roff.control("SH", [section.title.to_uppercase().as_str()]);
        roff.control("nf", []);
        for line in section.body.lines() {
            roff.text([roman(line)]);
        }
        roff.control("fi", []);
    }
    roff.to_writer(w)?;
    if cmd.get_version().is_some() {
        man.render_version_section(w)?;
    }
    Ok(())
}
