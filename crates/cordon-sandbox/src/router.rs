//! The router: the one place a host gets a sandbox from.
//!
//! Construction refuses any backend below the floor or unable to name its
//! rung. Every [`Router::acquire`] then runs, before it reaches a backend:
//! the host's hard stops, the effective floor (the stricter of the host's
//! and the spec's), the capability match, the egress rule, the policy's
//! resource bounds, the egress surface for each allowlist entry, and the
//! secret surface for each secret. The first backend, in the host's order,
//! that passes every check serves; one that then fails is not retried on
//! another. Nothing here degrades: a check that cannot be satisfied is an
//! error that names what to change.

mod origin;
mod rekey;

use std::collections::BTreeSet;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cordon_policy::{
    Bound, Decision, Deployment, EgressFacts, Identity, Policy, Request, SecretFacts, SurfaceFacts,
    Verdict,
};

use crate::backend::{AcquireRequest, Backend, Limits, Provenance, Sandbox};
use crate::capability::{Capability, CapabilitySet, ToolIdentity};
use crate::egress::{Egress, EgressEntry};
use crate::isolation::Isolation;
use crate::key::CallerContext;
pub use crate::router_error::{Refusal, Refusals, RouterError};
use crate::secrets::{secret_path, SecretError, SecretProvider, SecretValue, SECRET_MODE};
use crate::spec::{SandboxSpec, SecretName};

/// The largest value of a secret brokered at the egress proxy: it goes
/// into a request header (and through the proxy's control channel).
pub const MAX_BROKERED_BYTES: usize = 8 * 1024;

/// Something that is permitted but worth knowing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// The backend confines more than the spec asks (closed egress for an
    /// allowlist): the sandbox reaches nothing it should not, and the
    /// workload fails visibly at whatever it could not fetch.
    ConfinesMore {
        backend: String,
        kind: String,
        entries: Vec<String>,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::ConfinesMore {
                backend,
                kind,
                entries,
            } => {
                let entries: Vec<String> = entries.iter().map(|e| format!("`{e}`")).collect();
                write!(
                    f,
                    "backend `{backend}` has closed egress, so spec `{kind}` cannot reach {}; the workload will fail at whatever it fetches — pick an `allowlist` backend if it needs them",
                    entries.join(", ")
                )
            }
        }
    }
}

impl Warning {
    /// What a sandbox of `backend`, whose egress is `egress`, is warned of
    /// for `spec`: closed egress for a spec that names hosts confines more
    /// than it asks (permitted, said). The one rule behind
    /// [`Router::ensure_can_serve`]'s warnings, for a surface that reports
    /// on a sandbox made earlier (`cordon sandbox exec`).
    pub fn of(backend: &str, egress: Egress, spec: &SandboxSpec) -> Vec<Warning> {
        if egress == Egress::Closed && !spec.egress_allow().is_empty() {
            vec![Warning::ConfinesMore {
                backend: backend.to_string(),
                kind: spec.kind().to_string(),
                entries: spec
                    .egress_allow()
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            }]
        } else {
            Vec::new()
        }
    }
}

/// What a [`Router::scope`] block returned, and how many sandboxes the
/// scope's disposal reclaimed after it.
#[derive(Debug)]
pub struct Scoped<T> {
    pub value: T,
    pub disposed: usize,
}

/// A backend's declarations, read once when the router is built.
struct Admitted {
    backend: Arc<dyn Backend>,
    name: String,
    isolation: Isolation,
    egress: Egress,
    capabilities: CapabilitySet,
}

type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Builds a [`Router`]; see [`Router::builder`].
pub struct RouterBuilder {
    backends: Vec<Arc<dyn Backend>>,
    floor: Isolation,
    denied_capabilities: CapabilitySet,
    denied_identities: BTreeSet<ToolIdentity>,
    policy: Arc<Policy>,
    env: Deployment,
    secrets: Option<Arc<dyn SecretProvider>>,
    clock: Clock,
}

