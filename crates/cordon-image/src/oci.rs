//! Container images: an OCI image layout (a directory, or one in a tar
//! archive) or a `docker save` archive, flattened into a root tree.
//!
//! [`detect`] says which a directory is; [`flatten`] picks one image's
//! manifest, checks every blob's SHA-256 against its name before reading
//! it as anything, applies the layers in order onto the staging tree with
//! [`Unpacker`] (whiteouts honoured, nothing written outside the tree) and
//! returns the parts of the image's config a backend needs
//! ([`ImageConfig`]).
//!
//! Files of the layout are opened with `openat2(RESOLVE_BENEATH)` under the
//! layout's directory: a layout's own links (`docker save` links repeated
//! layers) are followed only while they stay inside it.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::tree::{hex, Unpacker};
use crate::ImageError;

/// The parts of an image's config that say how to run it, kept in the
/// image's entry for the backends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageConfig {
    /// `NAME=value` lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
}

/// How an image is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `oci-layout`, `index.json`, `blobs/sha256/<hex>`.
    Oci,
    /// `manifest.json` listing `Config` and `Layers`.
    DockerSave,
}

/// Which image layout the top-level names of a directory or archive show,
/// if any. An OCI layout wins over `manifest.json` (newer `docker save`
/// writes both).
pub(crate) fn detect_names<'a>(mut names: impl Iterator<Item = &'a str>) -> Option<Layout> {
    let (mut layout, mut index, mut manifest) = (false, false, false);
    for n in names.by_ref() {
        match n {
            "oci-layout" => layout = true,
            "index.json" => index = true,
            "manifest.json" => manifest = true,
            _ => {}
        }
    }
    if layout && index {
        Some(Layout::Oci)
    } else if manifest {
        Some(Layout::DockerSave)
    } else {
        None
    }
}

/// [`detect_names`] for a directory.
pub(crate) fn detect(dir: &Path) -> Option<Layout> {
    let names: Vec<String> = ["oci-layout", "index.json", "manifest.json"]
        .into_iter()
        .filter(|n| std::fs::symlink_metadata(dir.join(n)).is_ok_and(|m| m.is_file()))
        .map(String::from)
        .collect();
    detect_names(names.iter().map(String::as_str))
}

/// What to import from a layout.
#[derive(Clone, Debug, Default)]
pub struct ImportOpts {
    /// `os/arch[/variant]` to pick from an index with several images.
    pub platform: Option<String>,
}

/// The platform picked when an index has several and none was asked for.
pub const DEFAULT_PLATFORM: &str = "linux/amd64";

/// JSON a layout holds is small; anything bigger is refused rather than read.
const MAX_JSON: u64 = 16 << 20;

fn bad(layout: &Path, reason: impl Into<String>) -> ImageError {
    ImageError::BadImage {
        path: layout.to_path_buf(),
        reason: reason.into(),
    }
}

/// A file of the layout, opened beneath its directory (links followed only
/// inside it), and required to be a regular file.
fn open_beneath(dir: &OwnedFd, layout: &Path, rel: &str) -> Result<File, ImageError> {
    use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};
    let ok = Path::new(rel)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !ok || rel.is_empty() {
        return Err(bad(
            layout,
            format!("`{rel}` is not a relative path inside the image"),
        ));
    }
    let fd = openat2(
        dir,
        rel,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        rustix::io::Errno::XDEV => bad(
            layout,
            format!("`{rel}` leads outside the image through a link"),
        ),
        rustix::io::Errno::NOENT => bad(layout, format!("`{rel}` is missing")),
        e => ImageError::Io {
            step: "open",
            path: layout.join(rel),
            source: e.into(),
        },
    })?;
    let f = File::from(fd);
    let m = f.metadata().map_err(|e| ImageError::Io {
        step: "stat",
        path: layout.join(rel),
        source: e,
    })?;
    if !m.is_file() {
        return Err(bad(layout, format!("`{rel}` is not a regular file")));
    }
    Ok(f)
}

fn read_json<T: serde::de::DeserializeOwned>(
    f: File,
    layout: &Path,
    rel: &str,
    expect: Option<&str>,
) -> Result<T, ImageError> {
    let mut bytes = Vec::new();
    f.take(MAX_JSON + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ImageError::Io {
            step: "read",
            path: layout.join(rel),
            source: e,
        })?;
    if bytes.len() as u64 > MAX_JSON {
        return Err(bad(layout, format!("`{rel}` is larger than 16 MiB")));
    }
    if let Some(want) = expect {
        let got = hex(&Sha256::digest(&bytes));
        if got != want {
            return Err(digest_mismatch(layout, rel, want, &got));
        }
    }
    serde_json::from_slice(&bytes).map_err(|e| bad(layout, format!("`{rel}` does not parse: {e}")))
}

