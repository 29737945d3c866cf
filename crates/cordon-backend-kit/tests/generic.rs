//! The kit's generic backend over a toy engine: what it decides once for
//! every engine, each shown against the way one of the copies it replaced
//! got it wrong.
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cordon_backend_kit::{Engine, EngineBackend, Which};
use cordon_files::host_dir::HostDirectorySandbox;
use cordon_policy::{Deployment, Identity, Policy};
use cordon_sandbox::{
    AcquireRequest, Backend, BackendError, Capability, CapabilitySet, Egress, Isolation,
    IsolationError, Provenance, Sandbox, SandboxSpec,
};

/// A toy engine: a host directory per sandbox; `found` stands for the
/// sandboxes other processes made (what a real engine lists), and
/// `fail_dispose` names sandbox directories whose dispose fails.
struct Toy {
    scratch: PathBuf,
    made: AtomicUsize,
    disposed: Mutex<Vec<PathBuf>>,
    found: Mutex<Vec<(String, String, String)>>,
    fail_dispose: Mutex<Vec<String>>,
}

struct ToySandbox {
    inner: HostDirectorySandbox,
    name: String,
}

impl Sandbox for ToySandbox {
    fn id(&self) -> &str {
        &self.name
    }
    fn provenance(&self) -> &Provenance {
        self.inner.provenance()
    }
    fn start_exec(
        &self,
        req: &cordon_sandbox::ExecRequest,
        attach: cordon_sandbox::Attach,
    ) -> Result<cordon_sandbox::ExecHandle, cordon_sandbox::SandboxError> {
        self.inner.start_exec(req, attach)
    }
    fn write_file(
        &self,
        path: &str,
        contents: &[u8],
        mode: u32,
    ) -> Result<(), cordon_sandbox::SandboxError> {
        self.inner.write_file(path, contents, mode)
    }
}

impl Engine for Toy {
    type Sandbox = ToySandbox;
    fn name(&self) -> &str {
        "toy"
    }
    fn isolation(&self) -> Result<Isolation, IsolationError> {
        Ok(Isolation::None)
    }
    fn egress(&self) -> Egress {
        Egress::Closed
    }
    fn capabilities(&self) -> CapabilitySet {
        [Capability::Exec].into_iter().collect()
    }
    fn materialises(&self, _image: &str) -> Result<(), String> {
        Ok(())
    }
    fn create(
        &self,
        req: &AcquireRequest,
        egress: Option<Arc<dyn cordon_egress::EgressService>>,
    ) -> Result<ToySandbox, BackendError> {
        assert!(egress.is_none(), "a spec naming no hosts got a proxy");
        let n = self.made.fetch_add(1, Ordering::SeqCst);
        let name = format!("{}-{n}", req.key.agent_dir());
        let dir = self.scratch.join(&name);
        std::fs::create_dir(&dir).unwrap();
        Ok(ToySandbox {
            inner: HostDirectorySandbox::new(&dir, req.provenance.clone()).unwrap(),
            name,
        })
    }
    fn dispose(&self, s: &ToySandbox) -> Result<(), BackendError> {
        if self.fail_dispose.lock().unwrap().contains(&s.name) {
            return Err(cordon_backend_kit::failed(
                "dispose",
                format!("`{}` would not go", s.name),
            ));
        }
        self.disposed
            .lock()
            .unwrap()
            .push(self.scratch.join(&s.name));
        Ok(())
    }
    fn dispose_found(
        &self,
        which: Which<'_>,
        _held: &[Arc<ToySandbox>],
    ) -> Result<usize, BackendError> {
        let mut found = self.found.lock().unwrap();
        let before = found.len();
        found.retain(|(s, t, a)| !which.matches(s, t, a));
        Ok(before - found.len())
    }
}

fn backend(scratch: &std::path::Path) -> EngineBackend<Toy> {
    EngineBackend::new(
        Toy {
            scratch: scratch.to_path_buf(),
            made: AtomicUsize::new(0),
            disposed: Mutex::new(Vec::new()),
            found: Mutex::new(Vec::new()),
            fail_dispose: Mutex::new(Vec::new()),
        },
        Arc::new(Policy::load_default().unwrap()),
        Deployment {
            name: String::new(),
        },
        Default::default(),
    )
}

