//! One exec's three pipes, split between the sandbox and us, and the
//! handle over our ends.

use cordon_sandbox::{
    Attach, ExecHandle, ExecRequest, ExitStatus, Killer, SandboxError, StdinFeed,
};

/// The three pipes of one exec, before they are split between the
/// sandbox and us.
pub struct ExecPipes {
    stdin: (std::os::fd::OwnedFd, Option<std::os::fd::OwnedFd>),
    stdout: (std::os::fd::OwnedFd, std::os::fd::OwnedFd),
    stderr: (std::os::fd::OwnedFd, std::os::fd::OwnedFd),
}

/// Our ends of an exec's pipes.
pub struct OurEnds {
    stdin: Option<std::os::fd::OwnedFd>,
    stdout: std::os::fd::OwnedFd,
    stderr: std::os::fd::OwnedFd,
}

impl ExecPipes {
    /// Pipes for stdout and stderr; for stdin a pipe when there is input,
    /// else `/dev/null`.
    pub fn new(with_stdin: bool) -> std::io::Result<ExecPipes> {
        use rustix::pipe::{pipe_with, PipeFlags};
        let p = || pipe_with(PipeFlags::CLOEXEC).map_err(std::io::Error::from);
        let stdin = if with_stdin {
            let (r, w) = p()?;
            (r, Some(w))
        } else {
            (std::fs::File::open("/dev/null")?.into(), None)
        };
        let (out_r, out_w) = p()?;
        let (err_r, err_w) = p()?;
        Ok(ExecPipes {
            stdin,
            stdout: (out_r, out_w),
            stderr: (err_r, err_w),
        })
    }

    /// The sandbox's ends and ours.
    pub fn split(self) -> (cordon_linux::ExecStdio, OurEnds) {
        (
            cordon_linux::ExecStdio {
                stdin: self.stdin.0,
                stdout: self.stdout.1,
                stderr: self.stderr.1,
            },
            OurEnds {
                stdin: self.stdin.1,
                stdout: self.stdout.0,
                stderr: self.stderr.0,
            },
        )
    }
}

impl OurEnds {
    /// The handle over these pipes: stdin streamed (with
    /// `attach.stdin_stream`) or fed the request's bytes, stdout and stderr
    /// read capped at the request's limit, `wait` for the end, `killer` to
    /// stop it early.
    pub fn into_handle(
        self,
        req: &ExecRequest,
        attach: Attach,
        wait: impl FnOnce() -> Result<ExitStatus, SandboxError> + Send + 'static,
        killer: Killer,
    ) -> ExecHandle {
        let stdin = match self.stdin {
            Some(w) if attach.stdin_stream => StdinFeed::Stream(Box::new(std::fs::File::from(w))),
            Some(w) => StdinFeed::Bytes(Box::new(std::fs::File::from(w)), req.stdin.clone()),
            None => StdinFeed::None,
        };
        ExecHandle::from_pipes(
            stdin,
            std::fs::File::from(self.stdout),
            std::fs::File::from(self.stderr),
            req.max_output_bytes,
            wait,
            killer,
        )
    }
}
