//! What a guest boots from, found or built once and cached by content:
//!
//! - the **kernel**: `CORDON_VM_KERNEL`, else the newest Debian cloud
//!   kernel in `/boot` (`vmlinuz-*-cloud-amd64`), with its modules in
//!   `/lib/modules/RELEASE`;
//! - the **guest agent**: `CORDON_VM_AGENT`, else `cordon-vm-agent` next to
//!   the running executable, else the static build in the cargo target
//!   directory the executable was built in;
//! - the **initramfs**: the agent as `/init`, the modules the guest needs
//!   (with their dependencies, from `modules.dep`) under `/modules` and
//!   their load order in `/modules/order`; a `newc` cpio archive written
//!   here (the format is a dozen fields of hex: no library needed), cached
//!   under the sha256 of everything in it;
//! - the **root image**: a stored image's tree packed read-only with
//!   `mkfs.erofs`, cached under the image's digest.
//!
//! The cache lives in `CORDON_VM_CACHE`, else `/var/lib/cordon/microvm`,
//! root's and not group- or world-writable (checked); entries are written
//! to a temporary name and renamed, so a reader sees a whole file or none.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The modules the guest loads, by name; their dependencies come along.
/// Images are packed as erofs only, so squashfs is not loaded (60 ms of
/// every TCG boot, measured).
pub const GUEST_MODULES: [&str; 4] = ["virtio_mmio", "virtio_blk", "virtio_console", "erofs"];

/// Bumped whenever the initramfs layout changes, so a cached one is not
/// reused by a cordon that expects another.
const LAYOUT: &str = "cordon-initramfs-2";

/// The kernel and where its modules are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub image: PathBuf,
    pub release: String,
    pub modules: PathBuf,
}

/// The microVM backend's settings (`BackendSetup::engines`, under its
/// name): where its kernel, agent and cache are, and whether to use the
/// emulator. The `cordon` binary fills them from `CORDON_VM_KERNEL`,
/// `CORDON_VM_AGENT`, `CORDON_VM_CACHE` and `CORDON_VM_ACCEL=tcg`; the
/// backend reads them only from its setup, so a keeper boots its owner's
/// kernel from its owner's cache.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSettings {
    /// The guest kernel (`vmlinuz-RELEASE`); `None`: the newest Debian
    /// cloud kernel in `/boot`.
    #[serde(default)]
    pub kernel: Option<PathBuf>,
    /// The guest agent; `None`: `cordon-vm-agent` beside this binary.
    #[serde(default)]
    pub agent: Option<PathBuf>,
    /// The cache; `None`: `/var/lib/cordon/microvm`.
    #[serde(default)]
    pub cache: Option<PathBuf>,
    /// Use the emulator (TCG) even where KVM would run a guest.
    #[serde(default)]
    pub tcg: bool,
}

impl VmSettings {
    /// What a surface reads from its environment.
    pub fn from_env() -> VmSettings {
        let path = |v: &str| {
            std::env::var_os(v)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        };
        VmSettings {
            kernel: path("CORDON_VM_KERNEL"),
            agent: path("CORDON_VM_AGENT"),
            cache: path("CORDON_VM_CACHE"),
            tcg: std::env::var("CORDON_VM_ACCEL").as_deref() == Ok("tcg"),
        }
    }

    /// The settings in `setup`.
    pub fn of(setup: &cordon_sandbox::BackendSetup) -> Result<VmSettings, String> {
        setup.engines.get(crate::NAME)
    }
}

/// Finds the guest kernel, or says how to get one.
pub fn kernel(settings: &VmSettings) -> Result<Kernel, String> {
    if let Some(p) = &settings.kernel {
        let image = p.clone();
        let release = release_of(&image).ok_or_else(|| {
            format!(
                "CORDON_VM_KERNEL=`{}` is not named `vmlinuz-RELEASE`, so its modules cannot be found",
                image.display()
            )
        })?;
        return with_modules(image, release);
    }
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir("/boot")
        .map_err(|e| format!("cannot list /boot: {e}; {INSTALL_KERNEL}"))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter_map(|p| release_of(&p).map(|r| (r, p)))
        .filter(|(r, _)| r.ends_with("-cloud-amd64"))
        .collect();
    found.sort_by_key(|a| version_key(&a.0));
    let (release, image) = found
        .pop()
        .ok_or_else(|| format!("no Debian cloud kernel in /boot; {INSTALL_KERNEL}"))?;
    if version_key(&release)
        .get(..2)
        .is_some_and(|v| v < [6, 12].as_slice())
    {
        return Err(format!(
            "the newest cloud kernel in /boot is {release}; a guest needs 6.12 or later (Landlock ABI 6, which the sandbox inside the guest holds); {INSTALL_KERNEL}"
        ));
    }
    with_modules(image, release)
}

