//! The collection probes: a hostile layout planted in the work dir, then
//! collected through an interposer and judged.

use std::sync::Mutex;

use unicode_normalization::UnicodeNormalization;

use cordon_collect::Cap;
use cordon_sandbox::{Collision, DeclaredOutput, SandboxSpec, TransferLimits};

use super::interposer::observe;
use super::judge::{judge_cap, judge_collision, judge_dangling, judge_escape, judge_refused};
use super::probe::{plant, ConformanceSubject, SECRET};

pub(super) fn small_limits() -> TransferLimits {
    TransferLimits {
        max_bytes_per_file: 64,
        max_total_bytes: 1024,
        max_files: 8,
    }
}

pub(super) fn collect_probe(
    name: &'static str,
    s: &dyn ConformanceSubject,
) -> Result<String, String> {
    let dir = format!("{}/cordon-probe-{name}", s.work_dir());
    let out = format!("{}/cordon-probe-{name}", s.outside_dir());
    plant(
        "a clean probe directory",
        s.remove(&dir).and(s.remove(&out)),
    )?;
    let rel = |p: &str| format!("cordon-probe-{name}/{p}");
    let decl = |p: &str| {
        DeclaredOutput::new(&rel(p), "application/octet-stream").map_err(|e| e.to_string())
    };
    let spec_with = |limits: TransferLimits, outputs: Vec<DeclaredOutput>| {
        SandboxSpec::new("conformance", "conformance")
            .and_then(|sp| sp.with_work_dir(s.work_dir()))
            .and_then(|sp| sp.with_outputs(limits, outputs))
            .map_err(|e| format!("the probe's spec is refused: {e}"))
    };
    let secret = format!("{out}/secret");
    match name {
        "link-to-outside-file" => {
            plant("the outside file", s.plant_file(&secret, SECRET))?;
            plant("the link", s.plant_link(&format!("{dir}/out.txt"), &secret))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            judge_escape(&observe(s, &spec, None, None))
        }
        "symlinked-parent" => {
            plant(
                "the outside file",
                s.plant_file(&format!("{out}/dir/out.txt"), SECRET),
            )?;
            plant(
                "the linked parent",
                s.plant_link(&format!("{dir}/sub"), &format!("{out}/dir")),
            )?;
            let spec = spec_with(small_limits(), vec![decl("sub/out.txt")?])?;
            judge_escape(&observe(s, &spec, None, None))
        }
        "link-swapped-after-stat" => {
            plant("the outside file", s.plant_file(&secret, SECRET))?;
            let path = format!("{dir}/out.txt");
            plant("the file", s.plant_file(&path, b"harmless\n"))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            let swapped = Mutex::new(None::<Result<(), String>>);
            let swap = || {
                let r = s.plant_link(&path, &secret);
                if let Ok(mut g) = swapped.lock() {
                    *g = Some(r);
                }
            };
            let o = observe(s, &spec, None, Some((&path, &swap)));
            match swapped.lock().map(|g| g.clone()) {
                Ok(Some(Ok(()))) => {}
                Ok(Some(Err(e))) => return Err(format!("could not plant the swapped link: {e}")),
                _ => return Err("the output was never stat-ed, so the swap never ran".into()),
            }
            judge_escape(&o)
        }
        "dangling-link" => {
            let target = format!("{out}/missing");
            plant(
                "the dangling link",
                s.plant_link(&format!("{dir}/out.txt"), &target),
            )?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?.optional()])?;
            judge_dangling(&observe(s, &spec, None, None))
        }
        "directory-declared-as-file" => {
            plant("the directory", s.plant_dir(&format!("{dir}/out.txt")))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            judge_refused(&observe(s, &spec, None, None))
        }
        "oversized-file" => {
            plant(
                "the oversized file",
                s.plant_file(&format!("{dir}/big.bin"), &[b'x'; 65]),
            )?;
            let spec = spec_with(small_limits(), vec![decl("big.bin")?])?;
            judge_cap(&observe(s, &spec, None, None), Cap::BytesPerFile)
        }
        "file-grows-after-stat" => {
            let path = format!("{dir}/grows.bin");
            plant("the file", s.plant_file(&path, b"small\n"))?;
            let spec = spec_with(small_limits(), vec![decl("grows.bin")?])?;
            let grown = Mutex::new(None::<Result<(), String>>);
            let grow = || {
                let r = s.append(&path, &vec![b'y'; 64 << 10]);
                if let Ok(mut g) = grown.lock() {
                    *g = Some(r);
                }
            };
            let o = observe(s, &spec, None, Some((&path, &grow)));
            match grown.lock().map(|g| g.clone()) {
                Ok(Some(Ok(()))) => {}
                Ok(Some(Err(e))) => return Err(format!("could not grow the file: {e}")),
                _ => return Err("the output was never stat-ed, so it never grew".into()),
            }
            judge_cap(&o, Cap::BytesPerFile)
        }
        "too-many-files" => {
            let mut outputs = Vec::new();
            for n in ["one", "two", "three"] {
                plant("a file", s.plant_file(&format!("{dir}/{n}.txt"), b"ok\n"))?;
                outputs.push(decl(&format!("{n}.txt"))?);
            }
            let limits = TransferLimits {
                max_files: 2,
                ..small_limits()
            };
            judge_cap(
                &observe(s, &spec_with(limits, outputs)?, None, None),
                Cap::Files,
            )
        }
        "names-collide-by-case" | "names-collide-by-nfc-nfd" => collide_probe(name, s, &dir, &rel),
        "fifo-at-output-path" => {
            plant("the FIFO", s.plant_fifo(&format!("{dir}/out.txt")))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            judge_refused(&observe(s, &spec, None, None))
        }
        "device-node-at-output-path" => {
            plant("the device node", s.plant_device(&format!("{dir}/out.txt")))?;
            let spec = spec_with(small_limits(), vec![decl("out.txt")?])?;
            judge_refused(&observe(s, &spec, None, None))
        }
        other => Err(format!("unknown probe `{other}`")),
    }
}

/// The two name-collision probes: two outputs whose landing names differ
/// only by case, or only by Unicode normalisation, named at call time.
fn collide_probe(
    name: &str,
    s: &dyn ConformanceSubject,
    dir: &str,
    rel: &dyn Fn(&str) -> String,
) -> Result<String, String> {
    let decl = |p: &str| {
        DeclaredOutput::new(&rel(p), "application/octet-stream").map_err(|e| e.to_string())
    };
    plant("a file", s.plant_file(&format!("{dir}/a.txt"), b"a\n"))?;
    plant("a file", s.plant_file(&format!("{dir}/b.txt"), b"b\n"))?;
    let (first, second, how) = if name == "names-collide-by-case" {
        (
            "Report.txt".to_string(),
            "report.txt".to_string(),
            Collision::Case,
        )
    } else {
        let composed: String = "caf\u{e9}.txt".nfc().collect();
        let decomposed: String = "caf\u{e9}.txt".nfd().collect();
        (composed, decomposed, Collision::Normalisation)
    };
    let named = vec![
        decl("a.txt")?
            .with_name(&first)
            .map_err(|e| e.to_string())?,
        decl("b.txt")?
            .with_name(&second)
            .map_err(|e| e.to_string())?,
    ];
    let spec = SandboxSpec::new("conformance", "conformance")
        .and_then(|sp| sp.with_work_dir(s.work_dir()))
        .and_then(|sp| sp.with_outputs_named_at_call_time(small_limits()))
        .map_err(|e| e.to_string())?;
    judge_collision(&observe(s, &spec, Some(&named), None), how)
}
