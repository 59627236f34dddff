"""Claims on units of work (vldocir.leases): claim, renew, expiry, take-over, release, waiting.

Time is a :class:`ManualClock` wherever expiry matters, so no test waits on the real clock or
depends on how fast this machine is. Races are run in forked processes started together at a
barrier (fork: no interpreter start-up).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time

import pytest

from helpers import compose_cfg
from vldocir.cache import DONE_FILE, ArtifactCache
from vldocir.config_checks import check_config
from vldocir.errors import ConfigError
from vldocir.leases import Lease, Leases, LeaseWaitError, ManualClock, release_held

DURATION = 60.0


def leases(tmp_path, clock=None, **options) -> Leases:
    """Another job's view of the same lease directory (each call: a new instance, as a new job)."""
    return Leases(tmp_path / "leases", DURATION, clock=clock or ManualClock(), heartbeat=False, **options)


class ScriptedClock(ManualClock):
    """A manual clock whose ``sleep`` also runs what another job does meanwhile (``then``, once per sleep)."""

    def __init__(self, then=lambda clock, n: None):
        super().__init__()
        self.then, self.sleeps = then, 0

    def sleep(self, seconds):
        super().sleep(seconds)
        self.sleeps += 1
        self.then(self, self.sleeps)


def test_a_claim_is_exclusive_until_released(tmp_path):
    clock = ManualClock()
    mine = leases(tmp_path, clock).claim("run/abc")
    assert isinstance(mine, Lease) and mine.epoch == 0
    other = leases(tmp_path, clock)
    assert other.claim("run/abc") is None
    holder = other.holder("run/abc")
    assert holder["owner"]["pid"] == os.getpid() and holder["expires"] == clock.now() + DURATION
    assert other.claim("run/other-unit") is not None, "units are independent"
    mine.release()
    assert not mine.path.exists()
    again = other.claim("run/abc")
    assert again is not None and again.epoch == 0


def test_renewal_keeps_a_claim_past_its_first_expiry(tmp_path):
    clock = ManualClock()
    mine = leases(tmp_path, clock).claim("page-embeddings/k/shard-00001")
    clock.advance(DURATION / 2)
    assert mine.renew()
    assert json.loads(mine.path.read_text())["expires"] == clock.now() + DURATION
    clock.advance(DURATION * 0.9)  # past the first expiry, not the renewed one
    assert leases(tmp_path, clock).claim("page-embeddings/k/shard-00001") is None


def test_a_claim_not_renewed_lapses_and_exactly_one_taker_gets_it(tmp_path):
    clock = ManualClock()
    stalled = leases(tmp_path, clock).claim("run/abc")
    first, second = leases(tmp_path, clock), leases(tmp_path, clock)
    clock.advance(DURATION - 1)
    assert first.claim("run/abc") is None
    clock.advance(1)  # expiry reached
    taken = first.claim("run/abc")
    assert taken is not None and taken.epoch == 1
    assert second.claim("run/abc") is None, "the taker's claim is live: no second taker"
    # The stalled holder learns it lost the claim, and its release leaves the taker's alone.
    assert not stalled.renew() and stalled.lost
    stalled.release()
    assert taken.path.exists() and stalled.path.exists(), "the lapsed epoch stays below the taker's"
    assert second.claim("run/abc") is None
    taken.release()
    assert second.claim("run/abc").epoch == 1


def test_a_holder_gives_up_a_claim_it_could_not_renew_in_time(tmp_path):
    clock = ManualClock()
    mine = leases(tmp_path, clock).claim("run/abc")
    clock.advance(DURATION * 0.8)  # in the last quarter: another job may be about to take it over
    assert not mine.renew() and mine.lost


def test_a_damaged_lease_file_counts_as_lapsed(tmp_path):
    clock = ManualClock()
    mine = leases(tmp_path, clock).claim("run/abc")
    mine.path.write_text("{not json")
    taken = leases(tmp_path, clock).claim("run/abc")
    assert taken is not None and taken.epoch == 1


