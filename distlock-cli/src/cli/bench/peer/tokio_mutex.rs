//! `tokio::sync::Mutex` per name: the in-process lock an application would
//! reach for instead of `memory://`. It queues waiters in FIFO order and
//! wakes exactly one per release, with no TTL, token or renewal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use distlock::Result;
use distlock::backend::async_trait;
use tokio::sync::OwnedMutexGuard;

use crate::cli::bench::contender::{Contender, Held, Role, Subject};

#[derive(Default)]
pub(super) struct TokioMutex {
    names: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl TokioMutex {
    fn mutex(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        names.entry(name.to_owned()).or_default().clone()
    }
}

#[async_trait]
impl Contender for TokioMutex {
    fn subject(&self) -> Subject {
        Subject {
            role: Role::Peer,
            name: "tokio-mutex".to_owned(),
            detail: "tokio::sync::Mutex per name (FIFO, one wake-up per release, no TTL)"
                .to_owned(),
        }
    }

    async fn acquire(&self, name: &str, until: Instant) -> Result<Option<Box<dyn Held>>> {
        let mutex = self.mutex(name);
        let until = tokio::time::Instant::from_std(until);
        Ok(tokio::time::timeout_at(until, mutex.lock_owned())
            .await
            .ok()
            .map(|guard| Box::new(guard) as Box<dyn Held>))
    }
}

#[async_trait]
impl Held for OwnedMutexGuard<()> {
    async fn release(self: Box<Self>) -> Result<()> {
        drop(self);
        Ok(())
    }
}
