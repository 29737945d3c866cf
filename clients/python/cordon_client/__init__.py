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
        for entry in t.files.list(depth=1):      # its files, links not followed
            print(entry.path, entry.kind, entry.size)
        with t.files.watch(recursive=True) as w: # its changes as they happen
            for event in w:
                print(event.event, event.path)   # ends after "ended"

The credential decides the scope and the identity; a request names only a
thread and an agent dir.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Union

__all__ = [
    "Client",
    "Thread",
    "AsyncThread",
    "Files",
    "AsyncFiles",
    "ExecResult",
    "Artifact",
    "FileEntry",
    "Listing",
    "FileChunk",
    "WatchEvent",
    "Watch",
    "AsyncWatch",
    "CordonError",
]


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


@dataclass(frozen=True)
class FileEntry:
    """One entry of a sandbox's files, as `lstat` sees it (a link is
    described, never followed): `path` relative to the work dir, `kind`
    one of "file", "dir", "symlink", "other", `size` in bytes, `mode` its
    permission bits, `mtime` seconds since the epoch."""

    path: str
    kind: str
    size: int
    mode: int
    mtime: int


class Listing(List[FileEntry]):
    """A directory's entries (a list of [`FileEntry`]); `truncated` is set
    when the server stopped at its cap on entries, `path` is the directory
    as the workload sees it."""

    def __init__(self, entries: List[FileEntry], truncated: bool, path: str) -> None:
        super().__init__(entries)
        self.truncated = truncated
        self.path = path


@dataclass(frozen=True)
class FileChunk:
    """Bytes read from a file: `data` from `offset`, and `size`, the whole
    file's (fewer bytes than asked come back at its end or the read cap)."""

    data: bytes
    offset: int
    size: int


@dataclass(frozen=True)
class WatchEvent:
    """One change seen by a watch: `event` is "created", "modified",
    "removed", "renamed" (`path` became `to`) or "overflow" (events were
    lost: look again with a listing), `path` relative to the work dir,
    `dir` whether it is (or was) a directory. The last event is "ended"
    (the sandbox, or the watched directory, went), with `reason` and an
    empty `path`."""

    event: str
    path: str
    to: Optional[str] = None
    dir: bool = False
    reason: Optional[str] = None


def _socket(response: Any) -> Optional[socket.socket]:
    """The socket beneath an open `urlopen` response, when it shows."""
    return getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)


def _hang_up(response: Any) -> None:
    """Closes a streamed response at once: shutting its socket down wakes
    a thread blocked reading it, and the server sees the client go."""
    sock = _socket(response)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    response.close()


