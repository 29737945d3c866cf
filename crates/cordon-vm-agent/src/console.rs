//! The agent's own log: [`say!`], one line on its stderr.

use std::io::Write;

/// One line on the agent's stderr: the console (the host's log of the VM)
/// in the guest, the test's stderr in `serve-unix` mode. Never panics.
pub(crate) fn say_line(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "cordon-vm-agent: {line}");
}

macro_rules! say {
    ($($t:tt)*) => { $crate::console::say_line(format_args!($($t)*)) };
}
pub(crate) use say;
