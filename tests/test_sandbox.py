"""Hostile programs in the DeepCoder sandbox: each is contained, scores 0, and ends within seconds."""

import dataclasses
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from envs.deepcoder.builtin import BUILTIN_PROBLEMS
from envs.deepcoder.grading import grade
from envs.deepcoder.sandbox import PROJECT_ROOT, Sandbox, SandboxConfig, _uid_has_processes

pytestmark = pytest.mark.timeout(60)

_SUM_TWO = next(p for p in BUILTIN_PROBLEMS if p.problem_id == "sum_two")
SUM_TWO = dataclasses.replace(_SUM_TWO, tests=_SUM_TWO.tests[:1])  # one test keeps each case fast


@pytest.fixture(scope="module")
def sandbox():
    cfg = SandboxConfig(cpu_time_s=1, wall_time_s=3, max_processes=16, max_output_bytes=1 << 20)
    return Sandbox(cfg, max_concurrency=2)


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def assert_scores_zero(sandbox, code):
    result = grade(sandbox, SUM_TWO, fenced(code))
    assert result.reward == 0.0 and not result.success


def test_capabilities_reported(sandbox):
    caps = sandbox.capabilities()
    assert "fatal" not in caps
    # Either real isolation or the documented fallback is in force, never nothing.
    assert caps["netns"] or "socket.__new__" in caps["audit_hook"]
    assert caps["nproc_enforced"] or "os.fork" in caps["audit_hook"]


def test_correct_program_runs(sandbox):
    r = sandbox.run("import sys\nprint(sum(map(int, sys.stdin.read().split())))", "2 3")
    assert r.ok and r.stdout.strip() == "5"


def test_infinite_loop_is_killed(sandbox):
    t = time.monotonic()
    r = sandbox.run("while True:\n    pass")
    assert r.status == "timeout"
    assert time.monotonic() - t < 5
    assert_scores_zero(sandbox, "while True:\n    pass")


def test_sleeping_program_hits_wall_clock(sandbox):
    t = time.monotonic()
    r = sandbox.run("import time\ntime.sleep(100)")
    assert r.status == "timeout" and time.monotonic() - t < 5


def test_fork_bomb_is_bounded_and_cleaned_up(sandbox):
    caps = sandbox.capabilities()
    # Bounded by construction: refuse to run the bomb unless a process cap is in force.
    assert caps["nproc_enforced"] or "os.fork" in caps["audit_hook"]
    bomb = ("import os\n"
            "while True:\n"
            "    try:\n"
            "        if os.fork() == 0:\n"
            "            os.setsid()\n"  # try to escape the process group
            "    except OSError:\n"
            "        pass\n")
    t = time.monotonic()
    r = sandbox.run(bomb)
    assert r.status != "ok"
    assert time.monotonic() - t < 10
    if caps.get("uid") is not None:
        for slot in range(sandbox.max_concurrency):
            assert not _uid_has_processes(sandbox.uid_base + slot)
    assert sandbox.run("print('alive')").stdout.strip() == "alive"


def test_huge_allocation_fails(sandbox):
    r = sandbox.run("x = bytearray(20 * 2**30)\nprint('allocated')")
    assert r.status == "runtime_error" and "MemoryError" in r.stderr
    r = sandbox.run("chunks = [bytearray(100 * 2**20) for _ in range(205)]\nprint('allocated')")
    assert r.status in ("runtime_error", "timeout") and "allocated" not in r.stdout
    assert_scores_zero(sandbox, "x = bytearray(20 * 2**30)")


def test_writes_outside_workdir_do_not_land():
    sb = Sandbox(SandboxConfig(cpu_time_s=1, wall_time_s=3), max_concurrency=1)
    name = f"sandbox_escape_{uuid.uuid4().hex}.txt"
    targets = [Path(PROJECT_ROOT) / name, Path("/tmp") / name, Path("/var/tmp") / name]
    code = "\n".join(
        [f"for p in {[str(t) for t in targets]!r}:",
         "    try:",
         "        open(p, 'w').write('pwned')",
         "        print('wrote', p)",
         "    except OSError as e:",
         "        print('blocked', p, e.errno)",
         "open('local.txt', 'w').write('ok')",  # its own dir is writable
         "print('local ok')"])
    r = sb.run(code)
    assert r.ok and "local ok" in r.stdout
    for t in targets:
        assert not t.exists(), f"sandboxed program wrote {t}"
    assert f"blocked {targets[0]}" in r.stdout  # the project is read-only (hidden) to it
    assert_scores_zero(sb, code)