const INSTALL_KERNEL: &str = "install Debian's from bookworm-backports (add the suite to apt's sources, then `apt-get install -t bookworm-backports linux-image-cloud-amd64`), or name a kernel with CORDON_VM_KERNEL=/boot/vmlinuz-RELEASE";

fn release_of(p: &Path) -> Option<String> {
    p.file_name()?
        .to_str()?
        .strip_prefix("vmlinuz-")
        .filter(|r| !r.is_empty())
        .map(str::to_string)
}

/// `6.1.0-48-cloud-amd64` sorts by its numbers.
fn version_key(release: &str) -> Vec<u64> {
    release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

fn with_modules(image: PathBuf, release: String) -> Result<Kernel, String> {
    let modules = Path::new("/lib/modules").join(&release);
    if !modules.join("modules.dep").is_file() {
        return Err(format!(
            "the kernel `{}` has no modules at `{}`; install its package (`apt-get install linux-image-{release}`)",
            image.display(),
            modules.display()
        ));
    }
    std::fs::File::open(&image)
        .map_err(|e| format!("cannot read the kernel `{}`: {e}", image.display()))?;
    Ok(Kernel {
        image,
        release,
        modules,
    })
}

/// Finds the guest agent binary, or says how to build it.
pub fn agent(settings: &VmSettings) -> Result<PathBuf, String> {
    if let Some(p) = &settings.agent {
        let p = p.clone();
        return if p.is_file() {
            trusted(&p)?;
            match is_static(&p)? {
                true => Ok(p),
                false => Err(format!(
                    "CORDON_VM_AGENT=`{}` is dynamically linked and cannot run as a guest's init; {BUILD_AGENT}",
                    p.display()
                )),
            }
        } else {
            Err(format!(
                "CORDON_VM_AGENT=`{}` is not a file; {BUILD_AGENT}",
                p.display()
            ))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut candidates = Vec::new();
    if let Some(dir) = exe.parent() {
        candidates.push(dir.join("cordon-vm-agent"));
        // target/PROFILE/cordon or target/PROFILE/deps/test-…
        for up in dir.ancestors().take(3) {
            for profile in ["guest", "release", "debug"] {
                candidates.push(
                    up.join("x86_64-unknown-linux-gnu")
                        .join(profile)
                        .join("cordon-vm-agent"),
                );
            }
        }
    }
    // The checkout this cordon was built from, as `.ci/run` builds the
    // agent there: an installed `cordon` (`cargo install`) finds it too.
    candidates.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/x86_64-unknown-linux-gnu/guest/cordon-vm-agent"),
    );
    // A dynamically linked build (a plain `cargo build` makes one next to
    // `cordon`) cannot be a guest's PID 1: there is no libc in the
    // initramfs. Passed over, and named when nothing else is found. So is
    // one that someone else could have written: it becomes the guest's
    // init.
    let mut dynamic = None;
    for c in candidates.into_iter().filter(|c| c.is_file()) {
        if trusted(&c).is_err() {
            continue;
        }
        match is_static(&c) {
            Ok(true) => return Ok(c.canonicalize().unwrap_or(c)),
            Ok(false) => {
                dynamic.get_or_insert(c);
            }
            Err(_) => {}
        }
    }
    Err(match dynamic {
        Some(d) => format!(
            "the guest agent `{}` is dynamically linked and cannot run as a guest's init; {BUILD_AGENT}",
            d.display()
        ),
        None => format!("the guest agent `cordon-vm-agent` is not built; {BUILD_AGENT}"),
    })
}

/// The agent becomes every guest's init: it must be this user's (or
/// root's) and writable by no one else.
fn trusted(p: &Path) -> Result<(), String> {
    let m = std::fs::metadata(p).map_err(|e| format!("`{}`: {e}", p.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if (m.uid() != me && m.uid() != 0) || m.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "`{}` is not this user's or root's, or others can write to it; it would be every guest's init",
            p.display()
        ));
    }
    Ok(())
}

/// Whether the ELF file at `p` names no program interpreter (`PT_INTERP`):
/// statically linked.
pub fn is_static(p: &Path) -> Result<bool, String> {
    use std::os::unix::fs::FileExt;
    // Read where they are: the ELF header, then the program headers it
    // points at (a few hundred bytes; this runs on every start, and
    // reading a 64 KiB prefix into a growing buffer was 3% of a `cordon
    // run`'s CPU).
    let f = std::fs::File::open(p).map_err(|e| format!("`{}`: {e}", p.display()))?;
    let read_at = |len: usize, at: u64| -> Result<Vec<u8>, String> {
        let mut b = vec![0u8; len];
        let mut got = 0;
        while got < len {
            match f.read_at(&mut b[got..], at + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("`{}`: {e}", p.display())),
            }
        }
        b.truncate(got);
        Ok(b)
    };
    let head = read_at(64, 0)?;
    if head.get(..5) != Some(b"\x7fELF\x02".as_slice()) {
        return Err(format!("`{}` is not a 64-bit ELF file", p.display()));
    }
    let bad = || format!("`{}` is a truncated ELF file", p.display());
    let field = |b: &[u8], o: usize, n: usize| -> Result<u64, String> {
        let s = b.get(o..o + n).ok_or_else(bad)?;
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    };
    let phoff = field(&head, 0x20, 8)?;
    let phentsize = usize::try_from(field(&head, 0x36, 2)?).map_err(|_| bad())?;
    let phnum = usize::try_from(field(&head, 0x38, 2)?).map_err(|_| bad())?;
    // An ELF64 program header is 56 bytes; at most 65535 of them.
    if phentsize != 56 {
        return Err(bad());
    }
    let table = read_at(phnum * phentsize, phoff)?;
    for i in 0..phnum {
        if field(&table, i * phentsize, 4)? == 3 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// How the agent is built (statically, so the initramfs needs no libc).
pub const BUILD_AGENT: &str = "install it next to `cordon` with `RUSTFLAGS='-C target-feature=+crt-static' cargo install --locked --path crates/cordon-vm-agent --profile guest --target x86_64-unknown-linux-gnu` from cordon's source (or build it in the checkout with `cargo build` and the same flags, as `.ci/run` does), or name it with CORDON_VM_AGENT";

/// The cache directory: made root's and private when missing; refused
/// when someone else could write to it.
pub fn cache_dir(settings: &VmSettings) -> Result<PathBuf, String> {
    let dir = settings
        .cache
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/cordon/microvm"));
    if !dir.exists() {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot make the cache `{}`: {e}", dir.display()))?;
        // QEMU runs as another uid in its jail and opens what is cached
        // here: searchable by others, whatever the umask.
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
    }
    let m = std::fs::symlink_metadata(&dir)
        .map_err(|e| format!("the cache `{}`: {e}", dir.display()))?;
    let me = rustix::process::geteuid().as_raw();
    if !m.is_dir() || m.uid() != me || m.permissions().mode() & 0o022 != 0 {
        return Err(format!(
            "the cache `{}` is not a directory of this user's that only it can write; fix its owner and mode (chmod go-w) or set CORDON_VM_CACHE",
            dir.display()
        ));
    }
    Ok(dir)
}

/// The module files for `names` and everything they depend on, in an
/// order that loads each after its dependencies. Names are matched on the
/// file stem (`virtio_mmio` is `…/virtio_mmio.ko`); a name the kernel
/// builds in (listed in `modules.builtin`) needs no file.
pub fn module_closure(modules_dir: &Path, names: &[&str]) -> Result<Vec<PathBuf>, String> {
    let dep = std::fs::read_to_string(modules_dir.join("modules.dep"))
        .map_err(|e| format!("cannot read `{}/modules.dep`: {e}", modules_dir.display()))?;
    let builtin = std::fs::read_to_string(modules_dir.join("modules.builtin")).unwrap_or_default();
    let mut table: Vec<(String, Vec<String>)> = Vec::new();
    for line in dep.lines() {
        let Some((m, deps)) = line.split_once(':') else {
            continue;
        };
        table.push((
            m.trim().to_string(),
            deps.split_whitespace().map(str::to_string).collect(),
        ));
    }
    let stem = |p: &str| -> String {
        Path::new(p)
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or("")
            .split(".ko")
            .next()
            .unwrap_or("")
            .replace('-', "_")
    };
    let mut order: Vec<String> = Vec::new();
    fn visit(
        m: &str,
        table: &[(String, Vec<String>)],
        order: &mut Vec<String>,
        depth: usize,
    ) -> Result<(), String> {
        if depth > 64 {
            return Err(format!("modules.dep has a cycle through `{m}`"));
        }
        if order.iter().any(|o| o == m) {
            return Ok(());
        }
        let deps = table
            .iter()
            .find(|(name, _)| name == m)
            .map(|(_, d)| d.clone())
            .unwrap_or_default();
        for d in deps {
            visit(&d, table, order, depth + 1)?;
        }
        order.push(m.to_string());
        Ok(())
    }
    for want in names {
        match table.iter().find(|(m, _)| stem(m) == *want) {
            Some((m, _)) => visit(m, &table, &mut order, 0)?,
            None if builtin.lines().any(|l| stem(l) == *want) => {}
            None => {
                return Err(format!(
                    "the guest kernel has no module `{want}` (`{}`); use a kernel with virtio-mmio, virtio-blk, virtio-console and erofs",
                    modules_dir.display()
                ))
            }
        }
    }
    Ok(order.into_iter().map(|m| modules_dir.join(m)).collect())
}

/// One archive member.
enum Member<'a> {
    Dir(&'a str),
    File {
        name: &'a str,
        mode: u32,
        data: &'a [u8],
    },
    CharDev {
        name: &'a str,
        major: u32,
        minor: u32,
    },
}

/// Writes a `newc` cpio archive (the initramfs format the kernel unpacks).
fn write_newc(out: &mut impl Write, members: &[Member<'_>]) -> std::io::Result<()> {
    fn pad(out: &mut (impl Write + ?Sized), len: usize) -> std::io::Result<()> {
        out.write_all(&[0u8; 3][..(4 - len % 4) % 4])
    }
    let mut ino = 1u32;
    let mut one = |out: &mut dyn Write,
                   name: &str,
                   mode: u32,
                   data: &[u8],
                   rdev: (u32, u32)|
     -> std::io::Result<()> {
        let namesize = name.len() + 1;
        let header = format!(
            "070701{ino:08x}{mode:08x}{:08x}{:08x}{nlink:08x}{:08x}{size:08x}{:08x}{:08x}{:08x}{:08x}{namesize:08x}{:08x}",
            0,
            0,
            0,
            0,
            0,
            rdev.0,
            rdev.1,
            0,
            nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 },
            size = data.len(),
        );
        ino += 1;
        out.write_all(header.as_bytes())?;
        out.write_all(name.as_bytes())?;
        out.write_all(&[0])?;
        pad(&mut *out, header.len() + namesize)?;
        out.write_all(data)?;
        pad(&mut *out, data.len())
    };
    for m in members {
        match m {
            Member::Dir(name) => one(out, name, 0o040755, &[], (0, 0))?,
            Member::File { name, mode, data } => one(out, name, 0o100000 | mode, data, (0, 0))?,
            Member::CharDev { name, major, minor } => {
                one(out, name, 0o020600, &[], (*major, *minor))?
            }
        }
    }
    one(out, "TRAILER!!!", 0, &[], (0, 0))
}

/// The initramfs for `kernel` with `agent` as its init: built when no
/// cached one has the same content, else the cached one.
pub fn initramfs(settings: &VmSettings, kernel: &Kernel, agent: &Path) -> Result<PathBuf, String> {
    // Every `cordon` command that considers this backend asks for it: a
    // small index keyed by what the image is made from (the agent's and
    // the kernel's files by path, size and mtime) names the one made
    // before, without reading and hashing them all again.
    let index =
        cache_dir(settings)?.join(format!("initramfs-index-{}.txt", quick_key(kernel, agent)));
    if let Some(known) = std::fs::read_to_string(&index)
        .ok()
        .map(PathBuf::from)
        .filter(|p| p.is_file())
    {
        return Ok(known);
    }
    let made = initramfs_made(settings, kernel, agent)?;
    let tmp = index.with_extension(format!("tmp-{}", std::process::id()));
    if std::fs::write(&tmp, made.display().to_string()).is_ok() {
        let _ = std::fs::rename(&tmp, &index);
    }
    Ok(made)
}

/// What [`initramfs`]'s index is keyed by: the layout, the guest modules
/// asked for, and the stamps (path, size, mtime, inode) of the agent, the
/// kernel image, its `modules.dep` and `modules.builtin` (a kernel package
/// upgrade rewrites them) and its configuration.
fn quick_key(kernel: &Kernel, agent: &Path) -> String {
    let mut h = Sha256::new();
    h.update(LAYOUT);
    h.update(GUEST_MODULES.join(",").as_bytes());
    let config = PathBuf::from(format!("/boot/config-{}", kernel.release));
    for p in [
        agent,
        kernel.image.as_path(),
        &kernel.modules.join("modules.dep"),
        &kernel.modules.join("modules.builtin"),
        config.as_path(),
    ] {
        h.update(crate::probe::stamp(p).as_bytes());
    }
    hex(&h.finalize())[..32].to_string()
}

/// [`initramfs`], made (or found by its contents' digest).
fn initramfs_made(settings: &VmSettings, kernel: &Kernel, agent: &Path) -> Result<PathBuf, String> {
    let agent_bytes = std::fs::read(agent)
        .map_err(|e| format!("cannot read the guest agent `{}`: {e}", agent.display()))?;
    let mods = module_closure(&kernel.modules, &GUEST_MODULES)?;
    let decompresses = std::fs::read_to_string(format!("/boot/config-{}", kernel.release))
        .map(|c| c.lines().any(|l| l == "CONFIG_MODULE_DECOMPRESS=y"))
        .unwrap_or(false);
    let mut loaded: Vec<(String, Vec<u8>)> = Vec::new();
    for m in &mods {
        let name = m
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("`{}` has no plain name", m.display()))?
            .to_string();
        if name.ends_with(".xz") && !decompresses {
            return Err(format!(
                "`{}` is compressed and the kernel's configuration does not say it decompresses modules itself (CONFIG_MODULE_DECOMPRESS); use another kernel",
                m.display()
            ));
        }
        if name.ends_with(".zst") || name.ends_with(".gz") {
            return Err(format!(
                "`{}` is compressed in a form the guest agent does not load (plain `.ko` and `.ko.xz` only)",
                m.display()
            ));
        }
        let data = std::fs::read(m).map_err(|e| format!("cannot read `{}`: {e}", m.display()))?;
        loaded.push((name, data));
    }
    let order: String = loaded.iter().map(|(n, _)| format!("{n}\n")).collect();
    let mut h = Sha256::new();
    h.update(LAYOUT);
    h.update(&agent_bytes);
    for (n, d) in &loaded {
        h.update(n.as_bytes());
        h.update((d.len() as u64).to_le_bytes());
        h.update(d);
    }
    let digest = hex(&h.finalize());
    let cache = cache_dir(settings)?;
    let path = cache.join(format!("initramfs-{}.cpio", &digest[..32]));
    if path.is_file() {
        return Ok(path);
    }
    let names: Vec<String> = loaded.iter().map(|(n, _)| format!("modules/{n}")).collect();
    let mut members = vec![
        Member::Dir("dev"),
        Member::CharDev {
            name: "dev/console",
            major: 5,
            minor: 1,
        },
        Member::Dir("proc"),
        Member::Dir("sys"),
        Member::Dir("tmp"),
        Member::Dir("image"),
        Member::Dir("run"),
        Member::Dir("modules"),
        Member::File {
            name: "init",
            mode: 0o755,
            data: &agent_bytes,
        },
        Member::File {
            name: "modules/order",
            mode: 0o644,
            data: order.as_bytes(),
        },
    ];
    for ((_, data), name) in loaded.iter().zip(&names) {
        members.push(Member::File {
            name,
            mode: 0o644,
            data,
        });
    }
    let mut bytes = Vec::new();
    write_newc(&mut bytes, &members).map_err(|e| format!("writing the initramfs: {e}"))?;
    publish(&path, &bytes)?;
    Ok(path)
}

/// Writes `bytes` at `path` through a temporary name in the same directory.
fn publish(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| format!("writing `{}`: {e}", tmp.display()))?;
    // Read by QEMU as its jail's uid: readable by others, whatever the umask.
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("`{}`: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("publishing `{}`: {e}", path.display())
    })
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The image tree `root` (digest `digest`, `sha256:…`) packed read-only
/// as erofs: the cached pack when there is one, else made now.
pub fn packed_image(settings: &VmSettings, root: &Path, digest: &str) -> Result<PathBuf, String> {
    let hexpart = digest.strip_prefix("sha256:").unwrap_or(digest);
    if hexpart.is_empty() || !hexpart.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("`{digest}` is not an image digest"));
    }
    let cache = cache_dir(settings)?.join("images");
    if !cache.exists() {
        std::fs::create_dir_all(&cache)
            .map_err(|e| format!("cannot make `{}`: {e}", cache.display()))?;
        let _ = std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755));
    }
    let path = cache.join(format!("{hexpart}.erofs"));
    if path.is_file() {
        return Ok(path);
    }
    pack_dir(root, &path)?;
    Ok(path)
}

