//! The body of the `load_policy` fuzz target (`fuzz/`), here so the corpus
//! can also be replayed by `cargo test` (`tests/fuzz_corpus.rs`). Not API.
//!
//! Input: the top policy file, then the layers it may extend, split on NUL
//! bytes and named `1.yaml`, `2.yaml`, … (in-memory, through
//! [`MemoryFiles`]). Whatever the bytes, loading either succeeds or returns
//! diagnostics, and a loaded policy decides a request of every surface,
//! explains it the same way, and plans, without panicking.

use std::collections::BTreeMap;

use crate::resolve::MemoryFiles;
use crate::{
    ComputeFacts, Deployment, EgressFacts, Identity, Mode, Policy, Request, SecretFacts,
    StorageFacts, SurfaceFacts,
};

/// Runs one input; panics only on a finding.
pub fn load_policy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.split('\0');
    let top = parts.next().unwrap_or_default();
    let files: BTreeMap<String, String> = parts
        .enumerate()
        .map(|(i, t)| (format!("{}.yaml", i + 1), t.to_string()))
        .collect();
    let Ok(policy) = Policy::load_with("fuzz.yaml", top, &MemoryFiles(files)) else {
        return;
    };
    let identity = Identity {
        namespace: "team".into(),
        name: "agent".into(),
        attested: false,
        labels: BTreeMap::from([("tier".into(), "dev".into())]),
    };
    let env = Deployment { name: "ci".into() };
    let work_dir = "/workspace";
    let facts = [
        SurfaceFacts::Egress(EgressFacts {
            url: Some("http://example.com/a?b".into()),
            scheme: Some("http".into()),
            host: Some("example.com".into()),
            port: 80,
            method: Some("GET".into()),
            path: Some("/a".into()),
            ip: Some("93.184.216.34".into()),
            query: None,
            headers: None,
        }),
        SurfaceFacts::Egress(EgressFacts::endpoint(None, 443)),
        SurfaceFacts::Compute(ComputeFacts {
            command: "/usr/bin/python3".into(),
            command_target: "/usr/bin/python3.11".into(),
            args: Some(vec!["-c".into(), "1".into()]),
            cpu: Some(1),
            memory: Some(1 << 30),
            work_dir: Some(work_dir.into()),
        }),
        SurfaceFacts::Storage(StorageFacts {
            path: "/workspace/out.txt".into(),
            mode: Mode::Write,
            bytes: Some(10),
            work_dir: Some(work_dir.into()),
        }),
        SurfaceFacts::Secret(SecretFacts {
            name: "team/token".into(),
            destination: None,
        }),
    ];
    for facts in facts {
        let req = Request {
            identity: identity.clone(),
            env: env.clone(),
            now: 1_700_000_000,
            facts,
        };
        let decision = policy.decide(&req);
        let explained = policy.explain(&req);
        assert_eq!(
            decision.verdict, explained.decision.verdict,
            "explain and decide disagree"
        );
    }
    let _ = policy.plan(&identity, &env, 1_700_000_000, work_dir);
}

#[cfg(test)]
mod corpus {
    /// Every input kept in `fuzz/corpus/load_policy` (the fuzzer's minimized
    /// corpus, findings included) runs through the target's body here too.
    #[test]
    fn the_load_policy_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/load_policy");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            super::load_policy(&data);
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }
}
