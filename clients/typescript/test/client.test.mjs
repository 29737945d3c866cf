// The client against a live `cordon serve` (started by cordon-cli's
// tests/serve.rs, which passes CORDON_URL, CORDON_TOKEN_A, CORDON_TOKEN_B
// and CORDON_WORKSPACE). Without CORDON_URL every test is skipped, saying why.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, existsSync } from "node:fs";
import { join } from "node:path";

import { Client, CordonError, Thread, Watch, ExecStream, Listing } from "../index.js";

const URL = process.env.CORDON_URL;
const SKIP = URL ? false : "CORDON_URL names no live server (cordon-cli's tests/serve.rs runs these)";

const SPEC = `kind: report
image: host
declared_outputs:
  - {path: out/result.txt, media_type: text/plain}
files_out: {max_bytes_per_file: 1KiB, max_total_bytes: 1KiB, max_files: 1}
`;

const a = () => new Client(URL, process.env.CORDON_TOKEN_A);
const b = () => new Client(URL, process.env.CORDON_TOKEN_B);
const bytes = (s) => new TextEncoder().encode(s);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A test against the live server (skipped, saying why, without one). */
function live(name, fn) {
  test(name, { skip: SKIP, timeout: 120_000 }, fn);
}

/** Asserts `promise` rejects with a CordonError of `status` (and `text` in its message). */
async function refused(promise, status, text) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof CordonError, `not a CordonError: ${e}`);
    assert.equal(e.status, status, `${e.status}: ${e.message}`);
    if (text !== undefined) assert.ok(e.message.includes(text), e.message);
    return true;
  });
}

/** Whether `cond()` holds within `ms`, asked every `every` ms. */
async function within(ms, cond, every = 100) {
  const until = Date.now() + ms;
  for (;;) {
    if (await cond()) return true;
    if (Date.now() >= until) return false;
    await sleep(every);
  }
}

/** A watch of `t`'s sandbox, opened, retried while the credential's 8 places are taken. */
async function opened(t, ms = 5_000) {
  const until = Date.now() + ms;
  for (;;) {
    const w = t.files.watch();
    try {
      await w.opened();
      return w;
    } catch (e) {
      if (!(e instanceof CordonError) || e.status !== 429 || Date.now() >= until) throw e;
      await sleep(100);
    }
  }
}

live("a round: files in, exec, outputs out, and disposal at the end", async () => {
  const client = a();
  let artifact;
  const value = await client.withThread("ts-1", async (t) => {
    assert.ok(t instanceof Thread);
    const made = await t.create({ spec: SPEC });
    assert.equal(made.rung, "container");
    assert.equal(made.thread, "ts-1");
    assert.equal(await t.writeFile("job.sh", bytes("mkdir -p out && echo 42 > out/result.txt\n")), 41);
    const r = await t.exec(["sh", "job.sh"]);
    assert.deepEqual([r.code, r.signal, r.killedBy, r.stdout, r.stderr], [0, null, null, "", ""]);
    assert.deepEqual([r.stdoutTruncated, r.stderrTruncated], [false, false]);
    // stdin reaches the command; a deadline ends it, saying which bound.
    const fed = await t.exec(["cat"], { stdin: "fed\n" });
    assert.deepEqual([fed.code, fed.stdout], [0, "fed\n"]);
    const slow = await t.exec(["sleep", "30"], { timeoutSeconds: 1 });
    assert.equal(slow.code, null);
    assert.equal(slow.killedBy, "max_wall_seconds");
    const failed = await t.exec(["sh", "-c", "echo oops >&2; exit 3"]);
    assert.deepEqual([failed.code, failed.stderr], [3, "oops\n"]);
    const landed = await t.outputs();
    assert.equal(landed.length, 1);
    [artifact] = landed;
    assert.ok(artifact.display.includes("out/result.txt"), artifact.display);
    // Another credential: the answer a handle that never existed gets.
    await refused(b().fetch(artifact), 404);
    const got = await client.fetch(artifact);
    assert.ok(got instanceof Uint8Array);
    assert.deepEqual(got, bytes("42\n"));
    // Once: the server removed it as it was fetched.
    await refused(client.fetch(artifact.handle), 404);
    return "the callback's value";
  });
  assert.equal(value, "the callback's value");
  // The end of withThread disposed of the thread.
  await refused(client.thread("ts-1").exec(["true"]), 404);
  assert.equal(await client.disposeThread("ts-1"), 0);
});

