//! The containers a sandbox is built of, as the engine is asked for them: the host directory's skeleton, binds, host config, the anchor that carries a sandbox's labels and the holder of its network namespace.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::models::{
    ContainerCreateBody, HostConfig, HostConfigCgroupnsModeEnum, Mount as DMount, MountBindOptions,
    MountBindOptionsPropagationEnum, MountType, ResourcesUlimits,
};
use cordon_confine::oci::DockerNet;
use cordon_sandbox::Limits;

use crate::engine::{call, Engine};
use crate::WORKLOAD_ID;

pub(crate) use cordon_backend_kit::workarea::private_dir;

/// An image's skeleton on the engine: its top-level links (`/bin` →
/// `usr/bin` on a merged-`/usr` host) and empty mount points, nothing
/// else, imported once per engine. The image's directories are bound into
/// it as the policy's plan grants, from `root` on the host (`/` for the
/// `host` image, whose directories are [`cordon_confine::oci::HOST_IMAGE`];
/// a stored image's root for one of cordon's store). Its tag names the
/// layout. Returns the tag and the directories to bind from.
pub(crate) fn skeleton(engine: &Engine, root: &Path) -> Result<(String, Vec<PathBuf>), String> {
    let names: Vec<String> = if root == Path::new("/") {
        cordon_confine::oci::HOST_IMAGE
            .iter()
            .map(|d| d.trim_start_matches('/').to_string())
            .collect()
    } else {
        let mut n: Vec<String> = std::fs::read_dir(root)
            .map_err(|e| format!("the image's root `{}`: {e}", root.display()))?
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .collect();
        n.sort();
        n
    };
    let mut tar = tar::Builder::new(Vec::new());
    let mut layout = String::new();
    let mut dirs = Vec::new();
    let dir = |tar: &mut tar::Builder<Vec<u8>>, name: &str| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        tar.append_data(&mut h, format!("{name}/"), std::io::empty())
            .map_err(|e| format!("building the image's skeleton: {e}"))
    };
    // Given by the engine, or cordon's own (`/etc` is cordon's files plus
    // what the plan grants of the image's, file by file).
    let own = ["etc", "proc", "dev", "sys", "tmp"];
    for name in &names {
        let at = root.join(name);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&at)
                    .map_err(|e| format!("cannot read the link `{}`: {e}", at.display()))?;
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                tar.append_link(&mut h, name, &to)
                    .map_err(|e| format!("building the image's skeleton: {e}"))?;
                layout.push_str(&format!("{name}>{};", to.display()));
            }
            Ok(m) if m.is_dir() && !own.contains(&name.as_str()) => {
                dir(&mut tar, name)?;
                layout.push_str(&format!("{name}/;"));
                dirs.push(Path::new("/").join(name));
            }
            _ => {}
        }
    }
    for d in own {
        dir(&mut tar, d)?;
    }
    let bytes = tar
        .into_inner()
        .map_err(|e| format!("building the image's skeleton: {e}"))?;
    // FNV-1a: a name for the layout, not a security boundary.
    let hash = layout.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let tag = format!("1-{hash:016x}");
    engine.import("cordon/skeleton", &tag, bytes)?;
    Ok((format!("cordon/skeleton:{tag}"), dirs))
}