fn request(thread: &str, agent_dir: &str) -> AcquireRequest {
    let (t, a) = (thread.to_string(), agent_dir.to_string());
    let caller = cordon_sandbox::CallerContext::new(
        || "tenant".into(),
        move || t.clone(),
        move || a.clone(),
        || Identity {
            namespace: "test".into(),
            ..Default::default()
        },
    )
    .resolve()
    .unwrap();
    AcquireRequest {
        key: caller.key,
        provenance: Provenance {
            spec: SandboxSpec::new("run", "host").unwrap(),
            identity: caller.identity,
            policy_digest: String::new(),
            origin: None,
        },
        limits: cordon_sandbox::Limits {
            memory_bytes: 1 << 28,
            processes: 64,
            cpu_seconds: 60,
            wall_seconds: 60,
            disk_bytes: 1 << 28,
        },
        brokered: Vec::new(),
    }
}

#[test]
fn a_key_gets_its_one_sandbox_and_a_dispose_ends_it() {
    let tmp = tempfile::tempdir().unwrap();
    let b = backend(tmp.path());
    let one = b.acquire(&request("t", "a")).unwrap();
    let again = b.acquire(&request("t", "a")).unwrap();
    assert_eq!(one.id(), again.id());
    assert_eq!(b.engine().made.load(Ordering::SeqCst), 1);
    assert!(b.dispose(&request("t", "a").key).unwrap());
    assert_eq!(b.engine().disposed.lock().unwrap().len(), 1);
    assert!(!b.dispose(&request("t", "a").key).unwrap());
}

/// microvm recovered from a poisoned table and docker and gvisor refused
/// every later acquire and dispose: the kit recovers, so a panic in one
/// request never strands the sandboxes already made.
#[test]
fn a_poisoned_table_still_serves_and_disposes() {
    let tmp = tempfile::tempdir().unwrap();
    let b = Arc::new(backend(tmp.path()));
    b.acquire(&request("t", "a")).unwrap();
    let poisoner = b.clone();
    let _ = std::thread::spawn(move || {
        // A panic while the table is held (a panic in a request handler
        // the table's lock was taken in).
        poisoner.poison_for_tests();
    })
    .join();
    assert!(b.acquire(&request("t", "b")).is_ok());
    assert_eq!(b.dispose_scope("tenant", "t").unwrap(), 2);
}

/// docker's key dispose never looked for another process's sandbox (its
/// scope dispose did): a key held by no one here is asked of the engine.
#[test]
fn a_key_this_process_does_not_hold_is_found_by_the_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let b = backend(tmp.path());
    b.engine()
        .found
        .lock()
        .unwrap()
        .push(("tenant".into(), "t".into(), "a".into()));
    b.engine()
        .found
        .lock()
        .unwrap()
        .push(("tenant".into(), "t".into(), "other".into()));
    assert!(b.dispose(&request("t", "a").key).unwrap());
    // Only that key's: the other agent dir's is left.
    assert_eq!(b.engine().found.lock().unwrap().len(), 1);
    assert_eq!(b.dispose_scope("tenant", "t").unwrap(), 1);
    assert!(b.engine().found.lock().unwrap().is_empty());
}

/// gvisor's and microvm's scope dispose stopped at the first sandbox that
/// would not go, leaving the rest (and never asking for other processes'):
/// the kit disposes of every one it can and names what failed.
#[test]
fn a_scope_dispose_goes_on_past_a_failure_and_names_it() {
    let tmp = tempfile::tempdir().unwrap();
    let b = backend(tmp.path());
    let stuck = b.acquire(&request("t", "a")).unwrap().id().to_string();
    b.acquire(&request("t", "b")).unwrap();
    b.acquire(&request("t", "c")).unwrap();
    b.engine()
        .found
        .lock()
        .unwrap()
        .push(("tenant".into(), "t".into(), "d".into()));
    b.engine().fail_dispose.lock().unwrap().push(stuck.clone());
    let e = b.dispose_scope("tenant", "t").unwrap_err().to_string();
    assert!(e.contains(&stuck) && e.contains("3 disposed"), "{e}");
    assert_eq!(b.engine().disposed.lock().unwrap().len(), 2);
    assert!(b.engine().found.lock().unwrap().is_empty());
}
