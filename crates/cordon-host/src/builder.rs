//! The one host builder. Every surface — the CLI's `run`, `sandbox`,
//! `doctor`, kits, `serve` and `mcp`, the serve bench, a Rust library host,
//! a test that registers an engine of its own — maps its flags or its
//! configuration to a [`HostBuilder`] and gets its host from it: the
//! backends' setup (this binary in its roles, the work dir, the egress
//! proxy's settings), kept sandboxes' keeper, the secret store, and then
//! the assembly ([`crate::assembly`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cordon_sandbox::{
    BackendSetup, EgressSetup, EngineSettings, Isolation, Registry, SecretProvider,
};

use crate::config::{Floor, FloorSource, HostConfig};

use crate::assembly::{Host, HostError, HostSetup};
use crate::keeper::KeptConfig;
use crate::roles::SelfCommands;
use crate::state::StateDir;

/// The egress audit log's name in a state directory.
pub const EGRESS_AUDIT: &str = "egress-audit.jsonl";

/// Sandboxes kept beyond the process that made them: where they are
/// recorded, whose they are, and how long they may live.
#[derive(Clone)]
pub struct Keep {
    pub state: StateDir,
    /// The owner's name for itself, recorded with each sandbox.
    pub owner: String,
    pub idle_timeout: Duration,
    pub max_age: Duration,
    /// Pause an idle sandbox rather than dispose of it (`on_idle: pause`);
    /// `None`: dispose.
    pub on_idle_pause: Option<crate::keeper::IdlePause>,
}

/// What a host is built from; see the module's doc.
#[derive(Clone)]
pub struct HostBuilder {
    registry: Registry,
    floor: Floor,
    policy_file: Option<PathBuf>,
    only: Option<String>,
    order: Option<Vec<String>>,
    deployment: String,
    work_dir: Option<PathBuf>,
    egress: EgressSetup,
    keep: Option<Keep>,
    secrets: Option<Arc<dyn SecretProvider>>,
    commands: Option<SelfCommands>,
    engines: EngineSettings,
}

impl HostBuilder {
    /// A host over `registry`'s backends, at cordon's default floor, under
    /// `cordon:default`, sandboxes living and dying with this process.
    pub fn new(registry: Registry) -> HostBuilder {
        HostBuilder {
            registry,
            floor: Floor {
                rung: Isolation::DEFAULT_FLOOR,
                source: FloorSource::Default,
            },
            policy_file: None,
            only: None,
            order: None,
            deployment: String::new(),
            work_dir: None,
            egress: EgressSetup::default(),
            keep: None,
            secrets: None,
            commands: None,
            engines: crate::builtin_engine_settings(),
        }
    }

    /// Every backend this build knows ([`crate::builtin_registry`]).
    pub fn builtin() -> HostBuilder {
        HostBuilder::new(crate::builtin_registry())
    }

    /// The registry the host is built over.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The weakest rung accepted, and where it came from.
    pub fn floor(mut self, floor: Floor) -> HostBuilder {
        self.floor = floor;
        self
    }

    /// The floor the host will be held to.
    pub fn chosen_floor(&self) -> &Floor {
        &self.floor
    }

    /// The floor from a flag, `CORDON_MIN_ISOLATION` and a configuration
    /// file, in that order of precedence (else the default).
    pub fn floor_from(
        self,
        flag: Option<&str>,
        config: Option<&HostConfig>,
    ) -> Result<HostBuilder, crate::config::ConfigError> {
        let env = std::env::var(crate::config::FLOOR_ENV).ok();
        let floor = crate::config::resolve_floor(flag, env.as_deref(), config)?;
        Ok(self.floor(floor))
    }

    /// The policy file (`None`: `cordon:default`), canonical: a policy's
    /// digest covers each layer's name, and keepers and the egress proxy
    /// load it again by the same name.
    pub fn policy_file(mut self, file: Option<PathBuf>) -> HostBuilder {
        self.policy_file = file;
        self
    }

