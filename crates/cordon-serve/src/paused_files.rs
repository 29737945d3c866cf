//! A paused sandbox's files outlive its keeper. When the server pauses a
//! sandbox it also keeps its files as a snapshot named `paused-KEYID` in
//! the credential's scope (KEYID: the sandbox key's id). Resuming it, an
//! exec (which resumes it) or disposing of it drops that snapshot. If the
//! sandbox's keeper dies while it is paused (killed, or the machine's
//! processes lost), the next request for its key finds it again: a new
//! sandbox is made at the key from the snapshot — its files as they were
//! when it was paused (its processes are not: a native rung cannot
//! restore them faithfully) — and served. That holds across a restart of
//! the server too: what the start-up reclaim found dead is remembered.

use std::sync::Arc;

use cordon_host::snapshots::Capture;
use cordon_sandbox::{Capability, Sandbox};

use crate::config::Credential;
use crate::refusal::Refusal;
use crate::request::Address;
use crate::served::Served;

fn key_id(cred: &Credential, at: &Address) -> String {
    cordon_sandbox::key::key_id(&cred.scope, &at.thread, &at.agent_dir)
}

fn name(cred: &Credential, at: &Address) -> String {
    format!("paused-{}", key_id(cred, at))
}

impl Served {
    /// After a pause: the sandbox's files kept (a snapshot taken again
    /// replaces the last). A failure (a quota, a backend whose files are
    /// in a guest) is logged; the pause stands.
    pub(crate) fn keep_paused_files(&self, cred: &Credential, at: &Address, sandbox: &dyn Sandbox) {
        self.paused_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key_id(cred, at), cred.scope.clone());
        let Some((st, _)) = &self.snapshots else {
            return;
        };
        let n = name(cred, at);
        let _ = st.remove(&n, &cred.scope);
        let backend = self
            .router
            .selected(&sandbox.provenance().spec)
            .map(|(b, _)| b.to_string())
            .unwrap_or_default();
        if let Err(e) = st.take(
            sandbox,
            &backend,
            &cred.scope,
            &at.thread,
            Some(&n),
            Capture::FilesLeftPaused,
        ) {
            tracing::warn!(thread = %at.thread, "a paused sandbox's files were not kept: {e}");
        }
    }

    /// After a resume, an exec or a dispose: the kept files dropped (when
    /// this server kept them, or `always`).
    pub(crate) fn drop_paused_files(&self, cred: &Credential, at: &Address, always: bool) {
        let id = key_id(cred, at);
        let held = self
            .paused_keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .is_some();
        self.resurrectable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        if held || always {
            if let Some((st, _)) = &self.snapshots {
                let _ = st.remove(&name(cred, at), &cred.scope);
            }
        }
    }

    /// The sandbox at `at` made again from its paused files, when its
    /// keeper died while it was paused (`dead`: its record says so, or the
    /// start-up reclaim did). `None`: nothing to find.
    pub(crate) fn resurrect(
        &self,
        cred: &Credential,
        at: &Address,
        dead: bool,
    ) -> Result<Option<Arc<dyn Sandbox>>, Refusal> {
        let id = key_id(cred, at);
        let known = self
            .resurrectable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&id);
        if !(dead || known) {
            return Ok(None);
        }
        let Some((st, digest)) = &self.snapshots else {
            return Ok(None);
        };
        let Ok(snap) = st.find(&name(cred, at), &cred.scope) else {
            return Ok(None);
        };
        let spec = snap.provenance.spec.clone().requiring(Capability::Snapshot);
        if cordon_host::snapshots::SnapshotStore::check_restore(
            &snap,
            &spec,
            &cred.identity,
            digest,
        )
        .is_err()
        {
            return Ok(None);
        }
        let made = self.get_or_create_from(cred, at, &spec, st.origin(&snap))?;
        tracing::info!(thread = %at.thread, snapshot = %snap.id, "a paused sandbox whose keeper died is made again from its files");
        self.drop_paused_files(cred, at, true);
        Ok(Some(made.sandbox))
    }
}

/// At start: the keys of the sandboxes the reclaim found dead (records
/// present before, gone after), for [`Served::resurrect`].
pub fn reclaimed_keys(
    before: &[cordon_host::state::Record],
    after: &[cordon_host::state::Record],
) -> Vec<String> {
    before
        .iter()
        .filter(|r| !after.iter().any(|a| a.handle == r.handle))
        .map(|r| cordon_sandbox::key::key_id(&r.key.scope, &r.key.thread, &r.key.agent_dir))
        .collect()
}