/// Packs the tree `root` as a read-only erofs image at `dest` (through a
/// temporary name).
pub fn pack_dir(root: &Path, dest: &Path) -> Result<(), String> {
    let mkfs = ["/usr/bin/mkfs.erofs", "/usr/sbin/mkfs.erofs"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or("`mkfs.erofs` is not installed; install it with `apt-get install erofs-utils`")?;
    let tmp = dest.with_extension(format!("tmp-{}", std::process::id()));
    let out = std::process::Command::new(&mkfs)
        .arg("--quiet")
        .arg(&tmp)
        .arg(root)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", mkfs.display()))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "`mkfs.erofs` could not pack `{}` ({}): {}",
            root.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("`{}`: {e}", tmp.display()))?;
    std::fs::rename(&tmp, dest).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("publishing `{}`: {e}", dest.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_is_what_cpio_reads() {
        let mut out = Vec::new();
        write_newc(
            &mut out,
            &[
                Member::Dir("d"),
                Member::File {
                    name: "d/f",
                    mode: 0o644,
                    data: b"hello",
                },
            ],
        )
        .unwrap();
        assert!(out.starts_with(b"070701"));
        assert_eq!(out.len() % 4, 0);
        let listed = std::process::Command::new("cpio")
            .args(["-t", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(&out)?;
                c.wait_with_output()
            });
        if let Ok(o) = listed {
            if o.status.success() {
                assert_eq!(String::from_utf8_lossy(&o.stdout), "d\nd/f\n");
            }
        }
    }

    #[test]
    fn a_dynamic_program_is_not_static() {
        assert_eq!(is_static(Path::new("/bin/sh")), Ok(false));
        assert!(is_static(Path::new("/etc/hostname")).is_err());
    }

    /// An ELF64 header and `types` program headers, the table placed
    /// after a gap (as a linker may), cut to `keep` bytes.
    fn elf(types: &[u32], keep: Option<usize>) -> tempfile::NamedTempFile {
        let phoff = 200u64;
        let mut b = vec![0u8; 64];
        b[..5].copy_from_slice(b"\x7fELF\x02");
        b[0x20..0x28].copy_from_slice(&phoff.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&(types.len() as u16).to_le_bytes());
        b.resize(phoff as usize, 0);
        for t in types {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&t.to_le_bytes());
            b.extend(ph);
        }
        b.truncate(keep.unwrap_or(b.len()));
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, &b).unwrap();
        f
    }

    #[test]
    fn an_interpreter_anywhere_in_the_table_makes_a_program_dynamic() {
        // PT_LOAD = 1, PT_INTERP = 3, PT_NOTE = 4.
        assert_eq!(is_static(elf(&[1, 1, 4], None).path()), Ok(true));
        assert_eq!(is_static(elf(&[1, 4, 3], None).path()), Ok(false));
        // A table cut short is refused, never taken as static.
        let cut = elf(&[1, 1, 3], Some(200 + 56 + 10));
        assert!(is_static(cut.path()).unwrap_err().contains("truncated"));
        assert!(is_static(elf(&[], Some(40)).path())
            .unwrap_err()
            .contains("truncated"));
    }

    #[test]
    fn releases_sort_by_number() {
        let mut v = ["6.1.0-9-cloud-amd64", "6.1.0-48-cloud-amd64", "5.10.0-1"];
        v.sort_by_key(|r| version_key(r));
        assert_eq!(v.last(), Some(&"6.1.0-48-cloud-amd64"));
    }

    #[test]
    fn the_closure_loads_dependencies_first() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("modules.dep"),
            "kernel/a.ko: kernel/b.ko kernel/c.ko\nkernel/b.ko: kernel/c.ko\nkernel/c.ko:\n",
        )
        .unwrap();
        std::fs::write(d.path().join("modules.builtin"), "kernel/x.ko\n").unwrap();
        let got = module_closure(d.path(), &["a", "x"]).unwrap();
        let names: Vec<_> = got
            .iter()
            .map(|p| p.strip_prefix(d.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["kernel/c.ko", "kernel/b.ko", "kernel/a.ko"]);
        assert!(module_closure(d.path(), &["nope"]).is_err());
    }
}
