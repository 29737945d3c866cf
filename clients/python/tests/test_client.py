"""The client against a live `cordon serve` (started by cordon-cli's
tests/serve.rs, which passes CORDON_URL, CORDON_TOKEN_A and CORDON_TOKEN_B)."""

import asyncio
import os
import queue
import sys
import threading
import time
import unittest
from typing import Any, Callable, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from cordon_client import Client, CordonError, Thread, Watch, WatchEvent  # noqa: E402

URL = os.environ.get("CORDON_URL")
SPEC = """kind: report
image: host
declared_outputs:
  - {path: out/result.txt, media_type: text/plain}
files_out: {max_bytes_per_file: 1KiB, max_total_bytes: 1KiB, max_files: 1}
"""


@unittest.skipUnless(URL, "CORDON_URL names no live server (cordon-cli's tests/serve.rs runs these)")
class LiveServer(unittest.TestCase):
    def setUp(self) -> None:
        self.a = Client(URL, os.environ["CORDON_TOKEN_A"])
        self.b = Client(URL, os.environ["CORDON_TOKEN_B"])

    def test_a_preview_url_reaches_a_server_in_the_sandbox(self) -> None:
        with self.a.thread("py-port") as t:
            t.create(spec="kind: run\nimage: host\nrequires: [exec, files_in, ports]\n")
            t.files.write("index.html", "hello from the sandbox\n")
            def serve() -> None:
                try:
                    t.exec(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], timeout_seconds=30)
                except CordonError:
                    pass  # ended by the thread's disposal

            server = threading.Thread(target=serve, daemon=True)
            server.start()
            self.assertTrue(t.url(8000).endswith("/v1/sandboxes/py-port/ports/8000/"))
            body = None
            for _ in range(50):
                try:
                    body = t.get_port(8000, "/index.html")
                    break
                except CordonError:
                    time.sleep(0.2)
            self.assertEqual(body, b"hello from the sandbox\n")
            with self.assertRaises(CordonError) as e:
                self.b.thread("py-port").get_port(8000, "/index.html")
            self.assertEqual(e.exception.status, 404)
            with self.assertRaises(CordonError) as e:
                t.get_port(80)
            self.assertEqual(e.exception.status, 403)
            self.assertIn("ingress", str(e.exception))

    def test_a_round_files_in_exec_outputs_out_and_disposal_on_exit(self) -> None:
        with self.a.thread("py-1") as t:
            made = t.create(spec=SPEC)
            self.assertEqual(made["rung"], "container")
            self.assertEqual(t.write_file("job.sh", b"mkdir -p out && echo 42 > out/result.txt\n"), 41)
            r = t.exec(["sh", "job.sh"])
            self.assertEqual((r.code, r.signal, r.killed_by), (0, None, None))
            [artifact] = t.outputs()
            self.assertIn("out/result.txt", artifact.display)
            self.assertEqual(self.a.fetch(artifact), b"42\n")
            with self.assertRaises(CordonError) as e:
                self.b.fetch(artifact)
            self.assertEqual(e.exception.status, 404)
        # The block's end disposed of the thread.
        with self.assertRaises(CordonError) as e:
            self.a.thread("py-1").exec(["true"])
        self.assertEqual(e.exception.status, 404)

    def test_the_thread_is_disposed_when_the_block_raises(self) -> None:
        with self.assertRaises(RuntimeError):
            with self.a.thread("py-2") as t:
                t.create()
                raise RuntimeError("the agent loop failed")
        self.assertEqual(self.a.dispose_thread("py-2"), 0)

    def test_streamed_output_arrives_in_order_and_ends_with_exit(self) -> None:
        with self.a.thread("py-3") as t:
            t.create()
            events = list(t.exec_stream(["sh", "-c", "echo one; echo two >&2; exit 5"]))
            self.assertEqual(events[-1]["event"], "exit")
            self.assertEqual(events[-1]["status"], {"code": 5})
            out = "".join(e.get("data", "") for e in events if e["event"] == "stdout")
            self.assertEqual(out, "one\n")

    def test_another_credential_cannot_reach_it(self) -> None:
        with self.a.thread("py-4") as t:
            t.create()
            with self.assertRaises(CordonError) as e:
                self.b.thread("py-4").exec(["true"])
            self.assertEqual(e.exception.status, 404)
        with self.assertRaises(CordonError) as e:
            Client(URL, "not-a-token").backends()
        self.assertEqual(e.exception.status, 401)

    def test_egress_is_changed_only_on_a_sandbox_with_a_route_and_only_by_its_credential(self) -> None:
        with self.a.thread("py-7") as t:
            t.create()
            # Made without `egress_allow`: no route out to change, said so.
            with self.assertRaises(CordonError) as e:
                t.set_egress([])
            self.assertEqual(e.exception.status, 400)
            self.assertIn("no route out", str(e.exception))
            with self.assertRaises(CordonError) as e:
                self.b.thread("py-7").set_egress([])
            self.assertEqual(e.exception.status, 404)

            async def changed() -> None:
                with self.assertRaises(CordonError) as e:
                    await self.a.athread("py-7").set_egress([])
                self.assertEqual(e.exception.status, 400)

            asyncio.run(changed())

    def test_a_sandbox_pauses_resumes_and_an_exec_wakes_it(self) -> None:
        with self.a.thread("py-8") as t:
            t.create()
            t.pause()
            t.pause()  # as often as asked
            # An exec on a paused sandbox resumes it first.
            r = t.exec(["sh", "-c", "echo awake"])
            self.assertEqual((r.code, r.stdout), (0, "awake\n"))
            t.pause()
            t.resume()
            t.resume()
            with self.assertRaises(CordonError) as e:
                self.b.thread("py-8").pause()
            self.assertEqual(e.exception.status, 404)

            async def paused() -> None:
                await self.a.athread("py-8").pause()
                await self.a.athread("py-8").resume()

            asyncio.run(paused())

    def test_a_workspace_shows_its_diff_and_applies_only_when_asked(self) -> None:
        project = os.environ["CORDON_WORKSPACE"]
        with self.a.thread("py-ws") as t:
            t.create(f"kind: run\nimage: host\nworkspace: {project}\n")
            r = t.exec(["sh", "-c", "echo more >> notes.md && echo new > new.txt && ln -s /etc/passwd out"])
            self.assertEqual(r.code, 0, r.stderr)
            changes = {(c["path"], c["change"]) for c in t.diff()}
            self.assertEqual(changes, {("notes.md", "modified"), ("new.txt", "added"), ("out", "added")})
            with open(os.path.join(project, "notes.md")) as f:
                self.assertEqual(f.read(), "# notes\n")
            report = t.apply(["notes.md", "out"])
            self.assertFalse(report["ok"])
            self.assertEqual([c["path"] for c in report["applied"]], ["notes.md"])
            self.assertEqual([c["path"] for c in report["refused"]], ["out"])
            self.assertIn("out of the workspace", report["refused"][0]["reason"])
            with open(os.path.join(project, "notes.md")) as f:
                self.assertEqual(f.read(), "# notes\nmore\n")
            self.assertFalse(os.path.exists(os.path.join(project, "new.txt")))
            self.assertTrue(asyncio.run(self.a.athread("py-ws").apply(["new.txt"]))["ok"])
            self.assertTrue(os.path.exists(os.path.join(project, "new.txt")))
        # A directory outside the server's workspace roots is refused.
        with self.a.thread("py-ws-2") as t:
            with self.assertRaises(CordonError) as e:
                t.create("kind: run\nimage: host\nworkspace: /var/tmp\n")
            self.assertEqual(e.exception.status, 403)
            self.assertIn("workspace_roots", str(e.exception))

    def test_a_snapshot_restores_and_forks_that_diverge(self) -> None:
        with self.a.thread("py-snap") as t:
            t.create()
            t.exec(["sh", "-c", "echo before > kept.txt"])
            # Processes too: refused at this rung, with the reason.
            with self.assertRaises(CordonError) as e:
                t.snapshot(memory=True)
            self.assertIn("Landlock", str(e.exception))
            snap = t.snapshot(name="py-base")
            self.assertTrue(snap["id"].startswith("snap-"))
            self.assertEqual(snap["files"], 1)
            self.assertIsNone(snap["processes"])
            forks = t.fork(2, thread_prefix="py-snap-f")
            try:
                for i, f in enumerate(forks):
                    f.exec(["sh", "-c", f"echo {i} > mark"])
                for i, f in enumerate(forks):
                    r = f.exec(["sh", "-c", "cat kept.txt mark"])
                    self.assertEqual(r.stdout, f"before\n{i}\n")
                self.assertEqual(t.exec(["sh", "-c", "test -e mark && echo leak || echo ok"]).stdout, "ok\n")
            finally:
                for f in forks:
                    f.dispose()
            with self.a.thread("py-snap-r") as r:
                made = r.create(from_snapshot="py-base")
                self.assertEqual(made["snapshot"], snap["id"])
                self.assertEqual(r.exec(["cat", "kept.txt"]).stdout, "before\n")
            # Another credential's scope has none of them.
            with self.assertRaises(CordonError) as e:
                self.b.thread("py-snap-x").create(from_snapshot="py-base")
            self.assertEqual(e.exception.status, 404)
            self.assertEqual([x["id"] for x in self.b.snapshots()], [])
            ids = {x["id"] for x in self.a.snapshots()}
            self.assertIn(snap["id"], ids)
            for i in ids:
                self.a.forget_snapshot(i)
            self.assertEqual(self.a.snapshots(), [])

    def test_files_are_written_read_listed_moved_and_removed(self) -> None:
        with self.a.thread("py-files") as t:
            t.create()
            f = t.files
            self.assertEqual(f.write("notes/a.txt", "hello"), 5)
            self.assertEqual(f.read("notes/a.txt"), b"hello")
            self.assertEqual(f.write("notes/a.txt", b" world", how="append"), 6)
            self.assertEqual(f.read_text("notes/a.txt"), "hello world")
            with self.assertRaises(CordonError) as e:
                f.write("notes/a.txt", b"x", how="create")
            self.assertEqual(e.exception.status, 400)
            self.assertEqual(f.read("notes/a.txt"), b"hello world")
            # A range, and the whole file's size beside it.
            self.assertEqual(f.read("notes/a.txt", offset=6, length=3), b"wor")
            chunk = f.read_chunk("notes/a.txt", offset=6, length=100)
            self.assertEqual((chunk.data, chunk.offset, chunk.size), (b"world", 6, 11))
            entry = f.stat("notes/a.txt")
            assert entry is not None
            self.assertEqual((entry.path, entry.kind, entry.size), ("notes/a.txt", "file", 11))
            self.assertEqual(entry.mode & 0o777, 0o644)
            self.assertGreater(entry.mtime, 0)
            self.assertIsNone(f.stat("nothing-here"))
            self.assertFalse(f.exists("nothing-here"))
            with self.assertRaises(CordonError) as e:
                f.read("nothing-here")
            self.assertEqual(e.exception.status, 404)
            f.mkdir("src/lib")
            self.assertEqual(f.stat("src/lib").kind, "dir")
            f.rename("notes/a.txt", "src/lib/b.txt")
            self.assertFalse(f.exists("notes/a.txt"))
            self.assertEqual(f.read("src/lib/b.txt"), b"hello world")
            # The workload sees what the files API wrote.
            self.assertEqual(t.exec(["cat", "src/lib/b.txt"]).stdout, "hello world")
            listing = f.list(depth=2)
            self.assertFalse(listing.truncated)
            kinds = {(e.path, e.kind) for e in listing}
            self.assertLessEqual({("notes", "dir"), ("src", "dir"), ("src/lib", "dir"), ("src/lib/b.txt", "file")}, kinds)
            self.assertEqual([e.path for e in f.list("src")], ["src/lib"])
            # A directory with something in it goes only recursively.
            with self.assertRaises(CordonError) as e:
                f.remove("src")
            self.assertEqual(e.exception.status, 400)
            self.assertTrue(f.remove("src", recursive=True))
            self.assertFalse(f.remove("src", recursive=True))
            self.assertFalse(f.exists("src"))
            # Another credential: the answer a missing sandbox gets.
            with self.assertRaises(CordonError) as e:
                self.b.thread("py-files").files.read("notes")
            self.assertEqual(e.exception.status, 404)

            async def awaited() -> None:
                af = self.a.athread("py-files").files
                self.assertEqual(await af.write("async.txt", b"abc"), 3)
                self.assertEqual(await af.read("async.txt"), b"abc")
                self.assertIn("async.txt", [e.path for e in await af.list()])
                self.assertTrue(await af.remove("async.txt"))

            asyncio.run(awaited())

    def test_files_never_follow_a_link_and_the_policy_decides(self) -> None:
        with self.a.thread("py-links") as t:
            t.create()
            r = t.exec(["sh", "-c", "ln -s /etc/passwd pw && ln -s /etc etc"])
            self.assertEqual(r.code, 0, r.stderr)
            listing = t.files.list(depth=3)
            kinds = {e.path: e.kind for e in listing}
            self.assertEqual((kinds.get("pw"), kinds.get("etc")), ("symlink", "symlink"))
            self.assertEqual([p for p in kinds if p.startswith("etc/")], [], "a link followed")
            self.assertEqual(t.files.stat("pw").kind, "symlink")
            # Reading, listing or writing through a link is refused.
            for call in (
                lambda: t.files.read("pw"),
                lambda: t.files.read("etc/hostname"),
                lambda: t.files.list("etc"),
                lambda: t.files.write("etc/cordon-py", b"x"),
            ):
                with self.assertRaises(CordonError) as e:
                    call()
                self.assertEqual(e.exception.status, 400)
                self.assertIn("symbolic link on its path", e.exception.message)
            self.assertFalse(os.path.exists("/etc/cordon-py"))
            # Removing a link removes the link, not what it names.
            self.assertTrue(t.files.remove("pw"))
            self.assertFalse(t.files.exists("pw"))
            self.assertTrue(os.path.exists("/etc/passwd"))
            # The policy's storage surface decides, and says which rule.
            with self.assertRaises(CordonError) as e:
                t.files.read("/etc/shadow")
            self.assertEqual(e.exception.status, 403)
            self.assertIn("storage surface", e.exception.message)
            self.assertIn("host-secrets", e.exception.message)
            with self.assertRaises(CordonError) as e:
                t.files.read("/workspace/../etc/passwd")
            self.assertEqual(e.exception.status, 400)

    def test_the_async_thread_runs_streams_and_disposes_however_the_block_ends(self) -> None:
        async def main() -> None:
            async with self.a.athread("py-5") as t:
                await t.create()
                r = await t.exec(["sh", "-c", "echo async"])
                self.assertEqual((r.code, r.stdout), (0, "async\n"))
                self.assertEqual(await t.write_file("f.txt", b"abc"), 3)
                seen = []
                async for ev in t.exec_stream(["sh", "-c", "echo a; echo b; exit 3"]):
                    seen.append(ev)
                self.assertEqual(seen[-1]["status"], {"code": 3})
                # Leaving a stream early hangs up: the command is killed.
                async for ev in t.exec_stream(["sh", "-c", "echo go; exec sleep 41.5"]):
                    self.assertEqual(ev.get("data"), "go\n")
                    # `exec sleep` follows the echo: see it run before hanging
                    # up, or its absence afterwards would prove nothing.
                    self.assertTrue(await waited(lambda: sleeping("41.5")), "the command is not running")
                    break
                self.assertTrue(await waited(lambda: not sleeping("41.5")), "the command outlived its client")
            with self.assertRaises(RuntimeError):
                async with self.a.athread("py-6") as t:
                    await t.create()
                    raise RuntimeError("the agent loop failed")

        asyncio.run(main())
        self.assertEqual(self.a.dispose_thread("py-5"), 0)
        self.assertEqual(self.a.dispose_thread("py-6"), 0)

    def test_a_watch_streams_the_changes_and_ends_with_the_sandbox(self) -> None:
        t = self.a.thread("py-watch")
        try:
            t.create()
            # Another credential's watch: the answer a missing sandbox gets.
            with self.assertRaises(CordonError) as e:
                self.b.thread("py-watch").files.watch()
            self.assertEqual(e.exception.status, 404)
            with t.files.watch(recursive=True) as w:
                events = Events(w)
                events.ready(self, t)
                r = t.exec(["sh", "-c", "mkdir d && echo x > d/f && mv d/f d/g && rm d/g"])
                self.assertEqual(r.code, 0, r.stderr)
                ten = 10.0
                self.assertIsNotNone(events.saw(lambda e: (e.event, e.path, e.dir) == ("created", "d", True), ten), events.seen)
                self.assertIsNotNone(
                    events.saw(lambda e: e.event in ("created", "modified") and e.path == "d/f", ten), events.seen
                )
                self.assertIsNotNone(events.saw(lambda e: (e.event, e.path, e.to) == ("renamed", "d/f", "d/g"), ten), events.seen)
                self.assertIsNotNone(events.saw(lambda e: (e.event, e.path) == ("removed", "d/g"), ten), events.seen)
                self.assertEqual([e for e in events.seen if e.event == "overflow"], [])
                self.assertEqual(t.dispose(), 1)
                ended = events.saw(lambda e: e.event == "ended", 30.0)
                self.assertIsNotNone(ended, events.seen)
                assert ended is not None
                self.assertEqual((ended.path, ended.to, ended.dir), ("", None, False))
                self.assertTrue(ended.reason, ended)
                self.assertEqual(w.reason, ended.reason)
                # The iterator stops after `ended`.
                self.assertTrue(events.finished(5.0), events.seen)
                self.assertIsNone(events.error)
        finally:
            self.a.dispose_thread("py-watch")

    def test_a_closed_watch_gives_back_its_place(self) -> None:
        with self.a.thread("py-watch-2") as t:
            t.create()
            # One after another: each closed watch's place comes back (the
            # server notices a hang-up within half a second).
            for _ in range(9):
                opened(self, t).close()
            # Eight at once is the most; the ninth is refused, saying why.
            held = [opened(self, t) for _ in range(8)]
            try:
                with self.assertRaises(CordonError) as e:
                    t.files.watch()
                self.assertEqual(e.exception.status, 429)
                self.assertIn("close one", e.exception.message)
                held.pop().close()
                held.append(opened(self, t))
            finally:
                for w in held:
                    w.close()
            # Closed means closed: iterating it ends at once.
            w = opened(self, t)
            w.close()
            w.close()
            self.assertEqual(list(w), [])
            # Closing from another thread stops an iteration blocked on it.
            w = opened(self, t)
            events = Events(w)
            w.close()
            self.assertTrue(events.finished(5.0), events.seen)
            self.assertIsNone(events.error)
            opened(self, t).close()

    def test_an_async_watch_streams_and_hangs_up_on_leaving_its_block(self) -> None:
        async def main() -> None:
            async with self.a.athread("py-watch-3") as t:
                await t.create()
                with self.assertRaises(CordonError) as e:
                    async with self.b.athread("py-watch-3").files.watch():
                        pass
                self.assertEqual(e.exception.status, 404)
                got: "asyncio.Queue[WatchEvent]" = asyncio.Queue()
                seen: List[WatchEvent] = []
                async with t.files.watch() as w:

                    async def read() -> None:
                        async for ev in w:
                            got.put_nowait(ev)

                    reading = asyncio.ensure_future(read())
                    for i in range(40):
                        await t.exec(["sh", "-c", f": > ready-{i}"])
                        try:
                            seen.append(await asyncio.wait_for(got.get(), 0.5))
                            break
                        except asyncio.TimeoutError:
                            continue
                    self.assertTrue(any(e.event == "created" and e.path.startswith("ready-") for e in seen), seen)
                # Leaving the block hung up: the reading loop ends.
                await asyncio.wait_for(reading, 5.0)
                # Left: its place is given back (eight more open).
                for _ in range(8):
                    await asyncio.to_thread(lambda: held.append(opened(self, t._t)))

        held: List[Watch] = []
        try:
            asyncio.run(main())
        finally:
            for w in held:
                w.close()


