//! Outputs: declared outputs collected into artifacts, and fetched.

use super::*;

/// 128 random bits as hex: an artifact's handle.
pub(crate) fn random_handle() -> std::io::Result<String> {
    use std::io::Read as _;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Collects the caller's sandbox's declared outputs (files out) through a
/// confined sink into a directory of the server's own: each landed file's
/// `display` line (what a model may be shown) and a handle to fetch it
/// with (`GET /v1/artifacts/HANDLE`, the same credential's scope only).
pub(crate) async fn outputs(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    body: Body<Address>,
) -> Response {
    let (cred, at) = match authed(&s, &headers, body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let sandbox = match live_sandbox(&s, &cred, &at).await {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let served = s.clone();
    let done = tokio::task::spawn_blocking(move || -> Response {
        match served.land_outputs(&cred, &*sandbox) {
            Ok(landed) => {
                let landed: Vec<_> = landed
                    .into_iter()
                    .map(|(display, handle)| json!({"display": display, "handle": handle}))
                    .collect();
                Json(json!({"landed": landed})).into_response()
            }
            Err(r) => r.into_response(),
        }
    })
    .await;
    done.unwrap_or_else(|e| refused(ErrorKind::Failed, e))
}

impl Served {
    /// Collects `sandbox`'s declared outputs through a confined sink into a
    /// directory of the server's own, each under a fresh handle only
    /// `cred`'s scope can fetch: (display line, handle) per landed file.
    /// Blocks.
    pub(crate) fn land_outputs(
        &self,
        cred: &Credential,
        sandbox: &dyn Sandbox,
    ) -> Result<Vec<(String, String)>, Refusal> {
        let spec = sandbox.provenance().spec.clone();
        if spec.declared_outputs().is_empty() {
            return Err(Refusal::of(
                ErrorKind::Invalid,
                "the sandbox's spec declares no outputs; create it with a spec naming `declared_outputs` and `files_out`",
            ));
        }
        let failed = |e: String| Refusal::of(ErrorKind::Failed, e);
        let dir = self
            .artifacts
            .join(random_handle().map_err(|e| failed(e.to_string()))?);
        std::fs::create_dir_all(&dir)
            .map_err(|e| failed(format!("the artifacts directory: {e}")))?;
        let sink = cordon_files::FsSink::new(&dir).map_err(|e| failed(e.to_string()))?;
        let got = cordon_sandbox::collect_outputs(sandbox, &spec, Some(&sink))
            .map_err(|e| Refusal::of(e.kind(), &e))?;
        let mut landed = Vec::new();
        let mut table = self.landed.lock().unwrap_or_else(|p| p.into_inner());
        for a in &got.landed {
            let handle =
                random_handle().map_err(|_| failed("no randomness for a handle".into()))?;
            table.insert(
                handle.clone(),
                (cred.scope.clone(), PathBuf::from(a.handle.reveal())),
            );
            landed.push((a.display.clone(), handle));
        }
        Ok(landed)
    }
}

/// A landed file's bytes, for the credential whose scope collected it;
/// any other handle, or another scope's, is the same `404`.
pub(crate) async fn artifact(
    State(s): State<Arc<Served>>,
    headers: HeaderMap,
    axum::extract::Path(handle): axum::extract::Path<String>,
) -> Response {
    let cred = match who(&s, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let found = s
        .landed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&handle)
        .filter(|(scope, _)| *scope == cred.scope)
        .map(|(_, path)| path.clone());
    let Some(path) = found else {
        return refused(ErrorKind::NotFound, "no artifact by that handle");
    };
    match tokio::fs::read(&path).await {
        Ok(bytes) => ([("content-type", "application/octet-stream")], bytes).into_response(),
        Err(e) => refused(ErrorKind::Failed, format!("the artifact: {e}")),
    }
}
