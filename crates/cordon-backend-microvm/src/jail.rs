//! TEMPORARY stand-in (replaced by the real jail before the backend is
//! registered as built): starts QEMU as a plain child.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

pub struct JailSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub run_dir: PathBuf,
    pub read_only: Vec<PathBuf>,
    pub kvm: bool,
    pub memory_bytes: u64,
    pub name: String,
}

pub struct Jailed {
    child: Arc<Mutex<Child>>,
}

pub fn start(spec: &JailSpec, _init: &cordon_linux::InitProgram) -> Result<Jailed, String> {
    if !std::path::Path::new("/run/cordon-dev-unjailed").exists() {
        return Err("the jail around QEMU is not built yet; the microvm backend refuses to run QEMU unconfined".into());
    }
    let child = Command::new(&spec.program)
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", spec.program.display()))?;
    Ok(Jailed {
        child: Arc::new(Mutex::new(child)),
    })
}

impl Jailed {
    pub fn alive(&self) -> bool {
        matches!(
            self.child
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_wait(),
            Ok(None)
        )
    }
    pub fn kill(&self) {
        let mut c = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = c.kill();
        let _ = c.wait();
    }
    pub fn killer(&self) -> impl Fn() + Send + Sync + 'static {
        let c = self.child.clone();
        move || {
            let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
impl Jailed {
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}