class Events:
    """A watch read on a thread of its own into a queue, so that a test
    waits for an event with a deadline and never hangs."""

    def __init__(self, watch: Watch) -> None:
        self.seen: List[WatchEvent] = []
        self.error: Optional[BaseException] = None
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._end = object()
        self._ended = False

        def read() -> None:
            try:
                for event in watch:
                    self._q.put(event)
            except BaseException as e:  # noqa: BLE001 - kept for the test to see
                self.error = e
            finally:
                self._q.put(self._end)

        threading.Thread(target=read, daemon=True).start()

    def _take(self, until: float) -> Any:
        """The next thing read, or None at the deadline."""
        try:
            item = self._q.get(timeout=max(0.0, until - time.time()))
        except queue.Empty:
            return None
        if item is self._end:
            self._ended = True
            return None
        self.seen.append(item)
        return item

    def saw(self, want: Callable[[WatchEvent], bool], within: float) -> Optional[WatchEvent]:
        """The first event (read already, or within `within` s) `want` takes."""
        for e in self.seen:
            if want(e):
                return e
        until = time.time() + within
        while not self._ended and time.time() < until:
            e = self._take(until)
            if e is not None and want(e):
                return e
        return None

    def finished(self, within: float) -> bool:
        """Whether the iteration ended within `within` s."""
        until = time.time() + within
        while not self._ended and time.time() < until:
            self._take(until)
        return self._ended

    def ready(self, case: unittest.TestCase, t: Thread) -> None:
        """Waits until the watch is in place: the server places it shortly
        after answering, so touch a file until its creation is seen."""
        for i in range(40):
            r = t.exec(["sh", "-c", f": > ready-{i}"])
            case.assertEqual(r.code, 0, r.stderr)
            if self.saw(lambda e, i=i: (e.event, e.path) == ("created", f"ready-{i}"), 0.5):
                return
        case.fail(f"the watch saw nothing: {self.seen} {self.error!r}")


def opened(case: unittest.TestCase, t: Thread, within: float = 5.0) -> Watch:
    """A watch of `t`'s sandbox, retried while the credential's 8 places
    are taken (a closed watch's comes back once the server notices)."""
    deadline = time.time() + within
    while True:
        try:
            return t.files.watch()
        except CordonError as e:
            if e.status != 429 or time.time() >= deadline:
                raise
            time.sleep(0.1)


async def waited(cond: Callable[[], bool], within: float = 5.0) -> bool:
    """Whether `cond()` holds within `within` seconds."""
    deadline = time.time() + within
    while not cond():
        if time.time() >= deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def sleeping(marker: str) -> bool:
    """Whether a process with `marker` among its arguments runs (the tests
    run as root on the server's machine, so its sandboxes' processes show)."""
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    return True
        except OSError:
            continue
    return False


if __name__ == "__main__":
    unittest.main()
