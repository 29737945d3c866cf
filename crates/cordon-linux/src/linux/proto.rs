//! Messages between the owner and the init program, one JSON object per line.

use std::io::{self, BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::outcome::Termination;

/// Owner → init, on the plan pipe.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Control {
    /// The plan (always the first line).
    Plan(Box<crate::plan::Plan>),
    /// Right after the plan, to stage 1 or the process-rung init: the cgroup
    /// `tasks` files (v1) to write `0` into before doing anything else.
    /// Empty when the owner has already moved the init (v2).
    Join(Vec<std::path::PathBuf>),
    /// Container rung: the owner has written uid_map/gid_map.
    Mapped,
}

/// Init → owner, on the report pipe.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Report {
    /// Stage 1 has unshared its namespaces and waits for the id maps.
    Unshared,
    /// Every layer is in place; the workload is being started.
    Started,
    /// A setup step failed; nothing of the workload ran.
    Failed { step: String, error: String },
    /// Container rung: the workload (child of PID 1) ended.
    Exited(Termination),
}

pub(crate) fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// Reads one message; `Ok(None)` at end of stream.
pub(crate) fn recv<T: for<'de> Deserialize<'de>>(r: &mut impl BufRead) -> io::Result<Option<T>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Owner → warm init, on the control socket (one packet each).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum WarmRequest {
    /// Start a command. Descriptors attached, in order: stdin, stdout,
    /// stderr (none when `tty` is set), then `joins` cgroup files (opened by
    /// the owner) that the new process writes `0` into before anything else.
    Exec {
        id: u64,
        argv: Vec<String>,
        /// The complete environment; nothing is inherited.
        env: std::collections::BTreeMap<String, String>,
        joins: usize,
        /// A terminal of the exec's own devpts instance, of this size, as
        /// the command's stdio and controlling terminal.
        #[serde(default)]
        tty: Option<super::pty::TtySize>,
    },
    /// Make an exec ahead of its request (a spare): a shim that joins the
    /// cgroup whose `joins` files are attached (opened by the owner), its
    /// own pid and mount namespaces, its PID 1 and its command forked and
    /// confined, the command waiting for what to run. An `Exec` with this
    /// `id`, no `joins` and no `tty` takes it (the owner writes the exec's
    /// bounds into the cgroup first); nothing is answered until then.
    Prepare { id: u64, joins: usize },
}

/// Warm init → a spare's command (see [`WarmRequest::Prepare`]): what to
/// run. Descriptors attached: stdin, stdout, stderr, and the pipe the
/// command's setup failures go to (close-on-exec: its end is the start).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Order {
    pub(crate) argv: Vec<String>,
    pub(crate) env: std::collections::BTreeMap<String, String>,
}

/// Warm init → owner, on the control socket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum WarmEvent {
    /// Every layer is in place and the command is starting. For an exec
    /// with a `tty`, the terminal's master is attached (the only
    /// descriptor the init ever sends).
    Started { id: u64 },
    /// The command did not start (the reason also went to its stderr).
    Failed { id: u64, error: String },
    /// The command's first process ended.
    Exited { id: u64, termination: Termination },
}

/// Init (stage 1) → owner, once, with one descriptor attached: on the
/// handover socket (one-shot) or as the first packet on the control socket
/// (warm).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(crate) enum Handover {
    /// The TCP listener on `127.0.0.1:port` of the sandbox's network
    /// namespace; the init kept no copy.
    ProxyListener { port: u16 },
    /// The warm init's `/tmp` (a tmpfs of the sandbox's mount namespace),
    /// opened `O_PATH` once the root is built and before any exec ran:
    /// what the owner serves the files API's `/tmp` beneath, as no host
    /// path reaches it. After the proxy listener, when there is one.
    Tmp,
}

/// The checks on an exec request before anything is built: the descriptor
/// count it names (`joins` cgroup files after the stdio) matches the `fds`
/// that came with it, the command is absolute, and every environment name
/// is usable. Returns the number of stdio descriptors and the program.
pub(crate) fn check_exec<'a>(
    argv: &'a [String],
    env: &std::collections::BTreeMap<String, String>,
    joins: usize,
    tty: Option<super::pty::TtySize>,
    fds: usize,
) -> Result<(usize, &'a String), String> {
    // A tty exec's stdio is its terminal: the owner sends none.
    let n_stdio: usize = if tty.is_some() { 0 } else { 3 };
    // `joins` comes off the wire: a count no message can carry is refused
    // before any sum (an overflow here panicked PID 1).
    let want = n_stdio
        .checked_add(joins)
        .filter(|&n| n <= crate::fdpass::MAX_FDS);
    if want != Some(fds) {
        return Err(format!(
            "expected {n_stdio} descriptors for stdio and {joins} cgroup files (at most {} in all), got {fds}",
            crate::fdpass::MAX_FDS
        ));
    }
    let program = argv
        .first()
        .filter(|p| p.starts_with('/'))
        .ok_or("the command must start with an absolute path")?;
    if env.keys().any(|k| k.is_empty() || k.contains('=')) {
        return Err("an environment variable has an empty name or one with `=`".into());
    }
    Ok((n_stdio, program))
}