fn digest_mismatch(layout: &Path, rel: &str, want: &str, got: &str) -> ImageError {
    ImageError::DigestMismatch {
        path: layout.join(rel),
        want: format!("sha256:{want}"),
        got: format!("sha256:{got}"),
    }
}

/// The hex of a `sha256:<64 hex>` digest; anything else is refused (the hex
/// becomes a file name).
fn sha256_hex<'a>(layout: &Path, digest: &'a str) -> Result<&'a str, ImageError> {
    match digest.strip_prefix("sha256:") {
        Some(h)
            if h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(h)
        }
        _ => Err(bad(
            layout,
            format!("digest `{digest}` is not a sha256 digest (the only algorithm cordon checks)"),
        )),
    }
}

/// SHA-256 of everything `r` yields.
fn hash_all(r: &mut dyn Read, path: &Path) -> Result<String, ImageError> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = r.read(&mut buf).map_err(|e| ImageError::Io {
            step: "read",
            path: path.to_path_buf(),
            source: e,
        })?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// A layer's compression, from its first bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
}

fn sniff(f: &mut File, layout: &Path, rel: &str) -> Result<Compression, ImageError> {
    let mut magic = [0u8; 4];
    let mut n = 0;
    while n < 4 {
        match f.read(&mut magic[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => {
                return Err(ImageError::Io {
                    step: "read",
                    path: layout.join(rel),
                    source: e,
                })
            }
        }
    }
    f.rewind().map_err(|e| ImageError::Io {
        step: "seek",
        path: layout.join(rel),
        source: e,
    })?;
    match &magic[..n] {
        [0x1f, 0x8b, ..] => Ok(Compression::Gzip),
        [0x28, 0xb5, 0x2f, 0xfd] => Err(bad(
            layout,
            format!(
                "layer `{rel}` is zstd-compressed, which cordon does not read; \
                 export the image with gzip layers (e.g. `docker save`, or \
                 `skopeo copy --dest-compress-format gzip`)"
            ),
        )),
        [0xfd, b'7', b'z', b'X'] | [b'B', b'Z', b'h', ..] => Err(bad(
            layout,
            format!("layer `{rel}` is xz/bzip2-compressed; only tar and tar+gzip layers are read"),
        )),
        _ => Ok(Compression::None),
    }
}

fn decoded<'a>(f: &'a mut File, c: Compression) -> Box<dyn Read + 'a> {
    let r = io::BufReader::new(f);
    match c {
        Compression::None => Box::new(r),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(r)),
    }
}

/// One layer to apply, and what its bytes must hash to.
struct Layer {
    rel: String,
    /// SHA-256 hex of the file as stored (its blob name).
    blob: Option<String>,
    /// SHA-256 hex of the uncompressed tar (the config's `diff_ids`).
    diff: Option<String>,
}

/// Checks a layer's digests, then applies it: nothing from a layer is read
/// as a tar before its bytes match.
fn apply_layer(
    dir: &OwnedFd,
    layout: &Path,
    layer: &Layer,
    unpacker: &mut Unpacker,
    warn: &mut dyn FnMut(&str),
) -> Result<(), ImageError> {
    if layer.blob.is_none() && layer.diff.is_none() {
        return Err(bad(
            layout,
            format!("layer `{}` has no digest to check it against", layer.rel),
        ));
    }
    let path = layout.join(&layer.rel);
    let mut f = open_beneath(dir, layout, &layer.rel)?;
    if let Some(want) = &layer.blob {
        let got = hash_all(&mut f, &path)?;
        if &got != want {
            return Err(digest_mismatch(layout, &layer.rel, want, &got));
        }
        f.rewind().map_err(|e| ImageError::Io {
            step: "seek",
            path: path.clone(),
            source: e,
        })?;
    }
    let c = sniff(&mut f, layout, &layer.rel)?;
    if let Some(want) = &layer.diff {
        let got = hash_all(&mut decoded(&mut f, c), &path)?;
        if &got != want {
            return Err(digest_mismatch(layout, &layer.rel, want, &got));
        }
        f.rewind().map_err(|e| ImageError::Io {
            step: "seek",
            path: path.clone(),
            source: e,
        })?;
    }
    let mut r = decoded(&mut f, c);
    unpacker.apply(&mut r, &path, warn)
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    platform: Option<Platform>,
    #[serde(default)]
    urls: Option<Vec<String>>,
}

