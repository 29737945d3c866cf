// Types of cordon-client (index.js), written by hand: the client of
// `cordon serve`'s HTTP API (docs/serve.md).
//
// Results the client shapes (ExecResult, Artifact, FileEntry, Listing,
// FileChunk, WatchEvent) have camelCase fields; answers it hands on as
// the server wrote them (create, backends, snapshots, egress, apply, the
// streamed exec's events) keep the server's snake_case names.

declare global {
  interface SymbolConstructor {
    /** Defined by index.js where the runtime lacks it. */
    readonly asyncDispose: unique symbol;
  }
}

/** A refusal: the HTTP status and the server's message (what to do). */
export declare class CordonError extends Error {
  constructor(status: number, message: string);
  readonly name: "CordonError";
  /** The HTTP status: 400 invalid, 401 no good token, 403 refused by the policy, 404 not there (or another credential's), 413/429 past a limit, 500 failed, 503 unavailable. */
  readonly status: number;
  /** The server's message (its `{"error"}`), as it wrote it. */
  readonly message: string;
  /** `CordonError STATUS: MESSAGE`. */
  toString(): string;
}

export interface ClientOptions {
  /**
   * How long an answer may take, in milliseconds (default 3,600,000): a
   * buffered answer's whole body, a stream's headers (its events have no
   * deadline). Past it the request is aborted and the call rejects with a
   * `DOMException` named `TimeoutError`.
   */
  timeoutMs?: number;
}

