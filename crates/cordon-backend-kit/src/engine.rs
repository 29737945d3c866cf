//! One backend over any engine: [`EngineBackend`] implements the sandbox
//! protocol's [`Backend`] once — the table of this process's sandboxes,
//! get-or-create, the egress proxy started on first use, dispose of a key
//! and of a scope's thread, other processes' sandboxes included — and asks
//! an [`Engine`] only what differs between engines.
//!
//! What the copies in each engine backend used to decide three ways is
//! decided here once:
//! - the table's lock is recovered when poisoned (it holds only handles,
//!   and a panic elsewhere must not make every later sandbox unreachable,
//!   nor its dispose impossible);
//! - a dispose whose key this process does not hold asks the engine for
//!   one another process made (a keeper, a restarted server);
//! - a scope's dispose disposes of every sandbox it can and reports every
//!   failure, rather than stopping at the first and leaving the rest.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    AcquireRequest, Backend, BackendError, CapabilitySet, Egress, EgressSetup, Isolation,
    IsolationError, Sandbox, SandboxKey,
};

use crate::failed;

/// Which sandboxes a dispose is for: a scope's thread, and one agent dir
/// of it (a key's dispose) or every one (a scope's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Which<'a> {
    pub scope: &'a str,
    pub thread: &'a str,
    pub agent_dir: Option<&'a str>,
}

impl Which<'_> {
    /// Whether a sandbox made for `scope`/`thread`/`agent_dir` is one.
    pub fn matches(&self, scope: &str, thread: &str, agent_dir: &str) -> bool {
        self.scope == scope
            && self.thread == thread
            && self.agent_dir.is_none_or(|a| a == agent_dir)
    }

    fn of_key(key: &SandboxKey) -> Which<'_> {
        Which {
            scope: key.scope(),
            thread: key.thread_id(),
            agent_dir: Some(key.agent_dir()),
        }
    }
}

/// What an engine does that another does not. Everything else a backend
/// is, [`EngineBackend`] is once.
pub trait Engine: Send + Sync + 'static {
    /// The engine's sandbox.
    type Sandbox: Sandbox + 'static;

    /// The backend's name (`docker`, `gvisor`, …).
    fn name(&self) -> &str;

    /// The rung the engine holds a workload at, on this machine.
    fn isolation(&self) -> Result<Isolation, IsolationError>;

    /// What the engine serves.
    fn capabilities(&self) -> CapabilitySet;

    /// What the engine holds egress to. Every engine here routes a
    /// sandbox's network through cordon's proxy alone: `allowlist`.
    fn egress(&self) -> Egress {
        Egress::Allowlist
    }

    /// Whether the image a spec names can be run (else why not, with the
    /// fix).
    fn materialises(&self, image: &str) -> Result<(), String>;

    /// What the engine refuses of a request before anything is made (a
    /// spec that names what it cannot serve): `Ok` to go on.
    fn admit(&self, req: &AcquireRequest) -> Result<(), BackendError> {
        let _ = req;
        Ok(())
    }

    /// Makes the sandbox `req` asks for; `egress` is its proxy when its
    /// spec names hosts (started before the sandbox, so a proxy that
    /// cannot start refuses the sandbox rather than leave it without its
    /// route), else `None`: no network at all.
    fn create(
        &self,
        req: &AcquireRequest,
        egress: Option<Arc<dyn cordon_egress::EgressService>>,
    ) -> Result<Self::Sandbox, BackendError>;

    /// Ends a sandbox this process made, and everything of it.
    fn dispose(&self, sandbox: &Self::Sandbox) -> Result<(), BackendError>;

    /// Ends the sandboxes `which` names that this process does not hold
    /// (`held`): another process's, a crashed or restarted one's, found
    /// in the engine's own listing. Returns how many; a listing that
    /// cannot be read is an error, never zero.
    fn dispose_found(
        &self,
        which: Which<'_>,
        held: &[Arc<Self::Sandbox>],
    ) -> Result<usize, BackendError>;
}

/// `Engine::name`, `isolation`, `capabilities`, `materialises` and
/// `dispose` of an OCI engine on this host (docker, gvisor): its name and
/// rung, what every such engine serves ([`crate::engine_capabilities`])
/// and any capabilities of its own after them,
/// the images whose tree is on this host ([`crate::stored_root`]), and a
/// sandbox's own `dispose`. Used inside `impl Engine for …`.
#[macro_export]
macro_rules! oci_engine_basics {
    ($name:expr, $rung:expr $(, $extra:expr)*) => {
        fn name(&self) -> &str {
            $name
        }

        fn isolation(
            &self,
        ) -> Result<$crate::__sandbox::Isolation, $crate::__sandbox::IsolationError> {
            Ok($rung)
        }

        fn capabilities(&self) -> $crate::__sandbox::CapabilitySet {
            #[allow(unused_mut)]
            let mut all = $crate::engine_capabilities();
            $( all.insert($extra); )*
            all
        }

        fn materialises(&self, image: &str) -> Result<(), String> {
            $crate::stored_root(image).map(drop)
        }

        fn dispose(&self, sandbox: &Self::Sandbox) -> Result<(), $crate::__sandbox::BackendError> {
            sandbox.dispose()
        }
    };
}

/// The generic backend: the protocol over an [`Engine`].
pub struct EngineBackend<E: Engine> {
    engine: E,
    policy: Arc<Policy>,
    env: Deployment,
    egress_setup: EgressSetup,
    /// The sandboxes this process made (a kept sandbox's keeper holds its
    /// own; others' are found through [`Engine::dispose_found`]).
    sandboxes: Mutex<HashMap<SandboxKey, Arc<E::Sandbox>>>,
    /// The egress proxy, started on first use by a spec that names hosts.
    egress: OnceLock<Result<Arc<dyn cordon_egress::EgressService>, String>>,
}

