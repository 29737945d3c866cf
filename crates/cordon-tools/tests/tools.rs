//! Host tools: declaration, sealing, the one door and its caps. (The
//! router's hard stops on them are tested with the router, in
//! `cordon-sandbox`.)
#![allow(clippy::expect_used, clippy::unwrap_used)] // tests may panic on a broken fixture

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use cordon_sandbox::{ToolIdentity, TransferLimits};
use cordon_tools::{
    HostTool, HostToolRegistry, RunLimits, Schema, Sink, Source, ToolDeclaration, ToolError,
    ToolSurface,
};

/// Runs `f` with `tracing` events captured; returns its value and the log.
fn capture_logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf(Arc::new(Mutex::new(Vec::new())));
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .finish();
    let value = tracing::subscriber::with_default(subscriber, f);
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (value, log)
}

fn echo(name: &str, identity: Option<ToolIdentity>) -> HostTool {
    HostTool {
        name: name.into(),
        declaration: ToolDeclaration {
            source: Some(Source::Private),
            sink: None,
            identity,
        },
        schema: Schema::object([(
            "text",
            Schema::String {
                max_length: Some(100),
                one_of: None,
            },
        )]),
        handler: Box::new(|args: &Value| Ok(args["text"].clone())),
    }
}

fn surface() -> ToolSurface {
    let mut r = HostToolRegistry::new().acknowledge_risk();
    r.register(echo("echo", Some(ToolIdentity::App))).unwrap();
    r.register(echo("send_as_user", Some(ToolIdentity::User)))
        .unwrap();
    r.aggregate()
}

#[test]
fn registering_warns_once_per_registry_and_acknowledging_silences_it() {
    let (_, log) = capture_logs(|| {
        let mut r = HostToolRegistry::new();
        r.register(echo("a", None)).unwrap();
        r.register(echo("b", None)).unwrap();
    });
    assert_eq!(
        log.matches("host tools run in the host process").count(),
        1,
        "{log}"
    );
    let (_, log) = capture_logs(|| {
        let mut r = HostToolRegistry::new().acknowledge_risk();
        r.register(echo("a", None)).unwrap();
    });
    assert!(log.is_empty(), "{log}");
}

#[test]
fn registration_refuses_bad_names_duplicates_and_non_object_schemas() {
    let mut r = HostToolRegistry::new().acknowledge_risk();
    let err = r.register(echo("Fetch-Invoice", None)).unwrap_err();
    insta::assert_snapshot!("tool_bad_name", err.to_string());
    r.register(echo("echo", None)).unwrap();
    let err = r.register(echo("echo", None)).unwrap_err();
    assert!(matches!(err, ToolError::Duplicate { .. }));
    let mut t = echo("scalar", None);
    t.schema = Schema::Boolean;
    assert!(matches!(
        r.register(t).unwrap_err(),
        ToolError::SchemaNotObject { .. }
    ));
}

#[test]
fn aggregate_seals_the_registry_and_derives_the_surface_policy() {
    let mut r = HostToolRegistry::new().acknowledge_risk();
    r.register(HostTool {
        name: "read_invoices".into(),
        declaration: ToolDeclaration {
            source: Some(Source::Private),
            sink: None,
            identity: Some(ToolIdentity::App),
        },
        schema: Schema::object([]),
        handler: Box::new(|_| Ok(json!([]))),
    })
    .unwrap();
    r.register(HostTool {
        name: "post_message".into(),
        declaration: ToolDeclaration {
            source: None,
            sink: Some(Sink::External),
            identity: Some(ToolIdentity::App),
        },
        schema: Schema::object([]),
        handler: Box::new(|_| Ok(json!("sent"))),
    })
    .unwrap();
    // `aggregate` takes the registry by value: nothing can be registered
    // after it (`r.register(...)` here would not compile).
    let s = r.aggregate();
    let p = s.policy();
    assert!(!p.approval_gated);
    assert_eq!(p.private_sources, ["read_invoices"]);
    assert_eq!(p.external_sinks, ["post_message"]);
    assert!(p.can_exfiltrate());
    // A user-identity tool raises the surface to approval-gated.
    assert!(surface().policy().approval_gated);
    let decls: Vec<(&str, ToolDeclaration)> = s.declarations().map(|(n, d)| (n, *d)).collect();
    assert_eq!(decls.len(), 2);
}

