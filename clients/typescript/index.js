// A small client for `cordon serve` (docs/serve.md): Node's own `fetch`,
// `AbortController` and streams, nothing to install. Types: index.d.ts.
//
//     import { Client } from "cordon-client";
//
//     const client = new Client("http://127.0.0.1:8787", process.env.CORDON_TOKEN);
//     await client.withThread("t-42", async (t) => {   // disposed however it ends
//       await t.create({ spec });
//       const r = await t.exec(["python3", "-c", "print(42)"]);
//       for await (const ev of t.execStream(["sh", "-c", "make"])) {
//         if (ev.event === "stderr") break;            // hangs up: the command ends
//       }
//     });
//
// The credential decides the scope and the identity; a request names only
// a thread and an agent dir.

// Where the runtime lacks it (Node 18 and 20), so that a thread is an async
// disposable under TypeScript's `await using` too.
Symbol.asyncDispose ??= Symbol("Symbol.asyncDispose");

/** A refusal: the HTTP status and the server's message (what to do). */
export class CordonError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   */
  constructor(status, message) {
    super(message);
    this.name = "CordonError";
    this.status = status;
  }

  toString() {
    return `CordonError ${this.status}: ${this.message}`;
  }
}

// ---- bytes --------------------------------------------------------------

const encoder = new TextEncoder();

/** @param {string | Uint8Array | ArrayBuffer} data */
function bytesOf(data) {
  if (typeof data === "string") return encoder.encode(data);
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError("data is a string, a Uint8Array or an ArrayBuffer");
}

/** @param {Uint8Array} bytes */
function toBase64(bytes) {
  if (typeof Buffer === "function") {
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
  }
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** A plain Uint8Array (never a Buffer) of base64 text. */
function fromBase64(text) {
  if (typeof Buffer === "function") {
    const b = Buffer.from(text, "base64");
    return new Uint8Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  }
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

// ---- results --------------------------------------------------------------

/** How a command ended: exactly one of code, signal or killedBy is set. */
function execResult(doc) {
  const status = doc.status ?? {};
  return {
    code: status.code ?? null,
    signal: status.signal ?? null,
    killedBy: doc.killed_by ?? status.killed ?? null,
    stdout: doc.stdout,
    stderr: doc.stderr,
    stdoutTruncated: Boolean(doc.stdout_truncated),
    stderrTruncated: Boolean(doc.stderr_truncated),
  };
}

function entry(doc) {
  return { path: doc.path, kind: doc.kind, size: doc.size, mode: doc.mode, mtime: doc.mtime };
}

/** A directory's entries (iterable), `truncated` when the server's cap cut it short. */
export class Listing {
  constructor(entries, truncated, path) {
    this.entries = entries;
    this.truncated = truncated;
    this.path = path;
  }

  [Symbol.iterator]() {
    return this.entries[Symbol.iterator]();
  }
}

function watchEvent(doc) {
  return {
    event: doc.event,
    path: doc.path ?? "",
    to: doc.to ?? null,
    dir: Boolean(doc.dir),
    reason: doc.reason ?? null,
  };
}

// ---- HTTP -------------------------------------------------------------------

/** The refusal a non-2xx answer carries: its `{"error"}`, or its text. */
async function refusal(response) {
  let text = "";
  try {
    text = await response.text();
  } catch {
    // the status alone, then
  }
  let message = text;
  try {
    const doc = JSON.parse(text);
    if (doc && typeof doc.error === "string") message = doc.error;
  } catch {
    // not JSON: the text as it came
  }
  return new CordonError(response.status, message || response.statusText);
}

/**
 * A request whose answer has a deadline (`client.timeoutMs`): `fetch`
 * through `controller` (the caller's, to hang up a stream; else one of its
 * own), aborted when the deadline passes. The deadline holds until
 * `done()`: a buffered answer calls it once its body is read, a stream
 * once its headers are in (its body has none).
 */
async function send(client, method, url, { body, headers = {}, controller = new AbortController() } = {}) {
  const timer = setTimeout(
    () => controller.abort(new DOMException(`no answer from ${method} ${url} within ${client.timeoutMs} ms`, "TimeoutError")),
    client.timeoutMs,
  );
  const done = () => clearTimeout(timer);
  const all = { Authorization: `Bearer ${client._token}`, ...headers };
  if (body !== undefined) all["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, {
      method,
      headers: all,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: controller.signal,
    });
  } catch (e) {
    done();
    throw why(controller, e);
  }
  if (!response.ok) {
    try {
      throw await refusal(response);
    } finally {
      done();
    }
  }
  return { response, controller, done };
}