def test_unit_names_are_checked(tmp_path):
    for bad in ("../escape", "/abs", "a//b", "", "a b"):
        with pytest.raises(ValueError, match="unit of work"):
            leases(tmp_path).claim(bad)


def test_a_waiter_reuses_the_work_of_the_holder_once_it_is_done(tmp_path):
    done = []

    def holder_finishes(clock, n):
        if n == 3:
            done.append(True)
            holding.release()

    clock = ScriptedClock(holder_finishes)
    holding = leases(tmp_path, clock).claim("run/abc")
    assert leases(tmp_path, clock).acquire("run/abc", lambda: bool(done)) is None
    assert clock.sleeps == 3


def test_a_waiter_takes_over_when_the_holder_stops_renewing(tmp_path):
    clock = ScriptedClock()
    leases(tmp_path, clock).claim("run/abc")  # never renewed: its job died
    lease = leases(tmp_path, clock).acquire("run/abc", lambda: False)
    assert lease is not None and lease.epoch == 1
    assert clock.now() >= 1_000_000.0 + DURATION


def test_waiting_for_a_live_holder_is_bounded_with_one_line_naming_it(tmp_path):
    clock = ScriptedClock(lambda clock, n: holding.renew())  # the holder keeps renewing
    holding = leases(tmp_path, clock).claim("run/abc")
    waiter = Leases(tmp_path / "leases", DURATION, wait_s=600, clock=clock, heartbeat=False)
    with pytest.raises(LeaseWaitError) as error:
        waiter.acquire("run/abc", lambda: False)
    message = str(error.value)
    assert "\n" not in message and "run/abc" in message and f"pid {os.getpid()}" in message
    assert "leases.wait_s=600" in message and str(holding.path) in message
    assert clock.now() == pytest.approx(1_000_000.0 + 600)


def test_each_takes_free_units_first_then_waits_for_the_claimed_ones(tmp_path):
    finished: set[int] = set()

    def others(clock, n):
        if n == 1:  # the job holding unit 1 finishes it
            finished.add(1)
            one.release()

    clock = ScriptedClock(others)
    other_job = leases(tmp_path, clock)
    one = other_job.claim("shard-1")
    other_job.claim("shard-3")  # its job dies: the claim lapses and is taken over
    worked = []
    count = leases(tmp_path, clock).each(
        range(5), lambda i: f"shard-{i}", lambda i: i in finished, lambda i: (worked.append(i), finished.add(i))
    )
    assert worked == [0, 2, 4, 3] and count == 4
    assert finished == {0, 1, 2, 3, 4}


def test_released_claims_of_a_failed_job_do_not_hold_up_the_next(tmp_path):
    clock = ManualClock()
    first = leases(tmp_path, clock)
    held = [first.claim("run/a"), first.claim("run/b")]
    release_held()
    assert all(lease.released for lease in held)
    assert leases(tmp_path, clock).claim("run/a").epoch == 0


def test_the_heartbeat_renews_held_claims(tmp_path):
    mine = Leases(tmp_path / "leases", duration_s=2.0).claim("run/abc")
    created = mine.record["renewed"]
    deadline = time.monotonic() + 60  # a bound against hanging, not a timing assumption
    while json.loads(mine.path.read_text())["renewed"] == created:
        assert time.monotonic() < deadline, "the heartbeat never renewed the claim"
        time.sleep(0.05)
    mine.release()
    assert not mine.path.exists()


@pytest.mark.parametrize("kind", ["doc-context", "query-embeddings"])
def test_builds_wait_for_the_job_holding_their_claim(tmp_path, kind):
    """build_in_parts (document context) and build_once (query embeddings, BM25 index) alike."""
    cache_root = tmp_path / "cache"
    final = cache_root / kind / "k1"

    def other_job_publishes(clock, n):
        if n == 2:
            final.mkdir(parents=True)
            (final / DONE_FILE).write_text("{}")
            holding.release()

    clock = ScriptedClock(other_job_publishes)
    shared = lambda: Leases(cache_root / ".leases", DURATION, clock=clock, heartbeat=False)  # noqa: E731
    holding = shared().claim(f"{kind}/k1")
    cache = ArtifactCache(cache_root, leases=shared())
    build = cache.build_in_parts if kind == "doc-context" else cache.build_once
    with build(kind, "k1", {}) as staging:
        assert staging is None, "the other job finished it: this one builds nothing"
    assert not cache.partial_directory(kind, "k1").exists()
    assert sorted(p.name for p in final.parent.iterdir()) == ["k1"], "no staging left behind"


