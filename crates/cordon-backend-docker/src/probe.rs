//! Whether an engine can take a sandbox: a trivial container under cordon's confinement, run once per engine and recorded there; placement of a new sandbox on the engine with the fewest.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;

use bollard::models::ContainerCreateBody;
use cordon_backend_kit::NEXT;
use cordon_confine::oci::DockerNet;
use cordon_sandbox::Limits;
use futures_util::StreamExt;

use crate::containers::*;
use cordon_backend_kit::memo::PerSettings;

use crate::engine::{call, live_sandboxes, reach, DockerSettings, Endpoint, Engine, HOST_VAR};
use crate::WORKLOAD_ID;

/// What the probe's container checks of itself: a seccomp filter,
/// no-new-privileges, no capability (an engine that took the request but
/// did not apply it fails here).
const PROBE_CHECK: &str = "s=/proc/self/status; grep -q '^Seccomp:[[:space:]]*2' $s && grep -q '^NoNewPrivs:[[:space:]]*1' $s && grep -q '^CapEff:[[:space:]]*0000000000000000' $s && grep -q '^CapBnd:[[:space:]]*0000000000000000' $s";

/// Runs a check in a container of the `host` image with its system
/// directories bound read-only and cordon's confinement: the probe's
/// proof that the engine runs what cordon asks of it.
pub(crate) fn trivial(engine: &Engine) -> Result<(), String> {
    let (image, dirs) = skeleton(engine, Path::new("/"))?;
    let mounts = dirs.iter().map(|d| bind(d, d, true)).collect();
    let limits = Limits {
        memory_bytes: 64 << 20,
        processes: 16,
        cpu_seconds: 10,
        disk_bytes: 1 << 20,
        wall_seconds: 30,
    };
    let d = engine.docker();
    let name = format!(
        "{}{}-{}-probe",
        crate::PREFIX,
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let body = ContainerCreateBody {
        image: Some(image),
        cmd: Some(vec!["/bin/sh".into(), "-c".into(), PROBE_CHECK.into()]),
        user: Some(format!("{WORKLOAD_ID}:{WORKLOAD_ID}")),
        labels: Some(HashMap::from([
            (crate::LABEL_OWNER.to_string(), crate::OWNER.to_string()),
            (crate::LABEL_SANDBOX.to_string(), name.clone()),
            (crate::LABEL_ROLE.to_string(), "probe".to_string()),
            (
                crate::LABEL_MAKER.to_string(),
                std::process::id().to_string(),
            ),
        ])),
        host_config: Some(host_config(mounts, &limits, DockerNet::None)?),
        ..Default::default()
    };
    let n = name.clone();
    let ran = call(async move {
        let opts = bollard::query_parameters::CreateContainerOptionsBuilder::default()
            .name(&n)
            .build();
        d.create_container(Some(opts), body)
            .await
            .map_err(|e| e.to_string())?;
        d.start_container(&n, None::<bollard::query_parameters::StartContainerOptions>)
            .await
            .map_err(|e| e.to_string())?;
        match d
            .wait_container(&n, None::<bollard::query_parameters::WaitContainerOptions>)
            .next()
            .await
        {
            Some(Ok(r)) if r.status_code == 0 => Ok(()),
            Some(Ok(r)) => Err(format!(
                "the check inside exited {}: the container's seccomp filter, no-new-privileges or capabilities are not what cordon asked for",
                r.status_code
            )),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, error })) => {
                Err(format!(
                    "the check inside exited {code} {error}: the container's seccomp filter, no-new-privileges or capabilities are not what cordon asked for"
                ))
            }
            Some(Err(e)) => Err(e.to_string()),
            None => Err("the engine did not say how it ended".into()),
        }
    });
    let removed = engine.remove(&name);
    ran??;
    removed
}

/// The name of the record that a trivial container ran on `engine`: the
/// engine's version and API, the `host` skeleton and the seccomp profile,
/// hashed.
pub(crate) fn probe_record(engine: &Engine) -> Result<String, String> {
    let (image, _) = skeleton(engine, Path::new("/"))?;
    let profile = cordon_confine::oci::docker_seccomp_profile(DockerNet::None)?;
    let what = format!(
        "{}|{}|{image}|{profile}|{PROBE_CHECK}",
        engine.version, engine.api
    );
    let hash = what.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Ok(format!("cordon-docker-probed-{hash:016x}"))
}

/// Records that a trivial container ran: a container named `record`,
/// made and never started, labelled `probed` (no maker: `gc` keeps it).
pub(crate) fn record_probe(engine: &Engine, record: &str) -> Result<(), String> {
    let (image, _) = skeleton(engine, Path::new("/"))?;
    let labels = HashMap::from([
        (crate::LABEL_OWNER.to_string(), crate::OWNER.to_string()),
        (crate::LABEL_ROLE.to_string(), "probed".to_string()),
        (crate::LABEL_SANDBOX.to_string(), record.to_string()),
    ]);
    make_anchor(engine, record, &image, labels)
}

