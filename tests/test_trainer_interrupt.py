"""StopRequests: the first SIGINT/SIGTERM is noted for the loop, the second goes to the earlier handler."""

import signal

import pytest

from ragen_jax.trainer.interrupt import StopRequests


class Stopped(Exception):
    pass


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_is_a_request_the_second_stops_at_once(signum):
    def earlier(s, frame):
        raise Stopped(s)

    previous = signal.signal(signum, earlier)
    try:
        with StopRequests() as stops:
            signal.raise_signal(signum)
            assert stops.received == signal.Signals(signum).name
            with pytest.raises(Stopped):
                signal.raise_signal(signum)
        assert signal.getsignal(signum) is earlier
        with StopRequests(enabled=False) as stops:
            with pytest.raises(Stopped):
                signal.raise_signal(signum)
            assert stops.received is None
    finally:
        signal.signal(signum, previous)