#[derive(Deserialize, Clone)]
struct Platform {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    variant: Option<String>,
}

impl Platform {
    fn name(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}/{}/{v}", self.os, self.architecture),
            None => format!("{}/{}", self.os, self.architecture),
        }
    }

    fn matches(&self, want: &str) -> bool {
        let mut parts = want.split('/');
        let (os, arch, variant) = (parts.next(), parts.next(), parts.next());
        os == Some(self.os.as_str())
            && arch == Some(self.architecture.as_str())
            && variant.is_none_or(|v| self.variant.as_deref() == Some(v))
    }
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    variant: Option<String>,
    #[serde(default)]
    config: Option<RunConfig>,
    #[serde(default)]
    rootfs: Option<RootFs>,
}

#[derive(Deserialize, Default)]
struct RunConfig {
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
    #[serde(rename = "User", default)]
    user: Option<String>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    cmd: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

#[derive(Deserialize)]
struct DockerEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

const MANIFEST_TYPES: [&str; 2] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];
const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

impl ConfigFile {
    fn run_config(&self) -> ImageConfig {
        let c = self.config.as_ref();
        let nonempty = |s: Option<&String>| s.filter(|s| !s.is_empty()).cloned();
        ImageConfig {
            env: c.and_then(|c| c.env.clone()).unwrap_or_default(),
            user: nonempty(c.and_then(|c| c.user.as_ref())),
            working_dir: nonempty(c.and_then(|c| c.working_dir.as_ref())),
            entrypoint: c.and_then(|c| c.entrypoint.clone()),
            cmd: c.and_then(|c| c.cmd.clone()),
        }
    }

    fn diff_ids(&self, layout: &Path) -> Result<Vec<String>, ImageError> {
        self.rootfs
            .iter()
            .flat_map(|r| r.diff_ids.iter())
            .map(|d| sha256_hex(layout, d).map(String::from))
            .collect()
    }
}

fn blob_rel(hex: &str) -> String {
    format!("blobs/sha256/{hex}")
}

/// Picks one image manifest from an index's entries (following nested
/// indexes), by `platform` when given, else the only one, else
/// [`DEFAULT_PLATFORM`] (said to `warn`).
fn pick(
    dir: &OwnedFd,
    layout: &Path,
    manifests: Vec<Descriptor>,
    opts: &ImportOpts,
    warn: &mut dyn FnMut(&str),
    depth: u32,
) -> Result<Descriptor, ImageError> {
    if depth > 4 {
        return Err(bad(layout, "image indexes nested more than 4 deep"));
    }
    // Attestations and signatures ride along as `unknown/unknown` entries.
    let candidates: Vec<Descriptor> = manifests
        .into_iter()
        .filter(|d| {
            (MANIFEST_TYPES.contains(&d.media_type.as_str())
                || INDEX_TYPES.contains(&d.media_type.as_str()))
                && d.platform.as_ref().is_none_or(|p| p.os != "unknown")
        })
        .collect();
    let chosen = match (candidates.len(), &opts.platform) {
        (0, _) => return Err(bad(layout, "its index names no image manifest")),
        (1, _) => candidates.into_iter().next(),
        (_, want) => {
            let want_name = want.clone().unwrap_or_else(|| DEFAULT_PLATFORM.to_string());
            let names: Vec<String> = candidates
                .iter()
                .map(|d| {
                    d.platform
                        .as_ref()
                        .map_or("(no platform)".into(), Platform::name)
                })
                .collect();
            let found = candidates
                .into_iter()
                .find(|d| d.platform.as_ref().is_some_and(|p| p.matches(&want_name)));
            if found.is_none() {
                return Err(bad(
                    layout,
                    format!(
                        "its index has no image for `{want_name}` (it has: {}); pick one with `--platform OS/ARCH`",
                        names.join(", ")
                    ),
                ));
            }
            if want.is_none() {
                warn(&format!(
                    "the index has images for {}; importing {want_name} (choose with `--platform`)",
                    names.join(", ")
                ));
            }
            found
        }
    };
    let Some(chosen) = chosen else {
        return Err(bad(layout, "its index names no image manifest"));
    };
    if let (Some(want), Some(p)) = (&opts.platform, &chosen.platform) {
        if !p.matches(want) {
            return Err(bad(
                layout,
                format!("its only image is for `{}`, not `{want}`", p.name()),
            ));
        }
    }
    if INDEX_TYPES.contains(&chosen.media_type.as_str()) {
        let h = sha256_hex(layout, &chosen.digest)?.to_string();
        let rel = blob_rel(&h);
        let inner: Index = read_json(open_beneath(dir, layout, &rel)?, layout, &rel, Some(&h))?;
        return pick(dir, layout, inner.manifests, opts, warn, depth + 1);
    }
    Ok(chosen)
}

