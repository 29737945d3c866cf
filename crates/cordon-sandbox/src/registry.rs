//! The backend registry: every backend a host can use, each one
//! registration — its name, what it claims, how to probe this machine for
//! it, how to build it, and how to clean up after a sandbox of it whose
//! keeper died. `cordon doctor`, `--backend`, the router's backend list, the
//! keeper and both kits all read the registry, so a backend is added by
//! registering it and by nothing else.
//!
//! A backend crate exports its registrations (e.g.
//! `cordon_backend_local::registrations()`); the host layer
//! (`cordon_host::builtin_registry`) puts them in a [`Registry`], and
//! `cordon_host::catalogue` reports on it for `cordon doctor`. A test
//! registers its own backend the same way.

use std::path::PathBuf;
use std::sync::Arc;

use cordon_policy::Policy;
use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::capability::CapabilitySet;
use crate::egress::Egress;
use crate::isolation::Isolation;

/// How this binary runs again as something else: the sandbox init, or a
/// keeper (the program, then its arguments).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelfCommand {
    pub path: PathBuf,
    pub args: Vec<String>,
}

/// What every backend of one host is built from. Serialisable: a keeper
/// process rebuilds the very same backend from it (with the policy, which
/// it loads itself and checks by digest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSetup {
    /// The deployment's name (`env.name` in rules).
    pub deployment: String,
    /// This binary as a sandbox init, for backends whose init is cordon.
    pub init: Option<SelfCommand>,
    /// The operator's work dir (`--work-dir`); `None`: a fresh one per
    /// sandbox under `scratch`.
    pub work_dir: Option<PathBuf>,
    /// Where fresh directories are made.
    pub scratch: PathBuf,
    /// How the egress proxy of a backend that hosts one resolves names and
    /// where it writes its audit log.
    #[serde(default)]
    pub egress: EgressSetup,
    /// Each engine's own settings (the Docker Engine to drive, the
    /// microVM's kernel, agent, cache and accelerator), by backend name.
    /// A surface fills them (the `cordon` binary from its environment);
    /// backends read them only from here, never from the environment, so
    /// a keeper rebuilds a backend with its owner's very settings.
    #[serde(default)]
    pub engines: EngineSettings,
}

/// Each engine's own settings, by backend name: a typed document per
/// engine, which the engine reads with [`EngineSettings::get`] (its own
/// type, unknown fields refused) and a surface writes with
/// [`EngineSettings::set`]. Serialised with the rest of the setup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EngineSettings(std::collections::BTreeMap<String, serde_json::Value>);

impl EngineSettings {
    /// `backend`'s settings; its type's default when none were given.
    /// `Err` says which engine's settings do not read, and why.
    pub fn get<T: serde::de::DeserializeOwned + Default>(
        &self,
        backend: &str,
    ) -> Result<T, String> {
        match self.0.get(backend) {
            None => Ok(T::default()),
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| format!("the `{backend}` backend's settings do not read: {e}")),
        }
    }

    /// Sets `backend`'s settings. Settings that do not serialise are
    /// recorded as that failure, which [`EngineSettings::get`] refuses: the
    /// backend then cannot be built, rather than built with its defaults
    /// (another engine, another cache) in their place.
    pub fn set<T: Serialize>(&mut self, backend: &str, settings: &T) {
        let v = serde_json::to_value(settings).unwrap_or_else(|e| {
            serde_json::Value::String(format!("settings that did not serialise: {e}"))
        });
        self.0.insert(backend.to_string(), v);
    }
}

/// The egress proxy's host-side settings (the policy and the spec decide
/// what is allowed; these say how names are resolved and where decisions
/// are recorded). From the host configuration's `egress:` section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSetup {
    /// Nameservers to ask (`ADDR:PORT`); `None`: the system's resolver.
    /// An empty list: no DNS, only `hosts_file` answers.
    #[serde(default)]
    pub nameservers: Option<Vec<std::net::SocketAddr>>,
    /// Names pinned to addresses, in the `/etc/hosts` format; consulted
    /// before DNS.
    #[serde(default)]
    pub hosts_file: Option<PathBuf>,
    /// The audit log (JSON lines, appended); `None`: standard error.
    #[serde(default)]
    pub audit: Option<PathBuf>,
    /// How far the audit log may grow: its rotation, and each sandbox's
    /// budget of audit lines.
    #[serde(default)]
    pub audit_bounds: AuditBounds,
    /// Run the proxy in a process of its own, started with this command,
    /// which confines itself before it reads a byte from a sandbox (it
    /// parses hostile input). `None`: inside the owning process (a library
    /// host's choice; the `cordon` binary always sets it).
    #[serde(default)]
    pub proxy: Option<SelfCommand>,
    /// The policy file the proxy process loads (checked against the owner's
    /// digest); `None`: `cordon:default`.
    #[serde(default)]
    pub policy_file: Option<PathBuf>,
}

