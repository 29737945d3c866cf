//! The loader must never panic, whatever the bytes: it either loads or
//! returns diagnostics. A loaded policy must decide without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = cordon_policy::Policy::load_str("fuzz.yaml", text) {
        let req = cordon_policy::Request {
            identity: cordon_policy::Identity::default(),
            env: cordon_policy::Deployment::default(),
            now: 0,
            facts: cordon_policy::SurfaceFacts::Secret(cordon_policy::SecretFacts {
                name: "a/b".into(),
            }),
        };
        let _ = p.decide(&req);
    }
});
