//! What a docker sandbox leaves for its cleanup, and the vetting and reclaiming of a recorded one.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use cordon_backend_kit::register::{read_residue, reclaim_read};
use cordon_backend_kit::remove_sandbox_dir;

/// What a sandbox leaves if its holder dies: its directory (the volume and
/// binds mounted in it) and its id, which its containers carry as
/// [`crate::LABEL_SANDBOX`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residue {
    pub dir: PathBuf,
    pub sandbox: String,
    /// The engine its containers are on (`unix:///…`).
    pub engine: String,
}

/// Checks that a residue names only what a docker sandbox of the process
/// `keeper` makes: a directory `cordon-docker-KEEPER-…` of root's in this
/// cordon's scratch directory (TMPDIR), and the sandbox id that is its
/// name (which its containers carry as a label).
pub(crate) fn vet_residue(residue: &serde_json::Value, keeper: u32) -> Result<(), String> {
    let r: Residue = read_residue(residue, crate::NAME)?;
    crate::DIRS.vet(&r.dir, keeper)?;
    crate::engine::Endpoint::parse(&r.engine)?;
    let name = r.dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if r.sandbox != name {
        return Err(format!(
            "the recorded sandbox `{}` is not the directory `{name}`'s",
            r.sandbox
        ));
    }
    Ok(())
}

/// Removes a vetted residue: the sandbox's containers on the engine (by
/// label), its binds, volume and directory. Returns what failed.
pub(crate) fn reclaim_residue(residue: &serde_json::Value) -> Vec<String> {
    reclaim_read(residue, crate::NAME, |r: Residue| {
        let engine = crate::engine::Endpoint::parse(&r.engine)
            .and_then(|ep| crate::engine::Engine::connect(&ep));
        let mut failures = match engine {
            Ok(engine) => engine.remove_labelled(crate::LABEL_SANDBOX, &r.sandbox),
            Err(e) => vec![format!(
                "the engine at `{}` did not answer, so the containers of sandbox `{}` there are left (its directory is removed); `cordon sandbox gc` removes them once it answers: {e}",
                r.engine, r.sandbox
            )],
        };
        failures.extend(remove_sandbox_dir(&r.dir).err());
        failures
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_residue_names_only_what_its_keeper_made() {
        let engine = "unix:///run/docker.sock";
        let of = |dir: &std::path::Path, sandbox: &str, engine: &str| serde_json::json!({"dir": dir, "sandbox": sandbox, "engine": engine});
        let named = |dir: &std::path::Path, name: &str| of(dir, name, engine);
        assert_eq!(
            cordon_backend_kit::register::vet_holds(crate::DIRS, vet_residue, named),
            Ok(())
        );
        // Its sandbox is its directory's, on an engine of this host.
        let keeper = 4_000_000;
        let name = format!("cordon-docker-{keeper}-0-1");
        let dir = std::env::temp_dir().canonicalize().unwrap().join(&name);
        let other = of(&dir, "cordon-docker-1-0-1", engine);
        assert!(vet_residue(&other, keeper).unwrap_err().contains("sandbox"));
        assert!(vet_residue(&of(&dir, &name, "tcp://h:1"), keeper).is_err());
    }
}
