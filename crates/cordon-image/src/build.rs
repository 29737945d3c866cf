//! Filling the store: [`ImageStore::import_with`] (a root tree, or an OCI
//! or `docker save` image flattened by `oci`) and
//! [`ImageStore::build_debootstrap`] (with [`ImageStore::ensure_default`]),
//! each staged under `tmp/` and then committed.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use crate::dirs::{lock_file, remove_tree};
use crate::error::{io_err, ImageError};
use crate::store::check_name;
use crate::{
    configured_mirror, debootstrap, oci, tree, DebootstrapOpts, ImageConfig, ImageInfo, ImageStore,
    ImportOpts, Resolved, DEFAULT_IMAGE, HOST,
};

impl ImageStore {
    /// Imports `src` as `name` with the default [`ImportOpts`]; see
    /// [`ImageStore::import_with`].
    pub fn import(
        &self,
        name: &str,
        src: &Path,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ImageInfo, ImageError> {
        self.import_with(name, src, &ImportOpts::default(), progress)
    }

    /// Imports `src` as `name`, replacing an earlier image of that name.
    /// `src` is a root tree (a directory, or a `.tar`/`.tar.gz`/`.tgz` file)
    /// or a container image: an OCI image layout (a directory with
    /// `oci-layout` and `index.json`, or such a directory in a tar archive)
    /// or a `docker save` archive (`manifest.json`). An image's blobs are
    /// checked against their digests before use, its layers applied in
    /// order with whiteouts honoured, and its config's env, user, work dir,
    /// entrypoint and cmd kept in [`ImageInfo::config`]. Symlinks are kept
    /// as symlinks (never followed); device nodes, fifos and sockets are
    /// skipped, each reported to `progress`.
    pub fn import_with(
        &self,
        name: &str,
        src: &Path,
        opts: &ImportOpts,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ImageInfo, ImageError> {
        if name == HOST {
            return Err(ImageError::Builtin { action: "replaced" });
        }
        check_name(name)?;
        let meta = fs::metadata(src).map_err(io_err("stat", src))?;
        let staging = self.stage()?;
        let rootfs = staging.rootfs();
        let mut config = None;
        if meta.is_dir() {
            if let Some(kind) = oci::detect(src) {
                progress(&format!("reading the image in `{}`", src.display()));
                config = Some(self.flatten_into(src, kind, &rootfs, opts, progress)?);
            } else {
                progress(&format!("copying `{}`", src.display()));
                tree::copy_dir(src, &rootfs, progress)?;
            }
        } else if meta.is_file() {
            let lower = src.to_string_lossy().to_lowercase();
            let mut f = File::open(src).map_err(io_err("open", src))?;
            let mut magic = [0u8; 2];
            let n = f.read(&mut magic).map_err(io_err("read", src))?;
            let gz = n == 2 && magic == [0x1f, 0x8b];
            let named_gz = lower.ends_with(".tar.gz") || lower.ends_with(".tgz");
            if !(lower.ends_with(".tar") || named_gz) || gz != named_gz {
                let hint = if gz != named_gz && (lower.ends_with(".tar") || named_gz) {
                    " (its content does not match its name)".to_string()
                } else {
                    " (decompress other formats first, e.g. `xz -d`)".to_string()
                };
                return Err(ImageError::UnsupportedSource {
                    path: src.to_path_buf(),
                    hint,
                });
            }
            let open_tar = || -> Result<Box<dyn Read>, ImageError> {
                let f = io::BufReader::new(File::open(src).map_err(io_err("open", src))?);
                Ok(if gz {
                    Box::new(flate2::read::GzDecoder::new(f))
                } else {
                    Box::new(f)
                })
            };
            let names = oci::tar_top_names(&mut open_tar()?, src)?;
            if let Some(kind) = oci::detect_names(names.iter().map(String::as_str)) {
                // The archive's own entries are unpacked like any tarball's
                // (nothing outside the staging directory), then read as a
                // layout directory.
                let layout = staging.dir.join("layout");
                progress(&format!("unpacking the image archive `{}`", src.display()));
                tree::unpack_tar(&mut open_tar()?, src, &layout, progress)?;
                config = Some(self.flatten_into(&layout, kind, &rootfs, opts, progress)?);
                remove_tree(&layout)?;
            } else {
                progress(&format!("unpacking `{}`", src.display()));
                tree::unpack_tar(&mut open_tar()?, src, &rootfs, progress)?;
            }
        } else {
            return Err(ImageError::UnsupportedSource {
                path: src.to_path_buf(),
                hint: String::new(),
            });
        }
        if config.is_none() && opts.platform.is_some() {
            return Err(ImageError::BadImage {
                path: src.to_path_buf(),
                reason: "`--platform` chooses from an OCI image index; this is a plain root tree"
                    .into(),
            });
        }
        let source = format!("import {}", src.display());
        self.commit(staging, name, source, config, progress)
    }

    fn flatten_into(
        &self,
        layout: &Path,
        kind: oci::Layout,
        rootfs: &Path,
        opts: &ImportOpts,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ImageConfig, ImageError> {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(rootfs)
            .map_err(io_err("mkdir", rootfs))?;
        oci::flatten(layout, kind, rootfs, opts, progress)
    }

    /// Builds `name` with `debootstrap --variant=minbase [--include=..]
    /// SUITE TMPDIR MIRROR`, streaming its output lines to `progress`.
    /// On failure the temporary tree is removed and nothing is named.
    pub fn build_debootstrap(
        &self,
        name: &str,
        opts: &DebootstrapOpts,
        progress: &mut dyn FnMut(&str),
    ) -> Result<ImageInfo, ImageError> {
        if name == HOST {
            return Err(ImageError::Builtin { action: "replaced" });
        }
        check_name(name)?;
        let mirror = opts
            .mirror
            .clone()
            .unwrap_or_else(|| configured_mirror(&opts.suite));
        opts.validate(&mirror)?;
        let program = debootstrap::find_program(opts.program.as_deref())?;
        let staging = self.stage()?;
        progress(&format!(
            "debootstrap --variant=minbase {}{} {}",
            if opts.include.is_empty() {
                String::new()
            } else {
                format!("--include={} ", opts.include.join(","))
            },
            opts.suite,
            mirror
        ));
        debootstrap::run(&program, opts, &mirror, &staging.rootfs(), progress)?;
        let mut source = format!("debootstrap {} {mirror}", opts.suite);
        if !opts.include.is_empty() {
            source.push_str(&format!(" +{}", opts.include.join(",")));
        }
        self.commit(staging, name, source, None, progress)
    }

    /// The store's `default` image (minimal Debian with `python3`): built
    /// on first use, showing debootstrap's progress, reused afterwards. Two
    /// callers at once build it once.
    pub fn ensure_default(&self, progress: &mut dyn FnMut(&str)) -> Result<Resolved, ImageError> {
        self.ensure_default_with(&DebootstrapOpts::default(), progress)
    }

    /// [`ensure_default`](Self::ensure_default) with other debootstrap
    /// options (`python3` is always included).
    pub fn ensure_default_with(
        &self,
        opts: &DebootstrapOpts,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Resolved, ImageError> {
        match self.resolve(DEFAULT_IMAGE) {
            Err(ImageError::NotFound { .. }) | Err(ImageError::Broken { .. }) => {}
            other => return other,
        }
        let _building = lock_file(&self.root().join("default.lock"), true)?;
        match self.resolve(DEFAULT_IMAGE) {
            Err(ImageError::NotFound { .. }) | Err(ImageError::Broken { .. }) => {}
            other => return other,
        }
        let mut opts = opts.clone();
        if !opts.include.iter().any(|p| p == "python3") {
            opts.include.push("python3".into());
        }
        progress("building the `default` image (first use)");
        self.build_debootstrap(DEFAULT_IMAGE, &opts, progress)?;
        self.resolve(DEFAULT_IMAGE)
    }
}
