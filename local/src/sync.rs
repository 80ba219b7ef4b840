//! Locks the runtime's threads share.

use std::sync::Mutex;

/// A mutex's guard, also when a thread holding it panicked: what it guards stays usable (each
/// holder leaves it consistent between statements).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
