//! Policies the tests share.

/// A root policy of the egress tests: system programs, the system trees
/// read and execute, `/etc` read, the work dir and `/tmp`, three devices,
/// and two test hosts on loopback (`ok.test`, `other.test`), resolved by
/// a hosts file of the test's own.
///
/// `compute_deny`, `egress_deny` and `more` are YAML a test adds: the
/// items of `compute.deny` and `egress.deny` (each list left out when
/// empty), and whole surfaces after `egress` (`  secret:` …).
pub fn loopback_egress(compute_deny: &str, egress_deny: &str, more: &str) -> String {
    let list = |items: &str| {
        if items.is_empty() {
            String::new()
        } else {
            format!("    deny:\n{items}")
        }
    };
    format!(
        r#"
policy:
  compute:
    allow:
      - name: system-programs
        when: command.startsWith("/usr/") || command.startsWith("/bin/")
{}  storage:
    allow:
      - name: system
        when: >-
          (path.startsWith("/usr/") || path.startsWith("/lib/") ||
          path.startsWith("/lib64/") || path.startsWith("/bin/") ||
          path.startsWith("/sbin/")) && mode in ["read", "execute"]
      - name: etc
        when: path.startsWith("/etc/") && mode == "read"
      - name: work
        when: path.startsWith(work_dir + "/") && mode in ["read", "write"]
      - name: tmp
        when: path.startsWith("/tmp/") && mode in ["read", "write"]
      - name: devices
        when: path in ["/dev/null", "/dev/zero", "/dev/urandom"] && mode in ["read", "write"]
  egress:
    allow_ranges:
      - cidr: 127.0.0.0/8
        hosts: [ok.test, other.test]
    allow:
      - name: test-hosts
        when: host == "ok.test" || host == "other.test"
{}{more}"#,
        list(compute_deny),
        list(egress_deny),
    )
}
