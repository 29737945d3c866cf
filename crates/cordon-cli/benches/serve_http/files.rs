//! The files API through the library against the `exec` route (issue 32).

use std::time::{Duration, Instant};

use cordon_sandbox::{ExecRequest, ExitStatus, FileAnswer, FileOp, Sandbox, WriteHow};

use crate::bench::{ms, stats, Library};

const TREE: &str = "
import os
for d in range(100):
    os.makedirs(f'tree/d{d}', exist_ok=True)
    for f in range(100):
        open(f'tree/d{d}/f{f}', 'w').close()
open('big', 'wb').write(os.urandom(10 << 20))
os.makedirs('w', exist_ok=True)
";

fn exec(s: &dyn Sandbox, argv: &[&str], stdin: Vec<u8>) -> Vec<u8> {
    let out = s
        .exec(&ExecRequest {
            argv: argv.iter().map(|a| (*a).to_string()).collect(),
            env: Default::default(),
            stdin,
            timeout: Duration::from_secs(600),
            max_output_bytes: 64 << 20,
        })
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(0), "{argv:?}: {out:?}");
    out.stdout
}

/// Median seconds of `runs` calls of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64());
    }
    stats(&v).0
}

fn row(what: &str, api: f64, exec: f64) {
    println!(
        "{what:<44} api {:>12}  exec {:>12}  api faster by {:.2}x",
        ms(api),
        ms(exec),
        exec / api
    );
}

pub fn bench(lib: &Library, runs: usize, writes: usize) {
    println!(
        "\n== files: the library's Sandbox::files against Sandbox::exec, container rung, {runs} runs (medians), {writes} writes a run"
    );
    crate::bench::machine_state();
    let s = lib.acquire("files");
    exec(&*s, &["python3", "-c", TREE], Vec::new());
    let list = FileOp::List {
        path: "tree".into(),
        depth: 2,
    };
    let api = median(runs, || match s.files(&list).unwrap() {
        // The tree's 10,100 entries are past the API's cap: it answers
        // its 10,000 and says it is truncated (so does the CLI's row).
        FileAnswer::Listing { entries, truncated } => {
            assert!(
                entries.len() == 10_000 && truncated,
                "{} entries",
                entries.len()
            );
        }
        other => panic!("{other:?}"),
    });
    let by_exec = median(runs, || {
        assert!(exec(&*s, &["ls", "-laR", "tree"], Vec::new()).len() > 100_000);
    });
    row("list a 10,000-file tree (depth 2 / ls -laR)", api, by_exec);
    let read = FileOp::Read {
        path: "big".into(),
        offset: 0,
        len: 10 << 20,
    };
    let api = median(runs, || match s.files(&read).unwrap() {
        FileAnswer::Read { data, .. } => assert_eq!(data.len(), 10 << 20),
        other => panic!("{other:?}"),
    });
    let by_exec = median(runs, || {
        assert_eq!(exec(&*s, &["cat", "big"], Vec::new()).len(), 10 << 20);
    });
    row("read a 10 MiB file (read / cat)", api, by_exec);
    let small = vec![b'x'; 100];
    let mut round = 0;
    let w_runs = runs.div_ceil(5).max(1);
    let api = median(w_runs, || {
        round += 1;
        for i in 0..writes {
            s.files(&FileOp::Write {
                path: format!("w/a{round}-{i}"),
                data: small.clone(),
                mode: 0o644,
                how: WriteHow::Create,
            })
            .unwrap();
        }
    });
    let by_exec = median(w_runs, || {
        round += 1;
        for i in 0..writes {
            let to = format!("cat > w/e{round}-{i}");
            exec(&*s, &["sh", "-c", &to], small.clone());
        }
    });
    row(
        &format!("write {writes} small files (write / sh -c 'cat > f')"),
        api,
        by_exec,
    );
    lib.dispose("files");
}