/** What failed: the abort's reason (a deadline, a close) when it was aborted. */
function why(controller, e) {
  return controller.signal.aborted && controller.signal.reason !== undefined ? controller.signal.reason : e;
}

/** The body of an answer read within its deadline. */
async function read(client, method, url, options, as) {
  const { response, controller, done } = await send(client, method, url, options);
  try {
    if (as === "json") return await response.json();
    return new Uint8Array(await response.arrayBuffer());
  } catch (e) {
    throw why(controller, e);
  } finally {
    done();
  }
}

// ---- streams ----------------------------------------------------------------

/**
 * An NDJSON answer as an async iterator: one parsed line a step. The
 * request starts when this is made; a refusal is thrown by the first
 * `next()` (and by `opened()`). `close()`, `return()` (a `break` out of
 * `for await`) or `[Symbol.asyncDispose]` hangs up: the request is
 * aborted, its connection closed, and the server ends what it ran for it.
 */
class NdjsonStream {
  constructor(open) {
    this._controller = new AbortController();
    this._closed = false;
    this._done = false;
    this._reader = null;
    this._buffer = "";
    this._lines = [];
    this._decoder = new TextDecoder();
    this._chain = Promise.resolve();
    this._opening = open(this._controller).then(({ response, done }) => {
      done(); // the deadline was for the answer; the stream has none
      this._reader = response.body.getReader();
    });
    // Kept for `next()` and `opened()`; never an unhandled rejection.
    this._opening.catch(() => {});
  }

  /** Resolves once the server accepted the request; rejects with its refusal. */
  opened() {
    return this._opening;
  }

  /** Whether it was closed (by the caller, or at its end). */
  get closed() {
    return this._closed;
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  next() {
    const step = this._chain.then(() => this._step());
    this._chain = step.then(
      () => {},
      () => {},
    );
    return step;
  }

  /** Hangs up, as `close()`: what a `break` out of `for await` calls. */
  async return() {
    this.close();
    return { done: true, value: undefined };
  }

  async [Symbol.asyncDispose]() {
    this.close();
  }

  /** Hangs up (again is a no-op); a `next()` waiting then ends. */
  close() {
    this._done = true;
    this._lines = [];
    if (!this._closed) {
      this._closed = true;
      this._controller.abort(new DOMException("closed by the client", "AbortError"));
      if (this._reader) this._reader.cancel().catch(() => {});
    }
  }

  /** Turns a parsed line into what is yielded (and may end the stream). */
  _item(doc) {
    return doc;
  }

  async _step() {
    const end = { done: true, value: undefined };
    if (this._done && this._lines.length === 0) {
      this.close(); // at its end: the connection given back, or dropped
      return end;
    }
    try {
      await this._opening;
    } catch (e) {
      if (this._closed) return end;
      this._done = true;
      this._closed = true;
      throw e;
    }
    for (;;) {
      while (this._lines.length > 0) {
        const line = this._lines.shift();
        if (line.trim() === "") continue;
        let doc;
        try {
          doc = JSON.parse(line);
        } catch (e) {
          this.close();
          throw new Error(`not a JSON line from the server: ${JSON.stringify(line.slice(0, 200))}`, { cause: e });
        }
        return { done: false, value: this._item(doc) };
      }
      if (this._done) {
        this.close();
        return end;
      }
      let chunk;
      try {
        chunk = await this._reader.read();
      } catch (e) {
        if (this._closed) return end;
        this.close();
        throw e;
      }
      if (this._closed) return end;
      if (chunk.done) {
        this._buffer += this._decoder.decode();
        this._lines.push(this._buffer);
        this._buffer = "";
        this._done = true;
        continue;
      }
      this._buffer += this._decoder.decode(chunk.value, { stream: true });
      const parts = this._buffer.split("\n");
      this._buffer = parts.pop();
      this._lines.push(...parts);
    }
  }
}

/**
 * A streamed exec (`Thread.execStream`): its events as they come, `exit`
 * (or `error`) last. Leaving it early hangs up, which ends the command.
 */
export class ExecStream extends NdjsonStream {}

/**
 * An open watch of a sandbox's files (`Files.watch`): its events as they
 * happen. It yields the `ended` event (its reason also kept as `.reason`)
 * and then stops; leaving it early hangs up, which ends the watch on the
 * server (and gives back its place among the credential's 8).
 */
export class Watch extends NdjsonStream {
  constructor(open) {
    super(open);
    /** @type {string | null} */
    this.reason = null;
  }

