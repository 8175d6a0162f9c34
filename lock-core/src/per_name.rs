//! Something shared by everybody using one lock name in this process right
//! now (the waiters' wake-up handle, the locker's queue of turns), kept
//! only while somebody holds it: the last user's drop removes the name's
//! entry, so the map holds exactly the names in use and no new name pays
//! for a scan of old ones.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::name::LockName;

type Names<T> = Mutex<HashMap<LockName, Weak<Entry<T>>>>;

/// Weak references by name: an entry lives as long as its users do.
#[derive(Debug)]
pub(crate) struct PerName<T> {
    names: Arc<Names<T>>,
}

/// One name's shared value; dropped by its last user, it takes its name
/// out of the map.
#[derive(Debug)]
pub(crate) struct Entry<T> {
    value: T,
    name: LockName,
    names: Weak<Names<T>>,
}

impl<T> Deref for Entry<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Drop for Entry<T> {
    fn drop(&mut self) {
        let Some(names) = self.names.upgrade() else {
            return;
        };
        let mut names = lock(&names);
        // A new user may have made a new entry for the name between the
        // last strong reference going and this drop: that one stays.
        if names.get(&self.name).is_some_and(|e| e.strong_count() == 0) {
            names.remove(&self.name);
        }
    }
}

fn lock<T>(names: &Names<T>) -> MutexGuard<'_, HashMap<LockName, Weak<Entry<T>>>> {
    names.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T> Default for PerName<T> {
    fn default() -> Self {
        Self {
            names: Arc::default(),
        }
    }
}

impl<T> PerName<T> {
    /// The entry of `name`, if somebody uses it.
    pub(crate) fn get(&self, name: &LockName) -> Option<Arc<Entry<T>>> {
        lock(&self.names).get(name).and_then(Weak::upgrade)
    }

    /// How many names have an entry.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.names).len()
    }
}

impl<T: Default> PerName<T> {
    /// The entry of `name`, made if nobody uses it yet.
    pub(crate) fn get_or_make(&self, name: &LockName) -> Arc<Entry<T>> {
        let mut names = lock(&self.names);
        if let Some(existing) = names.get(name).and_then(Weak::upgrade) {
            return existing;
        }
        let entry = Arc::new(Entry {
            value: T::default(),
            name: name.clone(),
            names: Arc::downgrade(&self.names),
        });
        names.insert(name.clone(), Arc::downgrade(&entry));
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_user_takes_its_name_out() {
        let names = PerName::<u32>::default();
        let a = LockName::new("a").unwrap();
        let first = names.get_or_make(&a);
        let second = names.get_or_make(&a);
        assert!(Arc::ptr_eq(&first, &second));
        let others: Vec<_> = (0..100)
            .map(|i| names.get_or_make(&LockName::new(format!("n{i}")).unwrap()))
            .collect();
        assert_eq!(names.len(), 101);
        drop(others);
        assert_eq!(names.len(), 1, "each name went with its last user");
        drop(first);
        assert!(names.get(&a).is_some(), "one user is left");
        drop(second);
        assert_eq!(names.len(), 0);
        assert!(names.get(&a).is_none());
    }

    #[test]
    fn a_name_made_again_outlives_the_old_entry() {
        let names = PerName::<u32>::default();
        let a = LockName::new("a").unwrap();
        let old = names.get_or_make(&a);
        // The old entry's last strong reference goes while a new one is
        // made: its drop must leave the new one in place.
        let weak = Arc::downgrade(&old);
        drop(old);
        assert!(weak.upgrade().is_none());
        let new = names.get_or_make(&a);
        assert_eq!(names.len(), 1);
        assert!(names.get(&a).is_some_and(|e| Arc::ptr_eq(&e, &new)));
    }

    #[test]
    fn entries_outliving_their_map_drop_cleanly() {
        let names = PerName::<u32>::default();
        let entry = names.get_or_make(&LockName::new("a").unwrap());
        drop(names);
        assert_eq!(**entry, 0);
    }
}