class Watch:
    """An open watch of a sandbox's files (`Files.watch`): an iterator of
    [`WatchEvent`]s as they happen, blocking until the next. It yields the
    "ended" event (its `reason` also kept as `.reason`) and then stops.
    `close()`, or leaving its `with` block, hangs up, which ends the watch
    on the server (and gives back its place among the credential's 8);
    it may be called from another thread, and an iteration blocked then
    stops."""

    def __init__(self, response: Any) -> None:
        self._r = response
        self._closed = False
        self._done = False
        self.reason: Optional[str] = None
        # Waiting for the next change has no deadline: a quiet sandbox
        # is not a failure (the client's timeout was for the answer).
        sock = _socket(response)
        if sock is not None:
            sock.settimeout(None)

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> WatchEvent:
        while not self._done:
            try:
                line = self._r.readline()
            except Exception:
                if self._closed:
                    break
                raise
            if not line:
                break
            if not line.strip():
                continue
            doc = json.loads(line)
            event = WatchEvent(
                event=doc["event"],
                path=doc.get("path", ""),
                to=doc.get("to"),
                dir=bool(doc.get("dir", False)),
                reason=doc.get("reason"),
            )
            if event.event == "ended":
                self.reason = event.reason
                self.close()
            return event
        self.close()
        raise StopIteration

    def close(self) -> None:
        """Hangs up (again is a no-op)."""
        self._done = True
        if not self._closed:
            self._closed = True
            _hang_up(self._r)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncWatch:
    """A [`Watch`] for asyncio hosts: `async with af.watch() as w: async
    for event in w:`. It opens on entering the block (or on the first
    event), each blocking read on a worker thread; leaving the block (or
    `aclose()`) hangs up. Like `Watch`, it yields "ended" and then stops."""

    def __init__(self, files: "Files", path: str, recursive: bool) -> None:
        self._f = files
        self._args = (path, recursive)
        self._w: Optional[Watch] = None
        self._closed = False

    @property
    def reason(self) -> Optional[str]:
        return None if self._w is None else self._w.reason

    async def _open(self) -> Watch:
        if self._w is None:
            if self._closed:
                raise RuntimeError("this watch is closed")
            self._w = await asyncio.to_thread(self._f.watch, *self._args)
        return self._w

    def __aiter__(self) -> "AsyncWatch":
        return self

    async def __anext__(self) -> WatchEvent:
        if self._closed:
            raise StopAsyncIteration
        w = await self._open()
        event = await asyncio.to_thread(next, w, None)
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        """Hangs up (again is a no-op)."""
        self._closed = True
        if self._w is not None:
            self._w.close()

    async def __aenter__(self) -> "AsyncWatch":
        await self._open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def _entry(doc: Dict[str, Any]) -> FileEntry:
    return FileEntry(path=doc["path"], kind=doc["kind"], size=doc["size"], mode=doc["mode"], mtime=doc["mtime"])


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

    def athread(self, thread: str, agent_dir: str = "default") -> "AsyncThread":
        """The same for asyncio hosts: `async with client.athread("t-42") as t:`."""
        return AsyncThread(Thread(self, thread, agent_dir))

    def fetch(self, artifact: Union[Artifact, str]) -> bytes:
        """A landed output's bytes (this credential's scope only), once: the
        server removes an artifact as it is fetched."""
        handle = artifact.handle if isinstance(artifact, Artifact) else artifact
        with self._request("GET", f"/v1/artifacts/{handle}") as r:
            return r.read()

    def snapshots(self) -> List[Dict[str, Any]]:
        """This credential's scope's snapshots."""
        return list(self._json("GET", "/v1/snapshots")["snapshots"])

    def forget_snapshot(self, snapshot: str) -> str:
        """Removes a snapshot (id or name) of this credential's scope."""
        return str(self._json("POST", "/v1/snapshots/forget", {"snapshot": snapshot})["removed"])

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
        self.files = Files(self)

    def __enter__(self) -> "Thread":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.client.dispose_thread(self.at["thread"])

    def create(self, spec: Optional[str] = None, from_snapshot: Optional[str] = None) -> Dict[str, Any]:
        """Gets or creates the sandbox (spec: YAML text, docs/spec.md); with
        `from_snapshot` (an id or name of this credential's scope), made
        from that snapshot's files (and its spec, unless one is given)."""
        body = dict(self.at)
        if spec is not None:
            body["spec"] = spec
        if from_snapshot is not None:
            body["from"] = from_snapshot
        return self.client._json("POST", "/v1/sandboxes", body)

    def url(self, port: int, path: str = "/") -> str:
        """The preview URL of `port` in this sandbox: where a server the
        workload runs there is reached through the server, as the policy's
        ingress surface allows (the sandbox made with `requires: [ports]`).
        A request to it needs this client's credential (`get_port` sends
        it); the sandbox never sees the credential."""
        from urllib.parse import quote
        if not 0 < int(port) < 65536:
            raise ValueError(f"a port is from 1 to 65535, not {port}")
        thread = quote(self.at["thread"], safe="")
        return f"{self.client.url}/v1/sandboxes/{thread}/ports/{int(port)}/{path.lstrip('/')}"

    def get_port(self, port: int, path: str = "/") -> bytes:
        """GET the preview URL of `port` (`url`) with this client's
        credential; the body. A refusal raises CordonError."""
        req = urllib.request.Request(self.url(port, path), method="GET")
        req.add_header("Authorization", f"Bearer {self.client._token}")
        if self.at["agent_dir"] != "default":
            req.add_header("cordon-agent-dir", self.at["agent_dir"])
        try:
            with urllib.request.urlopen(req, timeout=self.client.timeout) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            try:
                message = json.loads(text).get("error", text)
            except ValueError:
                message = text
            raise CordonError(e.code, message) from None

    def snapshot(self, name: Optional[str] = None, memory: bool = False) -> Dict[str, Any]:
        """Captures the sandbox's files (its work dir) into the server's
        snapshot store: `{id, name, files, bytes, processes, ...}`.
        `create(from_snapshot=id)` makes a new sandbox from it. With
        `memory=True` its running processes are saved too and end here (a
        gvisor sandbox made with `requires: [snapshot_memory]`; refused,
        saying why, elsewhere); they go on in a sandbox made from it."""
        body = dict(self.at)
        if name is not None:
            body["name"] = name
        if memory:
            body["memory"] = True
        return dict(self.client._json("POST", "/v1/sandboxes/snapshot", body))

    def fork(self, count: int, thread_prefix: Optional[str] = None) -> List["Thread"]:
        """A snapshot of this sandbox and `count` new sandboxes made from
        it (threads `PREFIX-1`..`PREFIX-N`), each independent; returns them."""
        body: Dict[str, Any] = dict(self.at, count=count)
        if thread_prefix is not None:
            body["thread_prefix"] = thread_prefix
        doc = self.client._json("POST", "/v1/sandboxes/fork", body)
        return [Thread(self.client, f["thread"], self.at["agent_dir"]) for f in doc["forks"]]

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
        with self._stream(argv, stdin) as r:
            for line in r:
                if line.strip():
                    yield json.loads(line)

    def _stream(self, argv: List[str], stdin: str):
        body = dict(self.at, argv=argv, stdin=stdin, stream=True)
        return self.client._request("POST", "/v1/sandboxes/exec", body)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> int:
        """Writes a file into the sandbox (relative paths are in its work dir)."""
        body = dict(self.at, path=path, content_base64=base64.b64encode(data).decode(), mode=mode)
        return int(self.client._json("POST", "/v1/sandboxes/files", body)["bytes"])

    def outputs(self) -> List[Artifact]:
        """Collects the spec's declared outputs."""
        doc = self.client._json("POST", "/v1/sandboxes/outputs", dict(self.at))
        return [Artifact(display=a["display"], handle=a["handle"]) for a in doc["landed"]]

    def set_egress(self, egress_allow: List[str]) -> Dict[str, Any]:
        """Replaces the sandbox's egress allowlist at once (entries as a
        spec's `egress_allow`; `[]` allows nothing): `{"generation",
        "egress_allow"}`. Open connections the new list does not admit are
        closed. A list the policy denies (403) or that does not load (400)
        raises, and leaves the sandbox's egress closed until a change that
        loads."""
        body = dict(self.at, egress_allow=list(egress_allow))
        return self.client._json("POST", "/v1/sandboxes/egress", body)

    def pause(self) -> None:
        """Freezes every process of the sandbox (no CPU; its memory and
        files stay) until `resume`, an exec or a file call, which resume it
        first. The wall clock of a command in progress goes on."""
        self.client._json("POST", "/v1/sandboxes/pause", dict(self.at))

    def resume(self) -> None:
        """Thaws a paused sandbox (one not paused is left as it is)."""
        self.client._json("POST", "/v1/sandboxes/resume", dict(self.at))

    def diff(self) -> List[Dict[str, Any]]:
        """The changes this sandbox made to its workspace (a spec's
        `workspace`: a project directory it works in copy-on-write), each
        `{path, change: added|modified|removed, kind, size}`. Nothing has
        reached the directory until `apply`."""
        return list(self.client._json("POST", "/v1/sandboxes/diff", dict(self.at))["changes"])

    def apply(self, paths: Optional[List[str]] = None) -> Dict[str, Any]:
        """Writes the workspace changes (all, or those at or beneath
        `paths`) back into the directory: `{ok, applied, refused}`, where
        each refused change says why (a link pointing out of the
        directory, a path changed there since the sandbox was made)."""
        body = dict(self.at)
        if paths:
            body["paths"] = list(paths)
        return dict(self.client._json("POST", "/v1/sandboxes/apply", body))

    def dispose(self) -> int:
        """Disposes of this one sandbox."""
        return int(self.client._json("POST", "/v1/sandboxes/dispose", dict(self.at))["disposed"])


