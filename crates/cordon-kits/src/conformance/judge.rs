//! The judges: what each probe's [`Observation`] must show to pass.

use cordon_collect::{Cap, CollectError, Collected};
use cordon_sandbox::{Artifact, Collision};

#[cfg(test)]
use super::probe::SECRET;

/// What a collection did, as the kit observed it.
#[derive(Debug)]
pub struct Observation {
    pub result: Result<Collected, CollectError>,
    /// Artifacts that reached the sink.
    pub delivered: Vec<Artifact>,
    /// Calls that reached the sandbox (stat, read).
    pub sandbox_calls: usize,
    /// Reads that returned more than their bound plus one byte.
    pub overruns: Vec<String>,
    /// Whether [`SECRET`](super::probe::SECRET) came back from any read or delivery.
    pub secret_seen: bool,
}

/// Did the host write change anything outside?
pub fn judge_host_write(
    watched: &str,
    before: Option<&[u8]>,
    after: Option<&[u8]>,
    wrote: &Result<(), String>,
) -> Result<String, String> {
    if before != after {
        return Err(format!(
            "the host write reached `{watched}` outside the work dir through a planted link"
        ));
    }
    Ok(match wrote {
        Ok(()) => {
            "the write stayed inside the work dir (the link was replaced, not followed)".into()
        }
        Err(e) => format!("refused: {e}"),
    })
}

pub(super) fn describe_err(e: &CollectError) -> String {
    e.to_string()
}

pub(super) fn common(o: &Observation) -> Result<(), String> {
    if o.secret_seen {
        return Err("bytes from outside the work dir came back".into());
    }
    if let Some(r) = o.overruns.first() {
        return Err(format!(
            "a read returned more than its bound plus one byte: {r}"
        ));
    }
    Ok(())
}

/// A hostile layout must be refused with nothing delivered and nothing of
/// the outside read.
pub fn judge_escape(o: &Observation) -> Result<String, String> {
    common(o)?;
    if !o.delivered.is_empty() {
        return Err(format!(
            "{} artifact(s) were delivered from a hostile layout",
            o.delivered.len()
        ));
    }
    match &o.result {
        Ok(_) => Err("the collection succeeded through a link".into()),
        Err(e) => Ok(format!("refused: {}", describe_err(e))),
    }
}

/// A dangling link at an optional output must be refused, not reported
/// absent (which is what a stat that follows links says).
pub fn judge_dangling(o: &Observation) -> Result<String, String> {
    common(o)?;
    match &o.result {
        Ok(c) if c.landed.is_empty() => Err(
            "the dangling link was reported absent: the stat follows links instead of reporting one"
                .into(),
        ),
        Ok(_) => Err("the collection succeeded through a dangling link".into()),
        Err(e) => Ok(format!("refused: {}", describe_err(e))),
    }
}

/// Any refusal, nothing delivered.
pub fn judge_refused(o: &Observation) -> Result<String, String> {
    common(o)?;
    if !o.delivered.is_empty() {
        return Err("something was delivered".into());
    }
    match &o.result {
        Ok(_) => Err("it was collected as if it were a regular file".into()),
        Err(e) => Ok(format!("refused: {}", describe_err(e))),
    }
}

/// Refused for exactly this cap, nothing delivered, every read bounded.
pub fn judge_cap(o: &Observation, cap: Cap) -> Result<String, String> {
    common(o)?;
    if !o.delivered.is_empty() {
        return Err("something was delivered past a cap".into());
    }
    match &o.result {
        Err(e @ CollectError::CapExceeded { cap: got, .. }) if *got == cap => {
            Ok(format!("refused: {e}"))
        }
        Err(e) => Err(format!("refused, but not for `{cap}`: {e}")),
        Ok(_) => Err(format!("collected past `{cap}`")),
    }
}

/// Refused as a collision, before the sandbox or the sink was touched.
pub fn judge_collision(o: &Observation, how: Collision) -> Result<String, String> {
    if o.sandbox_calls > 0 || !o.delivered.is_empty() {
        return Err(format!(
            "the sandbox was reached {} time(s) before the collision was refused (it is decided from the declaration alone)",
            o.sandbox_calls
        ));
    }
    match &o.result {
        Err(e @ CollectError::Collision { how: got, .. }) if *got == how => {
            Ok(format!("refused: {e}"))
        }
        Err(e) => Err(format!("refused, but not as a collision that {how}: {e}")),
        Ok(_) => Err("two names that are one file at the destination were both landed".into()),
    }
}

#[cfg(test)]
mod tests {
    //! The judges of the probes an unsafe *backend* cannot fail (they
    //! attack cordon's own collector), fed the observation a broken
    //! collector would produce: each can fail.
    use super::*;

    fn obs(result: Result<Collected, CollectError>) -> Observation {
        Observation {
            result,
            delivered: Vec::new(),
            sandbox_calls: 0,
            overruns: Vec::new(),
            secret_seen: false,
        }
    }

    fn collected() -> Collected {
        Collected {
            landed: Vec::new(),
            consumed: Vec::new(),
        }
    }

    #[test]
    fn a_collision_judge_fails_a_collector_that_lands_both_or_reads_first() {
        assert!(judge_collision(&obs(Ok(collected())), Collision::Case).is_err());
        let mut o = obs(Err(CollectError::Collision {
            first: "A".into(),
            second: "a".into(),
            how: Collision::Case,
        }));
        assert!(judge_collision(&o, Collision::Case).is_ok());
        assert!(judge_collision(&o, Collision::Normalisation).is_err());
        o.sandbox_calls = 1;
        assert!(judge_collision(&o, Collision::Case).is_err());
    }

    #[test]
    fn a_cap_judge_fails_a_collector_that_collects_past_the_cap_or_the_wrong_one() {
        assert!(judge_cap(&obs(Ok(collected())), Cap::Files).is_err());
        let e = CollectError::CapExceeded {
            cap: Cap::TotalBytes,
            limit: 1,
            path: "p".into(),
            observed: 2,
            unit: "bytes",
        };
        assert!(judge_cap(&obs(Err(e.clone())), Cap::Files).is_err());
        assert!(judge_cap(&obs(Err(e)), Cap::TotalBytes).is_ok());
    }

    #[test]
    fn a_host_write_judge_fails_when_the_outside_changed() {
        assert!(judge_host_write("x", Some(SECRET), Some(b"written"), &Ok(())).is_err());
        assert!(judge_host_write("x", None, Some(b"written"), &Err("no".into())).is_err());
        assert!(judge_host_write("x", None, None, &Ok(())).is_ok());
    }
}
