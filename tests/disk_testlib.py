"""A full disk for tests: a real OS write error (EFBIG) without mount privileges."""

import contextlib
import resource
import signal


@contextlib.contextmanager
def full_disk():
    """Every write that grows a file fails with EFBIG (RLIMIT_FSIZE 0), as on a full disk; SIGXFSZ is ignored so
    the write returns the error instead of killing the process. The limit is the process's: keep the block short
    and print nothing in it (a print to pytest's capture file fails too)."""
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