class Files:
    """A sandbox's files, `thread.files`, read and changed without running
    anything in it. A relative path is in its work dir. Each path is
    decided by the policy's storage surface (a refusal, `403`, names the
    rule); a link is never followed (a path through one is refused, `400`),
    nor is a path with an empty, `.` or `..` part taken; a file or sandbox
    that is not there is `404`. Each call resumes a paused sandbox first.
    """

    def __init__(self, thread: Thread) -> None:
        self._t = thread

    def _call(self, op: str, body: Dict[str, Any]) -> Dict[str, Any]:
        return self._t.client._json("POST", f"/v1/sandboxes/files/{op}", dict(self._t.at, **body))

    def list(self, path: str = "", depth: int = 0) -> Listing:
        """The entries of a directory (the work dir by default), and with
        `depth` those of its directories that many levels down (links to
        directories are listed, not entered); `.truncated` says the
        server's cap on entries cut it short."""
        doc = self._call("list", {"path": path, "depth": depth})
        return Listing([_entry(e) for e in doc["entries"]], doc["truncated"], doc["path"])

    def stat(self, path: str) -> Optional[FileEntry]:
        """The entry at `path` (a link described, not followed), or None
        when nothing is there."""
        entry = self._call("stat", {"path": path})["entry"]
        return None if entry is None else _entry(entry)

    def exists(self, path: str) -> bool:
        """Whether something (a link too) is at `path`."""
        return self.stat(path) is not None

    def read_chunk(self, path: str, offset: int = 0, length: Optional[int] = None) -> FileChunk:
        """Up to `length` bytes of a regular file from `offset`, and the
        file's size. Without `length`, as many as one read answers (16 MiB,
        or the spec's `files_out.max_bytes_per_file` when lower)."""
        body: Dict[str, Any] = {"path": path, "offset": offset}
        if length is not None:
            body["length"] = length
        doc = self._call("read", body)
        return FileChunk(data=base64.b64decode(doc["content_base64"]), offset=doc["offset"], size=doc["size"])

    def read(self, path: str, offset: int = 0, length: Optional[int] = None) -> bytes:
        """A regular file's bytes (see `read_chunk` for the size and the cap)."""
        return self.read_chunk(path, offset, length).data

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """A regular file's text."""
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[bytes, str], mode: int = 0o644, how: str = "truncate") -> int:
        """Writes a file (text as UTF-8), its parents made: `how` is
        "truncate" (made or replaced; a link there is replaced, never
        followed), "create" (refused, `400`, when something is there) or
        "append" (to an existing regular file). The bytes written."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        body = dict(self._t.at, path=path, content_base64=base64.b64encode(raw).decode(), mode=mode, how=how)
        return int(self._t.client._json("POST", "/v1/sandboxes/files", body)["bytes"])

    def mkdir(self, path: str) -> None:
        """Makes a directory, with its parents."""
        self._call("mkdir", {"path": path})

    def remove(self, path: str, recursive: bool = False) -> bool:
        """Removes a file, a link (not what it names) or an empty directory;
        a directory with something in it only with `recursive` (else
        `400`). False when nothing was there."""
        return bool(self._call("remove", {"path": path, "recursive": recursive})["removed"])

    def rename(self, src: str, dst: str) -> None:
        """Moves `src` to `dst`; something already at `dst` is refused, not
        replaced."""
        self._call("rename", {"from": src, "to": dst})

    def watch(self, path: str = "", recursive: bool = False) -> Watch:
        """Watches a directory (the work dir by default; with `recursive`,
        the directories beneath it too) for changes the sandbox makes: a
        [`Watch`], iterated for [`WatchEvent`]s as they happen, and closed
        (`with` or `close()`) to end it. It yields the "ended" event when
        the sandbox or the directory goes, and stops. A refusal comes
        before any event, raised here: a sandbox not there (or another
        credential's) `404`, a path refused `400`/`403`, more than 8
        watches open for this credential `429`. Events start once the
        server has placed the watch, shortly after this returns."""
        body = dict(self._t.at, path=path, recursive=recursive)
        return Watch(self._t.client._request("POST", "/v1/sandboxes/files/watch", body))


class AsyncFiles:
    """[`Files`] for asyncio hosts: the same calls, awaited."""

    def __init__(self, files: Files) -> None:
        self._f = files

    async def list(self, path: str = "", depth: int = 0) -> Listing:
        return await asyncio.to_thread(self._f.list, path, depth)

    async def stat(self, path: str) -> Optional[FileEntry]:
        return await asyncio.to_thread(self._f.stat, path)

    async def exists(self, path: str) -> bool:
        return await asyncio.to_thread(self._f.exists, path)

    async def read_chunk(self, path: str, offset: int = 0, length: Optional[int] = None) -> FileChunk:
        return await asyncio.to_thread(self._f.read_chunk, path, offset, length)

    async def read(self, path: str, offset: int = 0, length: Optional[int] = None) -> bytes:
        return await asyncio.to_thread(self._f.read, path, offset, length)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return await asyncio.to_thread(self._f.read_text, path, encoding)

    async def write(self, path: str, data: Union[bytes, str], mode: int = 0o644, how: str = "truncate") -> int:
        return await asyncio.to_thread(self._f.write, path, data, mode, how)

    async def mkdir(self, path: str) -> None:
        await asyncio.to_thread(self._f.mkdir, path)

    async def remove(self, path: str, recursive: bool = False) -> bool:
        return await asyncio.to_thread(self._f.remove, path, recursive)

    async def rename(self, src: str, dst: str) -> None:
        await asyncio.to_thread(self._f.rename, src, dst)

    def watch(self, path: str = "", recursive: bool = False) -> AsyncWatch:
        """An [`AsyncWatch`] (see `Files.watch`); not awaited: `async with
        t.files.watch() as w:` opens it, raising a refusal there."""
        return AsyncWatch(self._f, path, recursive)


class AsyncThread:
    """A [`Thread`] for asyncio hosts: the same calls, awaited (each runs on a
    worker thread, so the event loop never blocks on the server).

    As an async context manager it disposes of the whole thread on exit,
    whether the block returned, raised or was cancelled.
    """

    def __init__(self, thread: Thread) -> None:
        self._t = thread
        self.at = thread.at
        self.files = AsyncFiles(thread.files)

    async def __aenter__(self) -> "AsyncThread":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        # Shielded: a cancelled block still disposes of its sandboxes.
        await asyncio.shield(asyncio.to_thread(self._t.client.dispose_thread, self.at["thread"]))

    async def create(self, spec: Optional[str] = None, from_snapshot: Optional[str] = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self._t.create, spec, from_snapshot)

    async def snapshot(self, name: Optional[str] = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self._t.snapshot, name)

    async def fork(self, count: int, thread_prefix: Optional[str] = None) -> List["AsyncThread"]:
        forks = await asyncio.to_thread(self._t.fork, count, thread_prefix)
        return [AsyncThread(t) for t in forks]

    async def exec(self, argv: List[str], stdin: str = "", timeout_seconds: Optional[int] = None) -> ExecResult:
        return await asyncio.to_thread(self._t.exec, argv, stdin, timeout_seconds)

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> int:
        return await asyncio.to_thread(self._t.write_file, path, data, mode)

    async def outputs(self) -> List[Artifact]:
        return await asyncio.to_thread(self._t.outputs)

    async def set_egress(self, egress_allow: List[str]) -> Dict[str, Any]:
        return await asyncio.to_thread(self._t.set_egress, egress_allow)

    async def pause(self) -> None:
        await asyncio.to_thread(self._t.pause)

    async def resume(self) -> None:
        await asyncio.to_thread(self._t.resume)

    async def diff(self) -> List[Dict[str, Any]]:
        return await asyncio.to_thread(self._t.diff)

    async def apply(self, paths: Optional[List[str]] = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self._t.apply, paths)

    async def dispose(self) -> int:
        return await asyncio.to_thread(self._t.dispose)

    async def exec_stream(self, argv: List[str], stdin: str = "") -> AsyncIterator[Dict[str, Any]]:
        """Events as they come (see `Thread.exec_stream`). Leaving the loop
        early (break, an exception, cancellation) hangs up, which kills the
        command."""
        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[Any]" = asyncio.Queue()
        held: Dict[str, Any] = {}
        done = object()

        def pump() -> None:
            try:
                with self._t._stream(argv, stdin) as r:
                    held["response"] = r
                    for line in r:
                        if line.strip():
                            loop.call_soon_threadsafe(queue.put_nowait, json.loads(line))
            except Exception as e:  # handed to the consumer, raised there
                loop.call_soon_threadsafe(queue.put_nowait, e)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, done)

        pumping = loop.run_in_executor(None, pump)
        try:
            while True:
                event = await queue.get()
                if event is done:
                    break
                if isinstance(event, Exception):
                    raise event
                yield event
        finally:
            response = held.get("response")
            if response is not None:
                _hang_up(response)
            await asyncio.shield(pumping)