  _item(doc) {
    const event = watchEvent(doc);
    if (event.event === "ended") {
      this.reason = event.reason;
      this._done = true;
      this._lines = [];
    }
    return event;
  }
}

// ---- the client -----------------------------------------------------------------

/** One credential's view of a server. */
export class Client {
  /**
   * @param {string} url
   * @param {string} token
   * @param {{timeoutMs?: number}} [options]
   */
  constructor(url, token, { timeoutMs = 3_600_000 } = {}) {
    if (typeof url !== "string" || url === "") throw new TypeError("url: the server's, such as http://127.0.0.1:8787");
    if (typeof token !== "string") throw new TypeError("token: a credential's bearer token");
    this.url = url.replace(/\/+$/, "");
    this.timeoutMs = timeoutMs;
    Object.defineProperty(this, "_token", { value: token, enumerable: false });
  }

  _json(method, path, body) {
    return read(this, method, this.url + path, { body }, "json");
  }

  /** The backends the server routes to, its floor, and who this credential is. */
  backends() {
    return this._json("GET", "/v1/backends");
  }

  /** The caller's sandbox for one thread and agent dir. */
  thread(name, agentDir = "default") {
    return new Thread(this, name, agentDir);
  }

  /**
   * Runs `fn` with the thread, then disposes of the whole thread however
   * `fn` ended: its value returned, its error rethrown.
   */
  async withThread(name, fn, { agentDir = "default" } = {}) {
    const t = this.thread(name, agentDir);
    let failed = false;
    try {
      return await fn(t);
    } catch (e) {
      failed = true;
      try {
        await this.disposeThread(name);
      } catch (disposeError) {
        // The callback's error is the one to see; the disposal's rides on it.
        if (e !== null && typeof e === "object" && Object.isExtensible(e)) {
          Object.defineProperty(e, "disposeError", { value: disposeError, configurable: true });
        }
      }
      throw e;
    } finally {
      if (!failed) await this.disposeThread(name);
    }
  }

  /**
   * A landed output's bytes (this credential's scope only), once: the
   * server removes an artifact as it is fetched.
   */
  fetch(artifact) {
    const handle = typeof artifact === "string" ? artifact : artifact.handle;
    return read(this, "GET", `${this.url}/v1/artifacts/${encodeURIComponent(handle)}`, {}, "bytes");
  }

  /** This credential's scope's snapshots. */
  async snapshots() {
    return (await this._json("GET", "/v1/snapshots")).snapshots;
  }

  /** Removes a snapshot (id or name) of this credential's scope: the id removed. */
  async forgetSnapshot(snapshot) {
    return String((await this._json("POST", "/v1/snapshots/forget", { snapshot })).removed);
  }

