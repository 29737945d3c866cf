//! The host assembly: from what a host decided (floor, policy, backend
//! preference, where sandboxes are kept) to a checked policy, the backends
//! that may serve under the floor, and the router over them. The CLI maps
//! its flags to a [`HostSetup`] and its errors to exit codes; a server will
//! map its configuration the same way.

use std::path::PathBuf;
use std::sync::Arc;

use cordon_policy::{Deployment, Policy};
use cordon_sandbox::{
    Backend, BackendRegistration, BackendSetup, Isolation, Registry, Router, SecretProvider,
};

use crate::config::Floor;
use crate::keeper::{KeptBackend, KeptConfig};

/// What a host decided.
#[derive(Clone)]
pub struct HostSetup {
    /// The weakest rung accepted, and where that came from.
    pub floor: Floor,
    /// The policy file (`None`: `cordon:default`). Name it canonically: a
    /// policy's digest covers each layer's name, and a keeper loads it too.
    pub policy_file: Option<PathBuf>,
    /// Only this backend (still held to the floor); `None`: every
    /// registered backend, strongest first.
    pub only: Option<String>,
    /// These backends only, in this order of preference (the router takes
    /// the first that passes every check); `None`: every registered one,
    /// strongest first. Still held to the floor.
    pub order: Option<Vec<String>>,
    /// What every backend is built from.
    pub backends: BackendSetup,
    /// Keep sandboxes beyond this process (a keeper each); `None`: they
    /// live and die with this process.
    pub keep: Option<KeptConfig>,
    /// Where granted secrets are read from (`None`: a spec naming a
    /// secret is refused at acquire, saying so).
    pub secrets: Option<Arc<dyn SecretProvider>>,
}

/// The assembled host.
pub struct Host {
    pub policy: Arc<Policy>,
    pub deployment: Deployment,
    pub router: Router,
    /// The names of the backends the router holds, in order.
    pub backends: Vec<String>,
}

/// Why a host could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The policy does not load; `diagnostics` is rendered for a terminal.
    #[error("the policy does not load")]
    Policy { diagnostics: String },
    /// `--backend` names nothing registered.
    #[error("{0}")]
    UnknownBackend(String),
    /// Nothing registered can serve under the floor here; says why each
    /// was left out, and how to opt down where that is an option.
    #[error("{0}")]
    NoBackend(String),
    /// The router refused its backends.
    #[error("{0}")]
    Router(String),
    /// What the host was given cannot be used (a secrets directory that
    /// is not one, a binary that cannot be found); says what to do.
    #[error("{0}")]
    Setup(String),
}

/// A built backend declares to the router what its registration claims
/// (what `cordon doctor` shows and the floor was checked against), or it is
/// left out: a backend that says one thing to the operator and another to
/// the router is not used.
fn declares_as_registered(reg: &BackendRegistration, b: &dyn Backend) -> Result<(), String> {
    let info = &reg.info;
    let mut differs = Vec::new();
    match b.isolation() {
        Ok(rung) if rung == info.isolation => {}
        Ok(rung) => differs.push(format!("rung `{rung}` (registered `{}`)", info.isolation)),
        // The router refuses an unnamed rung with the reason; leave that to it.
        Err(_) => {}
    }
    if b.egress() != info.egress {
        differs.push(format!(
            "egress `{}` (registered `{}`)",
            b.egress(),
            info.egress
        ));
    }
    if b.capabilities() != info.capabilities {
        differs.push(format!(
            "capabilities {} (registered {})",
            b.capabilities(),
            info.capabilities
        ));
    }
    match differs.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "it declares {}; its registration and the backend must agree",
            differs.join(", ")
        )),
    }
}

impl HostError {
    /// The kind of failure, for exit codes and HTTP statuses.
    pub fn kind(&self) -> cordon_sandbox::ErrorKind {
        use cordon_sandbox::ErrorKind;
        match self {
            HostError::Policy { .. } | HostError::UnknownBackend(_) => ErrorKind::Invalid,
            HostError::NoBackend(_) => ErrorKind::Unavailable,
            HostError::Router(_) | HostError::Setup(_) => ErrorKind::Invalid,
        }
    }
}

impl Host {
    /// Loads the policy (once) and assembles the host with it.
    pub fn assemble(setup: &HostSetup, registry: &Registry) -> Result<Host, HostError> {
        let loading = tracing::debug_span!("phase", name = "load policy").entered();
        let policy = match &setup.policy_file {
            Some(p) => Policy::load_file(p),
            None => Policy::load_default(),
        }
        .map_err(|d| HostError::Policy {
            diagnostics: d.render(),
        })?;
        drop(loading);
        Host::assemble_with(setup, registry, Arc::new(policy))
    }

