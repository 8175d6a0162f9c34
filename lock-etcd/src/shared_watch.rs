//! One watch per lock and backend, shared by the backend's waiters on that
//! lock (a mutex's or a read-write lock's; an election's candidates).
//!
//! etcd spends about as much on making a watch as on a read or a write, and
//! a watch made for one wait was followed by a read whenever the store had
//! moved since the read that named the key ahead (docs/BENCHMARKS.md,
//! "etcd: where the read-write lock's server time goes"). A watch of the
//! lock's whole range, deletions only, kept while the backend's waiters
//! use it, costs one watch for many waits, and a waiter whose read came
//! after the watch began needs no read to cover the gap: every deletion
//! after the watch's start is either among those it has kept or still to
//! come. A waiter whose read came before it reads once more, as before.
//!
//! Nothing here grants anything: a waiter woken by a deletion reads the
//! queue (or takes a hand-over a release vouched for), as it would after
//! its own watch's event; a watch that ends or fails wakes every waiter on
//! it with the error, and they read again. A shared watch nobody has used
//! for [`LINGER`] is dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions, WatchStream};
use lock_core::{Error, Result};
use tokio::sync::{OnceCell, oneshot};
use tokio::time::Instant;

use crate::client::{Core, next_message};

/// How long a shared watch stays open with nobody waiting on it: long
/// enough to carry a lock's waiters from one turn to the next.
const LINGER: Duration = Duration::from_secs(2);

/// How long after it opened a shared watch takes new waiters: a watch that
/// stalls unseen (a member cut off from the others, a connection that
/// hangs) then holds up only the waits it already has, as a stalled watch
/// of a wait's own held that wait, and the next waits open a new one.
const TAKES_WAITERS_FOR: Duration = Duration::from_secs(5);

/// The deletions a shared watch keeps, newest last, for waiters whose read
/// came before the deletion reached them.
const KEPT: usize = 1024;

/// The backend's shared watches, by the lock range each watches.
#[derive(Default)]
pub(crate) struct SharedWatches {
    watches: Mutex<HashMap<String, Arc<Shared>>>,
}

/// One shared watch: the deletions it has seen and the waiters it wakes.
#[derive(Default)]
struct Shared {
    /// Set once the watch is open and read.
    started: OnceCell<()>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Every deletion at a revision after this one is in `seen` or still to
    /// come.
    complete_after: i64,
    seen: VecDeque<(Vec<u8>, i64)>,
    waiting: Vec<Waiting>,
    next_id: u64,
    /// Why the watch ended, once it has.
    ended: Option<String>,
    last_used: Option<Instant>,
    opened: Option<Instant>,
}

struct Waiting {
    id: u64,
    key: Vec<u8>,
    woken: oneshot::Sender<Result<()>>,
}

/// A waiter's wait for one key's deletion on a shared watch; withdrawn
/// when dropped.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    id: u64,
    woken: oneshot::Receiver<Result<()>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether new waiters may wait on it: not ended, and not opened
    /// longer ago than [`TAKES_WAITERS_FOR`] (one still opening does).
    fn takes_waiters(&self) -> bool {
        let state = self.state();
        state.ended.is_none() && state.opened.is_none_or(|t| t.elapsed() < TAKES_WAITERS_FOR)
    }
}