/** How a command ended: exactly one of code, signal or killedBy is set. */
export interface ExecResult {
  code: number | null;
  signal: number | null;
  /** The bound that killed it (such as `max_wall_seconds`), if one did. */
  killedBy: string | null;
  stdout: string;
  stderr: string;
  /** Each stream is kept up to 1 MiB. */
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

export interface ExecOptions {
  /** Text fed to the command's standard input (default none). */
  stdin?: string;
  /** Its deadline, a whole number of seconds from 1 to 3600. */
  timeoutSeconds?: number;
}

export interface ExecStreamOptions {
  stdin?: string;
}

/** How a command ended, as the server writes it: one key. */
export type ExitStatus = { code: number } | { signal: number } | { killed: string };

/** Output as the command writes it: `data` (UTF-8) or `data_base64` (bytes that are not). */
export interface ExecOutputEvent {
  event: "stdout" | "stderr";
  data?: string;
  data_base64?: string;
}

/** The last event of a command that ran. */
export interface ExecExitEvent {
  event: "exit";
  status: ExitStatus;
  killed_by: string | null;
  stdout_truncated: boolean;
  stderr_truncated: boolean;
}

/** The last event of a command whose running failed. */
export interface ExecErrorEvent {
  event: "error";
  error: string;
}

/** One event of a streamed exec, as the server writes it. */
export type ExecEvent = ExecOutputEvent | ExecExitEvent | ExecErrorEvent;

/** A landed output: `display` is what a model may see; `handle` is for the host. */
export interface Artifact {
  display: string;
  handle: string;
}

export type FileKind = "file" | "dir" | "symlink" | "other";

/**
 * One entry of a sandbox's files, as `lstat` sees it (a link is
 * described, never followed).
 */
export interface FileEntry {
  /** Relative to the work dir. */
  path: string;
  kind: FileKind;
  /** In bytes. */
  size: number;
  /** Its permission bits. */
  mode: number;
  /** Seconds since the epoch. */
  mtime: number;
}

/** A directory's entries: iterable, and `entries` as an array. */
export declare class Listing implements Iterable<FileEntry> {
  constructor(entries: FileEntry[], truncated: boolean, path: string);
  readonly entries: FileEntry[];
  /** Set when the server stopped at its cap on entries (10,000). */
  readonly truncated: boolean;
  /** The directory, as the workload sees it. */
  readonly path: string;
  [Symbol.iterator](): Iterator<FileEntry>;
}

/** Bytes read from a file: `data` from `offset`, and `size`, the whole file's. */
export interface FileChunk {
  data: Uint8Array;
  offset: number;
  size: number;
}

export interface ReadOptions {
  /** Where to start (default 0). */
  offset?: number;
  /** At most this many bytes (default: as many as one read answers, 16 MiB or the spec's `files_out.max_bytes_per_file`). */
  length?: number;
}

export type WriteHow = "truncate" | "create" | "append";

export interface WriteOptions {
  /** Permission bits (default 0o644). */
  mode?: number;
  /** "truncate" (default: made or replaced; a link there replaced, never followed), "create" (refused, 400, when something is there) or "append". */
  how?: WriteHow;
}

export type WatchKind = "created" | "modified" | "removed" | "renamed" | "overflow" | "ended";

/**
 * One change seen by a watch. "renamed": `path` became `to`; "overflow":
 * events were lost (look again with a listing); "ended" (last): the
 * sandbox, or the watched directory, went, with `reason` and an empty `path`.
 */
export interface WatchEvent {
  event: WatchKind;
  /** Relative to the work dir ("" for "overflow" and "ended"). */
  path: string;
  to: string | null;
  /** Whether it is (or was) a directory. */
  dir: boolean;
  reason: string | null;
}

export interface WatchOptions {
  /** The directories beneath it too (default false). */
  recursive?: boolean;
}

/**
 * An NDJSON answer read as it comes. The request starts when the object is
 * made; a refusal (a `CordonError`) is thrown by `opened()` and by the
 * first `next()`. Leaving a `for await` loop early (`return()`), `close()`
 * or disposing of it hangs up: the request is aborted, and the server ends
 * what it ran for it.
 */
declare class NdjsonStream<T> implements AsyncIterableIterator<T> {
  /** Resolves once the server accepted the request; rejects with its refusal. */
  opened(): Promise<void>;
  /** Whether it was closed (by the caller, or at its end). */
  readonly closed: boolean;
  next(): Promise<IteratorResult<T, undefined>>;
  /** Hangs up, as `close()`. */
  return(): Promise<IteratorResult<T, undefined>>;
  /** Hangs up (again is a no-op); a `next()` waiting then ends. */
  close(): void;
  [Symbol.asyncIterator](): this;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A streamed exec: output events, then `exit` (or `error`). Hanging up ends the command. */
export declare class ExecStream extends NdjsonStream<ExecEvent> {}

/**
 * An open watch: events as they happen, "ended" last (its reason also kept
 * as `reason`). Hanging up ends the watch on the server and gives back its
 * place among the credential's 8.
 */
export declare class Watch extends NdjsonStream<WatchEvent> {
  /** The "ended" event's reason, once it came. */
  readonly reason: string | null;
}

/** What a credential is and where its sandboxes may run (`GET /v1/backends`). */
export interface Backends {
  backends: string[];
  available: Array<{ name: string; rung: string; admitted: boolean; runnable: boolean; used: boolean; [key: string]: unknown }>;
  floor: string;
  identity: Record<string, unknown>;
  scope: string;
  [key: string]: unknown;
}

/** A sandbox got or made (`POST /v1/sandboxes`). */
export interface Created {
  handle: string;
  backend: string;
  rung: string;
  warnings: string[];
  thread: string;
  agent_dir: string;
  /** The snapshot it was made from, with `fromSnapshot`. */
  snapshot?: string;
  [key: string]: unknown;
}

export interface CreateOptions {
  /** The spec, YAML text (docs/spec.md); default `kind: run, image: host`. */
  spec?: string;
  /** A snapshot (id or name) of this credential's scope to make it from. */
  fromSnapshot?: string;
}

export interface Snapshot {
  id: string;
  name: string | null;
  thread: string;
  created: unknown;
  backend: string;
  files: number;
  bytes: number;
  kind: string;
  processes: number | null;
  memory_bytes: number | null;
  [key: string]: unknown;
}

export interface SnapshotOptions {
  name?: string;
  /** Its running processes too (gvisor, a spec with `requires: [snapshot_memory]`; refused elsewhere). */
  memory?: boolean;
}

export interface ForkOptions {
  /** The forks' threads are PREFIX-1 .. PREFIX-N. */
  threadPrefix?: string;
}

export interface Egress {
  generation: number;
  egress_allow: string[];
}

export interface WorkspaceChange {
  path: string;
  change: "added" | "modified" | "removed";
  kind: string;
  size?: number;
}

export interface ApplyReport {
  ok: boolean;
  applied: WorkspaceChange[];
  refused: Array<{ path: string; reason: string; [key: string]: unknown }>;
}

export interface WithThreadOptions {
  /** Default "default". */
  agentDir?: string;
}

/** One credential's view of a server. */
export declare class Client {
  constructor(url: string, token: string, options?: ClientOptions);
  /** The server's URL, without a trailing slash. */
  readonly url: string;
  readonly timeoutMs: number;
  /** The backends the server routes to, its floor, and who this credential is. */
  backends(): Promise<Backends>;
  /** The caller's sandbox for one thread and agent dir (nothing is asked of the server yet). */
  thread(name: string, agentDir?: string): Thread;
  /**
   * Runs `fn` with the thread, then disposes of the whole thread however
   * `fn` ended: resolves to its value, or rejects with its error (a failed
   * disposal then rides on that error as `disposeError`).
   */
  withThread<T>(name: string, fn: (thread: Thread) => T | Promise<T>, options?: WithThreadOptions): Promise<T>;
  /** A landed output's bytes (this credential's scope only), once: the server removes it as it is fetched. */
  fetch(artifact: Artifact | string): Promise<Uint8Array>;
  /** This credential's scope's snapshots. */
  snapshots(): Promise<Snapshot[]>;
  /** Removes a snapshot (id or name) of this credential's scope: the id removed. */
  forgetSnapshot(snapshot: string): Promise<string>;
  /** Disposes of every sandbox of this credential's scope and `thread`: how many. */
  disposeThread(thread: string): Promise<number>;
}

/**
 * A sandbox addressed by (the credential's scope, thread, agent dir). An
 * async disposable: `await using t = client.thread("t-42")` (or
 * `client.withThread`) disposes of the whole thread.
 */
export declare class Thread {
  constructor(client: Client, name: string, agentDir?: string);
  readonly client: Client;
  readonly name: string;
  readonly agentDir: string;
  /** `{thread, agent_dir}`, as a request names this sandbox. */
  readonly at: { thread: string; agent_dir: string };
  readonly files: Files;
  /** Gets or creates the sandbox. */
  create(options?: CreateOptions): Promise<Created>;
  /** Runs a command to its end. */
  exec(argv: string[], options?: ExecOptions): Promise<ExecResult>;
  /** Runs a command, its events as they come; leaving early hangs up, which ends it. */
  execStream(argv: string[], options?: ExecStreamOptions): ExecStream;
  /** Writes a file (a relative path is in the work dir): the bytes written. */
  writeFile(path: string, data: string | Uint8Array | ArrayBuffer, mode?: number): Promise<number>;
  /** Collects the spec's declared outputs. */
  outputs(): Promise<Artifact[]>;
  /** The preview URL of `port` (1-65535; a RangeError otherwise) in this sandbox, made with `requires: [ports]`. */
  url(port: number, path?: string): string;
  /** GET the preview URL of `port` with this client's credential: the body. */
  getPort(port: number, path?: string): Promise<Uint8Array>;
  /** Replaces the sandbox's egress allowlist at once (`[]` allows nothing). */
  setEgress(egressAllow: Iterable<string>): Promise<Egress>;
  /** Freezes every process of the sandbox until `resume`, an exec or a file call. */
  pause(): Promise<void>;
  /** Thaws a paused sandbox (one not paused is left as it is). */
  resume(): Promise<void>;
  /** The changes this sandbox made to its workspace (none reached it until `apply`). */
  diff(): Promise<WorkspaceChange[]>;
  /** Writes the workspace changes (all, or those at or beneath `paths`) back into the directory. */
  apply(paths?: string[]): Promise<ApplyReport>;
  /** Captures the sandbox's files (with `memory`, its processes too) as a snapshot. */
  snapshot(options?: SnapshotOptions): Promise<Snapshot>;
  /** A snapshot of this sandbox and `count` (1-64) new sandboxes made from it, each independent. */
  fork(count: number, options?: ForkOptions): Promise<Thread[]>;
  /** Disposes of this one sandbox: how many (0 or 1). */
  dispose(): Promise<number>;
  /** Disposes of the whole thread. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * A sandbox's files, read and changed without running anything in it. A
 * relative path is in its work dir; each path is decided by the policy's
 * storage surface (403, naming the rule); a path through a link, or not
 * canonical, is 400; nothing there is 404 (another credential's sandbox
 * too). Each call resumes a paused sandbox first.
 */
export declare class Files {
  constructor(thread: Thread);
  /** The entries of a directory (the work dir by default) and, `depth` (0-32) levels down, of those beneath it. */
  list(path?: string, depth?: number): Promise<Listing>;
  /** The entry at `path` (a link described, not followed), or null. */
  stat(path: string): Promise<FileEntry | null>;
  /** Whether something (a link too) is at `path`. */
  exists(path: string): Promise<boolean>;
  /** Bytes of a regular file from `offset`, and the file's size. */
  readChunk(path: string, options?: ReadOptions): Promise<FileChunk>;
  /** A regular file's bytes (at most one read's worth: page a larger one with `readChunk`). */
  read(path: string, options?: ReadOptions): Promise<Uint8Array>;
  /** A regular file's text (UTF-8). */
  readText(path: string): Promise<string>;
  /** Writes a file (text as UTF-8), its parents made: the bytes written. */
  write(path: string, data: string | Uint8Array | ArrayBuffer, options?: WriteOptions): Promise<number>;
  /** Makes a directory, with its parents. */
  mkdir(path: string): Promise<void>;
  /** Removes a file, a link (not what it names) or a directory (one with something in it only `recursive`, else 400): false when nothing was there. */
  remove(path: string, options?: { recursive?: boolean }): Promise<boolean>;
  /** Moves `from` to `to`; something already at `to` is refused (400), not replaced. */
  rename(from: string, to: string): Promise<void>;
  /**
   * Watches a directory (the work dir by default) for the sandbox's
   * changes. Refusals come from `opened()` or the first step: 404, 400/403
   * for a path, 429 past the credential's 8 open watches.
   */
  watch(path?: string, options?: WatchOptions): Watch;
}