/// Where a new sandbox goes: the engine with the fewest live cordon
/// sandboxes among those that answer and run cordon's trivial container
/// ([`vet`]), the configured order breaking ties. An engine that does not
/// answer is skipped; if none is left, the refusal names each engine and
/// why.
pub fn place(eps: &[Endpoint]) -> Result<Engine, String> {
    let mut why = Vec::new();
    let mut answering = Vec::new();
    for (ep, reached) in reach(eps) {
        match reached.and_then(|e| live_sandboxes(&e).map(|n| (n, e))) {
            Ok(counted) => answering.push(counted),
            Err(e) => why.push(format!("`{ep}`: {e}")),
        }
    }
    // Stable: equal counts keep the configured order.
    answering.sort_by_key(|(n, _)| *n);
    for (_, engine) in answering {
        match vet(&engine) {
            Ok(_) => return Ok(engine),
            Err(e) => why.push(format!("`{}`: {e}", engine.endpoint)),
        }
    }
    Err(format!(
        "no Docker Engine of `{HOST_VAR}` can take a sandbox: {}",
        why.join("; ")
    ))
}

/// Checks that `engine` runs cordon's trivial container under its
/// confinement, once per engine and process, and records it on the engine
/// so later processes ask one question instead of running one. Returns
/// what was found, for `doctor`.
pub fn vet(engine: &Engine) -> Result<String, String> {
    static VETTED: std::sync::Mutex<Vec<(Endpoint, String, String)>> =
        std::sync::Mutex::new(Vec::new());
    let key = (engine.endpoint.clone(), engine.version.clone());
    if let Some((_, _, found)) = VETTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(ep, v, _)| (ep, v) == (&key.0, &key.1))
    {
        return Ok(found.clone());
    }
    // A trivial container that ran is recorded on the engine (a container
    // made and never started, named for the engine's version and what
    // cordon asks of it): a changed engine or a changed confinement has
    // another name and runs it again.
    let record = probe_record(engine)?;
    let recorded = engine.containers(&[
        (crate::LABEL_OWNER, crate::OWNER),
        (crate::LABEL_ROLE, "probed"),
        (crate::LABEL_SANDBOX, &record),
    ])?;
    let found = if recorded.is_empty() {
        let started = std::time::Instant::now();
        trivial(engine)
            .map_err(|e| format!("a trivial container did not run on the engine: {e}"))?;
        // Best effort: without the record the next process runs it again.
        let _ = record_probe(engine, &record);
        format!(
            "a trivial container ran in {} ms",
            started.elapsed().as_millis()
        )
    } else {
        format!("a trivial container ran on this engine (recorded as `{record}`)")
    };
    VETTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push((key.0, key.1, found.clone()));
    Ok(found)
}

/// A probe's findings, once per process.
#[derive(Debug, Clone)]
pub struct Probed {
    /// Every endpoint configured, in order (placement looks at each again
    /// at every acquire: an engine down at the probe may answer later).
    pub endpoints: Vec<Endpoint>,
    pub found: Vec<String>,
}

/// Connects to every engine, and on each that answers imports the `host`
/// image and runs a trivial container ([`vet`]), once per process: what
/// `doctor` shows and what `build` needs. Runnable when at least one
/// engine answers and runs it; each that does not is named in `found`.
pub fn probe(settings: &DockerSettings) -> &'static Result<Probed, (String, Vec<String>)> {
    static P: PerSettings<DockerSettings, Result<Probed, (String, Vec<String>)>> =
        PerSettings::new();
    P.get_or_make(settings, |settings| {
        let mut found = Vec::new();
        let eps = settings.endpoints().map_err(|e| (e.clone(), vec![e]))?;
        found.push(format!(
            "engine endpoint{}: {}",
            if eps.len() == 1 { "" } else { "s" },
            eps.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if !rustix::process::geteuid().is_root() {
            let e = "the docker backend makes each sandbox's work dir volume and binds on the host, which needs root; run cordon as root".to_string();
            found.push(e.clone());
            return Err((e, found));
        }
        let mut down = Vec::new();
        for (ep, reached) in reach(&eps) {
            let vetted = reached.and_then(|engine| {
                let ran = vet(&engine)?;
                Ok(format!(
                    "engine `{ep}`: Docker {} (API {}, negotiated down from {}.{}); {ran}",
                    engine.version,
                    engine.api,
                    bollard::API_DEFAULT_VERSION.major_version,
                    bollard::API_DEFAULT_VERSION.minor_version
                ))
            });
            match vetted {
                Ok(line) => found.push(line),
                Err(e) => {
                    let line = format!("engine `{ep}` does not answer: {e}");
                    found.push(line.clone());
                    down.push(line);
                }
            }
        }
        if down.len() == eps.len() {
            return Err((down.join("; "), found));
        }
        if !down.is_empty() {
            found.push(format!(
                "{} of {} engines do not answer: skipped for placement; their sandboxes, if any, are left until they answer",
                down.len(),
                eps.len()
            ));
        }
        Ok(Probed {
            endpoints: eps,
            found,
        })
    })
}