impl SharedWatches {
    fn watches(&self) -> MutexGuard<'_, HashMap<String, Arc<Shared>>> {
        self.watches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A wait for the deletion of `key`, in the lock range `range`, at a
    /// revision after `known_at` (the read that found it): with whether
    /// the shared watch vouches for every deletion since that read (else
    /// the waiter reads once more, as after a watch of its own that began
    /// after its read).
    pub(crate) async fn subscribe(
        self: &Arc<Self>,
        core: &Core,
        range: &str,
        key: &[u8],
        known_at: i64,
    ) -> Result<(Subscription, bool)> {
        let shared = {
            let mut watches = self.watches();
            match watches.get(range).filter(|shared| shared.takes_waiters()) {
                Some(shared) => shared.clone(),
                None => {
                    let shared = Arc::new(Shared::default());
                    watches.insert(range.to_owned(), shared.clone());
                    shared
                }
            }
        };
        // Opened once, by the first waiter to come; the others wait for it.
        shared
            .started
            .get_or_try_init(|| self.open(core, range, &shared))
            .await?;
        let mut state = shared.state();
        state.last_used = Some(Instant::now());
        let (woken_tx, woken) = oneshot::channel();
        let in_step = known_at >= state.complete_after;
        // Answered at once (its id matches no registration), or registered.
        let id = if let Some(why) = &state.ended {
            let _ = woken_tx.send(Err(ended(why)));
            u64::MAX
        } else if in_step
            && state
                .seen
                .iter()
                .any(|(k, revision)| k == key && *revision > known_at)
        {
            let _ = woken_tx.send(Ok(()));
            u64::MAX
        } else {
            let id = state.next_id;
            state.next_id += 1;
            state.waiting.push(Waiting {
                id,
                key: key.to_vec(),
                woken: woken_tx,
            });
            id
        };
        drop(state);
        Ok((Subscription { shared, id, woken }, in_step))
    }

    /// Opens `shared`, the watch of `range`, from the present, and starts
    /// the task that reads it. It replaced the one before in the map,
    /// which ends once its waiters are done with it. Dropped before the
    /// watch is open, it takes `shared` out of the map; a waiter already
    /// queued on it then takes the open over and, once open, puts it back.
    /// (A waiter that came in between opens a second watch of the range,
    /// which only costs a watch until the first goes idle.)
    ///
    /// A failed open ends `shared` for every waiter queued on it, which
    /// fail at once with the same error (and read again, then open a new
    /// one), rather than each trying again in turn, a timeout apiece.
    async fn open(self: &Arc<Self>, core: &Core, range: &str, shared: &Arc<Shared>) -> Result<()> {
        if let Some(why) = &shared.state().ended {
            return Err(ended(why));
        }
        let options = WatchOptions::new()
            .with_prefix()
            .with_filters([WatchFilterType::NoPut]);
        // Dropped with the waiter's future before the watch is open, the
        // entry goes too: a lock nobody waits on again would keep it.
        let unopened = Unopened {
            watches: self,
            range,
            shared,
        };
        let opened = core
            .watch_from_now("watch the lock", range.as_bytes().to_vec(), Some(options))
            .await;
        let (stream, created_at) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                shared.state().ended = Some(reason(&e));
                return Err(e);
            }
        };
        std::mem::forget(unopened);
        // Where the waiter that began the open was dropped, its entry went
        // with it, and this waiter took the open over: the watch is the
        // range's again, unless a newer one has it.
        self.watches()
            .entry(range.to_owned())
            .or_insert_with(|| shared.clone());
        {
            let mut state = shared.state();
            state.complete_after = created_at;
            state.last_used = Some(Instant::now());
            state.opened = Some(Instant::now());
        }
        tokio::spawn(read(
            Arc::downgrade(self),
            range.to_owned(),
            shared.clone(),
            stream,
        ));
        Ok(())
    }

    /// Forgets `shared` as the watch of `range`, unless another replaced it.
    fn remove(&self, range: &str, shared: &Arc<Shared>) {
        let mut watches = self.watches();
        if watches.get(range).is_some_and(|s| Arc::ptr_eq(s, shared)) {
            watches.remove(range);
        }
    }
}

/// A shared watch being opened: removed from the map when dropped, unless
/// the open succeeded and the guard was disarmed (`mem::forget`, which
/// leaks nothing while it holds only references).
struct Unopened<'a> {
    watches: &'a SharedWatches,
    range: &'a str,
    shared: &'a Arc<Shared>,
}

impl Drop for Unopened<'_> {
    fn drop(&mut self) {
        self.watches.remove(self.range, self.shared);
    }
}

