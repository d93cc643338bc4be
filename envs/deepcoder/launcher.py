"""Sandbox launcher: a fresh single-threaded process that isolates itself, then execs the program.

Run as `python -I -S launcher.py <config-json>` by `sandbox.py` (stdlib only, no package imports).
It applies what the host allows, in order: new mount/network/IPC/UTS namespaces, a private size-capped
tmpfs on /tmp (the working directory lives there), empty read-only tmpfs over hidden paths (the
project, the caller's home), resource limits, an unprivileged uid; it reports what it applied as
JSON on `status_fd`, then execs the interpreter. Config keys: see `sandbox.SandboxConfig`.
"""

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REC = 0x4000
MS_PRIVATE = 0x40000

# Run in the sandboxed interpreter when no network namespace (or no unprivileged uid) is available:
# an audit hook (it cannot be removed from Python) that refuses sockets and new processes.
FALLBACK_BOOTSTRAP = """
import sys
_BLOCKED = {BLOCKED!r}
def _sandbox_hook(event, args):
    if event in _BLOCKED:
        raise PermissionError("sandbox: " + event + " is not allowed")
sys.addaudithook(_sandbox_hook)
del _sandbox_hook
import runpy
sys.argv = ["solution.py"]
runpy.run_path("solution.py", run_name="__main__")
"""
NET_EVENTS = ["socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo"]
PROC_EVENTS = ["os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
               "subprocess.Popen", "os.kill", "os.killpg", "ctypes.dlopen"]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount_tmpfs(libc, target: str, size: str, mode: str, flags: int = 0) -> None:
    opts = f"size={size},mode={mode}".encode()
    _check(libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | flags, opts),
           f"mount tmpfs on {target}")


def _covers(parent: str, path: str) -> bool:
    parent = parent.rstrip("/") or "/"
    return path == parent or path.startswith(parent + "/")


def _isolate_filesystem(libc, cfg: dict, status: dict) -> str:
    """Private /tmp with the working dir in it, hidden paths; returns the working dir path."""
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    with open(os.path.join(cfg["staging_dir"], "solution.py"), "rb") as f:
        program = f.read()
    _mount_tmpfs(libc, "/tmp", cfg["tmp_size"], "1777")
    workdir = "/tmp/sandbox"
    os.mkdir(workdir, 0o700)
    with open(os.path.join(workdir, "solution.py"), "wb") as f:
        f.write(program)
    os.chmod(os.path.join(workdir, "solution.py"), 0o644)
    if cfg["uid"] is not None:
        os.chown(workdir, cfg["uid"], cfg["gid"])
    for extra in ("/var/tmp", "/dev/shm"):
        if os.path.isdir(extra):
            try:
                _mount_tmpfs(libc, extra, cfg["tmp_size"], "1777")
            except OSError as e:
                status["errors"].append(str(e))
    interpreter = os.path.realpath(cfg["interpreter"])
    for path in cfg["hidden_paths"]:
        path = os.path.realpath(path)
        if not os.path.isdir(path) or _covers(path, interpreter) or _covers(path, "/tmp"):
            continue
        try:
            _mount_tmpfs(libc, path, "4k", "0555", MS_RDONLY)
            status["hidden"].append(path)
        except OSError as e:
            status["errors"].append(str(e))
    status["private_tmp"] = True
    return workdir


def _set_limits(cfg: dict, status: dict) -> None:
    cpu = int(cfg["cpu_time_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    mem = int(cfg["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = int(cfg["file_size_bytes"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(cfg["max_open_files"]),) * 2)
    nproc = int(cfg["max_processes"])
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    # RLIMIT_NPROC counts the processes of the real uid and is not enforced for root.
    status["nproc_enforced"] = cfg["uid"] is not None and cfg["uid"] != 0


def _drop_privileges(cfg: dict, status: dict) -> None:
    if cfg["uid"] is None:
        return
    os.setgroups([])
    os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
    os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    status["uid"] = os.getuid()


def main() -> None:
    cfg = json.loads(sys.argv[1])
    status = {"netns": False, "mountns": False, "private_tmp": False, "hidden": [], "uid": None,
              "nproc_enforced": False, "audit_hook": [], "errors": []}
    status_fd = cfg["status_fd"]
    try:
        libc = _libc()
        workdir = cfg["staging_dir"]
        if cfg["use_namespaces"]:
            if libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) == 0:
                status["netns"] = status["mountns"] = True
            elif libc.unshare(CLONE_NEWNET) == 0:
                status["netns"] = True
            else:
                status["errors"].append(f"unshare: {os.strerror(ctypes.get_errno())}")
        if status["mountns"]:
            workdir = _isolate_filesystem(libc, cfg, status)
        os.chdir(workdir)
        _set_limits(cfg, status)
        _drop_privileges(cfg, status)
        blocked = [] if status["netns"] else list(NET_EVENTS)
        if not status["nproc_enforced"]:
            blocked += PROC_EVENTS
        status["audit_hook"] = blocked
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        argv = [cfg["interpreter"], "-I", "-X", "utf8"]
        argv += ["-c", FALLBACK_BOOTSTRAP.replace("{BLOCKED!r}", repr(blocked))] if blocked else ["solution.py"]
        if cfg["strict"] and (not status["netns"] or not status["nproc_enforced"]):
            raise RuntimeError("strict sandbox requested but namespaces or an unprivileged uid are unavailable")
    except Exception as e:  # report, then refuse to run the program
        status["fatal"] = f"{type(e).__name__}: {e}"
        os.write(status_fd, json.dumps(status).encode())
        os._exit(121)
    os.write(status_fd, json.dumps(status).encode())
    os.close(status_fd)
    os.execve(cfg["interpreter"], argv, env)


if __name__ == "__main__":
    main()