live("the thread is disposed of when the callback throws, and as an async disposable", async () => {
  const client = a();
  const failure = new Error("the agent loop failed");
  await assert.rejects(
    client.withThread("ts-2", async (t) => {
      await t.create();
      assert.equal((await t.exec(["true"])).code, 0);
      throw failure;
    }),
    (e) => e === failure,
  );
  await refused(client.thread("ts-2").exec(["true"]), 404);
  assert.equal(await client.disposeThread("ts-2"), 0);

  const t = client.thread("ts-2b");
  await t.create();
  assert.equal((await t.exec(["true"])).code, 0);
  assert.equal(typeof Symbol.asyncDispose, "symbol");
  await t[Symbol.asyncDispose]();
  await refused(t.exec(["true"]), 404);
  // One sandbox of a thread, by its own dispose.
  await t.create();
  assert.equal(await t.dispose(), 1);
  assert.equal(await t.dispose(), 0);
});

live("streamed output arrives in order and ends with exit", async () => {
  await a().withThread("ts-3", async (t) => {
    await t.create();
    const s = t.execStream(["sh", "-c", "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; exit 5"]);
    assert.ok(s instanceof ExecStream);
    const events = [];
    for await (const ev of s) events.push(ev);
    const last = events.at(-1);
    assert.equal(last.event, "exit", JSON.stringify(events));
    assert.deepEqual(last.status, { code: 5 });
    assert.equal(last.killed_by, null);
    const body = events.slice(0, -1);
    assert.ok(body.every((e) => e.event === "stdout" || e.event === "stderr"), JSON.stringify(events));
    const out = body.filter((e) => e.event === "stdout").map((e) => e.data).join("");
    const err = body.filter((e) => e.event === "stderr").map((e) => e.data).join("");
    assert.deepEqual([out, err], ["one\nthree\n", "two\n"]);
    // In the order written: one, two, three.
    const order = body.map((e) => e.data.trim()).filter(Boolean);
    assert.deepEqual(order, ["one", "two", "three"]);
    assert.ok(s.closed);
    assert.deepEqual(await s.next(), { done: true, value: undefined });
    // stdin reaches a streamed command too.
    const fed = [];
    for await (const ev of t.execStream(["cat"], { stdin: "fed\n" })) fed.push(ev);
    assert.equal(fed.filter((e) => e.event === "stdout").map((e) => e.data).join(""), "fed\n");
    assert.deepEqual(fed.at(-1).status, { code: 0 });
    // A refusal is thrown by the first step: another credential's is none.
    await refused(b().thread("ts-3").execStream(["true"]).next(), 404);
  });
});