/// Checks a `Prepare`'s descriptors: exactly its `joins` cgroup files.
pub(crate) fn check_prepare(joins: usize, fds: usize) -> Result<(), String> {
    if joins == 0 || joins > crate::fdpass::MAX_FDS || joins != fds {
        return Err(format!(
            "a spare joins its cgroup through 1 to {} files, and this one says {joins} with {fds} attached",
            crate::fdpass::MAX_FDS
        ));
    }
    Ok(())
}

/// The body of the `init_wire` fuzz target (`fuzz/`), through
/// [`crate::fuzz::init_frames`]. Whatever the bytes, every frame between
/// the owner and the init either decodes or is refused; a decoded frame
/// encodes to a frame that decodes to the same bytes; and a warm exec
/// request goes through the init's checks with the descriptor count the
/// first byte names (as many as [`crate::fdpass::MAX_FDS`] can carry).
pub(crate) fn fuzz_frames(data: &[u8]) {
    fn again<T: Serialize + for<'de> Deserialize<'de>>(msg: &T) {
        let once = match serde_json::to_vec(msg) {
            Ok(b) => b,
            Err(e) => panic!("a decoded frame does not encode: {e}"),
        };
        let back: T = match serde_json::from_slice(&once) {
            Ok(m) => m,
            Err(e) => panic!(
                "an encoded frame does not decode: {e}\n{}",
                String::from_utf8_lossy(&once)
            ),
        };
        let twice = serde_json::to_vec(&back).unwrap_or_default();
        assert_eq!(once, twice, "a frame changed on its way round");
    }
    // The pipes: lines, read the way the init and the owner read them.
    let mut lines = data;
    while let Ok(Some(c)) = recv::<Control>(&mut lines) {
        if let Control::Plan(plan) = &c {
            let back = crate::plan::Plan::new(plan.spec().clone());
            assert_eq!(
                back.as_ref().ok(),
                Some(&**plan),
                "a decoded plan is invalid"
            );
        }
        again(&c);
    }
    let mut lines = data;
    while let Ok(Some(r)) = recv::<Report>(&mut lines) {
        again(&r);
    }
    // The sockets: one packet each.
    let Some((&n, packet)) = data.split_first() else {
        return;
    };
    let fds = usize::from(n) % (crate::fdpass::MAX_FDS + 1);
    if let Ok(req) = serde_json::from_slice::<WarmRequest>(packet) {
        again(&req);
        match req {
            WarmRequest::Exec {
                argv,
                env,
                joins,
                tty,
                ..
            } => {
                let _ = check_exec(&argv, &env, joins, tty, fds);
            }
            WarmRequest::Prepare { joins, .. } => {
                let _ = check_prepare(joins, fds);
            }
        }
    }
    if let Ok(o) = serde_json::from_slice::<Order>(packet) {
        again(&o);
    }
    if let Ok(ev) = serde_json::from_slice::<WarmEvent>(packet) {
        again(&ev);
    }
    if let Ok(h) = serde_json::from_slice::<Handover>(packet) {
        again(&h);
    }
}

#[cfg(test)]
mod corpus {
    /// Every input kept in `fuzz/corpus/init_wire` (the fuzzer's minimized
    /// corpus, findings included) runs through the target's body here too.
    #[test]
    fn the_init_wire_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/init_wire");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::fuzz_frames(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }

    /// The seeds are frames the owner and the init really exchange: a
    /// `seed-` file is either lines of pipe messages or one socket packet
    /// after its descriptor-count byte.
    #[test]
    fn every_seed_is_a_frame() {
        use super::*;
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/init_wire");
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if !path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("seed-"))
            {
                continue;
            }
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let lines = |ok: fn(&str) -> bool| {
                data.ends_with(b"\n") && std::str::from_utf8(&data).is_ok_and(|t| t.lines().all(ok))
            };
            let ok = lines(|l| serde_json::from_str::<Control>(l).is_ok())
                || lines(|l| serde_json::from_str::<Report>(l).is_ok())
                || serde_json::from_slice::<WarmRequest>(&data[1..]).is_ok()
                || serde_json::from_slice::<WarmEvent>(&data[1..]).is_ok()
                || serde_json::from_slice::<Handover>(&data[1..]).is_ok();
            assert!(ok, "{} is no frame", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_exec;
    use std::collections::BTreeMap;

    // Found by the `init_wire` fuzz target's harness: a `joins` near
    // usize::MAX overflowed `3 + joins` (a panic in the warm init, PID 1 of
    // the sandbox; in a build without overflow checks the sum wrapped, the
    // count matched and the later `drain(3..)` panicked instead).
    #[test]
    fn a_descriptor_count_no_message_can_carry_is_refused() {
        let argv = vec!["/bin/true".to_string()];
        let env = BTreeMap::new();
        for (joins, fds) in [(usize::MAX, 2), (usize::MAX - 2, 1), (6, 9)] {
            let err = check_exec(&argv, &env, joins, None, fds).expect_err("accepted");
            assert!(err.contains("at most 8 in all"), "{err}");
        }
        assert!(check_exec(&argv, &env, 2, None, 5).is_ok());
        assert!(check_exec(
            &argv,
            &env,
            0,
            Some(crate::linux::pty::TtySize { rows: 24, cols: 80 }),
            0
        )
        .is_ok());
    }
}
