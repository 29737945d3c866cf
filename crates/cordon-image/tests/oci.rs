//! Importing container images: an OCI image layout (a directory or a tar
//! archive of one) and a `docker save` archive. Layers apply in order with
//! whiteouts honoured, blobs are checked against their digests, the run
//! config is kept, and no entry of a layer reaches outside the tree.

#![expect(clippy::unwrap_used, reason = "tests: a failed step is a failed test")]

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cordon_image::{ImageConfig, ImageError, ImageStore, ImportOpts, Resolved};
use serde_json::json;
use sha2::{Digest, Sha256};
use tar::EntryType::{self, Block, Char, Directory, Fifo, Link, Regular, Symlink};

fn scratch() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("cordon-oci-test-")
        .tempdir()
        .unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn store(d: &tempfile::TempDir) -> ImageStore {
    ImageStore::open(&d.path().join("store")).unwrap()
}

fn quiet() -> impl FnMut(&str) {
    |_: &str| {}
}

fn root_of(s: &ImageStore, name: &str) -> PathBuf {
    match s.resolve(name).unwrap() {
        Resolved::Stored { root, .. } => root,
        Resolved::Host => panic!("expected a stored image"),
    }
}

/// One layer entry: raw path, type, content, link target, mode.
type Entry<'a> = (&'a str, EntryType, &'a [u8], Option<&'a str>, u32);

fn e<'a>(path: &'a str, kind: EntryType, content: &'a [u8]) -> Entry<'a> {
    let mode = if kind == Directory { 0o755 } else { 0o644 };
    (path, kind, content, None, mode)
}

fn link<'a>(path: &'a str, kind: EntryType, target: &'a str) -> Entry<'a> {
    (path, kind, b"", Some(target), 0o777)
}

/// A layer's tar bytes. Names are written raw: the builder's own checks
/// would refuse `..` and absolute paths, which these tests need to send.
fn layer(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut data = Vec::new();
    {
        let mut b = tar::Builder::new(&mut data);
        for (path, kind, content, target, mode) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(*mode);
            h.set_size(content.len() as u64);
            let name = h.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            if let Some(l) = target {
                let ln = h.as_old_mut().linkname.as_mut();
                ln[..l.len()].copy_from_slice(l.as_bytes());
            }
            h.set_cksum();
            b.append(&h, *content).unwrap();
        }
        b.finish().unwrap();
    }
    data
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn sha(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A config blob with a run config and the layers' diff ids.
fn config(uncompressed_layers: &[Vec<u8>]) -> Vec<u8> {
    config_for(uncompressed_layers, "amd64", None)
}

fn config_for(uncompressed_layers: &[Vec<u8>], arch: &str, variant: Option<&str>) -> Vec<u8> {
    let diff_ids: Vec<String> = uncompressed_layers
        .iter()
        .map(|l| format!("sha256:{}", sha(l)))
        .collect();
    serde_json::to_vec(&json!({
        "architecture": arch,
        "variant": variant,
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8"],
            "User": "1000:1000",
            "WorkingDir": "/srv/app",
            "Entrypoint": ["/bin/tool"],
            "Cmd": ["--serve"],
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap()
}

fn put_blob(layout: &Path, data: &[u8]) -> String {
    let h = sha(data);
    let dir = layout.join("blobs/sha256");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(&h), data).unwrap();
    format!("sha256:{h}")
}

/// Writes an OCI image manifest (config + layers, the second and later
/// layers gzipped) into `layout`; returns its descriptor.
fn put_manifest(layout: &Path, layers: &[Vec<u8>]) -> serde_json::Value {
    put_manifest_for(layout, layers, "amd64", None)
}

fn put_manifest_for(
    layout: &Path,
    layers: &[Vec<u8>],
    arch: &str,
    variant: Option<&str>,
) -> serde_json::Value {
    let cfg = config_for(layers, arch, variant);
    let mut descs = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let (bytes, mt) = if i == 0 {
            (l.clone(), "application/vnd.oci.image.layer.v1.tar")
        } else {
            (gzip(l), "application/vnd.oci.image.layer.v1.tar+gzip")
        };
        let digest = put_blob(layout, &bytes);
        descs.push(json!({"mediaType": mt, "digest": digest, "size": bytes.len()}));
    }
    let cdigest = put_blob(layout, &cfg);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdigest, "size": cfg.len()},
        "layers": descs,
    }))
    .unwrap();
    let mdigest = put_blob(layout, &manifest);
    json!({
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": mdigest,
        "size": manifest.len(),
    })
}