/// Bounds on the egress audit log, so no sandbox can grow it without
/// bound and the disk under it stays writable for every sandbox (the
/// host configuration's `egress.audit_bounds`, `cordon proxy --audit-*`).
///
/// A sandbox's lines are charged to its own budget, a bucket of
/// `sandbox_burst_bytes` refilled at `sandbox_bytes_per_sec`: a sandbox
/// whose budget is spent has its requests refused (`429`, saying so),
/// never carried unaudited. The file is rotated when a line would take it
/// past `rotate_bytes`: `FILE.1` is the newest of `keep` old files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditBounds {
    /// The audit file's size past which it is rotated, in bytes.
    pub rotate_bytes: u64,
    /// Old files kept (`FILE.1` to `FILE.N`); 0: the file is emptied when
    /// it is full, nothing kept.
    pub keep: u32,
    /// One sandbox's sustained rate of audit lines, in bytes per second.
    pub sandbox_bytes_per_sec: u64,
    /// What one sandbox may write at once before its rate applies, in bytes.
    pub sandbox_burst_bytes: u64,
}

impl AuditBounds {
    /// The smallest `rotate_bytes` taken.
    pub const MIN_ROTATE_BYTES: u64 = 64 * 1024;
    /// The most old files kept.
    pub const MAX_KEEP: u32 = 64;
    /// The smallest rate taken, bytes per second.
    pub const MIN_RATE: u64 = 1024;
    /// The smallest burst taken: more than the longest audit line.
    pub const MIN_BURST: u64 = 32 * 1024;

    /// Whether the bounds can be held; the message says which is not.
    pub fn check(&self) -> Result<(), String> {
        if self.rotate_bytes < Self::MIN_ROTATE_BYTES {
            return Err(format!(
                "`rotate_bytes` is {}, below the least taken ({})",
                self.rotate_bytes,
                Self::MIN_ROTATE_BYTES
            ));
        }
        if self.keep > Self::MAX_KEEP {
            return Err(format!(
                "`keep` is {}, above the most taken ({})",
                self.keep,
                Self::MAX_KEEP
            ));
        }
        if self.sandbox_bytes_per_sec < Self::MIN_RATE {
            return Err(format!(
                "`sandbox_bytes_per_sec` is {}, below the least taken ({})",
                self.sandbox_bytes_per_sec,
                Self::MIN_RATE
            ));
        }
        if self.sandbox_burst_bytes < Self::MIN_BURST {
            return Err(format!(
                "`sandbox_burst_bytes` is {}, below the least taken ({})",
                self.sandbox_burst_bytes,
                Self::MIN_BURST
            ));
        }
        Ok(())
    }
}

impl Default for AuditBounds {
    /// 32 MiB files, 3 kept (at most 128 MiB on disk); each sandbox 64 KiB
    /// of lines a second (about 80 requests a second) after a burst of
    /// 2 MiB (about 2,500 requests).
    fn default() -> AuditBounds {
        AuditBounds {
            rotate_bytes: 32 << 20,
            keep: 3,
            sandbox_bytes_per_sec: 64 << 10,
            sandbox_burst_bytes: 2 << 20,
        }
    }
}

/// Builds a backend from a setup and the host's policy.
pub type BuildFn = fn(&BackendSetup, Arc<Policy>) -> Result<Arc<dyn Backend>, String>;

/// Where a backend shows an operator's work dir (`--work-dir`) to the
/// workload: what the kits need to know to find their files inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkDirView {
    /// At the spec's `work_dir` (`/workspace` by default).
    SpecPath,
    /// At its own host path.
    HostPath,
    /// At the spec's `work_dir`, in the guest only: the backend shares no
    /// host directory (a microVM's work dir lives in the guest; files go
    /// in and out through the sandbox's own calls). An operator's work dir
    /// (`--work-dir`) is refused.
    GuestOnly,
}

/// What a backend claims: its name, rung, egress, capabilities and a
/// one-line summary (a registration holds one; `cordon doctor` shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    pub name: &'static str,
    pub isolation: Isolation,
    pub egress: Egress,
    pub capabilities: CapabilitySet,
    pub summary: &'static str,
}

impl BackendInfo {
    /// Whether a floor admits this backend.
    pub fn admitted_by(&self, floor: Isolation) -> bool {
        self.isolation >= floor
    }
}

/// What a probe of this machine found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub runnable: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// What the machine has (or lacks) that the backend needs.
    pub found: Vec<String>,
}

