//! Apache Curator's `LeaderLatch`, run with `java` from Debian's
//! `libcurator-recipes-java`, for the election interoperability test: a
//! small program (`tests/java/LatchProbe.java`) compiled with `javac` into
//! a temporary directory, then one JVM per latch, driven line by line over
//! its standard input and output. Each JVM is killed when its [`Latch`] is
//! dropped, and closes its latch by itself when its input ends.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::{Instant, timeout_at};

/// Where Debian puts the jars.
const JARS: &str = "/usr/share/java";
/// The jars the program needs (their packages pull in the rest through
/// the jars' manifests).
const NEEDED: &[&str] = &[
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
];
/// Silences slf4j's complaint about a missing logger, where installed.
const QUIET: &str = "slf4j-nop.jar";
/// What to install when something is missing.
const INSTALL: &str = "the Curator interoperability test needs Apache Curator's jars and a JDK: \
    install them with `apt-get install -y libcurator-recipes-java default-jdk-headless`, \
    or run ./scripts/test, which does";

/// The program, compiled.
#[derive(Debug)]
pub struct Curator {
    classes: TempDir,
    classpath: String,
}

impl Curator {
    /// Compiles `LatchProbe.java` against the installed jars; fails the
    /// test, naming the Debian packages to install, if any is missing.
    pub fn compile() -> Self {
        let missing: Vec<&str> = NEEDED
            .iter()
            .copied()
            .filter(|jar| !Path::new(JARS).join(jar).is_file())
            .collect();
        assert!(missing.is_empty(), "{missing:?} not in {JARS}: {INSTALL}");
        let mut jars: Vec<PathBuf> = NEEDED.iter().map(|j| Path::new(JARS).join(j)).collect();
        let quiet = Path::new(JARS).join(QUIET);
        if quiet.is_file() {
            jars.push(quiet);
        }
        let jars: Vec<String> = jars.iter().map(|j| j.display().to_string()).collect();
        let classes = tempfile::Builder::new()
            .prefix("distlock-curator-")
            .tempdir()
            .expect("a temporary directory");
        let classpath = jars.join(":");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/LatchProbe.java");
        let compiled = std::process::Command::new(tool("javac"))
            .arg("-d")
            .arg(classes.path())
            .args(["-cp", &classpath])
            .arg(&source)
            .output()
            .unwrap_or_else(|e| panic!("cannot run javac: {e}; {INSTALL}"));
        assert!(
            compiled.status.success(),
            "javac {} failed: {}",
            source.display(),
            String::from_utf8_lossy(&compiled.stderr)
        );
        let classpath = format!("{}:{classpath}", classes.path().display());
        Self { classes, classpath }
    }

    /// Starts a latch on `connect` (hosts, and the chroot distlock's URL
    /// has) at `path` as participant `id`, and waits until it has started.
    pub async fn latch(&self, connect: &str, path: &str, id: &str) -> Latch {
        let log = self.classes.path().join(format!("latch-{id}.log"));
        let stderr = std::fs::File::create(&log).expect("create the latch's log");
        let mut child = Command::new(tool("java"))
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .args(["-cp", &self.classpath, "LatchProbe", connect, path, id])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run java: {e}; {INSTALL}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut latch = Latch {
            id: id.to_owned(),
            child,
            stdin,
            lines,
            backlog: VecDeque::new(),
            transcript: Vec::new(),
            log,
        };
        latch.expect("started", Duration::from_secs(60)).await;
        latch
    }
}

/// `name` on `PATH`, or the test fails naming the package to install.
fn tool(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{name} not found on PATH: {INSTALL}"))
}

/// One Curator `LeaderLatch` in its own JVM.
#[derive(Debug)]
pub struct Latch {
    id: String,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// Lines read but not yet expected.
    backlog: VecDeque<String>,
    /// Every line, for failure messages.
    transcript: Vec<String>,
    log: PathBuf,
}

impl Latch {
    /// Waits up to `within` for the line `wanted` (`leader`, `not-leader`,
    /// `closed`), taken from those not yet expected.
    pub async fn expect(&mut self, wanted: &str, within: Duration) {
        if let Some(at) = self.backlog.iter().position(|l| l == wanted) {
            self.backlog.remove(at);
            return;
        }
        let deadline = Instant::now() + within;
        loop {
            let line = self.next_line(deadline, wanted).await;
            if line == wanted {
                return;
            }
            self.backlog.push_back(line);
        }
    }

    /// Whether the latch printed `line` and it was not expected yet.
    pub fn printed(&self, line: &str) -> bool {
        self.backlog.iter().any(|l| l == line)
    }

    /// `getLeader().getId()` and `hasLeadership()`, as the latch sees them now.
    pub async fn ask(&mut self) -> (String, bool) {
        self.send("ask").await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut leader = None;
        loop {
            let line = self.next_line(deadline, "an answer to ask").await;
            if let Some(id) = line.strip_prefix("leader-id ") {
                leader = Some(id.to_owned());
            } else if let Some(has) = line.strip_prefix("has-leadership ") {
                let leader = leader.expect("leader-id comes first");
                return (leader, has == "true");
            } else {
                self.backlog.push_back(line);
            }
        }
    }

    /// Asks until `getLeader().getId()` is `id`, within `within`; returns
    /// `hasLeadership()` then.
    pub async fn leader_becomes(&mut self, id: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let (leader, has) = self.ask().await;
            if leader == id {
                return has;
            }
            assert!(
                Instant::now() < deadline,
                "Curator's latch {} still sees {leader:?} as leader, not {id:?}{}",
                self.id,
                self.story()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Closes the latch (its node goes) and waits until it has.
    pub async fn close(&mut self) {
        self.send("close").await;
        self.expect("closed", Duration::from_secs(30)).await;
    }

    async fn send(&mut self, command: &str) {
        let sent = self
            .stdin
            .write_all(format!("{command}\n").as_bytes())
            .await;
        if let Err(e) = sent.and(self.stdin.flush().await) {
            panic!(
                "cannot tell latch {} to {command}: {e}{}",
                self.id,
                self.story()
            );
        }
    }

    async fn next_line(&mut self, deadline: Instant, wanted: &str) -> String {
        match timeout_at(deadline, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => {
                self.transcript.push(line.clone());
                line
            }
            Ok(Ok(None)) | Ok(Err(_)) => {
                let status = self.child.try_wait();
                panic!(
                    "Curator's latch {} ended ({status:?}) before {wanted:?}{}",
                    self.id,
                    self.story()
                )
            }
            Err(_) => panic!(
                "Curator's latch {} did not print {wanted:?} in time{}",
                self.id,
                self.story()
            ),
        }
    }

    /// What the latch printed, and its log.
    fn story(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "\nprinted: {:?}\nstderr (last lines):\n{}",
            self.transcript,
            tail.join("\n")
        )
    }
}