#[test]
fn dispatching_a_user_tool_is_refused_naming_the_prerequisites() {
    let s = surface();
    let mut run = s.run(RunLimits::default());
    let err = run
        .dispatch("send_as_user", &json!({"text": "hi"}))
        .unwrap_err();
    assert!(matches!(err, ToolError::UserNotServable { .. }));
    insta::assert_snapshot!("user_not_servable", err.to_string());
    // Positive: the app tool on the same surface is served.
    assert_eq!(
        run.dispatch("echo", &json!({"text": "hi"})).unwrap(),
        json!("hi")
    );
}

#[test]
fn arguments_are_validated_at_the_one_door() {
    let s = surface();
    let mut run = s.run(RunLimits::default());
    let err = run.dispatch("echo", &json!({"text": 5})).unwrap_err();
    insta::assert_snapshot!("tool_bad_argument", err.to_string());
    let err = run
        .dispatch("echo", &json!({"text": "hi", "path": "/etc/passwd"}))
        .unwrap_err();
    insta::assert_snapshot!("tool_extra_argument", err.to_string());
    let err = run.dispatch("rm_rf", &json!({})).unwrap_err();
    insta::assert_snapshot!("tool_unknown", err.to_string());
}

#[test]
fn the_dispatch_cap_counts_refusals() {
    let s = surface();
    let mut run = s.run(RunLimits {
        max_dispatches: 3,
        responses: TransferLimits::DEFAULT,
    });
    assert!(run.dispatch("echo", &json!({"text": 1})).is_err());
    assert!(run.dispatch("nope", &json!({})).is_err());
    assert!(run.dispatch("echo", &json!({"text": "ok"})).is_ok());
    let err = run.dispatch("echo", &json!({"text": "ok"})).unwrap_err();
    assert_eq!(run.attempts(), 4);
    insta::assert_snapshot!("dispatch_cap", err.to_string());
    // A new run starts a new count.
    assert!(s
        .run(RunLimits::default())
        .dispatch("echo", &json!({"text": "ok"}))
        .is_ok());
}

#[test]
fn responses_are_capped_per_response_per_run_and_in_number() {
    let s = surface();
    let limits = |per, total, files| RunLimits {
        max_dispatches: 100,
        responses: TransferLimits {
            max_bytes_per_file: per,
            max_total_bytes: total,
            max_files: files,
        },
    };
    // `"hello"` is 7 bytes of JSON.
    let mut run = s.run(limits(6, 100, 10));
    let err = run.dispatch("echo", &json!({"text": "hello"})).unwrap_err();
    insta::assert_snapshot!("response_too_large", err.to_string());
    let mut run = s.run(limits(7, 14, 10));
    run.dispatch("echo", &json!({"text": "hello"})).unwrap();
    run.dispatch("echo", &json!({"text": "hello"})).unwrap();
    let err = run.dispatch("echo", &json!({"text": "hello"})).unwrap_err();
    insta::assert_snapshot!("run_bytes", err.to_string());
    let mut run = s.run(limits(7, 100, 1));
    run.dispatch("echo", &json!({"text": "hello"})).unwrap();
    assert!(matches!(
        run.dispatch("echo", &json!({"text": "hello"})),
        Err(ToolError::RunResponses { .. })
    ));
}

/// What the router checks of a surface: each tool's name and identity.
#[test]
fn a_surface_shows_the_router_each_tools_identity() {
    let s = surface();
    let ids: Vec<(&str, Option<ToolIdentity>)> = s.identities().collect();
    assert_eq!(
        ids,
        [
            ("echo", Some(ToolIdentity::App)),
            ("send_as_user", Some(ToolIdentity::User))
        ]
    );
}