live("leaving a streamed exec early hangs up: the command ends, the sandbox goes on", async () => {
  await a().withThread("ts-4", async (t) => {
    await t.create();
    const command = "for i in $(seq 1 100); do echo $i; echo $i >> count; sleep 0.1; done";
    const started = Date.now();
    let out = "";
    const s = t.execStream(["sh", "-c", command]);
    for await (const ev of s) {
      if (ev.event === "stdout") out += ev.data;
      if (out.split("\n").length > 3) break;
    }
    const took = Date.now() - started;
    assert.ok(out.startsWith("1\n2\n3\n"), out);
    // The command runs 10 s; the loop ended at the break.
    assert.ok(took < 5_000, `the loop took ${took} ms`);
    assert.ok(s.closed);
    assert.deepEqual(await s.next(), { done: true, value: undefined });
    // The sandbox is usable right after.
    const r = await t.exec(["echo", "still here"]);
    assert.deepEqual([r.code, r.stdout], [0, "still here\n"]);
    // And the command ended: what it counts stops growing, short of 100.
    const count = async () => (await t.files.readText("count")).split("\n").filter(Boolean).length;
    let now = await count();
    let stopped = false;
    for (let i = 0; i < 12 && !stopped; i++) {
      await sleep(700); // seven of its steps
      const then = now;
      now = await count();
      stopped = now === then;
    }
    assert.ok(stopped, `the command outlived its client: it counted ${now}`);
    // (It appends a number after writing it: the third may not be counted.)
    assert.ok(now >= 2 && now < 100, `it counted ${now}`);
  });
});

live("another credential and a bad token are refused", async () => {
  const client = a();
  const who = await client.backends();
  assert.equal(who.scope, "team-a");
  assert.ok(Array.isArray(who.backends) && who.backends.length > 0, JSON.stringify(who));
  assert.equal((await b().backends()).scope, "team-b");
  await client.withThread("ts-5", async (t) => {
    await t.create();
    await refused(b().thread("ts-5").exec(["true"]), 404);
    // Disposing of another's thread disposes of nothing.
    assert.equal(await b().disposeThread("ts-5"), 0);
    assert.equal((await t.exec(["true"])).code, 0);
  });
  await refused(new Client(URL, "not-a-token").backends(), 401);
  await refused(new Client(URL, "not-a-token").thread("ts-5").create(), 401);
});

live("files are written, read, listed, moved and removed", async () => {
  await a().withThread("ts-files", async (t) => {
    await t.create();
    const f = t.files;
    assert.equal(await f.write("notes/a.txt", "hello"), 5);
    assert.deepEqual(await f.read("notes/a.txt"), bytes("hello"));
    assert.equal(await f.write("notes/a.txt", bytes(" world"), { how: "append" }), 6);
    assert.equal(await f.readText("notes/a.txt"), "hello world");
    await refused(f.write("notes/a.txt", "x", { how: "create" }), 400);
    assert.equal(await f.readText("notes/a.txt"), "hello world");
    // Bytes that are not UTF-8 go and come back as they are.
    const raw = new Uint8Array([0, 255, 128, 10, 0xc3]);
    assert.equal(await f.write("raw.bin", raw), 5);
    assert.deepEqual(await f.read("raw.bin"), raw);
    // A range, and the whole file's size beside it.
    assert.deepEqual(await f.read("notes/a.txt", { offset: 6, length: 3 }), bytes("wor"));
    const chunk = await f.readChunk("notes/a.txt", { offset: 6, length: 100 });
    assert.deepEqual([chunk.data, chunk.offset, chunk.size], [bytes("world"), 6, 11]);
    const entry = await f.stat("notes/a.txt");
    assert.deepEqual([entry.path, entry.kind, entry.size], ["notes/a.txt", "file", 11]);
    assert.equal(entry.mode & 0o777, 0o644);
    assert.ok(entry.mtime > 0);
    // A mode asked for is the mode made.
    await f.write("run.sh", "#!/bin/sh\necho ran\n", { mode: 0o755 });
    assert.equal((await f.stat("run.sh")).mode & 0o777, 0o755);
    const ran = await t.exec(["sh", "run.sh"]);
    assert.deepEqual([ran.code, ran.stdout], [0, "ran\n"], JSON.stringify(ran));
    assert.equal(await t.writeFile("w.sh", "echo w\n", 0o700), 7);
    assert.equal((await f.stat("w.sh")).mode & 0o777, 0o700);
    assert.equal(await f.stat("nothing-here"), null);
    assert.equal(await f.exists("nothing-here"), false);
    assert.equal(await f.exists("run.sh"), true);
    await refused(f.read("nothing-here"), 404);
    await f.mkdir("src/lib");
    assert.equal((await f.stat("src/lib")).kind, "dir");
    await f.rename("notes/a.txt", "src/lib/b.txt");
    assert.equal(await f.exists("notes/a.txt"), false);
    assert.deepEqual(await f.read("src/lib/b.txt"), bytes("hello world"));
    // A rename never replaces what is there.
    await f.write("other.txt", "other");
    await refused(f.rename("other.txt", "src/lib/b.txt"), 400);
    // The workload sees what the files API wrote.
    assert.equal((await t.exec(["cat", "src/lib/b.txt"])).stdout, "hello world");
    const listing = await f.list("", 2);
    assert.ok(listing instanceof Listing);
    assert.equal(listing.truncated, false);
    const kinds = new Set([...listing].map((e) => `${e.path} ${e.kind}`));
    for (const want of ["notes dir", "src dir", "src/lib dir", "src/lib/b.txt file", "raw.bin file"]) {
      assert.ok(kinds.has(want), `${want} not in ${[...kinds]}`);
    }
    // Depth 0: the directory's own entries, none beneath.
    const top = (await f.list()).entries.map((e) => e.path);
    assert.ok(top.includes("src") && !top.includes("src/lib"), top.join(" "));
    assert.deepEqual((await f.list("src")).entries.map((e) => e.path), ["src/lib"]);
    assert.deepEqual((await f.list("src", 1)).entries.map((e) => e.path).sort(), ["src/lib", "src/lib/b.txt"]);
    // A directory with something in it goes only recursively.
    await refused(f.remove("src"), 400);
    assert.equal(await f.remove("src", { recursive: true }), true);
    assert.equal(await f.remove("src", { recursive: true }), false);
    assert.equal(await f.exists("src"), false);
    // A link is described, never followed.
    assert.equal((await t.exec(["ln", "-s", "/etc/passwd", "pw"])).code, 0);
    assert.equal((await f.stat("pw")).kind, "symlink");
    await refused(f.read("pw"), 400, "symbolic link");
    // Another credential: the answer a missing sandbox gets.
    await refused(b().thread("ts-files").files.read("raw.bin"), 404);
    await refused(b().thread("ts-files").files.list(), 404);
  });
});