fn oci_layout(layout: &Path, layers: &[Vec<u8>]) {
    fs::create_dir_all(layout).unwrap();
    let m = put_manifest(layout, layers);
    finish_layout(layout, vec![m]);
}

fn finish_layout(layout: &Path, manifests: Vec<serde_json::Value>) {
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion": "1.0.0"}"#,
    )
    .unwrap();
    fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": manifests})).unwrap(),
    )
    .unwrap();
}

/// A `docker save` archive in the older layout: `<hex>.json` config,
/// `<id>/layer.tar` layers, `manifest.json`.
fn docker_save(at: &Path, layers: &[Vec<u8>]) {
    let cfg = config(layers);
    let cname = format!("{}.json", sha(&cfg));
    let mut files: Vec<(String, Vec<u8>)> = vec![(cname.clone(), cfg)];
    let mut names = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let n = format!("layer{i}/layer.tar");
        files.push((n.clone(), l.clone()));
        names.push(n);
    }
    let manifest = json!([{"Config": cname, "RepoTags": ["test:latest"], "Layers": names}]);
    files.push((
        "manifest.json".into(),
        serde_json::to_vec(&manifest).unwrap(),
    ));
    let mut b = tar::Builder::new(fs::File::create(at).unwrap());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append_data(&mut h, name, data.as_slice()).unwrap();
    }
    b.finish().unwrap();
}

fn tar_dir(dir: &Path, at: &Path) {
    let mut b = tar::Builder::new(fs::File::create(at).unwrap());
    b.append_dir_all(".", dir).unwrap();
    b.finish().unwrap();
}

/// Two layers: the base, then one that deletes, hides and replaces.
fn two_layers() -> Vec<Vec<u8>> {
    let base = layer(&[
        e("etc/", Directory, b""),
        e("etc/os-release", Regular, b"ID=base\n"),
        e("etc/gone", Regular, b"deleted by a whiteout"),
        e("opaque/", Directory, b""),
        e("opaque/lower", Regular, b"hidden by the opaque marker"),
        e("opaque/sub/", Directory, b""),
        e("opaque/sub/deep", Regular, b"hidden too"),
        e("bin/", Directory, b""),
        ("bin/tool", Regular, b"#!/bin/sh\n", None, 0o4755),
        link("bin/sh", Symlink, "/bin/busybox"),
        e("var/", Directory, b""),
        e("var/was-a-dir/", Directory, b""),
        e("var/was-a-dir/x", Regular, b"x"),
    ]);
    let top = layer(&[
        e("etc/.wh.gone", Regular, b""),
        e("etc/os-release", Regular, b"ID=top\n"),
        e("opaque/.wh..wh..opq", Regular, b""),
        e("opaque/upper", Regular, b"from the top layer"),
        e("var/was-a-dir", Regular, b"now a file"),
        // Hides nothing that exists, and makes no directory.
        e("nowhere/.wh.thing", Regular, b""),
    ]);
    vec![base, top]
}