    /// Assembles the host with a policy already loaded.
    pub fn assemble_with(
        setup: &HostSetup,
        registry: &Registry,
        policy: Arc<Policy>,
    ) -> Result<Host, HostError> {
        let floor = &setup.floor;
        if let Some(b) = &setup.only {
            if registry.get(b).is_none() {
                return Err(HostError::UnknownBackend(format!(
                    "`--backend {b}` is not a backend cordon knows; name one of {} (`cordon doctor` lists them)",
                    registry.names()
                )));
            }
        }
        let deployment = Deployment {
            name: setup.backends.deployment.clone(),
        };
        let mut chosen: Vec<Arc<dyn Backend>> = Vec::new();
        let mut names = Vec::new();
        let mut why_not: Vec<String> = Vec::new();
        let regs: Vec<&BackendRegistration> = match &setup.order {
            None => registry.iter().collect(),
            Some(names) => {
                let mut out = Vec::new();
                for n in names {
                    let Some(r) = registry.get(n) else {
                        return Err(HostError::UnknownBackend(format!(
                            "backend `{n}` is not a backend cordon knows; name some of {} (`cordon doctor` lists them)",
                            registry.names()
                        )));
                    };
                    out.push(r);
                }
                out
            }
        };
        for reg in regs {
            let (name, iso) = (reg.name(), reg.info.isolation);
            if setup.only.as_deref().is_some_and(|b| b != name) {
                continue;
            }
            if iso < floor.rung {
                why_not.push(format!(
                    "`{name}` ({iso}) is below the floor `{}` (from {})",
                    floor.rung, floor.source
                ));
                continue;
            }
            if reg.opt_in && setup.order.is_none() && setup.only.is_none() && iso > floor.rung {
                why_not.push(format!(
                    "`{name}` ({iso}) is used only at a floor of `{iso}` or when named (`--backend {name}`)"
                ));
                continue;
            }
            if reg.build.is_none() {
                why_not.push(format!("`{name}` ({iso}) is not built in this version"));
                continue;
            }
            let _probe =
                tracing::debug_span!("phase", name = "probe and build", backend = name).entered();
            let p = (reg.probe)(&setup.backends);
            if !p.runnable {
                // Why first (what to do), then what was found.
                let why = match (&p.reason, p.found.is_empty()) {
                    (Some(r), true) => r.clone(),
                    (Some(r), false) => format!("{r} (found: {})", p.found.join("; ")),
                    (None, _) => p.found.join("; "),
                };
                why_not.push(format!("`{name}` cannot run here: {why}"));
                continue;
            }
            let built = match &setup.keep {
                Some(kept) => KeptBackend::new(
                    registry,
                    name,
                    setup.backends.clone(),
                    policy.clone(),
                    kept.clone(),
                )
                .map(|k| Arc::new(k) as Arc<dyn Backend>),
                None => reg.build(&setup.backends, policy.clone()),
            };
            match built.and_then(|b| declares_as_registered(reg, &*b).map(|()| b)) {
                Ok(b) => {
                    chosen.push(b);
                    names.push(name.to_string());
                }
                Err(e) => why_not.push(format!("`{name}` could not be built: {e}")),
            }
        }
        if chosen.is_empty() {
            let mut msg = format!(
                "no backend here meets the floor `{}` (from {}):",
                floor.rung, floor.source
            );
            for w in &why_not {
                msg.push_str(&format!("\n  - {w}"));
            }
            let runnable_below = registry
                .iter()
                .filter(|r| r.info.isolation < floor.rung && r.build.is_some())
                .filter(|r| (r.probe)(&setup.backends).runnable)
                .map(|r| r.info.isolation)
                .max();
            if let Some(to) = runnable_below {
                msg.push_str(&format!(
                    "\nhelp: where a `{to}` boundary is enough, choose it once for this host: `cordon setup --min-isolation {to}` (recorded in your configuration; no flag needed after it) — or for one command: `--min-isolation {to}` (or `{}={to}`); `cordon doctor` says what each rung protects against",
                    crate::config::FLOOR_ENV
                ));
            } else {
                msg.push_str("\nhelp: `cordon doctor` shows what this machine lacks; a backend below the floor is never used");
            }
            return Err(HostError::NoBackend(msg));
        }
        let builder = chosen.into_iter().fold(
            Router::builder(policy.clone(), deployment.clone()).min_isolation(floor.rung),
            |b, x| b.backend(x),
        );
        let builder = match &setup.secrets {
            Some(p) => builder.secrets(p.clone()),
            None => builder,
        };
        let router = builder
            .build()
            .map_err(|e| HostError::Router(e.to_string()))?;
        Ok(Host {
            policy,
            deployment,
            router,
            backends: names,
        })
    }

    /// Whether the floor is below cordon's default.
    pub fn below_default_floor(floor: &Floor) -> bool {
        floor.rung < Isolation::DEFAULT_FLOOR
    }
}