live("a watch sees what the workload makes, and leaving it hangs up", async () => {
  const client = a();
  const t = client.thread("ts-watch");
  try {
    await t.create();
    // Another credential's watch: the answer a missing sandbox gets.
    await refused(b().thread("ts-watch").files.watch().opened(), 404);
    await refused(b().thread("ts-watch").files.watch().next(), 404);

    const w = t.files.watch("", { recursive: true });
    assert.ok(w instanceof Watch);
    await w.opened();
    // Never hang: a watch that sees nothing is closed from here.
    const guard = setTimeout(() => w.close(), 30_000);
    // The server places the watch shortly after answering: the workload
    // makes files until one is seen.
    let seen = null;
    const making = (async () => {
      for (let i = 0; i < 60 && seen === null; i++) {
        await t.exec(["sh", "-c", `mkdir -p d && echo x > d/made-${i}`]);
        await sleep(250);
      }
    })();
    const events = [];
    for await (const ev of w) {
      events.push(ev);
      if (ev.event === "created" && ev.path.startsWith("d/made-")) {
        seen = ev;
        break;
      }
    }
    clearTimeout(guard);
    await making;
    assert.ok(seen, `the watch saw nothing of it: ${JSON.stringify(events)}`);
    assert.deepEqual([seen.to, seen.dir, seen.reason], [null, false, null]);
    assert.equal(events.filter((e) => e.event === "overflow").length, 0);
    // Left: closed, and it stays ended.
    assert.ok(w.closed);
    assert.deepEqual(await w.next(), { done: true, value: undefined });
    assert.equal(w.reason, null);

    // The break hung up: its place among the credential's 8 came back
    // (the server notices within half a second), so 8 more open and a
    // ninth is refused.
    const held = [];
    try {
      for (let i = 0; i < 8; i++) held.push(await opened(t));
      await refused(t.files.watch().opened(), 429, "close one");
    } finally {
      for (const h of held) h.close();
    }

    // A watch ends with the sandbox: `ended`, with why, and then stops.
    const last = await opened(t);
    const guard2 = setTimeout(() => last.close(), 30_000);
    const disposing = (async () => {
      await sleep(500);
      return t.dispose();
    })();
    const tail = [];
    for await (const ev of last) tail.push(ev);
    clearTimeout(guard2);
    assert.equal(await disposing, 1);
    const ended = tail.at(-1);
    assert.ok(ended && ended.event === "ended", JSON.stringify(tail));
    assert.deepEqual([ended.path, ended.to, ended.dir], ["", null, false]);
    assert.ok(ended.reason, JSON.stringify(ended));
    assert.equal(last.reason, ended.reason);
  } finally {
    await client.disposeThread("ts-watch");
  }
});