fn system_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl RouterBuilder {
    /// Adds a backend. Order matters: the first that passes every check serves.
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> RouterBuilder {
        self.backends.push(backend);
        self
    }

    /// The host's floor; [`Isolation::DEFAULT_FLOOR`] (`microvm`) unless set.
    pub fn min_isolation(mut self, floor: Isolation) -> RouterBuilder {
        self.floor = floor;
        self
    }

    /// A hard stop: specs requiring this capability are refused.
    pub fn deny_capability(mut self, c: Capability) -> RouterBuilder {
        self.denied_capabilities.insert(c);
        self
    }

    /// A hard stop: host tools acting as this identity are refused.
    pub fn deny_identity(mut self, i: ToolIdentity) -> RouterBuilder {
        self.denied_identities.insert(i);
        self
    }

    /// Where granted secrets are read from. Without one, a spec naming a
    /// secret is refused at acquire.
    pub fn secrets(mut self, provider: Arc<dyn SecretProvider>) -> RouterBuilder {
        self.secrets = Some(provider);
        self
    }

    /// The clock policy decisions see as `now` (seconds since the epoch).
    pub fn clock(mut self, clock: impl Fn() -> i64 + Send + Sync + 'static) -> RouterBuilder {
        self.clock = Arc::new(clock);
        self
    }

    /// Reads every backend's declarations once and refuses the router if any
    /// backend is below the floor or cannot name its rung.
    pub fn build(self) -> Result<Router, RouterError> {
        if self.backends.is_empty() {
            return Err(RouterError::NoBackends);
        }
        let mut admitted: Vec<Admitted> = Vec::new();
        for backend in self.backends {
            let name = backend.name().to_string();
            if admitted.iter().any(|a| a.name == name) {
                return Err(RouterError::DuplicateBackend { name });
            }
            let isolation = backend
                .isolation()
                .map_err(|source| RouterError::UnnamedRung {
                    backend: name.clone(),
                    floor: self.floor,
                    source,
                })?;
            if isolation < self.floor {
                return Err(RouterError::BelowFloor {
                    backend: name,
                    rung: isolation,
                    floor: self.floor,
                });
            }
            let egress = backend.egress();
            let capabilities = backend.capabilities();
            admitted.push(Admitted {
                backend,
                name,
                isolation,
                egress,
                capabilities,
            });
        }
        Ok(Router {
            backends: admitted,
            floor: self.floor,
            denied_capabilities: self.denied_capabilities,
            denied_identities: self.denied_identities,
            policy: self.policy,
            env: self.env,
            secrets: self.secrets,
            clock: self.clock,
            placeholders: Default::default(),
        })
    }
}

/// Routes specs to backends under a floor and a policy.
pub struct Router {
    backends: Vec<Admitted>,
    floor: Isolation,
    denied_capabilities: CapabilitySet,
    denied_identities: BTreeSet<ToolIdentity>,
    policy: Arc<Policy>,
    env: Deployment,
    secrets: Option<Arc<dyn SecretProvider>>,
    clock: Clock,
    /// Each placeholder secret's placeholder, by (sandbox, name).
    placeholders: std::sync::Mutex<std::collections::HashMap<(String, String), String>>,
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field(
                "backends",
                &self
                    .backends
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("floor", &self.floor)
            .field("policy", &self.policy.digest)
            .finish_non_exhaustive()
    }
}

/// Where a decision's deciding rules stand (`file:line`, as the egress
/// audit names them).
fn rule_places(policy: &Policy, d: &Decision) -> Box<[String]> {
    d.deciding
        .iter()
        .map(|id| {
            let r = policy.rule(*id);
            format!("{}:{}", r.file, r.line)
        })
        .collect()
}

