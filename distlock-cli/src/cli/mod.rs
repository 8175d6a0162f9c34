//! The `distlock` command-line tool.

mod args;
mod bench;
mod completions;
mod elect;
mod exit;
mod group;
mod help;
mod job;
mod leader;
mod man;
mod run;
mod shared_args;
mod show;
mod signals;
mod status;
mod supervise;
mod torture;
mod watchdog;

use std::process::ExitCode;

use clap::FromArgMatches;
use clap::error::ErrorKind;

use args::{Cli, Command};

pub(crate) fn main() -> ExitCode {
    let mut cmd = help::command();
    let parsed = cmd
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|mut matches| Cli::from_arg_matches_mut(&mut matches));
    let cli = match parsed.map_err(|e| e.format(&mut cmd)) {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(exit::USAGE);
        }
    };
    let command = match cli.command {
        // Before any runtime or thread exists: it blocks signals for good.
        Command::Watchdog(args) => return ExitCode::from(watchdog::main(&args)),
        Command::Completions(args) => return ExitCode::from(completions::print(&args)),
        Command::Man(args) => return ExitCode::from(man::main(&args)),
        other => other,
    };
    init_logging(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("distlock: cannot start the async runtime: {e}");
            return ExitCode::from(exit::INTERNAL);
        }
    };
    let status = runtime.block_on(async {
        match command {
            Command::Run(args) => run::run(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Elect(args) => elect::elect(args).await,
            Command::Leader(args) => leader::leader(args).await,
            Command::Bench(args) => bench::bench(args).await,
            Command::Torture(args) => torture::torture(args).await,
            Command::TortureWorker(args) => torture::worker(args).await,
            Command::Watchdog(_) | Command::Completions(_) | Command::Man(_) => Ok(exit::INTERNAL),
        }
    });
    // A command's status can be any byte; ours are the constants in `exit`.
    ExitCode::from(status.unwrap_or_else(|e| {
        eprintln!("distlock: {e}");
        exit::for_error(&e)
    }))
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::fmt::format::FmtSpan;

    let level = match verbose {
        0 => "off",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        let quiet_deps = if verbose >= 3 { "" } else { ",sqlx=warn" };
        EnvFilter::new(format!("{level}{quiet_deps}"))
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_span_events(FmtSpan::CLOSE)
        .with_target(verbose >= 2)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