live("a preview URL reaches a server in the sandbox, and only its credential", async () => {
  let serving;
  await a().withThread("ts-port", async (t) => {
    await t.create({ spec: "kind: run\nimage: host\nrequires: [exec, files_in, ports]\n" });
    await t.files.write("index.html", "hello from the sandbox\n");
    // Ended by the thread's disposal.
    serving = t
      .exec(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], { timeoutSeconds: 30 })
      .catch((e) => e);
    assert.ok(t.url(8000).endsWith("/v1/sandboxes/ts-port/ports/8000/"), t.url(8000));
    assert.ok(t.url(8000, "/index.html").endsWith("/ports/8000/index.html"));
    assert.throws(() => t.url(0), RangeError);
    assert.throws(() => t.url(65536), RangeError);
    let body = null;
    await within(10_000, async () => {
      try {
        body = await t.getPort(8000, "/index.html");
        return true;
      } catch (e) {
        if (!(e instanceof CordonError)) throw e;
        return false;
      }
    }, 200);
    assert.ok(body instanceof Uint8Array);
    assert.equal(new TextDecoder().decode(body), "hello from the sandbox\n");
    await refused(b().thread("ts-port").getPort(8000, "/index.html"), 404);
    await refused(t.getPort(80), 403, "ingress");
  });
  await serving;
});

live("a sandbox pauses, resumes, and its egress is changed only by its credential", async () => {
  await a().withThread("ts-pause", async (t) => {
    await t.create();
    // A clock in the sandbox: a pause stops it.
    const ticking = t.execStream(["sh", "-c", "while :; do date +%s%N >> ticks; sleep 0.05; done"]);
    await ticking.opened();
    assert.ok(await within(5_000, () => t.files.exists("ticks")), "the clock did not start");
    await t.pause();
    await t.pause(); // as often as asked
    await sleep(1_200);
    await t.resume();
    await t.resume();
    // The clock goes on: its first tick after the pause shows the gap. On
    // a loaded machine that tick can take a while, so it is waited for
    // (read after the resume: a file call would have resumed it).
    let gap = 0n;
    const resumed = await within(10_000, async () => {
      const ticks = (await t.files.readText("ticks")).split("\n").filter(Boolean).map(BigInt);
      for (let i = 1; i < ticks.length; i++) if (ticks[i] - ticks[i - 1] > gap) gap = ticks[i] - ticks[i - 1];
      return gap >= 1_000_000_000n;
    });
    ticking.close();
    assert.ok(resumed, `the longest gap between ticks was ${gap} ns: the pause did not stop the clock, or it did not go on after the resume`);
    // An exec on a paused sandbox resumes it first.
    await t.pause();
    const r = await t.exec(["sh", "-c", "echo awake"]);
    assert.deepEqual([r.code, r.stdout], [0, "awake\n"]);
    await refused(b().thread("ts-pause").pause(), 404);
    await refused(b().thread("ts-pause").resume(), 404);
    // Made without `egress_allow`: no route out to change, said so.
    await refused(t.setEgress([]), 400, "no route out");
    await refused(b().thread("ts-pause").setEgress([]), 404);
  });
});