    /// Only this backend (still held to the floor).
    pub fn only(mut self, backend: Option<String>) -> HostBuilder {
        self.only = backend;
        self
    }

    /// These backends only, in this order of preference.
    pub fn order(mut self, backends: Option<Vec<String>>) -> HostBuilder {
        self.order = backends;
        self
    }

    /// The deployment's name (`env.name` in rules).
    pub fn deployment(mut self, name: impl Into<String>) -> HostBuilder {
        self.deployment = name.into();
        self
    }

    /// The operator's work dir (`None`: a fresh one per sandbox).
    pub fn work_dir(mut self, dir: Option<PathBuf>) -> HostBuilder {
        self.work_dir = dir;
        self
    }

    /// The egress proxy's settings (a configuration's `egress:` section);
    /// the proxy is always this binary in its role, loading the host's
    /// policy file.
    pub fn egress(mut self, egress: EgressSetup) -> HostBuilder {
        self.egress = egress;
        self
    }

    /// The egress audit log, when the settings name none: the state
    /// directory's [`EGRESS_AUDIT`].
    pub fn audit_in(mut self, state: &Path) -> HostBuilder {
        if self.egress.audit.is_none() {
            self.egress.audit = Some(state.join(EGRESS_AUDIT));
        }
        self
    }

    /// Where the egress proxy's decisions are written (`None`: its
    /// standard error).
    pub fn egress_audit(&self) -> Option<&Path> {
        self.egress.audit.as_deref()
    }

    /// Sandboxes are kept (a keeper each, this binary in its role).
    pub fn keep(mut self, keep: Keep) -> HostBuilder {
        self.keep = Some(keep);
        self
    }

    /// Where granted secrets are read from (`None`: a spec naming a secret
    /// is refused at acquire, saying so).
    pub fn secrets(mut self, provider: Option<Arc<dyn SecretProvider>>) -> HostBuilder {
        self.secrets = provider;
        self
    }

    /// Secrets read from a directory that exists, a file each.
    pub fn secrets_dir(self, dir: &Path) -> Result<HostBuilder, HostError> {
        let help = "help: name a directory that holds each secret as a file";
        let real = dir
            .canonicalize()
            .map_err(|e| HostError::Setup(format!("`{}`: {e}\n{help}", dir.display())))?;
        if !real.is_dir() {
            return Err(HostError::Setup(format!(
                "`{}` is not a directory\n{help}",
                dir.display()
            )));
        }
        Ok(self.secrets(Some(Arc::new(crate::secrets::DirectorySecrets::new(real)))))
    }

    /// Secrets answered by a command the provider accepts.
    pub fn secrets_command(self, argv: Vec<String>) -> Result<HostBuilder, HostError> {
        let c = crate::secrets::CommandSecrets::new(argv).map_err(HostError::Setup)?;
        Ok(self.secrets(Some(Arc::new(c))))
    }

    /// The binary run as the sandbox init, the keeper and the egress proxy
    /// (default: the running binary, [`SelfCommands::current`]).
    pub fn commands(mut self, commands: SelfCommands) -> HostBuilder {
        self.commands = Some(commands);
        self
    }

    /// Each engine's settings (default: the built-in engines' from this
    /// process's environment, [`crate::builtin_engine_settings`]).
    pub fn engines(mut self, engines: EngineSettings) -> HostBuilder {
        self.engines = engines;
        self
    }

    fn self_commands(&self) -> Result<SelfCommands, HostError> {
        match &self.commands {
            Some(c) => Ok(c.clone()),
            None => SelfCommands::current().map_err(HostError::Setup),
        }
    }

    /// What every backend of the host is built from.
    pub fn backend_setup(&self) -> Result<BackendSetup, HostError> {
        let commands = self.self_commands()?;
        let mut egress = self.egress.clone();
        egress.proxy = Some(commands.proxy);
        egress.policy_file = self.policy_file.clone();
        Ok(BackendSetup {
            deployment: self.deployment.clone(),
            init: Some(commands.init),
            work_dir: self.work_dir.clone(),
            scratch: std::env::temp_dir(),
            egress,
            engines: self.engines.clone(),
        })
    }