fn check_two_layers(root: &Path) {
    assert_eq!(
        fs::read_to_string(root.join("etc/os-release")).unwrap(),
        "ID=top\n"
    );
    assert!(!root.join("etc/gone").exists(), "whiteout ignored");
    assert!(!root.join("etc/.wh.gone").exists(), "whiteout stored");
    assert!(
        !root.join("nowhere").exists(),
        "a whiteout made a directory"
    );
    let opaque: Vec<_> = fs::read_dir(root.join("opaque"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(opaque, vec!["upper".to_string()], "opaque dir not opaque");
    assert_eq!(
        fs::read_to_string(root.join("var/was-a-dir")).unwrap(),
        "now a file"
    );
    assert_eq!(
        fs::read_link(root.join("bin/sh")).unwrap(),
        Path::new("/bin/busybox")
    );
    let mode = fs::metadata(root.join("bin/tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755, "setuid kept");
}

fn expected_config() -> ImageConfig {
    ImageConfig {
        env: vec!["PATH=/usr/bin:/bin".into(), "LANG=C.UTF-8".into()],
        user: Some("1000:1000".into()),
        working_dir: Some("/srv/app".into()),
        entrypoint: Some(vec!["/bin/tool".into()]),
        cmd: Some(vec!["--serve".into()]),
    }
}

#[test]
fn an_oci_layout_dir_its_tar_and_a_docker_save_tar_import_to_the_same_tree() {
    let d = scratch();
    let s = store(&d);
    let layers = two_layers();

    let dir = d.path().join("layout");
    oci_layout(&dir, &layers);
    let mut lines = Vec::new();
    let a = s
        .import("from-dir", &dir, &mut |l: &str| lines.push(l.to_string()))
        .unwrap();
    check_two_layers(&root_of(&s, "from-dir"));
    assert_eq!(a.config, Some(expected_config()));
    assert!(
        lines.iter().any(|l| l.contains("setuid/setgid")),
        "the setuid strip is not reported: {lines:?}"
    );
    // Kept in the entry: `ls` reads it back.
    let listed = s.ls().unwrap();
    assert_eq!(listed[0].config, Some(expected_config()));

    let tarred = d.path().join("layout.tar");
    tar_dir(&dir, &tarred);
    let b = s.import("from-tar", &tarred, &mut quiet()).unwrap();
    check_two_layers(&root_of(&s, "from-tar"));
    assert_eq!(b.digest, a.digest);
    assert_eq!(b.config, Some(expected_config()));

    let saved = d.path().join("saved.tar");
    docker_save(&saved, &layers);
    let c = s.import("from-docker", &saved, &mut quiet()).unwrap();
    check_two_layers(&root_of(&s, "from-docker"));
    assert_eq!(c.digest, a.digest);
    assert_eq!(c.config, Some(expected_config()));
    // The layout's unpacked copy is gone with the staging directory.
    assert_eq!(fs::read_dir(s.root().join("tmp")).unwrap().count(), 0);
}

#[test]
fn an_index_with_several_platforms_picks_amd64_and_says_so_or_the_one_asked_for() {
    let d = scratch();
    let s = store(&d);
    let dir = d.path().join("multi");
    fs::create_dir_all(&dir).unwrap();
    let amd = layer(&[e("arch", Regular, b"amd64")]);
    let arm = layer(&[e("arch", Regular, b"arm64")]);
    let mut m1 = put_manifest(&dir, &[amd]);
    m1["platform"] = json!({"os": "linux", "architecture": "amd64"});
    let mut m2 = put_manifest_for(&dir, &[arm], "arm64", Some("v8"));
    m2["platform"] = json!({"os": "linux", "architecture": "arm64", "variant": "v8"});
    finish_layout(&dir, vec![m2, m1]);

    let mut lines = Vec::new();
    s.import("multi", &dir, &mut |l: &str| lines.push(l.to_string()))
        .unwrap();
    assert_eq!(
        fs::read_to_string(root_of(&s, "multi").join("arch")).unwrap(),
        "amd64"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("importing linux/amd64") && l.contains("--platform")),
        "{lines:?}"
    );
    let arm_opts = ImportOpts {
        platform: Some("linux/arm64".into()),
    };
    s.import_with("multi-arm", &dir, &arm_opts, &mut quiet())
        .unwrap();
    assert_eq!(
        fs::read_to_string(root_of(&s, "multi-arm").join("arch")).unwrap(),
        "arm64"
    );
    let none = ImportOpts {
        platform: Some("linux/s390x".into()),
    };
    let err = s
        .import_with("multi-s390x", &dir, &none, &mut quiet())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("linux/s390x") && err.contains("linux/arm64/v8") && err.contains("--platform"),
        "{err}"
    );
    // One image without a platform in the index: its config says amd64.
    let single = d.path().join("single");
    oci_layout(&single, &[layer(&[e("arch", Regular, b"amd64")])]);
    let err = s
        .import_with("single-arm", &single, &arm_opts, &mut quiet())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("for `linux/amd64`, not `linux/arm64`"),
        "{err}"
    );
}

#[test]
fn a_blob_that_does_not_match_its_digest_is_refused() {
    let d = scratch();
    let s = store(&d);
    let layers = two_layers();

    // A layer changed after it was named.
    let dir = d.path().join("bad-layer");
    oci_layout(&dir, &layers);
    let blob = dir.join("blobs/sha256").join(sha(&layers[0]));
    let mut bytes = fs::read(&blob).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 1;
    fs::write(&blob, &bytes).unwrap();
    let err = s.import("bad", &dir, &mut quiet()).unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
    assert!(err.to_string().contains("export it again"), "{err}");
    assert!(matches!(s.resolve("bad"), Err(ImageError::NotFound { .. })));

    // A config changed after it was named (a new user slipped in).
    let dir = d.path().join("bad-config");
    oci_layout(&dir, &layers);
    let cfg = config(&layers);
    let path = dir.join("blobs/sha256").join(sha(&cfg));
    let text = String::from_utf8(cfg).unwrap().replace("1000:1000", "0:0");
    fs::write(&path, text).unwrap();
    let err = s.import("bad", &dir, &mut quiet()).unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");

    // A `docker save` layer that does not match the config's diff id.
    let mut changed = layers.clone();
    changed[1] = layer(&[e("etc/os-release", Regular, b"ID=evil\n")]);
    let saved = d.path().join("bad.tar");
    let good_cfg = config(&layers);
    // Rebuild the archive with the right config but the wrong layer bytes.
    let mut b = tar::Builder::new(fs::File::create(&saved).unwrap());
    let cname = format!("{}.json", sha(&good_cfg));
    let manifest = json!([{"Config": cname, "Layers": ["l0/layer.tar", "l1/layer.tar"]}]);
    let files: Vec<(String, Vec<u8>)> = vec![
        (cname.clone(), good_cfg),
        ("l0/layer.tar".into(), changed[0].clone()),
        ("l1/layer.tar".into(), changed[1].clone()),
        (
            "manifest.json".into(),
            serde_json::to_vec(&manifest).unwrap(),
        ),
    ];
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append_data(&mut h, name, data.as_slice()).unwrap();
    }
    b.finish().unwrap();
    let err = s.import("bad", &saved, &mut quiet()).unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
    assert!(matches!(s.resolve("bad"), Err(ImageError::NotFound { .. })));
    assert_eq!(fs::read_dir(s.root().join("tmp")).unwrap().count(), 0);
}

