//! The seccomp programs [`super::seccomp::compile_entries`] makes, as one
//! program that decides what they decide together.
//!
//! seccompiler makes one program per errno (a filter has one match
//! action), and cordon adds the x32 guard; installed one by one, each is
//! converted and JIT-compiled by the kernel at every attach, and every
//! system call the workload makes runs all of them. A warm exec attaches
//! the set twice (its PID 1 and its command). One program does the same
//! with one attach and one run per call.
//!
//! What the kernel does with several: it runs each, newest first, and
//! keeps the result whose action has the highest precedence
//! (`KILL_PROCESS` over `ERRNO` over `ALLOW`), the first found among
//! equals. The programs here return only those three: the guard `KILL`
//! or `ALLOW`; each seccompiler program `KILL` when the architecture is
//! not x86_64 (its first check, the same in each), else its `ERRNO` or
//! `ALLOW`. So, in one program: the guard first (its `KILL` stands
//! whatever follows), then the others newest first, each `ALLOW` turned
//! into a jump to the next one's start and every other return kept. An
//! `ERRNO` returned early is the one the kernel would keep: no later
//! program can return `KILL` once the first passed the architecture, and
//! among `ERRNO`s the newest wins. [`merge`] refuses a program holding any
//! other return, and the tests check the merged program against the
//! kernel's rule over every system call number and the argument values
//! the programs compare with.

use seccompiler::{sock_filter, BpfProgram};

use super::seccomp::SeccompError;

const BPF_RET: u16 = 0x06;
const BPF_RET_K: u16 = 0x06;
const BPF_JMP_JA: u16 = 0x05;
/// The kernel's limit on one program's length.
const BPF_MAXINSNS: usize = 4096;

fn action(ret: u32) -> u32 {
    ret & libc::SECCOMP_RET_ACTION_FULL
}