    /// The host's setup, for a surface that wants to see it before it is
    /// assembled.
    pub fn setup(&self) -> Result<HostSetup, HostError> {
        let keep = match &self.keep {
            None => None,
            Some(k) => Some(KeptConfig {
                state: k.state.clone(),
                keeper: self.self_commands()?.keeper,
                policy_file: self.policy_file.clone(),
                idle_timeout: k.idle_timeout,
                max_age: k.max_age,
                owner: k.owner.clone(),
                on_idle_pause: k.on_idle_pause.clone(),
            }),
        };
        Ok(HostSetup {
            floor: self.floor.clone(),
            policy_file: self.policy_file.clone(),
            only: self.only.clone(),
            order: self.order.clone(),
            backends: self.backend_setup()?,
            keep,
            secrets: self.secrets.clone(),
        })
    }

    /// Loads the policy and assembles the host.
    pub fn build(&self) -> Result<Host, HostError> {
        Host::assemble(&self.setup()?, &self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands() -> SelfCommands {
        SelfCommands::of(Path::new("/opt/cordon/bin/cordon"))
    }

    #[test]
    fn the_proxy_and_keeper_are_this_binary_and_load_the_hosts_policy() {
        let policy = PathBuf::from("/etc/cordon/policy.yaml");
        let d = tempfile::tempdir().unwrap();
        let state = StateDir::open(&d.path().join("state")).unwrap();
        let b = HostBuilder::new(Registry::new())
            .commands(commands())
            .policy_file(Some(policy.clone()))
            .egress(EgressSetup {
                // A configuration cannot name another proxy program.
                proxy: Some(cordon_sandbox::SelfCommand {
                    path: "/tmp/other".into(),
                    args: Vec::new(),
                }),
                ..Default::default()
            })
            .audit_in(state.path())
            .keep(Keep {
                state: state.clone(),
                owner: "test".into(),
                idle_timeout: Duration::from_secs(1),
                max_age: Duration::from_secs(2),
                on_idle_pause: None,
            });
        let s = b.setup().unwrap();
        assert_eq!(s.backends.egress.proxy, Some(commands().proxy));
        assert_eq!(s.backends.egress.policy_file, Some(policy.clone()));
        assert_eq!(
            s.backends.egress.audit,
            Some(state.path().join(EGRESS_AUDIT))
        );
        assert_eq!(s.backends.init, Some(commands().init));
        let keep = s.keep.unwrap();
        assert_eq!(keep.keeper, commands().keeper);
        assert_eq!(keep.policy_file, Some(policy));
    }

    #[test]
    fn a_configured_audit_log_is_kept_and_a_missing_secrets_dir_is_refused() {
        let b = HostBuilder::new(Registry::new())
            .commands(commands())
            .egress(EgressSetup {
                audit: Some("/var/log/cordon.jsonl".into()),
                ..Default::default()
            })
            .audit_in(Path::new("/run/cordon"));
        assert_eq!(
            b.backend_setup().unwrap().egress.audit,
            Some(PathBuf::from("/var/log/cordon.jsonl"))
        );
        let err = b
            .secrets_dir(Path::new("/nonexistent/secrets"))
            .err()
            .unwrap();
        assert_eq!(err.kind(), cordon_sandbox::ErrorKind::Invalid);
        assert!(err.to_string().contains("help: name a directory"), "{err}");
    }

    #[test]
    fn nothing_registered_is_refused_with_the_floor_named() {
        let err = HostBuilder::new(Registry::new())
            .commands(commands())
            .build()
            .err()
            .unwrap();
        assert!(matches!(err, HostError::NoBackend(_)), "{err}");
        assert!(err.to_string().contains("the floor"), "{err}");
    }
}