def test_build_once_builds_when_nobody_holds_the_claim(tmp_path):
    cache = ArtifactCache(tmp_path / "cache", leases=Leases(tmp_path / "cache" / ".leases", DURATION, heartbeat=False))
    with cache.build_once("bm25-index", "k2", {"a": 1}) as staging:
        (staging / "x.json").write_text("[1]")
    assert cache.lookup("bm25-index", "k2") == cache.directory("bm25-index", "k2")
    assert not list((tmp_path / "cache" / ".leases").rglob("*.lease")), "the claim is released"


# -- races between processes -------------------------------------------------------------------------
def _race(root, unit, clock_at, barrier, results):
    barrier.wait()
    lease = Leases(root, DURATION, clock=ManualClock(clock_at), heartbeat=False).claim(unit)
    results.put(None if lease is None else lease.epoch)


@pytest.mark.parametrize("lapsed", [False, True], ids=["fresh", "take-over"])
def test_processes_racing_for_one_claim_exactly_one_wins(tmp_path, lapsed):
    context = multiprocessing.get_context("fork")
    root, n = tmp_path / "leases", 6
    for round_ in range(10):
        unit = f"run/race-{round_}"
        start = 1_000_000.0
        if lapsed:  # a claim whose holder died: every racer sees it lapsed and goes for epoch 1
            Leases(root, DURATION, clock=ManualClock(start), heartbeat=False).claim(unit)
            start += 2 * DURATION
        barrier, results = context.Barrier(n), context.Queue()
        racers = [context.Process(target=_race, args=(root, unit, start, barrier, results)) for _ in range(n)]
        for racer in racers:
            racer.start()
        epochs = [results.get(timeout=60) for _ in racers]
        for racer in racers:
            racer.join(timeout=60)
        winners = [e for e in epochs if e is not None]
        assert winners == [1 if lapsed else 0], epochs


def _hold_then_hang(root, ready):
    Leases(root, DURATION, clock=ManualClock(), heartbeat=False).claim("run/abc")
    ready.set()
    time.sleep(600)


def test_a_killed_holders_claim_expires_and_is_taken_over(tmp_path):
    context = multiprocessing.get_context("fork")
    root, ready = tmp_path / "leases", context.Event()
    holder = context.Process(target=_hold_then_hang, args=(root, ready))
    holder.start()
    assert ready.wait(60)
    clock = ManualClock()  # the holder's start time
    as_if_remote = Leases(root, DURATION, clock=clock, heartbeat=False, check_local_pid=False)
    local = Leases(root, DURATION, clock=clock, heartbeat=False)
    assert local.claim("run/abc") is None and as_if_remote.claim("run/abc") is None, "its holder is alive"
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(timeout=60)
    # On another host only expiry counts: the claim stands until then ...
    clock.advance(DURATION - 1)
    assert as_if_remote.claim("run/abc") is None
    # ... while on the holder's own kernel its process is known to be gone.
    taken = local.claim("run/abc")
    assert taken is not None and taken.epoch == 1
    taken.release()
    clock.advance(1)
    assert as_if_remote.claim("run/abc").epoch == 1


def test_lease_settings_are_checked_with_the_config():
    for override, fragment in (
        ("leases.duration_s=0", "leases.duration_s must be a number of seconds above 0"),
        ("leases.wait_s=-1", "leases.wait_s must be a number of seconds at least 0"),
        ("leases.duration_s=soon", "leases.duration_s"),
    ):
        with pytest.raises(ConfigError, match=fragment):
            check_config(compose_cfg(override), [override])
    check_config(compose_cfg("leases.wait_s=0", "leases.duration_s=2"), [])