impl<E: Engine> EngineBackend<E> {
    /// The backend over `engine`; `policy`, `env` and `egress` are what its
    /// egress proxy decides with.
    pub fn new(engine: E, policy: Arc<Policy>, env: Deployment, egress: EgressSetup) -> Self {
        EngineBackend {
            engine,
            policy,
            env,
            egress_setup: egress,
            sandboxes: Mutex::new(HashMap::new()),
            egress: OnceLock::new(),
        }
    }

    /// The backend over `engine`, set up by `setup`.
    pub fn set_up(engine: E, setup: &crate::EngineSetup) -> Self {
        let s = setup.clone();
        EngineBackend::new(engine, s.policy, s.env, s.egress)
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// The sandboxes this process holds.
    pub fn held(&self) -> Vec<Arc<E::Sandbox>> {
        self.table().values().cloned().collect()
    }

    /// Panics while holding the table's lock, poisoning it: how a test
    /// shows that a poisoned table still serves. Not for anything else.
    #[doc(hidden)]
    pub fn poison_for_tests(&self) {
        let _held = self.table();
        panic!("poisoning the sandbox table, as a test asked");
    }

    fn table(&self) -> MutexGuard<'_, HashMap<SandboxKey, Arc<E::Sandbox>>> {
        self.sandboxes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The egress proxy, started on first use: in a confined process of
    /// its own when the setup names one (the `cordon` binary always does).
    fn egress_host(&self) -> Result<Arc<dyn cordon_egress::EgressService>, String> {
        self.egress
            .get_or_init(|| {
                cordon_egress::start_service(
                    &self.egress_setup,
                    self.policy.clone(),
                    self.env.clone(),
                )
            })
            .clone()
    }

    /// Removes the held sandboxes `which` names from the table.
    fn take(&self, which: Which<'_>) -> Vec<Arc<E::Sandbox>> {
        let mut all = self.table();
        let keys: Vec<SandboxKey> = all
            .keys()
            .filter(|k| which.matches(k.scope(), k.thread_id(), k.agent_dir()))
            .cloned()
            .collect();
        keys.iter().filter_map(|k| all.remove(k)).collect()
    }

    /// Disposes of what `which` names, held here or found by the engine;
    /// every failure is reported, none stops the rest.
    fn dispose_which(&self, which: Which<'_>) -> Result<usize, BackendError> {
        let mine = self.take(which);
        let mut n = 0;
        let mut failures = Vec::new();
        for s in &mine {
            match self.engine.dispose(s) {
                Ok(()) => n += 1,
                Err(e) => failures.push(e.to_string()),
            }
        }
        drop(mine);
        let held = self.held();
        match self.engine.dispose_found(which, &held) {
            Ok(found) => n += found,
            Err(e) => failures.push(e.to_string()),
        }
        if failures.is_empty() {
            Ok(n)
        } else {
            Err(failed(
                "dispose",
                format!("{n} disposed; {}", failures.join("; ")),
            ))
        }
    }
}

impl<E: Engine> Backend for EngineBackend<E> {
    fn name(&self) -> &str {
        self.engine.name()
    }

    fn isolation(&self) -> Result<Isolation, IsolationError> {
        self.engine.isolation()
    }

    fn egress(&self) -> Egress {
        self.engine.egress()
    }

    fn capabilities(&self) -> CapabilitySet {
        self.engine.capabilities()
    }

    fn materialises(&self, image: &str) -> Result<(), String> {
        self.engine.materialises(image)
    }

    fn acquire(&self, req: &AcquireRequest) -> Result<Arc<dyn Sandbox>, BackendError> {
        if let Some(s) = self.table().get(&req.key) {
            return Ok(s.clone());
        }
        self.engine.admit(req)?;
        let spec = &req.provenance.spec;
        self.engine
            .materialises(spec.image())
            .map_err(|reason| BackendError::Refused {
                operation: "acquire",
                reason,
            })?;
        let egress = if spec.egress_allow().is_empty() {
            None
        } else {
            Some(self.egress_host().map_err(|e| failed("acquire", e))?)
        };
        let made = Arc::new(self.engine.create(req, egress)?);
        let mut all = self.table();
        // Another thread may have made one meanwhile: keep the first.
        if let Some(s) = all.get(&req.key) {
            let s = s.clone();
            drop(all);
            let _ = self.engine.dispose(&made);
            return Ok(s);
        }
        all.insert(req.key.clone(), made.clone());
        Ok(made)
    }

    fn dispose(&self, key: &SandboxKey) -> Result<bool, BackendError> {
        let which = Which::of_key(key);
        // A key is one sandbox: held here, it is that one.
        let mine = self.take(which);
        if !mine.is_empty() {
            for s in &mine {
                self.engine.dispose(s)?;
            }
            return Ok(true);
        }
        let held = self.held();
        Ok(self.engine.dispose_found(which, &held)? > 0)
    }

    /// The table's entry moved: the engine's own labels keep the key it
    /// was made at (a sandbox held here is disposed of from the table, by
    /// its new key; one a crash left is found by its old one).
    fn rekey(
        &self,
        from: &SandboxKey,
        to: &SandboxKey,
    ) -> Result<cordon_sandbox::backend::Rekeyed, BackendError> {
        Ok(cordon_sandbox::backend::rekey_in(
            &mut self.table(),
            from,
            to,
        ))
    }

    fn dispose_scope(&self, scope: &str, thread_id: &str) -> Result<usize, BackendError> {
        self.dispose_which(Which {
            scope,
            thread: thread_id,
            agent_dir: None,
        })
    }
}
