//! The process group the command runs in.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

/// The command's process group: signalling it reaches the command and every
/// process the command started that stayed in the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group(pub(crate) Pid);

impl Group {
    /// Sends `sig` to every process in the group. A stopped process only
    /// acts on a signal once continued, so every signal but those that stop,
    /// continue or kill goes with a SIGCONT.
    pub(crate) fn signal(self, sig: Signal) {
        let _ = killpg(self.0, sig);
        if continues_after(sig) {
            let _ = killpg(self.0, Signal::SIGCONT);
        }
    }

    /// Whether a live process other than those in `except` is in the group.
    /// Reads /proc (Linux); where that cannot be read, assumes there is.
    pub(crate) fn has_members_besides(self, except: &[Pid]) -> bool {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return true;
        };
        entries.flatten().any(|entry| {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                return false;
            };
            if except.contains(&Pid::from_raw(pid)) {
                return false;
            }
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                return false;
            };
            // After the command name in parentheses: state, ppid, pgrp, …
            let mut fields = stat
                .rsplit_once(')')
                .map_or("", |(_, f)| f)
                .split_whitespace();
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
            // A zombie is done; only its parent's wait is missing.
            pgrp == Some(self.0.as_raw()) && state != Some("Z")
        })
    }
}

/// Whether a process stopped when it gets `sig` must be continued to act on
/// it: not for SIGKILL (acted on regardless), SIGCONT itself, or a signal
/// meant to stop it.
pub(crate) fn continues_after(sig: Signal) -> bool {
    !matches!(
        sig,
        Signal::SIGKILL
            | Signal::SIGCONT
            | Signal::SIGSTOP
            | Signal::SIGTSTP
            | Signal::SIGTTIN
            | Signal::SIGTTOU
    )
}

/// A child's pid, while it has not been reaped.
pub(crate) fn pid_of(child: &Child) -> Option<Pid> {
    child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
}
