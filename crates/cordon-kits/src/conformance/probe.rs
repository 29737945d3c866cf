//! What every probe is given: the [`ConformanceSubject`] it attacks, the
//! [`SECRET`] it plants outside the work dir, and `plant`, which says what
//! could not be planted.

use cordon_sandbox::Sandbox;

/// What the kit plants outside the work dir. Seeing these bytes come back
/// is an escape.
/// Shorter than every probe's per-file cap, so a backend that follows the
/// link would really hand it over rather than trip a cap.
pub const SECRET: &[u8] = b"cordon-conformance-secret: never out\n";

/// A backend under test, seen only through its public surface.
///
/// Paths are absolute guest paths. Planting replaces whatever is at the
/// path and creates the parents it needs.
pub trait ConformanceSubject: Send + Sync {
    /// Shown in the report.
    fn name(&self) -> &str;
    fn sandbox(&self) -> &dyn Sandbox;
    /// The guest work dir the sandbox serves outputs from.
    fn work_dir(&self) -> &str;
    /// A guest directory outside the work dir the guest can write to.
    fn outside_dir(&self) -> &str;
    fn plant_file(&self, path: &str, contents: &[u8]) -> Result<(), String>;
    fn append(&self, path: &str, contents: &[u8]) -> Result<(), String>;
    fn plant_dir(&self, path: &str) -> Result<(), String>;
    fn plant_link(&self, path: &str, target: &str) -> Result<(), String>;
    fn plant_fifo(&self, path: &str) -> Result<(), String>;
    /// Whether this subject can make device nodes (a confined guest
    /// cannot); the device probe runs only when it can.
    fn plants_device_nodes(&self) -> bool {
        false
    }
    fn plant_device(&self, path: &str) -> Result<(), String> {
        Err(format!("`{path}`: this subject cannot make device nodes"))
    }
    /// What is at `path` now (following links is fine: the kit reads only
    /// its own outside files); `Ok(None)` when nothing is there.
    fn read_back(&self, path: &str) -> Result<Option<Vec<u8>>, String>;
    /// Removes whatever is at `path`, recursively (a probe's own directory).
    fn remove(&self, path: &str) -> Result<(), String>;
    /// The host-side writes into the work dir this backend makes (files
    /// in, ownership fixes, a work-dir sync). Each is attacked by the
    /// `host-write-*` probes. The default is [`Sandbox::write_file`].
    fn host_writes(&self) -> Vec<String> {
        vec!["Sandbox::write_file".to_string()]
    }
    /// Performs host-side write number `which` of [`Self::host_writes`].
    fn host_write(&self, which: usize, path: &str, contents: &[u8]) -> Result<(), String> {
        let _ = which;
        self.sandbox()
            .write_file(path, contents, 0o644)
            .map_err(|e| e.to_string())
    }
}

/// `r`, its error saying that `what` could not be planted.
pub(super) fn plant(what: &str, r: Result<(), String>) -> Result<(), String> {
    r.map_err(|e| format!("could not plant {what}: {e}"))
}
