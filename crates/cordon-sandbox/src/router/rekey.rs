//! A warm pool's claim: a sandbox moved from the pool's key to the
//! caller's ([`Router::rekey`]).

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::{who, Router};
use crate::backend::Rekeyed;
use crate::key::CallerContext;
use crate::router_error::RouterError;

impl Router {
    /// Moves the sandbox at `from`'s key to `to`'s, where there is none: a
    /// warm pool's claim, so the next acquire at `to` finds it, and so do
    /// dispose and every lookup by key. Only between callers of one
    /// identity in one scope (a pool is made under the identity it serves,
    /// in its scope; anything else is a [`RouterError::Mismatch`]). The placeholders its brokered
    /// secrets were given move with it. The caller still acquires at `to`
    /// to have it, which checks its spec and policy as any acquire does.
    pub fn rekey(&self, from: &CallerContext, to: &CallerContext) -> Result<(), RouterError> {
        let from = from.resolve()?;
        let to = to.resolve()?;
        if from.identity != to.identity {
            return Err(RouterError::Mismatch {
                key: from.key,
                what: format!(
                    "identity (`{}`, not `{}`)",
                    who(&from.identity),
                    who(&to.identity)
                ),
            });
        }
        // A scope is a tenant's: nothing moves out of one.
        if from.key.scope() != to.key.scope() {
            return Err(RouterError::Mismatch {
                what: format!("scope (`{}`, not `{}`)", from.key.scope(), to.key.scope()),
                key: from.key,
            });
        }
        let mut refusals = Vec::new();
        for a in &self.backends {
            match catch_unwind(AssertUnwindSafe(|| a.backend.rekey(&from.key, &to.key))) {
                Ok(Ok(Rekeyed::Moved)) => {
                    let (old, new) = (from.key.id(), to.key.id());
                    let mut map = self.placeholders.lock().unwrap_or_else(|p| p.into_inner());
                    let moved: Vec<_> = map
                        .iter()
                        .filter(|((k, _), _)| *k == old)
                        .map(|((_, n), p)| (n.clone(), p.clone()))
                        .collect();
                    map.retain(|(k, _), _| *k != old);
                    for (name, p) in moved {
                        map.insert((new.clone(), name), p);
                    }
                    return Ok(());
                }
                Ok(Ok(Rekeyed::NotHeld)) => {}
                Ok(Ok(Rekeyed::KeyTaken)) => {
                    return Err(RouterError::KeyTaken {
                        key: to.key.to_string(),
                    })
                }
                Ok(Err(e)) => refusals.push(format!("backend `{}`: {e}", a.name)),
                Err(_) => refusals.push(format!("backend `{}`: its rekey panicked", a.name)),
            }
        }
        Err(RouterError::Rekey {
            from: from.key.to_string(),
            to: to.key.to_string(),
            reason: if refusals.is_empty() {
                "no backend holds it (disposed of, or never made)".into()
            } else {
                refusals.join("; ")
            },
        })
    }
}
