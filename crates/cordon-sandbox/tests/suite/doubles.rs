//! Test-double backends and sandboxes, and a log capture. (The doubles
//! for collecting outputs are `cordon-collect`'s.)

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{
    AcquireRequest, Backend, BackendError, CallerContext, Capability, CapabilitySet, Egress,
    ExecOutput, ExecRequest, ExitStatus, Isolation, IsolationError, Provenance, Router,
    RouterBuilder, Sandbox, SandboxError, SandboxKey, SandboxSpec,
};

pub const POLICY: &str = r#"policy:
  egress:
    allow:
      - name: package-index
        when: host == "pypi.org" || host.endsWith(".pythonhosted.org")
      - name: team-a-partner
        when: identity.namespace == "team-a" && host == "partner-a.example.com"
    deny:
      - name: tls-only
        when: port != 443
      - name: no-metadata
        when: host == "metadata.internal.example.com"
  compute:
    allow:
      - name: usr-bin
        when: command.startsWith("/usr/bin/")
    max_memory: 512MiB
    max_processes: 32
    max_cpu_seconds: 60
    max_wall_seconds: 600
  secret:
    allow:
      - name: team-a-secrets
        when: identity.namespace == "team-a" && secret.name.startsWith("team-a/")
    deny:
      - name: no-platform-secrets
        when: secret.name.startsWith("platform/")
"#;

pub fn policy() -> Arc<Policy> {
    Arc::new(Policy::load_str("policy.yaml", POLICY).expect("test policy loads"))
}

pub fn env() -> Deployment {
    Deployment {
        name: "test".into(),
    }
}

pub fn builder() -> RouterBuilder {
    Router::builder(policy(), env())
}

pub fn team_a() -> Identity {
    Identity {
        namespace: "team-a".into(),
        name: "builder".into(),
        attested: true,
        labels: BTreeMap::new(),
    }
}

/// A caller context whose parts are read from shared cells at call time,
/// as a host's request context would be.
#[derive(Clone)]
pub struct Request {
    pub scope: Arc<Mutex<String>>,
    pub thread: Arc<Mutex<String>>,
    pub agent_dir: Arc<Mutex<String>>,
    pub identity: Arc<Mutex<Identity>>,
}

impl Request {
    pub fn new(scope: &str, thread: &str) -> Request {
        Request {
            scope: Arc::new(Mutex::new(scope.into())),
            thread: Arc::new(Mutex::new(thread.into())),
            agent_dir: Arc::new(Mutex::new("agent".into())),
            identity: Arc::new(Mutex::new(team_a())),
        }
    }

    pub fn context(&self) -> CallerContext {
        let (s, t, a, i) = (
            self.scope.clone(),
            self.thread.clone(),
            self.agent_dir.clone(),
            self.identity.clone(),
        );
        CallerContext::new(
            move || s.lock().unwrap().clone(),
            move || t.lock().unwrap().clone(),
            move || a.lock().unwrap().clone(),
            move || i.lock().unwrap().clone(),
        )
    }
}

pub fn ctx() -> CallerContext {
    Request::new("tenant-1", "thread-1").context()
}

pub fn spec() -> SandboxSpec {
    SandboxSpec::new("bicep", "bicep-sandbox:1").unwrap()
}

/// A sandbox that records what reaches it.
pub struct FakeSandbox {
    pub id: String,
    pub provenance: Provenance,
    /// path -> (contents, mode)
    pub files: Mutex<BTreeMap<String, (Vec<u8>, u32)>>,
    /// The environment the sandbox was started with. A backend builds it
    /// from the acquire request, which has none.
    pub base_env: BTreeMap<String, String>,
    /// How many commands reached it.
    pub execs: std::sync::atomic::AtomicUsize,
    /// The egress changes that reached it.
    pub egress: Mutex<Vec<cordon_sandbox::EgressChange>>,
}