  /** Disposes of every sandbox of this credential's scope and `thread`: how many. */
  async disposeThread(thread) {
    return Number((await this._json("POST", "/v1/threads/dispose", { thread })).disposed);
  }
}

/**
 * A sandbox addressed by (the credential's scope, thread, agent dir). An
 * async disposable: disposing of it disposes of the whole thread.
 */
export class Thread {
  constructor(client, name, agentDir = "default") {
    this.client = client;
    this.name = name;
    this.agentDir = agentDir;
    this.files = new Files(this);
  }

  /** `{thread, agent_dir}`, as a request names this sandbox. */
  get at() {
    return { thread: this.name, agent_dir: this.agentDir };
  }

  _post(path, body = {}) {
    return this.client._json("POST", path, { ...this.at, ...body });
  }

  async [Symbol.asyncDispose]() {
    await this.client.disposeThread(this.name);
  }

  /**
   * Gets or creates the sandbox (spec: YAML text, docs/spec.md); with
   * `fromSnapshot` (an id or name of this credential's scope), made from
   * that snapshot's files (and its spec, unless one is given).
   */
  create({ spec, fromSnapshot } = {}) {
    const body = {};
    if (spec !== undefined) body.spec = spec;
    if (fromSnapshot !== undefined) body.from = fromSnapshot;
    return this._post("/v1/sandboxes", body);
  }

  /** Runs a command to its end. */
  async exec(argv, { stdin = "", timeoutSeconds } = {}) {
    const body = { argv, stdin };
    if (timeoutSeconds !== undefined) body.timeout_seconds = timeoutSeconds;
    return execResult(await this._post("/v1/sandboxes/exec", body));
  }

  /**
   * Runs a command, its events as they come: `stdout`/`stderr` chunks
   * (`data`, or `data_base64`), then `exit`. Leaving the loop early hangs
   * up, which ends the command.
   */
  execStream(argv, { stdin = "" } = {}) {
    const body = { ...this.at, argv, stdin, stream: true };
    return new ExecStream((controller) =>
      send(this.client, "POST", `${this.client.url}/v1/sandboxes/exec`, { body, controller }),
    );
  }

  /** Writes a file into the sandbox (a relative path is in its work dir): the bytes written. */
  writeFile(path, data, mode = 0o644) {
    return this.files.write(path, data, { mode });
  }

  /** Collects the spec's declared outputs: display lines and handles. */
  async outputs() {
    const doc = await this._post("/v1/sandboxes/outputs");
    return doc.landed.map((a) => ({ display: a.display, handle: a.handle }));
  }

  /**
   * The preview URL of `port` in this sandbox (made with `requires:
   * [ports]`); a request to it needs this client's credential (`getPort`
   * sends it).
   */
  url(port, path = "/") {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new RangeError(`a port is from 1 to 65535, not ${port}`);
    }
    const thread = encodeURIComponent(this.name);
    return `${this.client.url}/v1/sandboxes/${thread}/ports/${port}/${String(path).replace(/^\/+/, "")}`;
  }

  /** GET the preview URL of `port` with this client's credential: the body. */
  getPort(port, path = "/") {
    const headers = this.agentDir === "default" ? {} : { "cordon-agent-dir": this.agentDir };
    return read(this.client, "GET", this.url(port, path), { headers }, "bytes");
  }

  /**
   * Replaces the sandbox's egress allowlist at once (`[]` allows
   * nothing): `{generation, egress_allow}`.
   */
  setEgress(egressAllow) {
    return this._post("/v1/sandboxes/egress", { egress_allow: [...egressAllow] });
  }

  /** Freezes every process of the sandbox until `resume`, an exec or a file call. */
  async pause() {
    await this._post("/v1/sandboxes/pause");
  }

  /** Thaws a paused sandbox (one not paused is left as it is). */
  async resume() {
    await this._post("/v1/sandboxes/resume");
  }

  /** The changes this sandbox made to its workspace. */
  async diff() {
    return (await this._post("/v1/sandboxes/diff")).changes;
  }

  /** Writes the workspace changes (all, or those at or beneath `paths`) back: `{ok, applied, refused}`. */
  apply(paths) {
    return this._post("/v1/sandboxes/apply", paths && paths.length ? { paths: [...paths] } : {});
  }

