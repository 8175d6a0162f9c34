//! The signals `distlock run` and `distlock elect` pass on to the
//! command's group.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// The signals passed on to the command.
///
/// The command runs in a process group of its own, so a signal sent to
/// distlock alone (by a supervisor, `kill`, a hang-up) reaches it only if
/// passed on. A signal distlock inherited as ignored (`nohup`, a script's
/// `&`) is left alone, so the command inherits it ignored too.
pub(crate) struct Forwarded {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
    /// The first signal passed on that asks distlock to end.
    ending: Option<Signal>,
}

impl Forwarded {
    pub(crate) fn install() -> Self {
        let ignored = ignored_at_start();
        let wanted = [
            (Signal::SIGTERM, SignalKind::terminate()),
            (Signal::SIGHUP, SignalKind::hangup()),
            (Signal::SIGQUIT, SignalKind::quit()),
            (Signal::SIGINT, SignalKind::interrupt()),
            // Ctrl-Z: handled as a job stop, not passed on as is.
            (
                Signal::SIGTSTP,
                SignalKind::from_raw(Signal::SIGTSTP as i32),
            ),
        ];
        let streams = wanted
            .into_iter()
            .filter(|(sig, _)| !ignored.contains(sig))
            .filter_map(|(sig, kind)| signal(kind).ok().map(|s| (sig, s)))
            .collect();
        Self {
            streams,
            ending: None,
        }
    }

    /// The next signal to pass on.
    pub(crate) async fn next(&mut self) -> Signal {
        if self.streams.is_empty() {
            return std::future::pending().await;
        }
        let sig = std::future::poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*sig);
                }
            }
            std::task::Poll::Pending
        })
        .await;
        if sig != Signal::SIGTSTP {
            self.ending.get_or_insert(sig);
        }
        sig
    }

    /// The first signal passed on (by [`next`](Self::next)) that ends a
    /// process by default, if any: `elect --again` campaigns no more after
    /// one, whatever the command made of it.
    pub(crate) fn ending(&self) -> Option<Signal> {
        self.ending
    }
}

/// The signals this process was started with set to be ignored, read from
/// /proc/self/status (Linux); none where that cannot be read.
fn ignored_at_start() -> Vec<Signal> {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return Vec::new();
    };
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    Signal::iterator()
        .filter(|&sig| {
            let bit = sig as i32 - 1;
            (0..64).contains(&bit) && mask & (1 << bit) != 0
        })
        .collect()
}