impl Sandbox for FakeSandbox {
    fn id(&self) -> &str {
        &self.id
    }
    fn provenance(&self) -> &Provenance {
        &self.provenance
    }
    /// `env` prints the environment; anything else exits 0.
    fn start_exec(
        &self,
        req: &ExecRequest,
        _attach: cordon_sandbox::Attach,
    ) -> Result<cordon_sandbox::ExecHandle, SandboxError> {
        Ok(cordon_sandbox::ExecHandle::finished(self.exec(req)))
    }
    /// A bare name is `/usr/bin/NAME`; links are not followed (there are
    /// none in this double).
    fn resolve_command(
        &self,
        program: &str,
    ) -> Result<cordon_sandbox::ResolvedCommand, SandboxError> {
        let command = match program.starts_with('/') {
            true => program.to_string(),
            false => format!("/usr/bin/{program}"),
        };
        Ok(cordon_sandbox::ResolvedCommand {
            command_target: command.clone(),
            command,
        })
    }
    fn exec(&self, req: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.execs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut env = self.base_env.clone();
        env.extend(req.env.clone());
        let stdout = if matches!(
            req.argv.first().map(String::as_str),
            Some("env" | "/usr/bin/env")
        ) {
            env.iter()
                .map(|(k, v)| format!("{k}={v}\n"))
                .collect::<String>()
                .into_bytes()
        } else {
            Vec::new()
        };
        Ok(ExecOutput {
            status: ExitStatus::Code(0),
            stdout,
            stderr: Vec::new(),
            stdout_truncated: false,
            stderr_truncated: false,
        })
    }
    /// Records the change; a closing answers its reason as an error.
    fn change_egress(
        &self,
        change: cordon_sandbox::EgressChange,
        _by: &str,
    ) -> Result<u64, SandboxError> {
        let mut seen = self.egress.lock().unwrap();
        seen.push(change.clone());
        match change {
            cordon_sandbox::EgressChange::Close(why) => Err(SandboxError::Refused {
                reason: why,
                rules: Vec::new(),
            }),
            cordon_sandbox::EgressChange::Replace(_) => Ok(seen.len() as u64 + 1),
        }
    }
    fn write_file(&self, path: &str, contents: &[u8], mode: u32) -> Result<(), SandboxError> {
        self.files
            .lock()
            .unwrap()
            .insert(path.to_string(), (contents.to_vec(), mode));
        Ok(())
    }
}

/// A backend double with honest get-or-create semantics: the sandbox for a
/// key is kept with the provenance it was created with.
pub struct Fake {
    pub name: String,
    pub isolation: Result<Isolation, IsolationError>,
    pub egress: Egress,
    pub capabilities: CapabilitySet,
    pub sandboxes: Mutex<HashMap<SandboxKey, Arc<FakeSandbox>>>,
    pub acquires: AtomicUsize,
    pub creates: AtomicUsize,
    pub requests: Mutex<Vec<String>>,
    pub fail_acquire: bool,
    pub fail_dispose_scope: bool,
    /// Its dispose fails (an engine that does not answer), the sandbox
    /// left in place.
    pub fail_dispose: bool,
    /// `Some(names)`: the only images it can run.
    pub images: Option<Vec<String>>,
}

impl Fake {
    pub fn new(name: &str, isolation: Isolation, egress: Egress) -> Fake {
        Fake {
            name: name.into(),
            isolation: Ok(isolation),
            egress,
            capabilities: CapabilitySet::default_for_backend(),
            sandboxes: Mutex::new(HashMap::new()),
            acquires: AtomicUsize::new(0),
            creates: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            fail_acquire: false,
            fail_dispose_scope: false,
            fail_dispose: false,
            images: None,
        }
    }

    pub fn with_images(mut self, images: &[&str]) -> Fake {
        self.images = Some(images.iter().map(|s| s.to_string()).collect());
        self
    }

    pub fn microvm(name: &str) -> Arc<Fake> {
        Arc::new(Fake::new(name, Isolation::Microvm, Egress::Allowlist))
    }

    pub fn with_caps(mut self, caps: &[Capability]) -> Fake {
        self.capabilities = caps.iter().copied().collect();
        self
    }

