//! A sandbox's pause as every engine backend holds it: whether it is
//! paused, and the lock that keeps a pause from coming between an exec's
//! resume and its start (nothing starts unpaused inside a paused sandbox).
//! The freezing itself is the backend's own.

use std::sync::{Mutex, MutexGuard};

use cordon_sandbox::SandboxError;

#[derive(Debug, Default)]
pub struct Pausing(Mutex<bool>);

impl Pausing {
    /// Pauses (`true`) or resumes the sandbox through `freeze`, under the
    /// lock; the state changes only when `freeze` succeeded.
    pub fn set(
        &self,
        paused: bool,
        freeze: impl FnOnce(bool) -> Result<(), SandboxError>,
    ) -> Result<(), SandboxError> {
        let mut state = self.lock();
        freeze(paused)?;
        *state = paused;
        Ok(())
    }

    /// The sandbox awake: resumed first through `freeze` when paused. No
    /// pause comes until the returned guard is dropped.
    pub fn awake(
        &self,
        freeze: impl FnOnce(bool) -> Result<(), SandboxError>,
    ) -> Result<MutexGuard<'_, bool>, SandboxError> {
        let mut state = self.lock();
        if *state {
            freeze(false)?;
            *state = false;
        }
        Ok(state)
    }

    fn lock(&self) -> MutexGuard<'_, bool> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_state_follows_only_a_freeze_that_succeeded_and_awake_resumes() {
        let p = Pausing::default();
        let asked = std::cell::RefCell::new(Vec::new());
        let ok = |v: bool| {
            asked.borrow_mut().push(v);
            Ok(())
        };
        // Awake while running: nothing is asked.
        drop(p.awake(ok).unwrap());
        assert!(asked.borrow().is_empty());
        p.set(true, ok).unwrap();
        // A failed resume leaves it paused, and awake tries again.
        let failed = |_| {
            Err(SandboxError::Failed {
                operation: "resume",
                reason: "no".into(),
            })
        };
        assert!(p.set(false, failed).is_err());
        assert!(p.awake(failed).is_err());
        let guard = p.awake(ok).unwrap();
        assert!(!*guard);
        drop(guard);
        assert_eq!(*asked.borrow(), [true, false]);
    }
}
