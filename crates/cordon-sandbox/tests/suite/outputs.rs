//! Outputs as a spec declares them: landing names, paths, collisions at
//! build time, and the router's files-out requirement. (Collecting them is
//! the `cordon-collect` crate's, tested there.)

use cordon_sandbox::{
    validate_artifact_name, Capability, DeclaredOutput, Isolation, SandboxSpec, TransferLimits,
};

use super::doubles::{builder, ctx, Fake};

const LIMITS: TransferLimits = TransferLimits {
    max_bytes_per_file: 10,
    max_total_bytes: 16,
    max_files: 3,
};

fn out(path: &str) -> DeclaredOutput {
    DeclaredOutput::new(path, "application/octet-stream").unwrap()
}

fn named(path: &str, name: &str) -> DeclaredOutput {
    out(path).with_name(name).unwrap()
}

fn spec_with(limits: TransferLimits, outputs: Vec<DeclaredOutput>) -> SandboxSpec {
    SandboxSpec::new("k", "i")
        .unwrap()
        .with_outputs(limits, outputs)
        .unwrap()
}

#[test]
fn a_spec_refuses_colliding_names_and_duplicate_paths_when_it_is_built() {
    let e = SandboxSpec::new("k", "i")
        .unwrap()
        .with_outputs(LIMITS, [named("a", "A.png"), named("b", "a.png")])
        .unwrap_err();
    assert!(e.to_string().contains("differ only by case"), "{e}");
    let e = SandboxSpec::new("k", "i")
        .unwrap()
        .with_outputs(LIMITS, [out("a"), out("a").consumed()])
        .unwrap_err();
    assert!(e.to_string().contains("declared twice"), "{e}");
}

// ---- names ----

#[test]
fn artifact_names_that_could_traverse_or_hide_are_refused() {
    let long = "a".repeat(256);
    let bad = [
        "",
        "..",
        "../x",
        "a/../../x",
        "/etc/passwd",
        "a\\b",
        "a//b",
        "a/",
        "./a",
        "a/.",
        "a\0b",
        "a\nb",
        "a\u{7f}b",
        "a\u{85}b",
        long.as_str(),
    ];
    for name in bad {
        assert!(validate_artifact_name(name).is_err(), "{name:?} accepted");
    }
    for name in [
        "a.png",
        "out/a.png",
        "..a",
        "a..",
        "caf\u{e9}.png",
        "a b.png",
    ] {
        assert!(validate_artifact_name(name).is_ok(), "{name:?} refused");
    }
}

#[test]
fn a_glob_is_refused_and_the_message_names_files_list() {
    for path in ["*.png", "out/?.png", "out/[ab].png"] {
        let e = DeclaredOutput::new(path, "image/png").unwrap_err();
        assert!(e.to_string().contains("`files_list`"), "{e}");
    }
    assert!(DeclaredOutput::new("a.png", "png").is_err());
    assert!(DeclaredOutput::new("a.png", "image/png; q=1").is_err());
    assert_eq!(
        DeclaredOutput::new("a.png", "Image/PNG")
            .unwrap()
            .media_type(),
        "image/png"
    );
}

// ---- the router ----

#[test]
fn a_spec_with_outputs_requires_files_out_and_the_router_refuses_a_backend_without_it() {
    let spec = spec_with(LIMITS, vec![out("a")])
        .with_requires([Capability::Exec])
        .with_min_isolation(Isolation::Microvm);
    assert!(spec.requires().contains(Capability::FilesOut));
    let without = Fake::microvm("plain");
    let router = builder().backend(without).build().unwrap();
    let e = router.acquire(&ctx(), &spec).unwrap_err();
    assert!(e.to_string().contains("`files_out`"), "{e}");
    let with = std::sync::Arc::new(
        Fake::new(
            "serving",
            Isolation::Microvm,
            cordon_sandbox::Egress::Allowlist,
        )
        .with_caps(&[Capability::Exec, Capability::FilesIn, Capability::FilesOut]),
    );
    let router = builder().backend(with).build().unwrap();
    router.acquire(&ctx(), &spec).unwrap();
}
