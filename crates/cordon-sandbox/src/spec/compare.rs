//! Two specs compared: what differs, and what one widens of another (a
//! snapshot's, which a restore may narrow and never widen).

use super::SandboxSpec;

impl SandboxSpec {
    /// The names of the fields in which `self` and `other` differ, for a
    /// refusal that says what differs.
    pub fn differences(&self, other: &SandboxSpec) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut diff = |name, differ: bool| {
            if differ {
                out.push(name);
            }
        };
        diff("kind", self.kind != other.kind);
        diff("image", self.image != other.image);
        diff("egress_allow", self.egress_allow != other.egress_allow);
        diff("work_dir", self.work_dir != other.work_dir);
        diff("workspace", self.workspace != other.workspace);
        diff("requires", self.requires != other.requires);
        diff("min_isolation", self.min_isolation != other.min_isolation);
        diff("resources", self.resources != other.resources);
        diff(
            "secrets",
            self.secrets != other.secrets || self.placeholders != other.placeholders,
        );
        diff(
            "declared_outputs",
            self.declared_outputs != other.declared_outputs,
        );
        diff("files_out", self.files_out != other.files_out);
        diff(
            "outputs_named_at_call_time",
            self.outputs_named_at_call_time != other.outputs_named_at_call_time,
        );
        out
    }

    /// The fields where this spec asks for more than `was` (a snapshot's
    /// spec, which a restore may narrow, never widen): what must stay as
    /// it was (kind, image, work dir, workspace, outputs), or grows — an
    /// egress entry, a secret or placeholder `was` did not name, a bound
    /// raised or left to the policy where `was` set one, a lower floor, a
    /// requirement dropped. Empty: the same or narrower.
    pub fn wider_than(&self, was: &SandboxSpec) -> Vec<&'static str> {
        fn subset<T: PartialEq>(a: &[T], b: &[T]) -> bool {
            a.iter().all(|x| b.contains(x))
        }
        let bound = |now: Option<u64>, then: Option<u64>| match (now, then) {
            (_, None) => true,
            (Some(n), Some(t)) => n <= t,
            (None, Some(_)) => false,
        };
        let r = (&self.resources, &was.resources);
        let mut out = Vec::new();
        let mut wider = |name, is: bool| {
            if is {
                out.push(name);
            }
        };
        wider("kind", self.kind != was.kind);
        wider("image", self.image != was.image);
        wider(
            "egress_allow",
            !subset(&self.egress_allow, &was.egress_allow),
        );
        wider("work_dir", self.work_dir != was.work_dir);
        wider("workspace", self.workspace != was.workspace);
        wider(
            "requires",
            was.requires.iter().any(|c| !self.requires.contains(c)),
        );
        wider("min_isolation", self.min_isolation < was.min_isolation);
        wider(
            "resources",
            !(bound(r.0.memory, r.1.memory)
                && bound(r.0.processes, r.1.processes)
                && bound(r.0.cpu_seconds, r.1.cpu_seconds)
                && bound(r.0.wall_seconds, r.1.wall_seconds)
                && bound(r.0.disk, r.1.disk)),
        );
        wider(
            "secrets",
            !subset(&self.secrets, &was.secrets) || !subset(&self.placeholders, &was.placeholders),
        );
        wider(
            "declared_outputs",
            self.declared_outputs != was.declared_outputs,
        );
        wider("files_out", self.files_out != was.files_out);
        wider(
            "outputs_named_at_call_time",
            self.outputs_named_at_call_time != was.outputs_named_at_call_time,
        );
        out
    }
}
