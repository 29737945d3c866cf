//! `cordon image build | import | ls | rm | gc`: the image store
//! (`cordon-image`) at `$CORDON_IMAGE_STORE`, else `/var/lib/cordon/images`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use cordon_image::{
    format_time, DebootstrapOpts, ImageConfig, ImageError, ImageInfo, ImageStore, ImportOpts,
};
use serde_json::json;

use crate::{Format, EXIT_PROBLEMS, EXIT_USAGE};

#[derive(Subcommand)]
pub enum ImageCommand {
    /// Build an image with `debootstrap --variant=minbase` (progress on
    /// stderr) and name it; prints its digest.
    Build(BuildArgs),
    /// Import a root tree (a directory or a `.tar`, `.tar.gz`/`.tgz`
    /// archive) or a container image (an OCI image layout, as a directory
    /// or a tar archive, or a `docker save` archive) and name it; prints its
    /// digest. An image's blobs are checked against their digests, its
    /// layers applied in order with whiteouts honoured, and its env, user,
    /// work dir, entrypoint and cmd kept. Symlinks are kept, never
    /// followed; device nodes, fifos and sockets are skipped with a
    /// warning; setuid/setgid and group/other write bits are cleared.
    Import {
        /// The image's name (a-z, 0-9, `.`, `_`, `-`).
        name: String,
        /// A directory, or a `.tar`, `.tar.gz` or `.tgz` file.
        source: PathBuf,
        /// `OS/ARCH[/VARIANT]` to import from an OCI index with several
        /// images (default: the only one, else linux/amd64).
        #[arg(long)]
        platform: Option<String>,
    },
    /// List the images: name, digest, size, created, source (`host` is
    /// built in).
    Ls {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
    /// Remove a name, and its tree when no other name points to it.
    Rm {
        /// The image's name.
        name: String,
    },
    /// Remove leftovers of builds that died and trees no name points to.
    Gc,
}

#[derive(Args)]
pub struct BuildArgs {
    /// The image's name (a-z, 0-9, `.`, `_`, `-`).
    name: String,
    /// Build with debootstrap (the only builder so far).
    #[arg(long, required = true)]
    debootstrap: bool,
    /// Extra packages, comma-separated (`--include python3,git`).
    #[arg(long, value_delimiter = ',')]
    include: Vec<String>,
    /// Debian suite.
    #[arg(long, default_value = cordon_image::DEFAULT_SUITE)]
    suite: String,
    /// Debian mirror (default: `$CORDON_DEBIAN_MIRROR`, else apt's
    /// configured mirror, else http://deb.debian.org/debian).
    #[arg(long)]
    mirror: Option<String>,
}

fn fail(e: &ImageError) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(if e.is_refusal() {
        EXIT_USAGE
    } else {
        EXIT_PROBLEMS
    })
}

fn progress(line: &str) {
    eprintln!("{line}");
}

pub fn run(command: ImageCommand) -> ExitCode {
    let store = match ImageStore::open(&ImageStore::default_root()) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    match command {
        ImageCommand::Build(args) => {
            let opts = DebootstrapOpts {
                suite: args.suite,
                mirror: args.mirror,
                include: args.include,
                program: None,
            };
            let started = std::time::Instant::now();
            match store.build_debootstrap(&args.name, &opts, &mut |l: &str| progress(l)) {
                Ok(info) => {
                    eprintln!(
                        "built `{}` ({}) in {:.0?}",
                        info.name,
                        human_size(info.size),
                        started.elapsed()
                    );
                    println!("{}", info.digest);
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        ImageCommand::Import {
            name,
            source,
            platform,
        } => {
            let opts = ImportOpts { platform };
            match store.import_with(&name, &source, &opts, &mut |l: &str| progress(l)) {
                Ok(info) => {
                    eprintln!("imported `{}` ({})", info.name, human_size(info.size));
                    println!("{}", info.digest);
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        ImageCommand::Ls { format } => match store.ls() {
            Ok(list) => {
                print_list(&list, format);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        ImageCommand::Rm { name } => match store.rm(&name) {
            Ok(()) => {
                println!("removed `{name}`");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        ImageCommand::Gc => match store.gc() {
            Ok(r) => {
                println!(
                    "removed {} unfinished builds and {} unnamed trees",
                    r.tmp_removed, r.blobs_removed
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
    }
}

fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30)),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20)),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn print_list(list: &[ImageInfo], format: Format) {
    match format {
        Format::Json => {
            let mut rows = vec![json!({"name": "host", "builtin": true})];
            rows.extend(list.iter().map(|i| {
                json!({
                    "name": i.name,
                    "builtin": false,
                    "digest": i.digest,
                    "size": i.size,
                    "created": format_time(i.created),
                    "source": i.source,
                    "config": i.config.as_ref().map(config_json),
                })
            }));
            println!("{}", serde_json::Value::Array(rows));
        }
        Format::Human => {
            println!(
                "{:<20} {:<19} {:>10}  {:<20}  SOURCE",
                "NAME", "DIGEST", "SIZE", "CREATED"
            );
            println!(
                "{:<20} {:<19} {:>10}  {:<20}  the host's system directories, read-only",
                "host", "(built in)", "-", "-"
            );
            for i in list {
                let short = i.digest.get(..19).unwrap_or(&i.digest);
                println!(
                    "{:<20} {:<19} {:>10}  {:<20}  {}",
                    i.name,
                    short,
                    human_size(i.size),
                    format_time(i.created),
                    i.source
                );
                if let Some(c) = &i.config {
                    println!("{:<20} {}", "", config_line(c));
                }
            }
        }
    }
}

fn config_json(c: &ImageConfig) -> serde_json::Value {
    json!({
        "env": c.env,
        "user": c.user,
        "working_dir": c.working_dir,
        "entrypoint": c.entrypoint,
        "cmd": c.cmd,
    })
}

/// The run config on one line under an image's row: what the image says
/// to run, as whom, where, and how many environment variables it sets.
fn config_line(c: &ImageConfig) -> String {
    let list = |v: &Option<Vec<String>>| v.as_ref().map_or("-".to_string(), |v| format!("{v:?}"));
    format!(
        "user={} workdir={} entrypoint={} cmd={} env={}",
        c.user.as_deref().unwrap_or("-"),
        c.working_dir.as_deref().unwrap_or("-"),
        list(&c.entrypoint),
        list(&c.cmd),
        if c.env.is_empty() {
            "-".to_string()
        } else {
            c.env.join(",")
        }
    )
}