def test_no_network_to_localhost(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []
    finished = threading.Event()

    def accept():
        while not finished.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(conn)
                return
            except socket.timeout:
                continue

    th = threading.Thread(target=accept)
    th.start()
    code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "s.sendall(b'leak')\nprint('connected')")
    r = sandbox.run(code)
    time.sleep(0.3)  # let a connection that did get through be accepted
    finished.set()
    th.join()
    server.close()
    assert r.status == "runtime_error" and "connected" not in r.stdout
    assert not accepted


def test_secrets_do_not_leak(sandbox, tmp_path, monkeypatch):
    secret = "s3cr3t-" + uuid.uuid4().hex
    monkeypatch.setenv("RAGEN_TEST_API_KEY", secret)
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    (ssh / "id_rsa").write_text(secret)
    monkeypatch.setenv("HOME", str(tmp_path))
    code = "\n".join([
        "import os, glob",
        "print(dict(os.environ))",
        f"for p in [os.path.expanduser('~/.ssh/id_rsa'), {str(ssh / 'id_rsa')!r}, '/root/.ssh/id_rsa',",
        f"          {os.path.join(PROJECT_ROOT, 'README.md')!r}, '/proc/1/environ']:",
        "    try:",
        "        print(p, open(p, errors='replace').read()[:200])",
        "    except OSError as e:",
        "        print('denied', p, e.errno)",
        f"print(glob.glob({PROJECT_ROOT + '/*'!r}))"])
    r = sandbox.run(code)
    assert secret not in r.stdout and secret not in r.stderr
    assert "RAGEN_TEST_API_KEY" not in r.stdout
    assert "ragen-jax" not in r.stdout  # README content
    assert r.stdout.strip().endswith("[]")  # the project folder looks empty


def test_gigabyte_of_output_is_cut(sandbox):
    t = time.monotonic()
    r = sandbox.run("import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)")
    assert r.status == "output_limit"
    assert len(r.stdout) <= sandbox.config.max_output_bytes
    assert time.monotonic() - t < 5
    assert_scores_zero(sandbox, "print('3' * (1 << 30))")


def test_workdir_is_removed(sandbox):
    before = set(os.listdir("/tmp"))
    r = sandbox.run("open('big.bin', 'wb').write(b'0' * 1000)\nimport os\nprint(os.getcwd())")
    assert r.ok
    assert {n for n in set(os.listdir("/tmp")) - before if n.startswith("ragen-sbx-")} == set()


def test_degraded_mode_blocks_sockets_and_processes():
    """Without namespaces or uid switching, the audit hook still refuses sockets and new processes."""
    sb = Sandbox(SandboxConfig(cpu_time_s=1, wall_time_s=3, use_namespaces=False, drop_privileges=False),
                 max_concurrency=1)
    caps = sb.capabilities()
    assert not caps["netns"] and caps["uid"] is None
    assert {"socket.__new__", "os.fork", "subprocess.Popen"} <= set(caps["audit_hook"])
    assert sb.run("print(sum(map(int, input().split())))", "2 3\n").stdout.strip() == "5"
    r = sb.run("import socket\nsocket.socket()")
    assert r.status == "runtime_error" and "not allowed" in r.stderr
    r = sb.run("import os\nos.fork()")
    assert r.status == "runtime_error" and "not allowed" in r.stderr
    r = sb.run("import os\nprint(sorted(os.environ), os.getcwd() == os.environ['HOME'])")
    assert r.stdout.strip() == "['HOME', 'LANG', 'LC_ALL', 'PATH', 'TMPDIR'] True"


def test_strict_mode_refuses_without_isolation():
    sb = Sandbox(SandboxConfig(use_namespaces=False, drop_privileges=False, strict=True), max_concurrency=1)
    r = sb.run("print('ran')")
    assert r.status == "sandbox_error" and "ran" not in r.stdout


def test_stdin_cannot_be_reread(sandbox):
    r = sandbox.run("import sys\nfirst = sys.stdin.read()\ntry:\n    sys.stdin.seek(0)\n    print('again', sys.stdin.read())\n"
                    "except OSError:\n    print('unseekable', first)", "secret-input")
    assert r.ok and r.stdout.strip() == "unseekable secret-input"