pub(crate) fn bind(source: &Path, target: &Path, read_only: bool) -> DMount {
    DMount {
        target: Some(target.display().to_string()),
        source: Some(source.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        bind_options: Some(MountBindOptions {
            propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What every container of cordon's runs with, whatever it runs. An
/// error when the seccomp profile cannot be written (never a container
/// without it).
pub(crate) fn host_config(
    mounts: Vec<DMount>,
    limits: &Limits,
    net: DockerNet,
) -> Result<HostConfig, String> {
    let seccomp = cordon_confine::oci::docker_seccomp_profile(net)
        .map_err(|e| format!("the seccomp profile for Docker: {e}"))?;
    let bytes = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let ulimit = |name: &str, soft: u64, hard: u64| ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(bytes(soft)),
        hard: Some(bytes(hard)),
    };
    Ok(HostConfig {
        network_mode: Some("none".into()),
        readonly_rootfs: Some(true),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec![
            "no-new-privileges".into(),
            format!("seccomp={seccomp}"),
        ]),
        ipc_mode: Some("private".into()),
        cgroupns_mode: Some(HostConfigCgroupnsModeEnum::PRIVATE),
        memory: Some(bytes(limits.memory_bytes)),
        // No swap: the memory bound is the bound.
        memory_swap: Some(bytes(limits.memory_bytes)),
        pids_limit: Some(bytes(limits.processes)),
        ulimits: Some(vec![
            // A second layer under the cgroup's CPU time, which cordon
            // watches and kills at first (its sum is at least any one
            // process's): one second later, so the bound is reported as
            // the bound, not as a signal.
            ulimit(
                "cpu",
                limits.cpu_seconds.saturating_add(1),
                limits.cpu_seconds.saturating_add(2),
            ),
            ulimit("fsize", limits.disk_bytes, limits.disk_bytes),
            ulimit("nofile", 1024, 1024),
            ulimit("core", 0, 0),
        ]),
        mounts: Some(mounts),
        ..Default::default()
    })
}

/// Makes the anchor container `id` (never started): it holds the labels.
pub(crate) fn make_anchor(
    engine: &Engine,
    id: &str,
    image: &str,
    labels: HashMap<String, String>,
) -> Result<(), String> {
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(vec!["/nonexistent".into()]),
        labels: Some(labels),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    create(engine, id, body, false)
}

/// Makes and starts the anchor container `id` of a sandbox with an egress
/// route: `/bin/sleep infinity` from the host's system directories, bound
/// read-only, under the same confinement as an exec, with no network but
/// its loopback. Its network namespace is the sandbox's.
pub(crate) fn start_holder(
    engine: &Engine,
    id: &str,
    labels: HashMap<String, String>,
) -> Result<(), String> {
    let (image, dirs) = skeleton(engine, Path::new("/"))?;
    let mounts = dirs.iter().map(|d| bind(d, d, true)).collect();
    let limits = Limits {
        memory_bytes: 16 << 20,
        processes: 4,
        cpu_seconds: 1,
        disk_bytes: 0,
        wall_seconds: 0,
    };
    let body = ContainerCreateBody {
        image: Some(image),
        cmd: Some(vec!["/bin/sleep".into(), "infinity".into()]),
        entrypoint: Some(Vec::new()),
        user: Some(format!("{WORKLOAD_ID}:{WORKLOAD_ID}")),
        hostname: Some(cordon_confine::oci::HOSTNAME.to_string()),
        labels: Some(labels),
        host_config: Some(host_config(mounts, &limits, DockerNet::None)?),
        ..Default::default()
    };
    create(engine, id, body, true)
}

pub(crate) fn create(
    engine: &Engine,
    id: &str,
    body: ContainerCreateBody,
    start: bool,
) -> Result<(), String> {
    let d = engine.docker();
    let n = id.to_string();
    call(async move {
        let opts = bollard::query_parameters::CreateContainerOptionsBuilder::default()
            .name(&n)
            .build();
        d.create_container(Some(opts), body)
            .await
            .map_err(|e| format!("creating the anchor container `{n}`: {e}"))?;
        if start {
            d.start_container(&n, None::<bollard::query_parameters::StartContainerOptions>)
                .await
                .map_err(|e| format!("starting the anchor container `{n}`: {e}"))?;
        }
        Ok(())
    })?
}

/// The pid of the running container `id`'s first process, as the engine
/// reports it (`None`: not running).
fn pid_of(engine: &Engine, id: &str) -> Result<Option<i32>, String> {
    let d = engine.docker();
    let n = id.to_string();
    let pid = call(async move {
        d.inspect_container(
            &n,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .ok()
        .and_then(|c| c.state?.pid)
        .unwrap_or(0)
    })?;
    Ok(i32::try_from(pid).ok().filter(|p| *p > 0))
}

/// The network namespace of the running anchor container `id`: its first
/// process's, pinned (`cordon_linux::netns::of_pid`) and asked of the
/// engine again once opened, so a pid reused in between never hands out
/// another process's namespace.
pub(crate) fn anchor_netns(engine: &Engine, id: &str) -> Result<std::os::fd::OwnedFd, String> {
    let not_running = || {
        format!(
            "the anchor container `{id}` is not running, so the sandbox has no network namespace"
        )
    };
    let pid = pid_of(engine, id)?.ok_or_else(not_running)?;
    cordon_linux::netns::of_pid(pid, || pid_of(engine, id).is_ok_and(|p| p == Some(pid))).map_err(
        |e| match e.kind() {
            std::io::ErrorKind::NotFound => not_running(),
            _ => format!("the anchor's network namespace: {e}"),
        },
    )
}

/// Listens on `127.0.0.1:port` inside the network namespace of the running
/// container `id` (`cordon_linux::netns::listen_in`: a short-lived thread
/// enters it, binds, and ends; the socket stays in that namespace).
pub(crate) fn listen_in(
    engine: &Engine,
    id: &str,
    port: u16,
) -> Result<std::net::TcpListener, String> {
    let ns = anchor_netns(engine, id)?;
    use std::os::fd::AsFd;
    cordon_linux::netns::listen_in(ns.as_fd(), port)
        .map_err(|e| format!("listening on 127.0.0.1:{port} in the sandbox: {e}"))
}
