//! What `--help` and the man pages show after the options: examples and exit
//! statuses. They are kept as data so that both render the same text, and
//! attached to the derived command line here, in the one `Command` that
//! parsing, completions and man pages all start from.

use clap::{Command, CommandFactory};

use super::args::Cli;
use super::exit;

/// A titled block of lines shown as written (`--help` indents them).
pub(crate) struct Section {
    pub(crate) title: &'static str,
    pub(crate) body: &'static str,
}

const EXIT_STATUS: Section = Section {
    title: "Exit status",
    body: exit::STATUSES,
};

const TOP_EXAMPLES: Section = Section {
    title: "Examples",
    body: "\
# Run a job on one host at a time; the lock lives in ./distlock.db
distlock run --name nightly-backup -- ./backup.sh

# The same lock from every host, through a shared server
export DISTLOCK_URL=postgres://locks@db.example.com/locks
distlock run --name deploy --wait 10m -- ./deploy.sh

# Who holds it, as JSON
distlock status --name deploy --json

# One leader among hosts, the others standing by; and who leads
distlock elect --url postgres://db/app --name scheduler --again -- ./scheduler
distlock leader --url postgres://db/app --name scheduler

# Shell completions and man pages
distlock completions bash > ~/.local/share/bash-completion/completions/distlock
distlock man --out ~/.local/share/man/man1",
};

const RUN_EXAMPLES: Section = Section {
    title: "Examples",
    body: "\
# Skip this run if the lock is held, as `flock -n` does (exit 75)
distlock run --name cleanup --no-wait -- ./cleanup.sh

# Wait at most a minute, as `flock -w 60` does (exit 124 if it runs out)
distlock run --name cleanup --wait 60s -- ./cleanup.sh

# A shell command line, as `consul lock PREFIX \"CMD\"` runs one
distlock run --name dump -- sh -c 'pg_dump app | gzip > app.sql.gz'

# The lock `etcdctl lock deploy` takes, with a 10 s lease
distlock run --url etcd://10.0.0.1:2379 --name deploy --ttl 10s -- ./deploy.sh

# At most 4 encoders at once, on any host
distlock run --url postgres://db/app --name encoders --permits 4 -- ./encode.sh

# Many readers of a catalog together, or one writer alone
distlock run --url redis://cache:6379 --name catalog --read -- ./serve-catalog
distlock run --url redis://cache:6379 --name catalog --write -- ./rebuild-catalog

# Pass the fencing token on, so the storage can refuse a stale holder
distlock run --url redis://cache:6379 --name report -- \\
    sh -c 'exec ./report --fence \"$DISTLOCK_TOKEN\"'

# A password kept out of `ps`: read from a file at connect
distlock run --url 'postgres://app@db/app?password_file=/run/secrets/pg' --name job -- ./job.sh",
};

const STATUS_EXAMPLES: Section = Section {
    title: "Examples",
    body: "\
# One sentence for a person
distlock status --name deploy

# One line of JSON for a script
distlock status --name deploy --json | jq -r .owner",
};

const STATUS_EXIT_STATUS: Section = Section {
    title: "Exit status",
    body: "\
0    the lock is free
75   the lock is held
64   bad usage or invalid input (flag, lock name, URL)
69   the backend is unreachable or failed",
};

const ELECT_EXAMPLES: Section = Section {
    title: "Examples",
    body: "\
# One scheduler among all hosts; the others stand by and take over
distlock elect --url postgres://db/app --name scheduler --again -- ./scheduler

# Proclaim an address, for clients that look it up with `distlock leader`
distlock elect --url etcd://10.0.0.1:2379 --name api --value 10.0.0.7:8080 --again -- ./api

# Pass the term on, so the storage can refuse a deposed leader's writes
distlock elect --url redis://cache:6379 --name compactor -- \\
    sh -c 'exec ./compact --fence \"$DISTLOCK_TOKEN\" --as \"$DISTLOCK_LEADER\"'

# Lead once, if nobody leads now (exit 75 if somebody does)
distlock elect --name migrate --no-wait -- ./migrate.sh",
};

const ELECT_EXIT_STATUS: Section = Section {
    title: "Exit status",
    body: "\
the command's own status   when the command ran (128+N if signal N ended it);
     with --again, the last command's, once a signal passed on ended it
64   bad usage or invalid input (flag, election name, value, TTL, URL)
69   the backend is unreachable, failed, or keeps no elections
70   internal error
75   somebody leads and --no-wait was given
124  --wait ran out before this candidate led
125  the lead was lost (or renewal kept failing) while the command ran;
     the command was stopped (or never started: too little lease left)
126  the command could not be executed
127  the command was not found
128+N  signal N came while campaigning",
};

const LEADER_EXAMPLES: Section = Section {
    title: "Examples",
    body: "\
# One sentence for a person
distlock leader --name scheduler

# The leader's value for a script
distlock leader --url etcd://10.0.0.1:2379 --name api --json | jq -r .value

# Each change as it happens, one line of JSON each, until Ctrl-C
distlock leader --url etcd://10.0.0.1:2379 --name api --watch --json",
};

const LEADER_EXIT_STATUS: Section = Section {
    title: "Exit status",
    body: "\
0    nobody leads (with --watch: interrupted by SIGINT or SIGTERM)
75   somebody leads
64   bad usage or invalid input (flag, election name, URL)
69   the backend is unreachable, failed, or keeps no elections",
};

const COMPLETIONS_EXAMPLES: Section = Section {
    title: "Examples",
    body: "\
# bash (the bash-completion package loads it)
distlock completions bash > ~/.local/share/bash-completion/completions/distlock

# zsh (a directory in $fpath, before compinit runs)
distlock completions zsh > ~/.zfunc/_distlock

# fish
distlock completions fish > ~/.config/fish/completions/distlock.fish",
};

const MAN_EXAMPLES: Section = Section {
    title: "Examples",
    body: "\
# Read a page without installing it
distlock man run | man -l -

# Install every page where man finds them
distlock man --out ~/.local/share/man/man1",
};

/// The sections of the command named `name`: "distlock" or a subcommand's.
pub(crate) fn sections(name: &str) -> &'static [Section] {
    match name {
        "distlock" => &[TOP_EXAMPLES, EXIT_STATUS],
        "run" => &[RUN_EXAMPLES, EXIT_STATUS],
        "status" => &[STATUS_EXAMPLES, STATUS_EXIT_STATUS],
        "elect" => &[ELECT_EXAMPLES, ELECT_EXIT_STATUS],
        "leader" => &[LEADER_EXAMPLES, LEADER_EXIT_STATUS],
        "torture" => &[EXIT_STATUS],
        "completions" => &[COMPLETIONS_EXAMPLES],
        "man" => &[MAN_EXAMPLES],
        _ => &[],
    }
}

/// The whole command line, each command with its sections after the options.
pub(crate) fn command() -> Command {
    with_sections(Cli::command()).mut_subcommands(with_sections)
}

fn with_sections(cmd: Command) -> Command {
    let sections = sections(cmd.get_name());
    if sections.is_empty() {
        return cmd;
    }
    // Titled as clap titles its own headings (bold and underlined on a
    // terminal, plain elsewhere).
    let header = *cmd.get_styles().get_header();
    let text = sections
        .iter()
        .map(|s| {
            let body: Vec<String> = s.body.lines().map(indent).collect();
            format!("{header}{}:{header:#}\n{}", s.title, body.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    cmd.after_help(text)
}

fn indent(line: &str) -> String {
    if line.is_empty() {
        String::new()
    } else {
        format!("  {line}")
    }
}
