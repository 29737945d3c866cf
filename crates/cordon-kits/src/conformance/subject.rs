//! Subjects: [`PosixGuestSubject`] plants through `sh` in any POSIX guest;
//! [`host_directory_subject`] is the host-directory test subject.

use std::sync::Arc;
use std::time::Duration;

use cordon_sandbox::{ExecOutput, ExecRequest, ExitStatus, Provenance, Sandbox, SandboxSpec};

use super::probe::ConformanceSubject;

/// A subject for any guest with `sh`, `ln`, `mkfifo`, `mkdir`, `rm` and
/// `cat`: it plants through [`Sandbox::exec`], as the workload would.
pub struct PosixGuestSubject {
    pub name: String,
    pub sandbox: Arc<dyn Sandbox>,
    pub work_dir: String,
    pub outside_dir: String,
    /// Set only where the guest can make device nodes (not a confined one).
    pub device_nodes: bool,
}

impl PosixGuestSubject {
    fn sh(&self, script: &str, args: &[&str], stdin: &[u8]) -> Result<ExecOutput, String> {
        let mut argv = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
        argv.push("sh".into());
        argv.extend(args.iter().map(|a| a.to_string()));
        self.sandbox
            .exec(&ExecRequest {
                argv,
                env: cordon_sandbox::outputs::plain_env(),
                stdin: stdin.to_vec(),
                timeout: Duration::from_secs(30),
                max_output_bytes: 2 << 20,
            })
            .map_err(|e| e.to_string())
    }

    fn run(&self, script: &str, args: &[&str], stdin: &[u8]) -> Result<(), String> {
        let out = self.sh(script, args, stdin)?;
        if out.status == ExitStatus::Code(0) {
            Ok(())
        } else {
            Err(format!(
                "`{script}` ended with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

const PARENT: &str = "mkdir -p -- \"$(dirname -- \"$1\")\" && rm -rf -- \"$1\"";

impl ConformanceSubject for PosixGuestSubject {
    fn name(&self) -> &str {
        &self.name
    }
    fn sandbox(&self) -> &dyn Sandbox {
        &*self.sandbox
    }
    fn work_dir(&self) -> &str {
        &self.work_dir
    }
    fn outside_dir(&self) -> &str {
        &self.outside_dir
    }
    fn plant_file(&self, path: &str, contents: &[u8]) -> Result<(), String> {
        self.run(&format!("{PARENT} && cat > \"$1\""), &[path], contents)
    }
    fn append(&self, path: &str, contents: &[u8]) -> Result<(), String> {
        self.run("cat >> \"$1\"", &[path], contents)
    }
    fn plant_dir(&self, path: &str) -> Result<(), String> {
        self.run(&format!("{PARENT} && mkdir -- \"$1\""), &[path], b"")
    }
    fn plant_link(&self, path: &str, target: &str) -> Result<(), String> {
        self.run(
            &format!("{PARENT} && ln -s -- \"$2\" \"$1\""),
            &[path, target],
            b"",
        )
    }
    fn plant_fifo(&self, path: &str) -> Result<(), String> {
        self.run(&format!("{PARENT} && mkfifo -- \"$1\""), &[path], b"")
    }
    fn plants_device_nodes(&self) -> bool {
        self.device_nodes
    }
    fn plant_device(&self, path: &str) -> Result<(), String> {
        // 1:3 is the null device: harmless if anything ever opened it.
        self.run(&format!("{PARENT} && mknod -- \"$1\" c 1 3"), &[path], b"")
    }
    fn read_back(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        let out = self.sh(
            "if [ -e \"$1\" ] || [ -L \"$1\" ]; then cat -- \"$1\"; else exit 3; fi",
            &[path],
            b"",
        )?;
        match out.status {
            ExitStatus::Code(0) => Ok(Some(out.stdout)),
            ExitStatus::Code(3) => Ok(None),
            other => Err(format!(
                "reading `{path}` back ended with {other}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }
    fn remove(&self, path: &str) -> Result<(), String> {
        self.run("rm -rf -- \"$1\"", &[path], b"")
    }
}

/// Whether this process can make device nodes (it runs as root), so the
/// host-directory subject can run the device probe.
#[cfg(target_os = "linux")]
pub fn can_make_device_nodes() -> bool {
    rustix::process::geteuid().is_root()
}

/// The host-directory test subject: a [`cordon_files::host_dir::HostDirectorySandbox`]
/// over `root/work`, with `root/outside` beside it, planted through `exec`
/// on the host. Device nodes are planted when `device_nodes` is set (root
/// only).
#[cfg(target_os = "linux")]
pub fn host_directory_subject(
    root: &std::path::Path,
    device_nodes: bool,
) -> Result<PosixGuestSubject, String> {
    let work = root.join("work");
    let outside = root.join("outside");
    for d in [&work, &outside] {
        std::fs::create_dir_all(d).map_err(|e| format!("`{}`: {e}", d.display()))?;
    }
    let text = |p: &std::path::Path| {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| format!("`{}` is not UTF-8", p.display()))
    };
    let (work_dir, outside_dir) = (text(&work)?, text(&outside)?);
    let spec = SandboxSpec::new("conformance", "host-directory")
        .and_then(|s| s.with_work_dir(&work_dir))
        .map_err(|e| e.to_string())?;
    let provenance = Provenance {
        spec,
        identity: cordon_policy::Identity {
            namespace: "cordon".into(),
            name: "conformance".into(),
            attested: false,
            labels: Default::default(),
        },
        policy_digest: String::new(),
        origin: None,
    };
    let sandbox = cordon_files::host_dir::HostDirectorySandbox::new(&work, provenance)
        .map_err(|e| e.to_string())?;
    Ok(PosixGuestSubject {
        name: "host-directory".into(),
        sandbox: Arc::new(sandbox),
        work_dir,
        outside_dir,
        device_nodes,
    })
}