/// Flattens the image in the layout directory `layout` onto `dest` (an
/// empty directory). Returns the image's run config.
pub(crate) fn flatten(
    layout: &Path,
    kind: Layout,
    dest: &Path,
    opts: &ImportOpts,
    warn: &mut dyn FnMut(&str),
) -> Result<ImageConfig, ImageError> {
    let dir: OwnedFd = File::open(layout)
        .map_err(|e| ImageError::Io {
            step: "open",
            path: layout.to_path_buf(),
            source: e,
        })?
        .into();
    let (config, layers) = match kind {
        Layout::Oci => oci_image(&dir, layout, opts, warn)?,
        Layout::DockerSave => docker_image(&dir, layout, opts)?,
    };
    let mut unpacker = Unpacker::new(dest, true);
    for (i, layer) in layers.iter().enumerate() {
        warn(&format!(
            "applying layer {}/{} `{}`",
            i + 1,
            layers.len(),
            layer.rel
        ));
        apply_layer(&dir, layout, layer, &mut unpacker, warn)?;
    }
    unpacker.finish()?;
    Ok(config.run_config())
}

fn oci_image(
    dir: &OwnedFd,
    layout: &Path,
    opts: &ImportOpts,
    warn: &mut dyn FnMut(&str),
) -> Result<(ConfigFile, Vec<Layer>), ImageError> {
    #[derive(Deserialize)]
    struct OciLayout {
        #[serde(rename = "imageLayoutVersion")]
        version: String,
    }
    let v: OciLayout = read_json(
        open_beneath(dir, layout, "oci-layout")?,
        layout,
        "oci-layout",
        None,
    )?;
    if !v.version.starts_with("1.") {
        return Err(bad(
            layout,
            format!("OCI layout version `{}` is not 1.x", v.version),
        ));
    }
    let index: Index = read_json(
        open_beneath(dir, layout, "index.json")?,
        layout,
        "index.json",
        None,
    )?;
    let chosen = pick(dir, layout, index.manifests, opts, warn, 0)?;
    let h = sha256_hex(layout, &chosen.digest)?.to_string();
    let rel = blob_rel(&h);
    let manifest: Manifest = read_json(open_beneath(dir, layout, &rel)?, layout, &rel, Some(&h))?;
    let ch = sha256_hex(layout, &manifest.config.digest)?.to_string();
    let crel = blob_rel(&ch);
    let config: ConfigFile =
        read_json(open_beneath(dir, layout, &crel)?, layout, &crel, Some(&ch))?;
    // The config says what the image is built for: an index entry
    // without a platform does not get past `--platform` unchecked.
    if let Some(want) = &opts.platform {
        let p = Platform {
            os: config.os.clone(),
            architecture: config.architecture.clone(),
            variant: config.variant.clone(),
        };
        if !p.matches(want) {
            return Err(bad(
                layout,
                format!("its image is for `{}`, not `{want}`", p.name()),
            ));
        }
    }
    let diff_ids = config.diff_ids(layout)?;
    if !diff_ids.is_empty() && diff_ids.len() != manifest.layers.len() {
        return Err(bad(
            layout,
            format!(
                "its manifest lists {} layers but its config {}",
                manifest.layers.len(),
                diff_ids.len()
            ),
        ));
    }
    let mut layers = Vec::new();
    for (i, d) in manifest.layers.iter().enumerate() {
        if d.urls.as_ref().is_some_and(|u| !u.is_empty()) || d.media_type.contains("foreign") {
            return Err(bad(
                layout,
                format!("layer `{}` is stored elsewhere (a foreign layer); cordon imports only layers in the layout", d.digest),
            ));
        }
        let h = sha256_hex(layout, &d.digest)?.to_string();
        let rel = blob_rel(&h);
        if let Some(size) = d.size {
            let actual = open_beneath(dir, layout, &rel)?
                .metadata()
                .map(|m| m.len())
                .unwrap_or(u64::MAX);
            if actual != size {
                return Err(bad(
                    layout,
                    format!("layer `{rel}` is {actual} bytes, its manifest says {size}"),
                ));
            }
        }
        layers.push(Layer {
            rel,
            blob: Some(h),
            diff: diff_ids.get(i).cloned(),
        });
    }
    Ok((config, layers))
}