#[test]
fn layer_entries_that_escape_the_tree_are_refused_and_devices_skipped() {
    let d = scratch();
    let s = store(&d);
    // What an escape would reach: nothing in it may change.
    let sentinel = d.path().join("sentinel");
    fs::create_dir(&sentinel).unwrap();
    fs::write(sentinel.join("keep"), "untouched").unwrap();
    let sent = Box::leak(sentinel.to_string_lossy().into_owned().into_boxed_str());
    let abs_file = Box::leak(format!("{sent}/abs").into_boxed_str());
    let keep = Box::leak(format!("{sent}/keep").into_boxed_str());
    let base = layer(&[e("etc/", Directory, b""), e("etc/passwd", Regular, b"root")]);

    let refused: Vec<(&str, Vec<u8>)> = vec![
        ("dotdot", layer(&[e("../sentinel/pwned", Regular, b"x")])),
        (
            "deep-dotdot",
            layer(&[e("etc/../../sentinel/pwned", Regular, b"x")]),
        ),
        ("absolute", layer(&[e(abs_file, Regular, b"x")])),
        (
            "through-a-link",
            layer(&[link("a", Symlink, sent), e("a/passwd", Regular, b"x")]),
        ),
        (
            "whiteout-through-a-link",
            layer(&[link("a", Symlink, sent), e("a/.wh.keep", Regular, b"")]),
        ),
        (
            "opaque-through-a-link",
            layer(&[link("a", Symlink, sent), e("a/.wh..wh..opq", Regular, b"")]),
        ),
        ("whiteout-dotdot", layer(&[e("etc/.wh...", Regular, b"")])),
        ("hardlink-absolute", layer(&[link("h", Link, keep)])),
        (
            "hardlink-dotdot",
            layer(&[link("h", Link, "../sentinel/keep")]),
        ),
        (
            "hardlink-through-a-link",
            layer(&[link("a", Symlink, sent), link("h", Link, "a/keep")]),
        ),
        (
            "hardlink-not-yet",
            layer(&[link("h", Link, "later"), e("later", Regular, b"x")]),
        ),
    ];
    for (name, bad) in refused {
        let dir = d.path().join(name);
        oci_layout(&dir, &[base.clone(), bad]);
        let err = s.import(name, &dir, &mut quiet()).unwrap_err();
        assert!(
            matches!(err, ImageError::UnsafeEntry { .. }),
            "{name}: {err}"
        );
        let left: Vec<_> = fs::read_dir(&sentinel).unwrap().collect();
        assert_eq!(left.len(), 1, "{name} wrote beside the sentinel");
        assert_eq!(
            fs::read_to_string(sentinel.join("keep")).unwrap(),
            "untouched",
            "{name}"
        );
        assert!(!d.path().join("pwned").exists(), "{name}");
        assert!(
            matches!(s.resolve(name), Err(ImageError::NotFound { .. })),
            "{name}"
        );
    }

    // A link planted by a lower layer cannot be written through by an
    // upper one either.
    let dir = d.path().join("lower-link");
    oci_layout(
        &dir,
        &[
            layer(&[link("a", Symlink, sent)]),
            layer(&[e("a/passwd", Regular, b"x")]),
        ],
    );
    let err = s.import("lower-link", &dir, &mut quiet()).unwrap_err();
    assert!(matches!(err, ImageError::UnsafeEntry { .. }), "{err}");
    assert!(!sentinel.join("passwd").exists());

    // Links whose targets are outside are kept as data; a hard link to a
    // file of a lower layer is inside the tree and kept; devices and fifos
    // are skipped and said.
    let dir = d.path().join("kept");
    oci_layout(
        &dir,
        &[
            base.clone(),
            layer(&[
                link("etc/host-secret", Symlink, keep),
                link("etc/passwd-again", Link, "etc/passwd"),
                e("dev/", Directory, b""),
                e("dev/sda", Block, b""),
                e("dev/null", Char, b""),
                e("dev/fifo", Fifo, b""),
            ]),
        ],
    );
    let mut lines = Vec::new();
    s.import("kept", &dir, &mut |l: &str| lines.push(l.to_string()))
        .unwrap();
    let root = root_of(&s, "kept");
    assert_eq!(
        fs::read_link(root.join("etc/host-secret")).unwrap(),
        Path::new(keep)
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/passwd-again")).unwrap(),
        "root"
    );
    assert_eq!(fs::read_dir(root.join("dev")).unwrap().count(), 0);
    assert_eq!(
        lines.iter().filter(|l| l.contains("skipped")).count(),
        3,
        "{lines:?}"
    );
    assert_eq!(
        fs::read_to_string(sentinel.join("keep")).unwrap(),
        "untouched"
    );
}