/// One backend, as a host knows it.
#[derive(Clone)]
pub struct BackendRegistration {
    /// Name, rung, egress, capabilities and a one-line summary: what it
    /// claims. The router still reads the built backend's own declarations
    /// (once, when it is built), and refuses a backend whose declarations
    /// are below these.
    pub info: BackendInfo,
    /// Whether this machine can run it, and what it found.
    pub probe: fn(&BackendSetup) -> Probe,
    /// `None`: not built in this version (the probe says so).
    pub build: Option<BuildFn>,
    /// Checks, before anything is killed or removed, that a residue read
    /// back from a record names only what this backend makes for a
    /// sandbox, made by the keeper that ran as the given pid (a record is
    /// data, not an authority: root-run cleanup acts on nothing it has not
    /// checked). `Err`: why not, and what to do; the record is then left
    /// alone.
    pub vet: fn(&serde_json::Value, u32) -> Result<(), String>,
    /// Cleans up after a sandbox whose keeper is gone, from the residue the
    /// sandbox reported ([`crate::Sandbox::residue`]) once [`Self::vet`]
    /// passed it; returns what failed.
    pub reclaim: fn(&serde_json::Value) -> Vec<String>,
    /// Reclaims what no record names (a killed owner's leftovers found in
    /// the system's own state); returns (what was reclaimed, what failed).
    /// Takes the host's setup: the engines to look in are its settings.
    pub sweep: fn(&BackendSetup) -> (Vec<String>, Vec<String>),
    /// Where an operator's work dir shows inside.
    pub work_dir_view: WorkDirView,
    /// The uid/gid an operator's work dir must be owned by, when the
    /// backend requires one (it never chowns the operator's files).
    pub work_dir_owner: Option<u32>,
    /// The host uid a sandbox's workload runs as when the operator gave
    /// the work dir, when it is one: the escape kit runs its host
    /// processes as that uid (else as its own), so only the boundary can
    /// keep the workload from them.
    pub workload_uid: Option<u32>,
    /// Used only when the floor is at its rung or above, or when named
    /// (`--backend NAME`, a host's `backends:` list): a lower floor's
    /// default order passes over it. For a backend that serves less than
    /// the rungs below it would in that order (the first `gvisor` slice:
    /// no secrets, terminals or egress), so that opting down to a lower
    /// floor never lands a workload on it unasked.
    pub opt_in: bool,
}

/// A reclaim for backends that leave nothing outside their keeper.
pub fn nothing_to_reclaim(_: &serde_json::Value) -> Vec<String> {
    Vec::new()
}

/// The check for backends that leave nothing outside their keeper: only
/// an empty residue passes.
pub fn nothing_to_vet(residue: &serde_json::Value, _keeper: u32) -> Result<(), String> {
    if residue.is_null() {
        Ok(())
    } else {
        Err(format!(
            "the backend leaves nothing behind, but the record names a residue ({residue}); it was not written by this backend, so nothing of it is touched"
        ))
    }
}

/// A sweep for backends that leave nothing unrecorded.
pub fn nothing_to_sweep(_: &BackendSetup) -> (Vec<String>, Vec<String>) {
    (Vec::new(), Vec::new())
}

impl BackendRegistration {
    pub fn name(&self) -> &'static str {
        self.info.name
    }

    /// Builds it, or says why it cannot be.
    pub fn build(
        &self,
        setup: &BackendSetup,
        policy: Arc<Policy>,
    ) -> Result<Arc<dyn Backend>, String> {
        match self.build {
            Some(build) => build(setup, policy),
            None => Err(format!(
                "backend `{}` is not built in this version of cordon; `cordon doctor` shows what is built",
                self.info.name
            )),
        }
    }
}

impl std::fmt::Debug for BackendRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendRegistration")
            .field("info", &self.info)
            .field("built", &self.build.is_some())
            .finish()
    }
}

/// The backends a host knows, strongest rung first (registration order
/// within a rung): the default preference order.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    entries: Vec<BackendRegistration>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a backend; a second one of the same name is refused.
    pub fn register(&mut self, r: BackendRegistration) -> Result<(), String> {
        if self.get(r.info.name).is_some() {
            return Err(format!("backend `{}` is registered twice", r.info.name));
        }
        self.entries.push(r);
        // Stable: registration order is kept within a rung.
        self.entries
            .sort_by_key(|r| std::cmp::Reverse(r.info.isolation));
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&BackendRegistration> {
        self.entries.iter().find(|r| r.info.name == name)
    }

    /// Every registration, strongest rung first.
    pub fn iter(&self) -> impl Iterator<Item = &BackendRegistration> {
        self.entries.iter()
    }

    /// The names, quoted and comma-separated, for messages.
    pub fn names(&self) -> String {
        self.entries
            .iter()
            .map(|r| format!("`{}`", r.info.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The registration `name`, or a refusal listing what is registered.
    pub fn require(&self, name: &str) -> Result<&BackendRegistration, String> {
        self.get(name).ok_or_else(|| {
            format!(
                "`{name}` is not a backend cordon knows; name one of {} (`cordon doctor` lists them)",
                self.names()
            )
        })
    }

    /// The registrations at or above `floor`, strongest first.
    pub fn admitted_by(&self, floor: Isolation) -> impl Iterator<Item = &BackendRegistration> {
        self.entries
            .iter()
            .filter(move |r| r.info.admitted_by(floor))
    }
}
