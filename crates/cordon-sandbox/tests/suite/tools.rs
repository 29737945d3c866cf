//! The router's hard stops on host tools (the tools themselves are the
//! `cordon-tools` crate's): a denied identity, host tools denied outright.

use cordon_sandbox::{Capability, RouterError, ToolIdentity};

use super::doubles::{builder, Fake};

#[test]
fn the_router_applies_the_hosts_hard_stops_to_tools() {
    let s = [
        ("echo", Some(ToolIdentity::App)),
        ("send_as_user", Some(ToolIdentity::User)),
    ];
    let router = builder()
        .deny_identity(ToolIdentity::User)
        .backend(Fake::microvm("vm"))
        .build()
        .unwrap();
    let err = router.admit_tools(s).unwrap_err();
    insta::assert_snapshot!("tool_identity_denied", err.to_string());
    let router = builder()
        .deny_capability(Capability::HostTools)
        .backend(Fake::microvm("vm"))
        .build()
        .unwrap();
    assert_eq!(router.admit_tools(s).unwrap_err(), RouterError::ToolsDenied);
    // Positive: app-only tools pass a host that denies user identity, and
    // an empty surface passes any host.
    let app_only = [("echo", Some(ToolIdentity::App))];
    let router = builder()
        .deny_identity(ToolIdentity::User)
        .backend(Fake::microvm("vm"))
        .build()
        .unwrap();
    assert!(router.admit_tools(app_only).is_ok());
    let router = builder()
        .deny_capability(Capability::HostTools)
        .backend(Fake::microvm("vm"))
        .build()
        .unwrap();
    assert!(router.admit_tools([]).is_ok());
}