/// The digest a `docker save` file name carries: `blobs/sha256/<hex>` (newer
/// docker) or `<hex>.json` (the config, older docker).
fn docker_name_digest(rel: &str) -> Option<String> {
    let base = rel
        .strip_prefix("blobs/sha256/")
        .or_else(|| rel.strip_suffix(".json"))?;
    (base.len() == 64
        && base
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then(|| base.to_string())
}

fn docker_image(
    dir: &OwnedFd,
    layout: &Path,
    opts: &ImportOpts,
) -> Result<(ConfigFile, Vec<Layer>), ImageError> {
    let entries: Vec<DockerEntry> = read_json(
        open_beneath(dir, layout, "manifest.json")?,
        layout,
        "manifest.json",
        None,
    )
    .map_err(|e| match e {
        ImageError::BadImage { path, reason } => ImageError::BadImage {
            path,
            reason: format!(
                "{reason} (a top-level `manifest.json` makes it a `docker save` archive; \
                 to import a root tree that has one, move it into a subdirectory first)"
            ),
        },
        e => e,
    })?;
    let entry = match entries.len() {
        1 => entries.into_iter().next(),
        0 => None,
        _ => {
            let tags: Vec<String> = entries
                .iter()
                .map(|e| e.repo_tags.clone().unwrap_or_default().join(" "))
                .collect();
            return Err(bad(
                layout,
                format!(
                    "`manifest.json` lists {} images ({}); save one image per archive (`docker save IMAGE`)",
                    tags.len(),
                    tags.join("; ")
                ),
            ));
        }
    };
    let Some(entry) = entry else {
        return Err(bad(layout, "`manifest.json` lists no image"));
    };
    if opts.platform.is_some() {
        // A `docker save` archive holds one platform; the flag has nothing
        // to choose from, and is not silently ignored.
        return Err(bad(
            layout,
            "`--platform` chooses from an OCI index; a `docker save` archive holds one image",
        ));
    }
    let Some(ch) = docker_name_digest(&entry.config) else {
        return Err(bad(
            layout,
            format!(
                "config `{}` is not named by its digest, so it cannot be checked",
                entry.config
            ),
        ));
    };
    let config: ConfigFile = read_json(
        open_beneath(dir, layout, &entry.config)?,
        layout,
        &entry.config,
        Some(&ch),
    )?;
    let diff_ids = config.diff_ids(layout)?;
    if diff_ids.len() != entry.layers.len() {
        return Err(bad(
            layout,
            format!(
                "`manifest.json` lists {} layers but the config's `rootfs.diff_ids` {}",
                entry.layers.len(),
                diff_ids.len()
            ),
        ));
    }
    let layers = entry
        .layers
        .iter()
        .zip(diff_ids)
        .map(|(rel, diff)| Layer {
            rel: rel.clone(),
            blob: rel
                .strip_prefix("blobs/sha256/")
                .and_then(|_| docker_name_digest(rel)),
            diff: Some(diff),
        })
        .collect();
    Ok((config, layers))
}

/// Top-level names of the tar stream `r` (for [`detect_names`]).
pub(crate) fn tar_top_names(r: &mut dyn Read, archive: &Path) -> Result<Vec<String>, ImageError> {
    let mut out = Vec::new();
    let err = |source: io::Error| ImageError::Io {
        step: "read archive",
        path: archive.to_path_buf(),
        source,
    };
    let mut ar = tar::Archive::new(r);
    for e in ar.entries().map_err(err)? {
        let e = e.map_err(err)?;
        let p: PathBuf = e.path().map_err(err)?.into_owned();
        let mut comps = p.components().filter(|c| !matches!(c, Component::CurDir));
        if let (Some(Component::Normal(n)), None) = (comps.next(), comps.next()) {
            if let Some(n) = n.to_str() {
                out.push(n.to_string());
            }
        }
    }
    Ok(out)
}