/// Reads the shared watch of `range` until it ends, fails, or has been
/// idle for [`LINGER`] (or the backend is gone): wakes the waiters of each
/// deleted key, keeps the latest deletions, and at the end wakes every
/// waiter left with the reason.
async fn read(
    watches: Weak<SharedWatches>,
    range: String,
    shared: Arc<Shared>,
    mut stream: WatchStream,
) {
    let mut idle_check = tokio::time::interval(LINGER);
    idle_check.tick().await;
    let why = loop {
        let message = tokio::select! {
            message = next_message(&mut stream, "watch") => message,
            _ = idle_check.tick() => {
                let idle = {
                    let state = shared.state();
                    state.waiting.is_empty()
                        && state.last_used.is_none_or(|t| t.elapsed() >= LINGER)
                };
                if idle || watches.strong_count() == 0 {
                    break "the shared watch was idle".to_owned();
                }
                continue;
            }
        };
        let message = match message {
            Ok(message) => message,
            Err(e) => break reason(&e),
        };
        let mut state = shared.state();
        for event in message.events() {
            if event.event_type() != EventType::Delete {
                continue;
            }
            let Some(kv) = event.kv() else { continue };
            let (key, revision) = (kv.key().to_vec(), kv.mod_revision());
            for w in state.waiting.extract_if(.., |w| w.key == key) {
                let _ = w.woken.send(Ok(()));
            }
            state.seen.push_back((key, revision));
            if state.seen.len() > KEPT
                && let Some((_, dropped)) = state.seen.pop_front()
            {
                state.complete_after = dropped;
            }
        }
    };
    // Forgotten first, so that no waiter subscribes to a watch that ended.
    if let Some(watches) = watches.upgrade() {
        watches.remove(&range, &shared);
    }
    let mut state = shared.state();
    for w in std::mem::take(&mut state.waiting) {
        let _ = w.woken.send(Err(ended(&why)));
    }
    state.ended = Some(why);
}

fn ended(why: &str) -> Error {
    Error::unavailable(crate::NAME, why.to_owned())
}

/// What [`ended`] says of a watch that ended with `e`: an `Unavailable`
/// error's own message, which [`ended`] wraps again; any other error whole.
fn reason(e: &Error) -> String {
    match e {
        Error::Unavailable { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

impl Subscription {
    /// Completes when the key is deleted (after the read that found it), or
    /// with an error when the shared watch ends first.
    pub(crate) async fn deleted(&mut self) -> Result<()> {
        match (&mut self.woken).await {
            Ok(outcome) => outcome,
            Err(_) => Err(ended("the shared watch ended")),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state.last_used = Some(Instant::now());
        state.waiting.retain(|w| w.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    /// A waiter whose future is dropped while it opens the shared watch
    /// leaves nothing behind: the map would otherwise keep the unopened
    /// watch until another waiter came for the same lock, which for a lock
    /// never waited on again is never.
    #[tokio::test]
    async fn a_cancelled_open_leaves_no_entry() {
        // A server that takes the connection and never answers: the open
        // stays pending until the waiter's future is dropped.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let endpoint = format!("http://{}", silent.local_addr().expect("its address"));
        let client = etcd_client::Client::connect([endpoint], None)
            .await
            .expect("a lazily connected client");
        let settings = Settings {
            prefix: "test/".to_owned(),
            timeout: Duration::from_secs(30),
        };
        let core = Core::new(client, settings);
        let watches = Arc::new(SharedWatches::default());
        let subscribe = watches.subscribe(&core, "test/lock/", b"test/lock/1", 1);
        let pending = tokio::time::timeout(Duration::from_millis(200), subscribe).await;
        assert!(pending.is_err(), "the silent server answered");
        assert!(
            watches.watches().is_empty(),
            "the cancelled open left its entry"
        );
    }

    #[test]
    fn an_ended_watch_is_unavailable_once_in_its_message() {
        let failed = Error::unavailable(crate::NAME, "the watch stream ended");
        let said = ended(&reason(&failed)).to_string();
        assert_eq!(said, failed.to_string());
        let other = Error::backend("the watch was refused");
        let said = ended(&reason(&other)).to_string();
        assert!(said.ends_with(&other.to_string()), "{said}");
    }
}
