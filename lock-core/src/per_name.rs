//! Something shared by everybody using one lock name in this process right
//! now (the waiters' wake-up handle, the locker's queue of turns), kept
//! only while somebody holds it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::name::LockName;

/// Weak references by name: an entry lives as long as its users do.
#[derive(Debug)]
pub(crate) struct PerName<T> {
    names: Mutex<HashMap<LockName, Weak<T>>>,
}

impl<T> Default for PerName<T> {
    fn default() -> Self {
        Self {
            names: Mutex::default(),
        }
    }
}

impl<T> PerName<T> {
    /// The entry of `name`, if somebody uses it.
    pub(crate) fn get(&self, name: &LockName) -> Option<Arc<T>> {
        self.lock().get(name).and_then(Weak::upgrade)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LockName, Weak<T>>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many names have an entry, used or not.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

impl<T: Default> PerName<T> {
    /// The entry of `name`, made if nobody uses it yet.
    pub(crate) fn get_or_make(&self, name: &LockName) -> Arc<T> {
        let mut names = self.lock();
        if let Some(existing) = names.get(name).and_then(Weak::upgrade) {
            return existing;
        }
        // Drop the entries nobody uses before adding one, so the map stays
        // as small as the set of names in use right now.
        names.retain(|_, e| e.strong_count() > 0);
        let entry = Arc::new(T::default());
        names.insert(name.clone(), Arc::downgrade(&entry));
        entry
    }
}