    pub fn acquires(&self) -> usize {
        self.acquires.load(Ordering::SeqCst)
    }

    pub fn creates(&self) -> usize {
        self.creates.load(Ordering::SeqCst)
    }

    pub fn sandbox(&self, key_scope: &str) -> Option<Arc<FakeSandbox>> {
        self.sandboxes
            .lock()
            .unwrap()
            .iter()
            .find(|(k, _)| k.scope() == key_scope)
            .map(|(_, s)| s.clone())
    }
}

impl Backend for Fake {
    fn materialises(&self, image: &str) -> Result<(), String> {
        match &self.images {
            Some(list) if !list.iter().any(|i| i == image) => {
                Err(format!("it runs only {}", list.join(", ")))
            }
            _ => Ok(()),
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
    fn isolation(&self) -> Result<Isolation, IsolationError> {
        self.isolation.clone()
    }
    fn egress(&self) -> Egress {
        self.egress
    }
    fn capabilities(&self) -> CapabilitySet {
        self.capabilities.clone()
    }
    fn acquire(&self, req: &AcquireRequest) -> Result<Arc<dyn Sandbox>, BackendError> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        self.requests.lock().unwrap().push(format!("{req:?}"));
        if self.fail_acquire {
            return Err(BackendError::Failed {
                operation: "create",
                reason: "the engine is down".into(),
            });
        }
        let mut map = self.sandboxes.lock().unwrap();
        let sb = map
            .entry(req.key.clone())
            .or_insert_with(|| {
                let n = self.creates.fetch_add(1, Ordering::SeqCst);
                Arc::new(FakeSandbox {
                    id: format!("{}-{n}", self.name),
                    provenance: req.provenance.clone(),
                    files: Mutex::new(BTreeMap::new()),
                    base_env: BTreeMap::from([("PATH".to_string(), "/usr/bin".to_string())]),
                    execs: Default::default(),
                    egress: Default::default(),
                })
            })
            .clone();
        Ok(sb)
    }
    fn dispose(&self, key: &SandboxKey) -> Result<bool, BackendError> {
        if self.fail_dispose {
            return Err(BackendError::Failed {
                operation: "dispose",
                reason: "the keeper does not answer".into(),
            });
        }
        Ok(self.sandboxes.lock().unwrap().remove(key).is_some())
    }
    fn dispose_scope(&self, scope: &str, thread_id: &str) -> Result<usize, BackendError> {
        if self.fail_dispose_scope {
            return Err(BackendError::Failed {
                operation: "list sandboxes",
                reason: "the control plane timed out".into(),
            });
        }
        let mut map = self.sandboxes.lock().unwrap();
        let before = map.len();
        map.retain(|k, _| !(k.scope() == scope && k.thread_id() == thread_id));
        Ok(before - map.len())
    }
}

/// A backend that declares only what it must: no egress, no capabilities.
pub struct Silent;

impl Backend for Silent {
    fn name(&self) -> &str {
        "silent"
    }
    fn isolation(&self) -> Result<Isolation, IsolationError> {
        Ok(Isolation::Microvm)
    }
    fn acquire(&self, _req: &AcquireRequest) -> Result<Arc<dyn Sandbox>, BackendError> {
        panic!("a backend with undeclared egress must never be reached")
    }
    fn dispose(&self, _key: &SandboxKey) -> Result<bool, BackendError> {
        Ok(false)
    }
    fn dispose_scope(&self, _scope: &str, _thread_id: &str) -> Result<usize, BackendError> {
        Ok(0)
    }
}

/// Runs `f` with `tracing` events captured; returns its value and the log.
pub fn capture_logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // A global subscriber that wants every event (and writes none): with
    // only scoped ones, a callsite first reached on a thread that has none
    // could be cached as uninteresting while another test's subscriber
    // came and went, and this capture would miss its event (a flake, seen).
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_writer(std::io::sink)
                .finish(),
        );
    });
    let buf = Buf(Arc::new(Mutex::new(Vec::new())));
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .finish();
    let value = tracing::subscriber::with_default(subscriber, f);
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (value, log)
}
