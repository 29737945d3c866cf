"""A small typed client for `cordon serve` (docs/serve.md), standard library only.

    from cordon_client import Client

    client = Client("http://127.0.0.1:8787", token=os.environ["CORDON_TOKEN"])
    with client.thread("t-42") as t:            # disposed however the block ends
        t.create(spec=open("chart.yaml").read())
        t.write_file("chart.py", open("chart.py", "rb").read())
        result = t.exec(["python3", "chart.py"])
        for artifact in t.outputs():
            print(artifact.display)              # what a model may be shown
            data = client.fetch(artifact)        # the bytes, for the host

The credential decides the scope and the identity; a request names only a
thread and an agent dir.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Union

__all__ = ["Client", "Thread", "ExecResult", "Artifact", "CordonError"]


class CordonError(Exception):
    """A refusal: the HTTP status and the server's message (what to do)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ExecResult:
    """How a command ended: exactly one of code, signal or killed_by is set."""

    code: Optional[int]
    signal: Optional[int]
    killed_by: Optional[str]
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool


@dataclass(frozen=True)
class Artifact:
    """A landed output: `display` is what a model may see; `handle` is for the host."""

    display: str
    handle: str


def _status(doc: Dict[str, Any]) -> Dict[str, Optional[Any]]:
    st = doc.get("status") or {}
    return {"code": st.get("code"), "signal": st.get("signal"), "killed_by": doc.get("killed_by")}


class Client:
    """One credential's view of a server."""

    def __init__(self, url: str, token: str, timeout: float = 3600.0) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self._token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            try:
                message = json.loads(text).get("error", text)
            except ValueError:
                message = text
            raise CordonError(e.code, message) from None

    def _json(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        with self._request(method, path, body) as r:
            return json.loads(r.read())

    def backends(self) -> Dict[str, Any]:
        """The backends the server routes to, its floor, and who this credential is."""
        return self._json("GET", "/v1/backends")

    def thread(self, thread: str, agent_dir: str = "default") -> "Thread":
        """The caller's sandbox for one thread and agent dir."""
        return Thread(self, thread, agent_dir)

    def fetch(self, artifact: Union[Artifact, str]) -> bytes:
        """A landed output's bytes (this credential's scope only)."""
        handle = artifact.handle if isinstance(artifact, Artifact) else artifact
        with self._request("GET", f"/v1/artifacts/{handle}") as r:
            return r.read()

    def dispose_thread(self, thread: str) -> int:
        """Disposes of every sandbox of this credential's scope and `thread`."""
        return int(self._json("POST", "/v1/threads/dispose", {"thread": thread})["disposed"])


class Thread:
    """A sandbox addressed by (the credential's scope, thread, agent dir).

    As a context manager it disposes of the whole thread on exit, whether
    the block returned or raised.
    """

    def __init__(self, client: Client, thread: str, agent_dir: str) -> None:
        self.client = client
        self.at = {"thread": thread, "agent_dir": agent_dir}

    def __enter__(self) -> "Thread":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.client.dispose_thread(self.at["thread"])

    def create(self, spec: Optional[str] = None) -> Dict[str, Any]:
        """Gets or creates the sandbox (spec: YAML text, docs/spec.md)."""
        body = dict(self.at)
        if spec is not None:
            body["spec"] = spec
        return self.client._json("POST", "/v1/sandboxes", body)

    def exec(self, argv: List[str], stdin: str = "", timeout_seconds: Optional[int] = None) -> ExecResult:
        """Runs a command to its end."""
        body: Dict[str, Any] = dict(self.at, argv=argv, stdin=stdin)
        if timeout_seconds is not None:
            body["timeout_seconds"] = timeout_seconds
        doc = self.client._json("POST", "/v1/sandboxes/exec", body)
        return ExecResult(
            stdout=doc["stdout"],
            stderr=doc["stderr"],
            stdout_truncated=doc["stdout_truncated"],
            stderr_truncated=doc["stderr_truncated"],
            **_status(doc),
        )

    def exec_stream(self, argv: List[str], stdin: str = "") -> Iterator[Dict[str, Any]]:
        """Runs a command, yielding its events as they come: `stdout`/`stderr`
        chunks (`data`, or `data_base64`), then `exit`. Closing the iterator
        early hangs up, which kills the command."""
        body = dict(self.at, argv=argv, stdin=stdin, stream=True)
        with self.client._request("POST", "/v1/sandboxes/exec", body) as r:
            for line in r:
                if line.strip():
                    yield json.loads(line)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> int:
        """Writes a file into the sandbox (relative paths are in its work dir)."""
        body = dict(self.at, path=path, content_base64=base64.b64encode(data).decode(), mode=mode)
        return int(self.client._json("POST", "/v1/sandboxes/files", body)["bytes"])

    def outputs(self) -> List[Artifact]:
        """Collects the spec's declared outputs."""
        doc = self.client._json("POST", "/v1/sandboxes/outputs", dict(self.at))
        return [Artifact(display=a["display"], handle=a["handle"]) for a in doc["landed"]]

    def dispose(self) -> int:
        """Disposes of this one sandbox."""
        return int(self.client._json("POST", "/v1/sandboxes/dispose", dict(self.at))["disposed"])
