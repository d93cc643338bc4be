"""Run untrusted Python in a contained subprocess.

Each run gets: its own session/process group, new network + mount (+IPC, UTS) namespaces where the
kernel allows (loopback down: no network at all), a private size-capped tmpfs `/tmp` whose
`/tmp/sandbox` is the working dir (gone when the run ends), empty read-only mounts over the project
and the caller's home, CPU-time / address-space / file-size / open-file / process-count limits, an
unprivileged uid of its own when we are root (so RLIMIT_NPROC is enforced and files that are not
world-writable are protected), a minimal environment (HOME = the working dir, no secrets), capped
output, and a wall-clock limit after which the process group and every process of its uid are
killed. Where namespaces or uid switching are unavailable it degrades to an audit hook that refuses
sockets and new processes; `Sandbox.capabilities()` says which mechanisms are in force.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import queue
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

LAUNCHER = str(Path(__file__).with_name("launcher.py"))
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


class SandboxError(RuntimeError):
    """The sandbox itself could not run a program (not a verdict on the program)."""


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Limits for one sandboxed run. Times in seconds, sizes in bytes."""

    cpu_time_s: float = 3.0  # RLIMIT_CPU (RAGEN's per-test timeout is 3 s)
    wall_time_s: float = 6.0  # killpg + uid sweep after this
    memory_bytes: int = 1 << 30  # RLIMIT_AS
    max_output_bytes: int = 4 << 20  # stdout and stderr each; more -> killed, "output limit"
    file_size_bytes: int = 16 << 20  # RLIMIT_FSIZE
    tmp_size: str = "64m"  # private /tmp tmpfs size
    max_processes: int = 32  # RLIMIT_NPROC for the run's own uid (threads count too)
    max_open_files: int = 64
    use_namespaces: bool = True
    drop_privileges: bool = True  # switch to uid_base + slot when root
    uid_base: int | None = None  # first uid of this sandbox's slots; None -> a block unique to the process
    hidden_paths: tuple[str, ...] = ()  # extra directories to hide (project root, home always)
    strict: bool = False  # refuse to run when netns or an unprivileged uid are unavailable


