//! The terminal, when `distlock run` is started from an interactive shell.
//!
//! The command runs in a process group of its own (so that one signal stops
//! it and everything it started). A process outside the terminal's
//! foreground group is stopped by the kernel when it reads the terminal, and
//! does not get Ctrl-C or Ctrl-Z. So when distlock itself is in the
//! foreground, it hands the terminal to the command's group, as a shell
//! does for a job, and takes it back when the command ends or is suspended.

use std::os::fd::AsFd;

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

use super::group::Group;

/// The terminal on standard input, handed to the command's group.
pub(crate) struct Terminal {
    ours: Pid,
    command: Group,
}

impl Terminal {
    /// Hands the terminal to `command` if standard input is a terminal whose
    /// foreground group is distlock's own; `None` otherwise (a pipe, a
    /// background job, no terminal at all).
    pub(crate) fn hand_to(command: Group) -> Option<Self> {
        let stdin = std::io::stdin();
        let ours = getpgrp();
        if tcgetpgrp(stdin.as_fd()).ok()? != ours {
            return None;
        }
        let terminal = Self { ours, command };
        terminal.set_foreground(command.0).then_some(terminal)
    }

    /// The command stopped (Ctrl-Z, or it read the terminal at the wrong
    /// moment): do what a shell's job would, and stop distlock's own group
    /// with the terminal given back; once continued (`fg`), hand the
    /// terminal to the command again and continue it.
    ///
    /// While distlock is stopped nothing renews the lock: the watchdog stops
    /// the command when the lease runs out, as for any stall.
    pub(crate) fn suspend_with_command(&self) {
        self.set_foreground(self.ours);
        let _ = killpg(self.ours, Signal::SIGTSTP);
        // Here once continued (or at once, if the group is orphaned and the
        // kernel discarded the stop).
        self.set_foreground(self.command.0);
        let _ = killpg(self.command.0, Signal::SIGCONT);
    }

    /// Makes `group` the terminal's foreground group. distlock may be in a
    /// background group by then, which would stop it with SIGTTOU unless
    /// that signal is blocked.
    fn set_foreground(&self, group: Pid) -> bool {
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let blocked = ttou.thread_block().is_ok();
        let set = tcsetpgrp(std::io::stdin().as_fd(), group).is_ok();
        if blocked {
            let _ = ttou.thread_unblock();
        }
        set
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.set_foreground(self.ours);
    }
}