/// `programs` (in installation order, the x32 guard first) as one.
pub(crate) fn merge(programs: &[BpfProgram]) -> Result<BpfProgram, SeccompError> {
    let refuse = |why: String| SeccompError::Merge(why);
    let Some((guard, rest)) = programs.split_first() else {
        return Err(refuse("no program".into()));
    };
    let order: Vec<&BpfProgram> = std::iter::once(guard).chain(rest.iter().rev()).collect();
    let mut out: Vec<sock_filter> = Vec::new();
    for (b, block) in order.iter().enumerate() {
        let last = b + 1 == order.len();
        for (i, ins) in block.iter().enumerate() {
            if ins.code & 0x07 != BPF_RET {
                out.push(ins.clone());
                continue;
            }
            if ins.code != BPF_RET_K {
                return Err(refuse(format!(
                    "program {b} returns a register, not a constant"
                )));
            }
            let allowed = [
                libc::SECCOMP_RET_ALLOW,
                libc::SECCOMP_RET_ERRNO,
                libc::SECCOMP_RET_KILL_PROCESS,
            ];
            if !allowed.contains(&action(ins.k)) {
                return Err(refuse(format!(
                    "program {b} returns the action {:#x}",
                    action(ins.k)
                )));
            }
            if action(ins.k) == libc::SECCOMP_RET_ALLOW && !last {
                let to_next = u32::try_from(block.len() - 1 - i)
                    .map_err(|_| refuse("a program too long to jump over".into()))?;
                out.push(sock_filter {
                    code: BPF_JMP_JA,
                    jt: 0,
                    jf: 0,
                    k: to_next,
                });
            } else {
                out.push(ins.clone());
            }
        }
    }
    if out.len() > BPF_MAXINSNS {
        return Err(refuse(format!(
            "{} instructions, past the kernel's {BPF_MAXINSNS}",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::seccomp::{compile, compile_entries, DENY};
    use crate::plan::Rung;

    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;

    /// A classic BPF interpreter for the instructions seccomp programs
    /// hold here, over `seccomp_data` (nr, arch, ip, six arguments).
    fn run(p: &[sock_filter], data: &[u8; 64]) -> u32 {
        let word = |k: u32| {
            let k = k as usize;
            u32::from_le_bytes(data[k..k + 4].try_into().unwrap())
        };
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = p[pc].clone();
            pc += 1;
            match i.code {
                0x20 => a = word(i.k),      // LD W ABS
                0x54 => a &= i.k,           // ALU AND K
                0x05 => pc += i.k as usize, // JA
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let hit = match i.code {
                        0x15 => a == i.k,
                        0x25 => a > i.k,
                        0x35 => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    pc += if hit { i.jt } else { i.jf } as usize;
                }
                0x06 => return i.k,
                other => panic!("an instruction the interpreter lacks: {other:#x}"),
            }
        }
    }

    /// What the kernel keeps of several programs' results: newest first,
    /// the highest precedence (lowest action as a signed number), the
    /// first among equals.
    fn kernel(programs: &[BpfProgram], data: &[u8; 64]) -> u32 {
        let mut best: Option<u32> = None;
        for p in programs.iter().rev() {
            let r = run(p, data);
            let lower = |x: u32, y: u32| (action(x) as i32) < (action(y) as i32);
            if best.is_none_or(|b| lower(r, b)) {
                best = Some(r);
            }
        }
        best.unwrap()
    }

    fn data(nr: u32, arch: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_le_bytes());
        d[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        d
    }

    /// The constants the programs compare with: the argument values
    /// worth trying (each, and combined into flags).
    fn constants(programs: &[BpfProgram]) -> Vec<u64> {
        let mut ks: Vec<u64> = programs
            .iter()
            .flatten()
            .filter(|i| i.code & 0x07 == 0x05 || i.code == 0x54)
            .map(|i| u64::from(i.k))
            .collect();
        ks.extend([0, 1, 2, 3, u64::from(u32::MAX), u64::MAX, 1 << 32]);
        ks.sort_unstable();
        ks.dedup();
        ks
    }

    fn same_decisions(programs: &[BpfProgram]) {
        let merged = merge(programs).unwrap();
        let ks = constants(programs);
        let mut checked = 0u64;
        for arch in [AUDIT_ARCH_X86_64, 0x4000_0003] {
            for base in [0u32, 0x4000_0000] {
                for nr in 0..=460u32 {
                    let compared = ks.contains(&u64::from(nr));
                    let nr = base | nr;
                    // A call no program names is tried bare; one it names
                    // with every constant in each argument alone, then
                    // pairs of constants OR-ed (flags).
                    let mut tries: Vec<[u64; 6]> = vec![[0; 6], [u64::MAX; 6]];
                    if !compared {
                        for args in tries {
                            let d = data(nr, arch, args);
                            assert_eq!(run(&merged, &d), kernel(programs, &d), "nr {nr:#x}");
                            checked += 1;
                        }
                        continue;
                    }
                    for &k in &ks {
                        for slot in 0..3 {
                            let mut a = [0u64; 6];
                            a[slot] = k;
                            tries.push(a);
                        }
                    }
                    for &k in ks.iter().step_by(3) {
                        for &j in ks.iter().step_by(5) {
                            tries.push([k | j, k | j, k, j, 0, 0]);
                        }
                    }
                    for args in tries {
                        let d = data(nr, arch, args);
                        assert_eq!(
                            run(&merged, &d),
                            kernel(programs, &d),
                            "nr {nr:#x} arch {arch:#x} args {args:x?}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    /// The merged program decides every call as the programs installed
    /// one by one do: at both rungs, for every system call number (x32's
    /// too, and a foreign architecture), with every constant the programs
    /// compare arguments with.
    #[test]
    fn one_program_decides_as_the_set_does() {
        for rung in [Rung::Container, Rung::Process] {
            let programs = compile(rung).unwrap();
            assert!(programs.len() >= 3);
            same_decisions(&programs);
        }
        same_decisions(&compile_entries(DENY.iter()).unwrap());
    }

    /// Denied calls come out denied, with their errno; the guard's kill
    /// stands; an allowed call is allowed.
    #[test]
    fn the_merged_program_denies_and_allows() {
        let merged = merge(&compile(Rung::Container).unwrap()).unwrap();
        let nr = |n: libc::c_long| u32::try_from(n).unwrap();
        let ptrace = run(
            &merged,
            &data(nr(libc::SYS_ptrace), AUDIT_ARCH_X86_64, [0; 6]),
        );
        assert_eq!(action(ptrace), libc::SECCOMP_RET_ERRNO);
        let clone3 = run(
            &merged,
            &data(nr(libc::SYS_clone3), AUDIT_ARCH_X86_64, [0; 6]),
        );
        assert_eq!(clone3, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        let read = run(
            &merged,
            &data(nr(libc::SYS_read), AUDIT_ARCH_X86_64, [0; 6]),
        );
        assert_eq!(read, libc::SECCOMP_RET_ALLOW);
        let x32 = run(&merged, &data(0x4000_0000, AUDIT_ARCH_X86_64, [0; 6]));
        assert_eq!(x32, libc::SECCOMP_RET_KILL_PROCESS);
    }

    #[test]
    fn a_program_returning_another_action_is_refused() {
        let trap = vec![sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_TRAP,
        }];
        let guard = compile(Rung::Container).unwrap().remove(0);
        assert!(merge(&[guard, trap]).is_err());
    }
}
