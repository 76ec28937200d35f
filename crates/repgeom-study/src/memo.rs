//! [`Memo`]: a value computed once per key and shared, the one cache type of the study's loader.
//!
//! Each key has its own lock, held while its value is computed: a caller asking for a key being
//! computed waits for that value instead of computing it again, while other keys are computed
//! beside it. An error is returned to the caller that met it and not kept: the next caller
//! computes again. Nothing here knows what the values are.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One key's slot: empty until its value is computed (or put there).
type Slot<V> = Arc<Mutex<Option<V>>>;

/// Values computed once per key; `V` is cloned out (an `Arc` where it is large).
pub(crate) struct Memo<K, V> {
    slots: Mutex<BTreeMap<K, Slot<V>>>,
}

impl<K: Ord, V: Clone> Memo<K, V> {
    /// An empty memo.
    pub(crate) fn new() -> Self {
        Self {
            slots: Mutex::new(BTreeMap::new()),
        }
    }

    /// The slot of `key`, made empty if it has none (the map's lock is released on return).
    fn slot(&self, key: K) -> Slot<V> {
        lock(&self.slots).entry(key).or_default().clone()
    }

    /// The value of `key`, computed by `compute` if it has none yet. The key's lock is held
    /// while `compute` runs, so `compute` must not ask this memo for the same key. An error is
    /// not kept.
    pub(crate) fn get_or_try_insert_with<E>(
        &self,
        key: K,
        compute: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        let slot = self.slot(key);
        let mut value = lock(&slot);
        if let Some(v) = &*value {
            return Ok(v.clone());
        }
        let v = compute()?;
        *value = Some(v.clone());
        Ok(v)
    }

    /// The value of `key`, computed by `compute` if it has none yet (as
    /// [`Memo::get_or_try_insert_with`], for a computation that cannot fail).
    pub(crate) fn get_or_insert_with(&self, key: K, compute: impl FnOnce() -> V) -> V {
        let Ok(v) = self.get_or_try_insert_with::<Infallible>(key, || Ok(compute()));
        v
    }

    /// The value of `key` if it has one (waiting while it is being computed).
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let slot = lock(&self.slots).get(key).cloned()?;
        lock(&slot).clone()
    }

    /// Puts `value` as the value of `key` (replacing one there).
    pub(crate) fn insert(&self, key: K, value: V) {
        *lock(&self.slot(key)) = Some(value);
    }
}

/// Locks `m`, also after a panic elsewhere while it was held: a map of slots and a slot's
/// `Option` are whole at every moment (a computation that panicked left its slot empty, and the
/// next caller computes again).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::Memo;

    #[test]
    fn computes_once_per_key_and_keeps_no_error() {
        let memo: Memo<u32, String> = Memo::new();
        let calls = AtomicUsize::new(0);
        let get = |k: u32| {
            memo.get_or_try_insert_with(k, || {
                calls.fetch_add(1, Ordering::SeqCst);
                if k == 0 {
                    Err("no zero")
                } else {
                    Ok(k.to_string())
                }
            })
        };
        assert_eq!(get(1), Ok("1".to_owned()));
        assert_eq!(get(1), Ok("1".to_owned()));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a kept value is not recomputed"
        );
        assert_eq!(get(0), Err("no zero"));
        assert_eq!(get(0), Err("no zero"));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "an error is computed again"
        );
        assert_eq!(memo.get(&0), None);
        memo.insert(0, "put".into());
        assert_eq!(memo.get(&0), Some("put".to_owned()));
        assert_eq!(get(0), Ok("put".to_owned()));
    }

    #[test]
    fn callers_of_one_key_wait_for_one_computation() {
        let memo: Memo<(), usize> = Memo::new();
        let calls = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    memo.get_or_insert_with((), || {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        calls.fetch_add(1, Ordering::SeqCst)
                    })
                });
            }
        });
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(memo.get(&()), Some(0));
    }
}
