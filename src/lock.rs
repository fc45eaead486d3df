//! The one way this crate takes a lock: [`Locked::locked`] (a `Mutex`), and
//! [`RwLocked::read_locked`] / [`RwLocked::write_locked`] (an `RwLock`). A lock is poisoned
//! when a thread panicked while holding it (one lock keeps its own rule on purpose: the
//! readiness flag of `metrics::Readiness`, whose poisoning makes `/readyz` answer 503); every value guarded in this crate is left consistent
//! between two statements (a counter, a map entry replaced whole), so the lock is taken
//! over instead of panicking in turn (`std::sync::PoisonError::into_inner`).

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A mutex whose poisoning is recovered from (module doc: why that is safe here).
pub trait Locked<T> {
    /// Locks, blocking the thread until the lock is free; a poisoned lock is taken over.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A read-write lock whose poisoning is recovered from (module doc: why that is safe here).
pub trait RwLocked<T> {
    /// Locks for reading, blocking until no writer holds it; a poisoned lock is taken over.
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    /// Locks for writing, blocking until nobody holds it; a poisoned lock is taken over.
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLocked<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_over_with_its_value() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let held = m.clone();
        let panicked = std::thread::spawn(move || {
            let mut g = held.lock().expect("first lock");
            *g = 2;
            panic!("poison it");
        })
        .join();
        assert!(panicked.is_err());
        assert!(m.is_poisoned());
        assert_eq!(*m.locked(), 2);
    }

    #[test]
    fn a_poisoned_read_write_lock_is_taken_over_with_its_value() {
        let l = std::sync::Arc::new(RwLock::new(1));
        let held = l.clone();
        let panicked = std::thread::spawn(move || {
            let mut g = held.write().expect("first lock");
            *g = 3;
            panic!("poison it");
        })
        .join();
        assert!(panicked.is_err());
        assert!(l.is_poisoned());
        assert_eq!(*l.read_locked(), 3);
        *l.write_locked() = 4;
        assert_eq!(*l.read_locked(), 4);
    }
}
