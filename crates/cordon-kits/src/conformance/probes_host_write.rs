//! The `host-write-*` probes: a link planted where the host writes into
//! the work dir.

use super::judge::judge_host_write;
use super::probe::{plant, ConformanceSubject, SECRET};

pub(super) fn host_write_probe(
    name: &'static str,
    which: usize,
    s: &dyn ConformanceSubject,
) -> Result<String, String> {
    let dir = format!("{}/cordon-probe-{name}-{which}", s.work_dir());
    let out = format!("{}/cordon-probe-{name}-{which}", s.outside_dir());
    plant(
        "a clean probe directory",
        s.remove(&dir).and(s.remove(&out)),
    )?;
    const WRITTEN: &[u8] = b"written by the host\n";
    let (path, watched, before): (String, String, Option<Vec<u8>>) = match name {
        "host-write-through-link" => {
            let secret = format!("{out}/secret");
            plant("the outside file", s.plant_file(&secret, SECRET))?;
            // The file must really be there, as the guest will see it next:
            // a subject whose planted files vanish between execs cannot be
            // judged, and must fail rather than pass or blame the host.
            let seen = s.read_back(&secret).map_err(|e| {
                format!("could not plant its layout: reading the outside file back: {e}")
            })?;
            if seen.as_deref() != Some(SECRET) {
                return Err(format!(
                    "could not plant its layout: the outside file `{secret}` is not there on the next exec (is the outside directory the same one on the host and in the guest?)"
                ));
            }
            let path = format!("{dir}/in.txt");
            plant("the link", s.plant_link(&path, &secret))?;
            (path, secret, Some(SECRET.to_vec()))
        }
        "host-write-through-dangling-link" => {
            let target = format!("{out}/created-by-host");
            plant("the outside directory", s.plant_dir(&out))?;
            let path = format!("{dir}/in.txt");
            plant("the dangling link", s.plant_link(&path, &target))?;
            (path, target, None)
        }
        "host-write-under-linked-parent" => {
            let target_dir = format!("{out}/dir");
            plant("the outside directory", s.plant_dir(&target_dir))?;
            plant(
                "the linked parent",
                s.plant_link(&format!("{dir}/sub"), &target_dir),
            )?;
            (
                format!("{dir}/sub/in.txt"),
                format!("{target_dir}/in.txt"),
                None,
            )
        }
        other => return Err(format!("unknown probe `{other}`")),
    };
    let wrote = s.host_write(which, &path, WRITTEN);
    let after = s
        .read_back(&watched)
        .map_err(|e| format!("could not read `{watched}` back: {e}"))?;
    judge_host_write(&watched, before.as_deref(), after.as_deref(), &wrote)
}
