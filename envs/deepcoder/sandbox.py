"""Run untrusted Python in a contained subprocess.

Each run holds a process-wide slot (`slots.py`: a bound on runs alive at once across every env and
thread, and a uid no other live run holds) and gets: its own session/process group; new PID, mount,
network (loopback down: no network at all), IPC and UTS namespaces where the kernel allows; a root
of its own that shows only the interpreter's paths read-only (`interpreter.py`), its own /proc (only
its own processes) and a private size-capped tmpfs `/tmp` whose `/tmp/sandbox` is the working dir;
CPU-time / address-space / file-size / open-file / process-count limits; the slot's unprivileged uid
when we are root (so RLIMIT_NPROC is enforced); a minimal environment (HOME = the working dir, no
secrets); capped output; and a wall-clock limit after which everything it started is killed (the
PID namespace dies with its init; without one, every process of its uid is swept). Where namespaces
or uid switching are unavailable it degrades to an audit hook that refuses sockets and new
processes; `Sandbox.capabilities()` says which mechanisms are in force.
"""

from __future__ import annotations

import dataclasses
import json
import os
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

from envs.deepcoder.interpreter import SandboxError, interpreter_for, interpreter_view
from envs.deepcoder.slots import POOL, uid_of


LAUNCHER = str(Path(__file__).with_name("launcher.py"))
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
_SANDBOX_OWNED = ("/proc", "/dev", "/tmp/sandbox")  # made by the launcher, never host paths (with / and /tmp)


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Limits for one sandboxed run. Times in seconds, sizes in bytes."""

    cpu_time_s: float = 3.0  # RLIMIT_CPU (RAGEN's per-test timeout is 3 s)
    wall_time_s: float = 6.0  # then the run and everything it started are killed
    memory_bytes: int = 1 << 30  # RLIMIT_AS
    max_output_bytes: int = 4 << 20  # stdout and stderr each; more -> killed, "output limit"
    file_size_bytes: int = 16 << 20  # RLIMIT_FSIZE
    tmp_size: str = "64m"  # private /tmp and /dev/shm tmpfs size, each
    max_processes: int = 32  # RLIMIT_NPROC for the run's own uid (threads count too)
    max_open_files: int = 64
    use_namespaces: bool = True
    drop_privileges: bool = True  # run as the slot's own uid when root
    extra_paths: tuple[str, ...] = ()  # host paths shown read-only besides the interpreter's
    strict: bool = False  # refuse to run without PID/mount/network namespaces and an unprivileged uid

    def __post_init__(self) -> None:
        for name in ("cpu_time_s", "wall_time_s", "memory_bytes", "max_output_bytes", "file_size_bytes",
                     "max_processes", "max_open_files"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"SandboxConfig.{name} must be a positive number, got {value!r} (a limit of 0 "
                                 "fails every run, a negative one means no limit at all)")
        for path in self.extra_paths:
            norm = os.path.normpath(path) if isinstance(path, str) else ""
            if not os.path.isabs(norm):
                raise ValueError(f"SandboxConfig.extra_paths: {path!r} is not an absolute path; list host "
                                 "paths as absolute paths")
            if norm in ("/", "/tmp") or any(norm == d or norm.startswith(d + "/") for d in _SANDBOX_OWNED):
                raise ValueError(f"SandboxConfig.extra_paths: {path!r} is (or is inside) a folder the sandbox makes "
                                 f"itself ({', '.join(('/', '/tmp') + _SANDBOX_OWNED)}); list the host folder "
                                 "holding the files instead, or move them (folders under /tmp are fine)")


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


class Sandbox:
    """Runs Python programs contained: up to `max_concurrency` of its own at once (the tests of one
    episode), and together with every other Sandbox of the process at most `max_concurrent_sandboxes()`."""

    def __init__(self, config: SandboxConfig | None = None, max_concurrency: int = 4):
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency (runs at once for one Sandbox) must be an int >= 1, "
                             f"got {max_concurrency!r}")
        self.config = config or SandboxConfig()
        self.max_concurrency = max_concurrency
        self._own_runs = threading.BoundedSemaphore(max_concurrency)
        self._switch_uid = self.config.drop_privileges and _can_switch_uid()
        self._caps: dict[str, Any] | None = None

    def run(self, code: str, stdin: str = "") -> RunResult:
        """Run `code` as a script with `stdin`; waits for one of this Sandbox's runs and a process-wide slot."""
        with self._own_runs, POOL.slot() as slot:
            return self._run_in_slot(code, stdin, uid_of(slot) if self._switch_uid else None)

    def capabilities(self) -> dict[str, Any]:
        """Which isolation mechanisms are in force on this host (runs one trivial program once)."""
        if self._caps is None:
            self._caps = self.run("pass").isolation
        return self._caps

    def _launch_config(self, staging: str, status_fd: int, uid: int | None, interpreter: str) -> dict[str, Any]:
        cfg = self.config
        view = interpreter_view(interpreter, tuple(cfg.extra_paths)) if cfg.use_namespaces else ()
        return {"status_fd": status_fd, "parent_pid": os.getpid(), "staging_dir": staging,
                "interpreter": interpreter, "view": list(view), "uid": uid, "gid": uid,
                "use_namespaces": cfg.use_namespaces, "tmp_size": cfg.tmp_size,
                "cpu_time_s": max(1, round(cfg.cpu_time_s)), "memory_bytes": cfg.memory_bytes,
                "file_size_bytes": cfg.file_size_bytes, "max_open_files": cfg.max_open_files,
                "max_processes": cfg.max_processes, "strict": cfg.strict}

    def _run_in_slot(self, code: str, stdin: str, uid: int | None) -> RunResult:
        cfg = self.config
        interpreter = interpreter_for(uid)
        staging = tempfile.mkdtemp(prefix="ragen-sbx-")
        status_r, status_w = os.pipe()
        start = time.monotonic()
        proc, isolation, killed = None, None, True
        try:
            Path(staging, "solution.py").write_text(code, encoding="utf-8")
            if uid is not None:  # fallback mode works in the staging dir itself
                os.chown(staging, uid, uid)
            launch = self._launch_config(staging, status_w, uid, interpreter)
            # stdin through a pipe (not a file: a file could be re-read with seek after the harness read it)
            proc = subprocess.Popen([sys.executable, "-I", "-S", LAUNCHER, json.dumps(launch)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    pass_fds=(status_w,), cwd="/", env={}, start_new_session=True)
            os.close(status_w)
            status_w = -1
            out, err, reason, killed = _collect(proc, stdin.encode("utf-8"), start + cfg.wall_time_s,
                                                cfg.max_output_bytes)
            isolation = _read_status(status_r)
        finally:
            if proc is not None:
                _leave_nothing_running(proc, uid, interpreter, killed or not (isolation or {}).get("pidns"))
            if status_w >= 0:
                os.close(status_w)
            os.close(status_r)
            shutil.rmtree(staging, ignore_errors=True)
        wall = time.monotonic() - start
        exit_record = isolation.pop("exit", None)  # the namespace's init saw the program end
        rc = proc.returncode if exit_record is None else exit_record.get("code", -exit_record.get("signal", 0))
        return _verdict(rc, out, err, reason, wall, isolation)


def _collect(proc: subprocess.Popen, stdin: bytes, deadline: float, cap: int) -> tuple[bytes, bytes, str | None, bool]:
    """Feed stdin, read the output until the launcher is gone: (stdout, stderr, reason, killed by us)."""
    feeder = threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)
    feeder.start()
    out, err, reason = _pump(proc, deadline, cap)
    killed = reason is not None
    if killed:
        _killpg(proc.pid)
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()) + 0.1)
    except subprocess.TimeoutExpired:
        reason, killed = reason or "timeout", True
        _killpg(proc.pid)
        proc.wait()
    feeder.join(timeout=5)
    proc.stdout.close()
    proc.stderr.close()
    return out, err, reason, killed


def _leave_nothing_running(proc: subprocess.Popen, uid: int | None, interpreter: str, sweep: bool) -> None:
    """After a run: its launcher reaped and, where it may not have ended by itself, every process of it killed.

    A launcher that exited by itself in a PID namespace took every process of the run with it; one we
    killed (or one without a PID namespace) may leave processes dying or escaped from its group.
    """
    if proc.returncode is None:  # an exception on the way
        _killpg(proc.pid)
        proc.wait()
    if sweep:
        _killpg(proc.pid)
        if uid is not None:
            kill_uid(uid, interpreter)


def _read_status(fd: int) -> dict[str, Any]:
    """The launcher's records (one JSON object a line: what it applied, then how the program exited), merged."""
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    status: dict[str, Any] = {}
    try:
        for line in data.decode().splitlines():
            status.update(json.loads(line))
    except ValueError:
        return {"fatal": f"unreadable launcher status: {data[:200]!r}"}
    return status or {"fatal": "launcher reported nothing"}


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