/// Why a decision did not allow, in words naming the rules.
fn explain(policy: &Policy, d: &Decision) -> String {
    let rules = |ids: &[cordon_policy::RuleId]| {
        ids.iter()
            .map(|id| {
                let r = policy.rule(*id);

                format!("`{}` ({}:{})", r.name, r.file, r.line)
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match d.verdict {
        Verdict::Deny if d.deciding.is_empty() => {
            let layer = d
                .layer
                .and_then(|l| policy.layers.get(l as usize))
                .map_or_else(|| "the policy".to_string(), |l| format!("`{}`", l.origin));
            format!("no allow rule of {layer} matched")
        }
        Verdict::Deny => format!("denied by rule {}", rules(&d.deciding)),
        Verdict::Undetermined => {
            let unknown: Vec<String> = d
                .unknown
                .iter()
                .map(|f| format!("`{}`", f.spelling()))
                .collect();
            let mut s = format!("undetermined: rule {} stayed open", rules(&d.deciding));
            if !unknown.is_empty() {
                s.push_str(&format!(" on unknown {}", unknown.join(", ")));
            }
            for e in &d.errors {
                s.push_str(&format!(" ({e})"));
            }
            s
        }
        Verdict::Allow => "allowed".to_string(),
    }
}

/// The egress check [`Router::ensure_policy_allows`] makes at acquire, for
/// an allowlist alone (a kept sandbox's allowlist changed live goes through
/// it too): each entry on the egress surface for `identity`, refused only
/// when denied for certain — an undetermined entry is held per connection
/// by the egress proxy. `kind`: the spec's, for the message.
pub fn ensure_egress_allowed(
    policy: &Policy,
    env: &Deployment,
    now: i64,
    identity: &Identity,
    kind: &str,
    entries: &[EgressEntry],
) -> Result<(), RouterError> {
    for entry in entries {
        let facts = EgressFacts::endpoint(entry.exact_host().map(str::to_string), entry.port());
        let d = policy.decide(&Request {
            identity: identity.clone(),
            env: env.clone(),
            now,
            facts: SurfaceFacts::Egress(facts),
        });
        // INVARIANT: only a certain deny refuses here; an undetermined
        // entry is held per connection by the egress proxy.
        if d.verdict == Verdict::Deny {
            return Err(RouterError::EgressDenied {
                kind: kind.to_string(),
                entry: entry.to_string(),
                identity: who(identity),
                why: crate::router_error::with_egress_hint(explain(policy, &d), policy),
                rules: rule_places(policy, &d),
            });
        }
    }
    Ok(())
}

/// Who a decision was for, as errors show it.
fn who(identity: &Identity) -> String {
    format!("{}/{}", identity.namespace, identity.name)
}

impl Router {
    /// Starts a router under `policy`, deciding in deployment `env`. The
    /// floor is `microvm` until [`RouterBuilder::min_isolation`] says otherwise.
    pub fn builder(policy: Arc<Policy>, env: Deployment) -> RouterBuilder {
        RouterBuilder {
            backends: Vec::new(),
            floor: Isolation::DEFAULT_FLOOR,
            denied_capabilities: CapabilitySet::empty(),
            denied_identities: BTreeSet::new(),
            policy,
            env,
            secrets: None,
            clock: Arc::new(system_now),
        }
    }

    /// The host's floor.
    pub fn floor(&self) -> Isolation {
        self.floor
    }

    /// The stricter of the host's floor and the spec's.
    pub fn effective_floor(&self, spec: &SandboxSpec) -> Isolation {
        spec.min_isolation()
            .map_or(self.floor, |s| s.max(self.floor))
    }

    /// Why `a` cannot serve `spec` (empty: it can).
    fn refusals(&self, a: &Admitted, spec: &SandboxSpec) -> Vec<Refusal> {
        let mut out = Vec::new();
        let floor = self.effective_floor(spec);
        if a.isolation < floor {
            out.push(Refusal::BelowFloor {
                rung: a.isolation,
                floor,
            });
        }
        let missing = spec.requires().missing_from(&a.capabilities);
        if !missing.is_empty() {
            out.push(Refusal::Missing {
                capabilities: missing,
            });
        }
        if a.egress == Egress::Unrestricted {
            out.push(Refusal::EgressUnrestricted);
        }
        if let Err(reason) = a.backend.materialises(spec.image()) {
            out.push(Refusal::Image {
                image: spec.image().to_string(),
                reason,
            });
        }
        out
    }

    /// The hard stops, then the first backend that passes every check.
    fn select(&self, spec: &SandboxSpec) -> Result<&Admitted, RouterError> {
        let denied = spec.requires().intersection(&self.denied_capabilities);
        if !denied.is_empty() {
            return Err(RouterError::DeniedCapability {
                kind: spec.kind().to_string(),
                capabilities: denied,
            });
        }
        let mut refusals = Vec::new();
        for a in &self.backends {
            let why = self.refusals(a, spec);
            if why.is_empty() {
                return Ok(a);
            }
            refusals.push((a.name.clone(), why));
        }
        Err(RouterError::NoBackendQualifies {
            kind: spec.kind().to_string(),
            floor: self.effective_floor(spec),
            refusals: Refusals(refusals),
        })
    }

    /// Runs every backend-side check acquire runs — hard stops, floor,
    /// capabilities, egress rule — and returns the warnings acquire does not
    /// give. This call alone is a wiring test for a host's backend choice.
    /// The policy's checks need the caller's identity; see
    /// [`Router::ensure_policy_allows`].
    pub fn ensure_can_serve(&self, spec: &SandboxSpec) -> Result<Vec<Warning>, RouterError> {
        let a = self.select(spec)?;
        Ok(Warning::of(&a.name, a.egress, spec))
    }

    /// The name of the backend that would serve `spec`.
    pub fn selected_backend(&self, spec: &SandboxSpec) -> Result<&str, RouterError> {
        self.select(spec).map(|a| a.name.as_str())
    }

    /// The backend the router picks for `spec` and the rung it declares,
    /// from one selection.
    pub fn selected(&self, spec: &SandboxSpec) -> Result<(&str, Isolation), RouterError> {
        self.select(spec).map(|a| (a.name.as_str(), a.isolation))
    }

    fn request(&self, identity: &Identity, facts: SurfaceFacts) -> Request {
        Request {
            identity: identity.clone(),
            env: self.env.clone(),
            now: (self.clock)(),
            facts,
        }
    }

    /// Where a decision's deciding rules stand (`file:line`, as the egress
    /// audit names them).
    fn rule_names(&self, d: &Decision) -> Box<[String]> {
        rule_places(&self.policy, d)
    }

    /// Why a decision did not allow, in words naming the rules.
    fn explain(&self, d: &Decision) -> String {
        explain(&self.policy, d)
    }

    /// The policy's checks for one identity: resource asks against its
    /// bounds, each allowlist entry on the egress surface (refused only when
    /// denied for certain; the egress proxy decides the rest per
    /// connection), and each secret on the secret surface (only an allow
    /// grants). Returns the limits the sandbox is created with.
    pub fn ensure_policy_allows(
        &self,
        identity: &Identity,
        spec: &SandboxSpec,
    ) -> Result<Limits, RouterError> {
        let bounds = self.policy.bounds_for(identity, &self.env);
        let ask = spec.resources();
        let checks = [
            (ask.memory, Bound::MaxMemory),
            (ask.processes, Bound::MaxProcesses),
            (ask.cpu_seconds, Bound::MaxCpuSeconds),
            (ask.wall_seconds, Bound::MaxWallSeconds),
            (ask.disk, Bound::MaxDisk),
        ];
        for (asked, bound) in checks {
            let limit = bounds.get(bound);
            if let Some(asked) = asked {
                if asked > limit {
                    return Err(RouterError::AboveBound {
                        kind: spec.kind().to_string(),
                        bound,
                        asked,
                        limit,
                        identity: who(identity),
                    });
                }
            }
        }
        ensure_egress_allowed(
            &self.policy,
            &self.env,
            (self.clock)(),
            identity,
            spec.kind(),
            spec.egress_allow(),
        )?;
        for name in spec.secrets() {
            match spec.placeholder(name) {
                None => self.ensure_secret_granted(identity, spec, name, None)?,
                Some(p) => {
                    for host in &p.to {
                        // The proxy must see (and rewrite) its requests.
                        if self.policy.inspection(host).is_none() {
                            return Err(RouterError::PlaceholderNotInspected {
                                kind: spec.kind().to_string(),
                                name: name.to_string(),
                                host: host.clone(),
                            });
                        }
                        self.ensure_secret_granted(identity, spec, name, Some(host))?;
                    }
                }
            }
        }
        Ok(Limits::of(&bounds, ask))
    }

    fn read_secrets(
        &self,
        spec: &SandboxSpec,
    ) -> Result<Vec<(SecretName, SecretValue)>, RouterError> {
        let mut out = Vec::new();
        for name in spec.secrets() {
            let provider = self.secrets.as_ref().ok_or_else(|| RouterError::Secret {
                source: SecretError::NoProvider {
                    name: name.to_string(),
                },
            })?;
            let value = provider
                .read(name)
                .map_err(|source| RouterError::Secret { source })?;
            out.push((name.clone(), value));
        }
        Ok(out)
    }

    /// Gets or creates the sandbox for the caller. The key and the identity
    /// are read from `caller` now. Every refusal runs before any backend is
    /// reached; the closed-vs-allowlist warning is not given here (see
    /// [`Router::ensure_can_serve`]). A sandbox that exists for the key but
    /// was created for another spec, identity or policy is refused, never
    /// handed back.
    pub fn acquire(
        &self,
        caller: &CallerContext,
        spec: &SandboxSpec,
    ) -> Result<Arc<dyn Sandbox>, RouterError> {
        self.acquire_from(caller, spec, None)
    }

    /// [`Router::acquire`], the sandbox made from `origin` (a snapshot's
    /// files as its work dir) when it is new. The caller has checked the
    /// snapshot against the spec and the policy, and put `snapshot` in the
    /// spec's `requires` (so only a backend that restores one is chosen).
    pub fn acquire_from(
        &self,
        caller: &CallerContext,
        spec: &SandboxSpec,
        origin: Option<crate::Origin>,
    ) -> Result<Arc<dyn Sandbox>, RouterError> {
        let caller = caller.resolve()?;
        let a = self.select(spec)?;
        if let Some(refusal) = origin::refusal(origin.as_ref(), &a.name, &a.capabilities) {
            return Err(RouterError::NoBackendQualifies {
                kind: spec.kind().to_string(),
                floor: self.effective_floor(spec),
                refusals: Refusals(vec![(a.name.clone(), vec![refusal])]),
            });
        }
        let limits = self.ensure_policy_allows(&caller.identity, spec)?;
        let secrets = self.read_secrets(spec)?;
        // A placeholder secret: the proxy gets the value, the sandbox
        // (below) the placeholder.
        let mut brokered = Vec::new();
        let mut files = Vec::new();
        for (name, value) in secrets {
            match spec.placeholder(&name) {
                Some(p) => {
                    // A stored file's one trailing newline is not part of
                    // a value sent in a header.
                    let raw = value.expose();
                    let v = raw
                        .strip_suffix(b"\r\n")
                        .or_else(|| raw.strip_suffix(b"\n"))
                        .unwrap_or(raw);
                    let value = SecretValue::new(v.to_vec());
                    let v = value.expose();
                    if v.len() > MAX_BROKERED_BYTES
                        || v.iter().any(|b| matches!(b, b'\r' | b'\n' | 0))
                    {
                        return Err(RouterError::Secret {
                            source: SecretError::Refused {
                                name: name.to_string(),
                                reason: format!("a placeholder's value is put in a request header, so it must be at most {MAX_BROKERED_BYTES} bytes with no CR, LF or NUL (one trailing newline is dropped); fix the stored value, or ask for the secret as a file"),
                            },
                        });
                    }
                    let placeholder = self.placeholder(&caller.key, &name)?;
                    files.push((
                        name.clone(),
                        SecretValue::new(placeholder.clone().into_bytes()),
                    ));
                    brokered.push(crate::secrets::Brokered {
                        name,
                        placeholder,
                        value,
                        to: p.to.clone(),
                    });
                }
                None => files.push((name, value)),
            }
        }
        let secrets = files;
        let req = AcquireRequest {
            key: caller.key,
            provenance: Provenance {
                spec: spec.clone(),
                identity: caller.identity,
                policy_digest: self.policy.digest.clone(),
                origin,
            },
            limits,
            brokered,
        };
        let sandbox = a
            .backend
            .acquire(&req)
            .map_err(|source| RouterError::Backend {
                backend: a.name.clone(),
                source,
            })?;
        let got = sandbox.provenance();
        let mut what = Vec::new();
        let spec_diff = got.spec.differences(&req.provenance.spec);
        if !spec_diff.is_empty() {
            let fields: Vec<String> = spec_diff.iter().map(|f| format!("`{f}`")).collect();
            what.push(format!("spec ({})", fields.join(", ")));
        }
        if got.identity != req.provenance.identity {
            what.push(format!(
                "identity (`{}`, not `{}`)",
                who(&got.identity),
                who(&req.provenance.identity)
            ));
        }
        if got.policy_digest != req.provenance.policy_digest {
            what.push("policy (its digest differs)".to_string());
        }
        if !what.is_empty() {
            return Err(RouterError::Mismatch {
                key: req.key,
                what: what.join(", "),
            });
        }
        for (name, value) in &secrets {
            sandbox
                .write_file(&secret_path(name), value.expose(), SECRET_MODE)
                .map_err(|source| RouterError::Delivery {
                    backend: a.name.clone(),
                    name: name.to_string(),
                    source,
                })?;
        }
        // Every exec is decided on the compute surface before it reaches
        // the backend, whichever backend it is.
        Ok(crate::guard::guard(
            sandbox,
            self.policy.clone(),
            self.env.clone(),
            req.limits,
        ))
    }

    /// One secret on the secret surface. A secret handed in as a value
    /// (`toward` none): this is the final enforcing point, so only an allow
    /// grants (a rule reading `destination` is open here, so denied). A
    /// placeholder toward `toward`: decided with `destination.host` bound;
    /// only a certain deny, or an open rule needing more than the
    /// request's own destination facts, refuses here — the proxy decides
    /// every use with method, path and header known, where only an allow
    /// puts the value in.
    fn ensure_secret_granted(
        &self,
        identity: &Identity,
        spec: &SandboxSpec,
        name: &SecretName,
        toward: Option<&String>,
    ) -> Result<(), RouterError> {
        let facts = SecretFacts {
            name: name.as_str().to_string(),
            destination: toward.map(|host| cordon_policy::Destination {
                host: host.clone(),
                method: None,
                path: None,
                header: None,
            }),
        };
        let d = self
            .policy
            .decide(&self.request(identity, SurfaceFacts::Secret(facts)));
        let open_only_at_the_proxy = toward.is_some()
            && d.verdict == Verdict::Undetermined
            && d.errors.is_empty()
            && !d.unknown.is_empty()
            && d.unknown.iter().all(|f| {
                matches!(
                    f.spelling(),
                    "destination.method" | "destination.path" | "destination.header"
                )
            });
        if d.is_allowed() || open_only_at_the_proxy {
            return Ok(());
        }
        Err(RouterError::SecretDenied {
            kind: spec.kind().to_string(),
            name: name.to_string(),
            identity: who(identity),
            why: self.explain(&d),
            rules: self.rule_names(&d),
        })
    }

    /// The placeholder of `name` in the sandbox `key`: the same one for
    /// every acquire of that sandbox through this router (its proxy was
    /// handed it when the sandbox was made).
    fn placeholder(
        &self,
        key: &crate::key::SandboxKey,
        name: &SecretName,
    ) -> Result<String, RouterError> {
        let mut map = self.placeholders.lock().unwrap_or_else(|p| p.into_inner());
        let k = (key.id(), name.as_str().to_string());
        if let Some(p) = map.get(&k) {
            return Ok(p.clone());
        }
        let p = crate::secrets::new_placeholder().map_err(|reason| RouterError::Secret {
            source: SecretError::Refused {
                name: name.to_string(),
                reason: format!("no placeholder could be made: {reason}"),
            },
        })?;
        map.insert(k, p.clone());
        Ok(p)
    }

    /// Disposes of the caller's sandbox on every backend; returns how many
    /// were disposed. Every backend is asked, whatever another answered;
    /// one that failed (or panicked) makes the whole an error,
    /// [`RouterError::NotDisposed`], saying why: a dispose that did not
    /// dispose is never a count.
    pub fn dispose(&self, caller: &CallerContext) -> Result<usize, RouterError> {
        let key = caller.resolve()?.key;
        let id = key.id();
        self.placeholders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(k, _), _| k != &id);
        let mut n = 0;
        let mut failures = Vec::new();
        for a in &self.backends {
            match catch_unwind(AssertUnwindSafe(|| a.backend.dispose(&key))) {
                Ok(Ok(true)) => n += 1,
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(backend = %a.name, key = %key, error = %e, "dispose failed; the sandbox keeps running until a later dispose reclaims it");
                    failures.push(format!("backend `{}`: {e}", a.name));
                }
                Err(_) => {
                    tracing::warn!(backend = %a.name, key = %key, "dispose panicked; the sandbox keeps running until a later dispose reclaims it");
                    failures.push(format!("backend `{}`: its dispose panicked", a.name));
                }
            }
        }
        if failures.is_empty() {
            Ok(n)
        } else {
            Err(RouterError::NotDisposed {
                disposed: n,
                failures,
            })
        }
    }

    /// Disposes of every sandbox of a scope and thread on every backend and
    /// returns how many. Best effort by contract: each backend's failure
    /// (error or panic) is logged and the others still run; it never fails.
    pub fn dispose_scope(&self, scope: &str, thread_id: &str) -> usize {
        match self.try_dispose_scope(scope, thread_id) {
            Ok(n) => n,
            Err(RouterError::NotDisposed { disposed, .. }) => disposed,
            Err(_) => 0,
        }
    }

    /// [`Router::dispose_scope`] for a caller that must know: every
    /// backend is asked, and one that failed (or panicked) makes the whole
    /// [`RouterError::NotDisposed`], with how many went and why the rest
    /// did not.
    pub fn try_dispose_scope(&self, scope: &str, thread_id: &str) -> Result<usize, RouterError> {
        let mut n = 0;
        let mut failures = Vec::new();
        for a in &self.backends {
            match catch_unwind(AssertUnwindSafe(|| {
                a.backend.dispose_scope(scope, thread_id)
            })) {
                Ok(Ok(k)) => n += k,
                Ok(Err(e)) => {
                    tracing::warn!(backend = %a.name, scope, thread_id, error = %e, "dispose_scope failed; the sandboxes it did not reclaim keep running until a later dispose");
                    failures.push(format!("backend `{}`: {e}", a.name));
                }
                Err(_) => {
                    tracing::warn!(backend = %a.name, scope, thread_id, "dispose_scope panicked; the sandboxes it did not reclaim keep running until a later dispose");
                    failures.push(format!("backend `{}`: its dispose panicked", a.name));
                }
            }
        }
        if failures.is_empty() {
            Ok(n)
        } else {
            Err(RouterError::NotDisposed {
                disposed: n,
                failures,
            })
        }
    }

    /// Runs `block`, then disposes of every sandbox of `scope` and
    /// `thread_id` however the block ends — returning, returning an error,
    /// or panicking — and reports how many. The block's value (its error
    /// included) comes back untouched; disposal cannot fail it.
    pub fn scope<T>(&self, scope: &str, thread_id: &str, block: impl FnOnce() -> T) -> Scoped<T> {
        struct OnUnwind<'a> {
            router: &'a Router,
            scope: &'a str,
            thread_id: &'a str,
            armed: bool,
        }
        impl Drop for OnUnwind<'_> {
            fn drop(&mut self) {
                if self.armed {
                    self.router.dispose_scope(self.scope, self.thread_id);
                }
            }
        }
        let mut guard = OnUnwind {
            router: self,
            scope,
            thread_id,
            armed: true,
        };
        let value = block();
        guard.armed = false;
        let disposed = self.dispose_scope(scope, thread_id);
        Scoped { value, disposed }
    }

    /// Checks a sealed host-tool surface, each tool's name and declared
    /// identity (`cordon_tools::ToolSurface::identities`), against the
    /// host's hard stops. No tools: nothing to refuse.
    pub fn admit_tools<'a>(
        &self,
        tools: impl IntoIterator<Item = (&'a str, Option<ToolIdentity>)>,
    ) -> Result<(), RouterError> {
        for (tool, identity) in tools {
            if self.denied_capabilities.contains(Capability::HostTools) {
                return Err(RouterError::ToolsDenied);
            }
            if let Some(identity) = identity {
                if self.denied_identities.contains(&identity) {
                    return Err(RouterError::ToolIdentityDenied {
                        tool: tool.to_string(),
                        identity,
                    });
                }
            }
        }
        Ok(())
    }
}