#[test]
fn a_layout_link_that_leads_outside_it_is_refused() {
    // `docker save` links repeated layers; a link out of the layout must
    // not be read as a layer.
    let d = scratch();
    let s = store(&d);
    let secret = d.path().join("secret.tar");
    fs::write(&secret, layer(&[e("stolen", Regular, b"host data")])).unwrap();
    let layers = vec![layer(&[e("stolen", Regular, b"host data")])];
    let saved = d.path().join("saved.tar");
    docker_save(&saved, &layers);
    // Unpack it as a directory and replace the layer with a link out.
    let dir = d.path().join("saved");
    fs::create_dir(&dir).unwrap();
    tar::Archive::new(fs::File::open(&saved).unwrap())
        .unpack(&dir)
        .unwrap();
    fs::remove_file(dir.join("layer0/layer.tar")).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("layer0/layer.tar")).unwrap();
    let err = s.import("out", &dir, &mut quiet()).unwrap_err().to_string();
    assert!(err.contains("outside the image"), "{err}");
    // A link inside the layout is followed.
    fs::remove_file(dir.join("layer0/layer.tar")).unwrap();
    fs::write(dir.join("real.tar"), &layers[0]).unwrap();
    std::os::unix::fs::symlink("../real.tar", dir.join("layer0/layer.tar")).unwrap();
    s.import("in", &dir, &mut quiet()).unwrap();
    assert_eq!(
        fs::read_to_string(root_of(&s, "in").join("stolen")).unwrap(),
        "host data"
    );
}

#[test]
fn a_zstd_layer_is_refused_with_what_to_do() {
    let d = scratch();
    let s = store(&d);
    let dir = d.path().join("zstd");
    fs::create_dir_all(&dir).unwrap();
    // A zstd frame's magic; the content is never decoded.
    let zst = b"\x28\xb5\x2f\xfd\x00\x00\x00\x00".to_vec();
    let cfg = serde_json::to_vec(&json!({"config": {}, "rootfs": {"diff_ids": []}})).unwrap();
    let ldigest = put_blob(&dir, &zst);
    let cdigest = put_blob(&dir, &cfg);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdigest},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": ldigest}],
    }))
    .unwrap();
    let mdigest = put_blob(&dir, &manifest);
    finish_layout(
        &dir,
        vec![json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdigest})],
    );
    let err = s
        .import("zstd", &dir, &mut quiet())
        .unwrap_err()
        .to_string();
    assert!(err.contains("zstd") && err.contains("gzip"), "{err}");
}