live("a snapshot restores, and forks diverge", async () => {
  const client = a();
  await client.withThread("ts-snap", async (t) => {
    await t.create();
    assert.equal((await t.exec(["sh", "-c", "echo before > kept.txt"])).code, 0);
    // Processes too: refused at this rung, with the reason.
    await assert.rejects(t.snapshot({ memory: true }), CordonError);
    const snap = await t.snapshot({ name: "ts-base" });
    assert.ok(snap.id.startsWith("snap-"), snap.id);
    assert.equal(snap.name, "ts-base");
    assert.equal(snap.files, 1);
    assert.equal(snap.processes, null);
    const forks = await t.fork(2, { threadPrefix: "ts-snap-f" });
    try {
      assert.deepEqual(forks.map((f) => f.name), ["ts-snap-f-1", "ts-snap-f-2"]);
      for (const [i, f] of forks.entries()) await f.exec(["sh", "-c", `echo ${i} > mark`]);
      for (const [i, f] of forks.entries()) {
        assert.equal((await f.exec(["sh", "-c", "cat kept.txt mark"])).stdout, `before\n${i}\n`);
      }
      assert.equal((await t.exec(["sh", "-c", "test -e mark && echo leak || echo ok"])).stdout, "ok\n");
    } finally {
      for (const f of forks) await f.dispose();
    }
    await client.withThread("ts-snap-r", async (r) => {
      const made = await r.create({ fromSnapshot: "ts-base" });
      assert.equal(made.snapshot, snap.id);
      assert.equal((await r.exec(["cat", "kept.txt"])).stdout, "before\n");
    });
    // Another credential's scope has none of them.
    await refused(b().thread("ts-snap-x").create({ fromSnapshot: "ts-base" }), 404);
    assert.deepEqual(await b().snapshots(), []);
    const ids = (await client.snapshots()).map((x) => x.id);
    assert.ok(ids.includes(snap.id), ids.join(" "));
    await refused(b().forgetSnapshot(snap.id), 404);
    for (const id of ids) assert.equal(await client.forgetSnapshot(id), id);
    assert.deepEqual(await client.snapshots(), []);
  });
});

live("a workspace shows its diff and applies only what is asked", async () => {
  const project = process.env.CORDON_WORKSPACE;
  assert.ok(project, "CORDON_WORKSPACE names no project directory");
  await a().withThread("ts-ws", async (t) => {
    await t.create({ spec: `kind: run\nimage: host\nworkspace: ${project}\n` });
    const r = await t.exec(["sh", "-c", "echo more >> notes.md && echo new > new.txt && ln -s /etc/passwd out"]);
    assert.equal(r.code, 0, r.stderr);
    const changes = (await t.diff()).map((c) => `${c.path} ${c.change}`).sort();
    assert.deepEqual(changes, ["new.txt added", "notes.md modified", "out added"]);
    assert.equal(readFileSync(join(project, "notes.md"), "utf8"), "# notes\n");
    const report = await t.apply(["notes.md", "out"]);
    assert.equal(report.ok, false);
    assert.deepEqual(report.applied.map((c) => c.path), ["notes.md"]);
    assert.deepEqual(report.refused.map((c) => c.path), ["out"]);
    assert.ok(report.refused[0].reason.includes("out of the workspace"), report.refused[0].reason);
    assert.equal(readFileSync(join(project, "notes.md"), "utf8"), "# notes\nmore\n");
    assert.equal(existsSync(join(project, "new.txt")), false);
    assert.equal((await t.apply(["new.txt"])).ok, true);
    assert.equal(readFileSync(join(project, "new.txt"), "utf8"), "new\n");
    await refused(b().thread("ts-ws").diff(), 404);
  });
});