  /** Captures the sandbox's files (and with `memory`, its processes) as a snapshot. */
  snapshot({ name, memory = false } = {}) {
    const body = {};
    if (name !== undefined) body.name = name;
    if (memory) body.memory = true;
    return this._post("/v1/sandboxes/snapshot", body);
  }

  /** A snapshot of this sandbox and `count` new sandboxes made from it: their threads. */
  async fork(count, { threadPrefix } = {}) {
    const body = { count };
    if (threadPrefix !== undefined) body.thread_prefix = threadPrefix;
    const doc = await this._post("/v1/sandboxes/fork", body);
    return doc.forks.map((f) => new Thread(this.client, f.thread, this.agentDir));
  }

  /** Disposes of this one sandbox: how many (0 or 1). */
  async dispose() {
    return Number((await this._post("/v1/sandboxes/dispose")).disposed);
  }
}

/**
 * A sandbox's files (`thread.files`), read and changed without running
 * anything in it. A relative path is in its work dir; each path is decided
 * by the policy's storage surface (`403`); a link is never followed (`400`);
 * nothing there is `404`.
 */
export class Files {
  constructor(thread) {
    this._t = thread;
  }

  _call(op, body) {
    return this._t._post(`/v1/sandboxes/files/${op}`, body);
  }

  /** The entries of a directory (the work dir by default), `depth` levels down. */
  async list(path = "", depth = 0) {
    const doc = await this._call("list", { path, depth });
    return new Listing(doc.entries.map(entry), Boolean(doc.truncated), doc.path);
  }

  /** The entry at `path` (a link described, not followed), or null. */
  async stat(path) {
    const doc = await this._call("stat", { path });
    return doc.entry == null ? null : entry(doc.entry);
  }

  /** Whether something (a link too) is at `path`. */
  async exists(path) {
    return (await this.stat(path)) !== null;
  }

  /** Up to `length` bytes of a regular file from `offset`, and the file's size. */
  async readChunk(path, { offset = 0, length } = {}) {
    const body = { path, offset };
    if (length !== undefined) body.length = length;
    const doc = await this._call("read", body);
    return { data: fromBase64(doc.content_base64), offset: doc.offset, size: doc.size };
  }

  /** A regular file's bytes (at most one read's worth: see `readChunk`). */
  async read(path, options = {}) {
    return (await this.readChunk(path, options)).data;
  }

  /** A regular file's text (UTF-8). */
  async readText(path) {
    return new TextDecoder().decode(await this.read(path));
  }

  /**
   * Writes a file (text as UTF-8), its parents made: `how` is "truncate",
   * "create" (refused when something is there) or "append". The bytes written.
   */
  async write(path, data, { mode = 0o644, how = "truncate" } = {}) {
    const body = { path, content_base64: toBase64(bytesOf(data)), mode, how };
    return Number((await this._t._post("/v1/sandboxes/files", body)).bytes);
  }

  /** Makes a directory, with its parents. */
  async mkdir(path) {
    await this._call("mkdir", { path });
  }

  /** Removes a file, a link or a directory (one with something in it only `recursive`): false when nothing was there. */
  async remove(path, { recursive = false } = {}) {
    return Boolean((await this._call("remove", { path, recursive })).removed);
  }

  /** Moves `from` to `to`; something already at `to` is refused, not replaced. */
  async rename(from, to) {
    await this._call("rename", { from, to });
  }

  /**
   * Watches a directory (the work dir by default; with `recursive`, those
   * beneath it too) for changes: a `Watch`, iterated for events as they
   * happen. The request starts now; a refusal is thrown by its first step.
   */
  watch(path = "", { recursive = false } = {}) {
    const body = { ...this._t.at, path, recursive };
    const client = this._t.client;
    return new Watch((controller) =>
      send(client, "POST", `${client.url}/v1/sandboxes/files/watch`, { body, controller }),
    );
  }
}