@dataclasses.dataclass
class RunResult:
    """Outcome of one run. `status`: ok | runtime_error | timeout | output_limit | sandbox_error."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    isolation: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _can_switch_uid() -> bool:
    return hasattr(os, "setresuid") and os.geteuid() == 0


_PROBE_UID = 999_999_999  # an unprivileged uid with no files: what every slot uid can access


def interpreter_for(uid: int | None) -> str:
    """A Python interpreter that `uid` (None = ourselves) can execute."""
    return os.path.realpath(sys.executable) if uid is None else _unprivileged_interpreter()


@functools.lru_cache(maxsize=1)
def _unprivileged_interpreter() -> str:
    uid = _PROBE_UID
    candidates = [os.path.realpath(sys.executable), os.path.realpath(getattr(sys, "_base_executable", ""))]
    candidates += [os.path.realpath(p) for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)]
    for cand in dict.fromkeys(c for c in candidates if c and os.path.isfile(c)):
        try:
            proc = subprocess.run([cand, "-I", "-c", "import json, math, collections"], user=uid, group=uid,
                                  extra_groups=[], cwd="/", env={}, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if proc.returncode == 0:
            return cand
    raise SandboxError("no Python interpreter is executable by an unprivileged uid; install python3 in /usr/bin "
                       "or set SandboxConfig(drop_privileges=False)")


def _uid_has_processes(uid: int) -> bool:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            return True
                        break
        except OSError:
            continue
    return False


_SWEEP = ("import os, signal\n"
          "for _ in range(10000):\n"
          "    try:\n        os.kill(-1, signal.SIGKILL)\n"
          "    except ProcessLookupError:\n        break\n")


def kill_uid(uid: int, interpreter: str) -> None:
    """Kill every process of `uid` (a run's own uid), including ones that left its process group."""
    for _ in range(20):
        if not _uid_has_processes(uid):
            return
        subprocess.run([interpreter, "-I", "-S", "-c", _SWEEP], user=uid, group=uid, extra_groups=[],
                       cwd="/", env={}, timeout=30, capture_output=True)
        time.sleep(0.01)
    raise SandboxError(f"processes of sandbox uid {uid} survived 20 kill sweeps")


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _feed(pipe: Any, data: bytes) -> None:
    """Write the program's stdin; a program that exits or is killed early just closes the pipe."""
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        try:
            pipe.close()
        except (BrokenPipeError, OSError):
            pass


def _pump(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[bytes, bytes, str | None]:
    """Read stdout/stderr until EOF; stops at the deadline ("timeout") or over `cap` bytes."""
    out, err = bytearray(), bytearray()
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    reason = None
    while sel.get_map():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reason = "timeout"
            break
        for key, _ in sel.select(timeout=min(remaining, 0.5)):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            key.data.extend(chunk)
            if len(key.data) > cap:
                reason = "output_limit"
                break
        if reason:
            break
    sel.close()
    return bytes(out[:cap]), bytes(err[:cap]), reason


_SLOTS_PER_BLOCK = 128
_block_counter = itertools.count()


def _next_uid_block() -> int:
    """Unused uids, distinct per process and per Sandbox (concurrent test runs must not share them)."""
    block = (os.getpid() % 1_000_000) * 16 + next(_block_counter) % 16
    return 1_000_000_000 + block * _SLOTS_PER_BLOCK


class Sandbox:
    """Runs Python programs contained; up to `max_concurrency` at once (one uid slot each)."""

    def __init__(self, config: SandboxConfig | None = None, max_concurrency: int = 4):
        self.config = config or SandboxConfig()
        self.max_concurrency = max_concurrency
        self._slots: queue.Queue[int] = queue.Queue()
        for slot in range(max_concurrency):
            self._slots.put(slot)
        if max_concurrency > _SLOTS_PER_BLOCK:
            raise ValueError(f"max_concurrency must be <= {_SLOTS_PER_BLOCK}, got {max_concurrency}")
        self._switch_uid = self.config.drop_privileges and _can_switch_uid()
        self.uid_base = self.config.uid_base if self.config.uid_base is not None else _next_uid_block()
        self._caps: dict[str, Any] | None = None

    def _uid(self, slot: int) -> int | None:
        return self.uid_base + slot if self._switch_uid else None

    def run(self, code: str, stdin: str = "") -> RunResult:
        """Run `code` as a script with `stdin`; blocks until a slot is free."""
        slot = self._slots.get()
        try:
            return self._run_in_slot(code, stdin, slot)
        finally:
            self._slots.put(slot)

    def capabilities(self) -> dict[str, Any]:
        """Which isolation mechanisms are in force on this host (runs one trivial program once)."""
        if self._caps is None:
            self._caps = self.run("pass").isolation
        return self._caps

    def _run_in_slot(self, code: str, stdin: str, slot: int) -> RunResult:
        cfg = self.config
        uid = self._uid(slot)
        interpreter = interpreter_for(uid)
        hidden = [PROJECT_ROOT, os.path.expanduser("~"), *cfg.hidden_paths]
        staging = tempfile.mkdtemp(prefix="ragen-sbx-")
        status_r, status_w = os.pipe()
        start = time.monotonic()
        try:
            Path(staging, "solution.py").write_text(code, encoding="utf-8")
            if uid is not None:  # fallback mode works in the staging dir itself
                os.chown(staging, uid, uid)
            launch = {"status_fd": status_w, "staging_dir": staging, "interpreter": interpreter,
                      "uid": uid, "gid": uid, "use_namespaces": cfg.use_namespaces,
                      "hidden_paths": hidden, "tmp_size": cfg.tmp_size, "cpu_time_s": max(1, round(cfg.cpu_time_s)),
                      "memory_bytes": cfg.memory_bytes, "file_size_bytes": cfg.file_size_bytes,
                      "max_open_files": cfg.max_open_files, "max_processes": cfg.max_processes,
                      "strict": cfg.strict}
            # stdin through a pipe (not a file: a file could be re-read with seek after the harness read it)
            proc = subprocess.Popen([sys.executable, "-I", "-S", LAUNCHER, json.dumps(launch)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    pass_fds=(status_w,), cwd="/", env={}, start_new_session=True)
            os.close(status_w)
            status_w = -1
            feeder = threading.Thread(target=_feed, args=(proc.stdin, stdin.encode("utf-8")), daemon=True)
            feeder.start()
            out, err, reason = _pump(proc, start + cfg.wall_time_s, cfg.max_output_bytes)
            if reason:
                _killpg(proc.pid)
            try:
                proc.wait(timeout=max(0.0, start + cfg.wall_time_s - time.monotonic()) + 0.1)
            except subprocess.TimeoutExpired:
                reason = reason or "timeout"
                _killpg(proc.pid)
                proc.wait()
            _killpg(proc.pid)  # orphans still in the group
            if uid is not None:
                kill_uid(uid, interpreter)
            feeder.join(timeout=5)
            proc.stdout.close()
            proc.stderr.close()
            isolation = _read_status(status_r)
        finally:
            if status_w >= 0:
                os.close(status_w)
            os.close(status_r)
            shutil.rmtree(staging, ignore_errors=True)
        wall = time.monotonic() - start
        return _verdict(proc.returncode, out, err, reason, wall, isolation)


def _read_status(fd: int) -> dict[str, Any]:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    try:
        return json.loads(data.decode()) if data else {"fatal": "launcher reported nothing"}
    except ValueError:
        return {"fatal": f"unreadable launcher status: {data[:200]!r}"}


def _verdict(rc: int | None, out: bytes, err: bytes, reason: str | None, wall: float,
             isolation: dict[str, Any]) -> RunResult:
    stdout = out.decode("utf-8", errors="replace")
    stderr = err.decode("utf-8", errors="replace")
    if "fatal" in isolation:
        status = "sandbox_error"
        stderr = f"sandbox: {isolation['fatal']}\n{stderr}"
    elif reason:
        status = reason
    elif rc in (-signal.SIGXCPU, -signal.SIGKILL):  # RLIMIT_CPU: SIGXCPU at soft, SIGKILL at hard
        status = "timeout"
    elif rc != 0:
        status = "runtime_error"
    else:
        status = "ok"
    return RunResult(status=status, returncode=rc, stdout=stdout, stderr=stderr, wall_s=wall,
                     isolation=isolation)
