//! Server processes: the watchdog each runs under (stop, kill, pause,
//! restart on the same data), the binaries and data directories they
//! use, and running a command as a server's system user.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

/// Runs the server (the arguments after the data directory and the stop
/// signal) and obeys `stop`, `start`, `kill`, `pause`, `resume` and `pid`
/// lines on stdin, answering each on stdout. At end of input it stops the server and deletes the
/// directory.
const WATCHDOG: &str = r#"
dir=$1; sig=$2; shift 2
run() { "$@" >>"$dir/server.log" 2>&1 & pid=$!; }
run "$@"
while read -r cmd; do
    case $cmd in
        stop) kill -s "$sig" "$pid"; wait "$pid"; echo stopped ;;
        kill) kill -s KILL "$pid"; wait "$pid"; echo stopped ;;
        pause) kill -s STOP "$pid"; echo paused ;;
        resume) kill -s CONT "$pid"; echo resumed ;;
        start) run "$@"; echo started ;;
        pid) echo "$pid" ;;
    esac
done
kill -s "$sig" "$pid" 2>/dev/null; wait "$pid"
rm -rf "$dir"
"#;

/// A server process under its watchdog.
#[derive(Debug)]
pub struct Supervised {
    dir: PathBuf,
    control: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    _watchdog: Child,
}

impl Supervised {
    /// Starts `command` with its output in `dir/server.log`; `stop_signal`
    /// is the signal that shuts it down quickly (e.g. `INT` for PostgreSQL).
    pub fn start(dir: &Path, stop_signal: &str, command: &[&str]) -> Self {
        let mut watchdog = Command::new("sh")
            .args(["-c", WATCHDOG, "watchdog"])
            .arg(dir)
            .arg(stop_signal)
            .args(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Only job-control chatter ("Terminated"); the server's own
            // output is in server.log.
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run sh to supervise {}: {e}", command[0]));
        let stdin = watchdog.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(watchdog.stdout.take().expect("piped stdout"));
        Self {
            dir: dir.to_owned(),
            control: Mutex::new((stdin, stdout)),
            _watchdog: watchdog,
        }
    }

    fn command(&self, cmd: &str) -> String {
        let mut control = self.control.lock().expect("poisoned");
        let (stdin, stdout) = &mut *control;
        writeln!(stdin, "{cmd}").expect("the watchdog is gone");
        let mut answer = String::new();
        stdout.read_line(&mut answer).expect("the watchdog is gone");
        answer
    }

    /// The server's process id (the last one started).
    pub(crate) fn pid(&self) -> u32 {
        let pid = self.command("pid");
        pid.trim()
            .parse()
            .unwrap_or_else(|_| panic!("the watchdog gave {pid:?} for a pid"))
    }

    /// Whether the server process has exited (stopped, killed or crashed)
    /// since it was last started. The watchdog reaps it only when told to
    /// stop it, so an exit on its own leaves a zombie, read as exited.
    pub fn exited(&self) -> bool {
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid())) {
            // The state follows the command name, which is in parentheses.
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_none_or(|(_, rest)| rest.starts_with(['Z', 'X'])),
            Err(_) => true,
        }
    }

    /// Stops the server gracefully and waits for it to exit.
    pub fn stop(&self) {
        self.command("stop");
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill(&self) {
        self.command("kill");
    }

    /// Freezes the server with SIGSTOP: it keeps its connections but answers
    /// nothing, like a hung host.
    pub fn pause(&self) {
        self.command("pause");
    }

    /// Thaws a paused server with SIGCONT.
    pub fn resume(&self) {
        self.command("resume");
    }

    /// Starts the server again on the same data and port.
    pub fn restart(&self) {
        self.command("start");
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

/// Finds `name` on `PATH` or in `extra` directories (globs allowed in the
/// last component's parent, e.g. `/usr/lib/postgresql/*/bin`), or fails the
/// test with an install hint.
pub fn find_binary(name: &str, extra: &[&str], package: &str) -> PathBuf {
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut candidates: Vec<PathBuf> = path_dirs.into_iter().map(|d| d.join(name)).collect();
    for pattern in extra {
        candidates.extend(expand(pattern).into_iter().map(|d| d.join(name)));
    }
    candidates
        .into_iter()
        .find(|c| c.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found: these tests need a real {package} server. Install it with \
             `apt-get install -y {package}`, or run ./scripts/test, which installs it. \
             A DISTLOCK_TEST_*_URL variable stands in for the server the tests of a binary \
             share, not for one a test starts to stop, freeze or reconfigure \
             (README: Running the tests against your own servers)."
            )
        })
}

/// Expands one `*` in a directory pattern, newest (greatest) match first.
fn expand(pattern: &str) -> Vec<PathBuf> {
    let Some((head, tail)) = pattern.split_once('*') else {
        return vec![PathBuf::from(pattern)];
    };
    let (parent, prefix) = head.rsplit_once('/').unwrap_or((".", head));
    let mut found: Vec<PathBuf> = std::fs::read_dir(if parent.is_empty() { "/" } else { parent })
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| PathBuf::from(format!("{}{}", e.path().display(), tail)))
        .collect();
    found.sort();
    found.reverse();
    found
}

/// A fresh directory for a server's data, owned by `user` when we are root
/// (database servers refuse to run as root). The watchdog deletes it.
pub fn data_dir(user: &str) -> PathBuf {
    let dir = tempfile::Builder::new()
        .prefix("distlock-server-")
        .tempdir()
        .expect("create a temporary directory")
        .keep();
    if nix::unistd::geteuid().is_root() && user != "root" {
        let account = nix::unistd::User::from_name(user)
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                panic!("system user {user} is missing; is its server package installed?")
            });
        std::os::unix::fs::chown(&dir, Some(account.uid.as_raw()), Some(account.gid.as_raw()))
            .expect("chown the data directory");
    }
    dir
}

/// Runs `command` (as `user`, if given, when we are root), failing the test
/// with its output if it fails.
pub fn run_as(user: Option<&str>, command: &[&str]) {
    let mut cmd = match user {
        Some(user) => as_user(user, command),
        None => {
            let mut cmd = Command::new(command[0]);
            cmd.args(&command[1..]);
            cmd
        }
    };
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", command[0]));
    assert!(
        out.status.success(),
        "{} failed: {}\n{}",
        command.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The command line that runs `command` as `user` when we are root.
pub fn as_user_args<'a>(user: &'a str, command: &[&'a str]) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    if nix::unistd::geteuid().is_root() {
        args.extend(
            [
                "setpriv",
                "--reuid",
                user,
                "--regid",
                user,
                "--init-groups",
                "--",
            ]
            .map(String::from),
        );
    }
    args.extend(command.iter().map(|s| (*s).to_owned()));
    args
}

fn as_user(user: &str, command: &[&str]) -> Command {
    let args = as_user_args(user, command);
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..]);
    cmd
}
