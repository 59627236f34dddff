"""Claims on units of work, so that concurrent jobs do each unit once (DESIGN.md §5).

A unit of work (an encode shard, a document-context build, a run) is named by a path-like string
(``page-embeddings/<key>/shard-00003``, ``doc-context/<key>``,
``run/<benchmark>/<retriever id>/<setting id>/<key>``). A job claims it with a lease: a small JSON
file ``<cache_dir>/.leases/<unit>.<epoch>.lease`` holding its owner (host, pid, job id), when it was
created and renewed, and when it expires. While a job works, a heartbeat thread renews its leases;
the others take other units, or wait for the claimed one and then reuse what it made. A lease
whose expiry has passed (its holder was preempted, killed with SIGKILL, or lost its node) lapses,
and a waiting job takes the unit over. Nobody recomputes a finished unit: the caller says what
"done" means (a shard's ``shard.json`` exists, a run's entry verifies), checked before claiming
and again once the claim is held.

Primitives, chosen to hold on NFS (and Lustre, GPFS, BeeGFS) as on a local disk:

- Create: the record is written to a file of a unique name, then hard-linked to the lease's name.
  link(2) fails atomically when the name exists, on NFS of every version (``O_CREAT|O_EXCL`` is
  atomic there only from NFSv3, and an empty ``mkdir`` holds no record). A lost server reply (the
  link made, the retry answered EEXIST) is caught by the unique file's link count, which is 2 when
  the link is ours, as open(2) recommends.
- Renew: the holder writes its new record to a unique file and renames it over its own lease
  (rename(2) is atomic on NFS too). No other job ever writes that name.
- Take over: a lapsed lease of epoch ``n`` is never rewritten or deleted by another job; the taker
  creates epoch ``n + 1`` with the same link, so of two takers exactly one wins.
- Release: the holder deletes its own lease (a waiting job goes on at once) unless a later epoch
  exists; the lapsed epochs below stay, a few hundred bytes per take-over, so that no gap under a
  live claim ever lets a second one in.
- Read: every read opens the file anew (NFS close-to-open consistency shows the last closed
  version). A name that NFS's negative-lookup cache still hides shows up as EEXIST on create and
  counts as a live claim until it can be read.

Nothing here uses ``fcntl``/``flock`` (POSIX locks over NFS depend on lockd and outlive, or lose,
a dead client) or file modification times (attribute caching keeps them stale for up to a minute).

Time. Expiry is compared with the reader's clock, so the hosts' clocks must agree to well within
a quarter of ``duration_s`` (NTP does). The heartbeat renews every quarter of the duration; a
holder that could not renew before the last quarter (a stalled process) gives its claim up
(``lost``) rather than renew a lease another job may be taking over. On the holder's own kernel and
pid namespace a claim also lapses as soon as its process is gone (``check_local_pid``), so a local
job killed with SIGKILL does not hold the others up for a whole duration; across hosts only
expiry counts.

Leases avoid repeated work; results never depend on them. Every artifact is content-keyed and
published by one rename, so two jobs that both do a unit (a stalled holder's lost claim, a deleted
``.leases/``) write the same bytes, and the second keeps the first's.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from vldocir.errors import VldocirError

log = logging.getLogger(__name__)

LEASES_DIR = ".leases"
"""Where an artifact cache keeps its leases: ``<cache_dir>/.leases/``."""
DEFAULT_DURATION_S = 300.0
DEFAULT_WAIT_S = 86400.0
FIRST_POLL_S = 0.1
MAX_POLL_S = 5.0
_UNIT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*")

Item = TypeVar("Item")


class LeaseWaitError(VldocirError, TimeoutError):
    """A unit stayed claimed by a live job for longer than this job may wait."""


class Clock:
    """Wall-clock time (leases are compared across hosts) and sleep; tests pass a :class:`ManualClock`."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ManualClock(Clock):
    """A clock that moves only when told to: :meth:`advance`, or :meth:`sleep` (a wait takes no real time)."""

    def __init__(self, start: float = 1_000_000.0):
        self.t = float(start)

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def advance(self, seconds: float) -> None:
        self.t += seconds


def _kernel() -> str | None:
    """This process's kernel boot and pid namespace: pids are comparable only between equal values."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot}/{namespace.st_dev}:{namespace.st_ino}"


def job_id() -> str | None:
    """The scheduler's id of this job, for people reading a lease: SLURM (array tasks too), submitit's local one."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"slurm:{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    if env.get("SLURM_JOB_ID"):
        return f"slurm:{env['SLURM_JOB_ID']}"
    if env.get("SUBMITIT_LOCAL_JOB_ID"):
        return f"submitit-local:{env['SUBMITIT_LOCAL_JOB_ID']}"
    return None


def _owner() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "job": job_id(), "kernel": _kernel()}


def describe_owner(owner: Any) -> str:
    """``host pid 123 (job slurm:77_3)`` for a lease's owner record."""
    if not isinstance(owner, dict):
        return "an unknown job"
    job = f" (job {owner['job']})" if owner.get("job") else ""
    return f"{owner.get('host', '?')} pid {owner.get('pid', '?')}{job}"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this kernel (signal 0: an existence check only)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _pid_gone(pid: Any) -> bool:
    return isinstance(pid, int) and pid > 0 and not pid_alive(pid)


def host_name() -> str:
    """This host's name as a file-name field: odd characters become '_'. Names holding the field
    parse it from the right, since host names may contain the '-' that separates the fields."""
    return re.sub(r"[^A-Za-z0-9.\-]", "_", socket.gethostname()) or "unknown"


def _unique_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{host_name()}-{os.getpid()}-{time.time_ns()}")


def _write_unique(path: Path, record: dict) -> Path:
    """``record`` written and flushed to disk in a new file beside ``path``; returns that file."""
    temporary = _unique_name(path)
    with open(temporary, "x") as handle:
        handle.write(json.dumps(record, sort_keys=True))
        handle.flush()
        os.fsync(handle.fileno())
    return temporary


class _Unreadable(dict):
    """A lease file that exists but holds no record (damaged): it counts as lapsed."""


@dataclass(eq=False)
class Lease:
    """A claim this process holds on ``unit``; release it (or use it as a context manager) when done."""

    leases: Leases
    unit: str
    epoch: int
    record: dict
    lost: bool = False
    released: bool = False

    @property
    def path(self) -> Path:
        return self.leases.path(self.unit, self.epoch)

    def renew(self, now: float | None = None) -> bool:
        """Push the expiry one duration past ``now``; ``False`` (and :attr:`lost`) when the claim is gone.

        A holder renews only before the last quarter of its lease: later, another job may already be
        taking it over, so it gives the claim up instead (the work it does meanwhile is still correct,
        only maybe done twice).
        """
        if self.released or self.lost:
            return False
        leases = self.leases
        now = leases.clock.now() if now is None else now
        current = leases.read(self.unit, self.epoch)
        if now >= self.record["expires"] - leases.duration_s / 4:
            why = "it could not be renewed in time"
        elif leases.read(self.unit, self.epoch + 1) is not None:
            why = "another job took it over"
        elif current is None or current.get("token") != self.record["token"]:
            why = "its lease file was removed or replaced"
        else:
            record = {**self.record, "renewed": now, "expires": now + leases.duration_s}
            os.replace(_write_unique(self.path, record), self.path)
            self.record = record
            return True
        self.lost = True
        _HEARTBEAT.discard(self)
        log.warning(
            "lost the claim on %s (%s): another job may do this work too (with the same result)", self.unit, why
        )
        return False

    def release(self) -> None:
        """End the claim: the lease file is removed, so a waiting job goes on at once."""
        if self.released:
            return
        self.released = True
        _HEARTBEAT.discard(self)
        # A lost claim's file stays: a taker's epoch may follow it, and a gap below that epoch
        # would let a new claim in beside the taker's.
        if not self.lost and self.leases.read(self.unit, self.epoch + 1) is None:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@dataclass
class Leases:
    """The leases of one shared directory (an artifact cache's ``.leases/``).

    Args:
        root: the directory; it must be on a file system every job that shares the work sees.
        duration_s: how long a claim lasts without renewal; a killed holder's claim lapses after it.
        wait_s: the longest a job waits for a unit another live job holds (:class:`LeaseWaitError`).
        clock: wall-clock time and sleep; tests pass a :class:`ManualClock`.
        heartbeat: renew held leases from a background thread (every quarter of ``duration_s``).
            Without it the holder calls :meth:`Lease.renew` itself.
        check_local_pid: on the holder's own kernel and pid namespace, a claim lapses as soon as its
            process is gone (not only when it expires).
    """

    root: Path
    duration_s: float = DEFAULT_DURATION_S
    wait_s: float = DEFAULT_WAIT_S
    clock: Clock = field(default_factory=Clock)
    heartbeat: bool = True
    check_local_pid: bool = True

    def __post_init__(self):
        self.root = Path(self.root)
        if not self.duration_s > 0:
            raise ValueError(f"leases.duration_s must be positive, got {self.duration_s!r}")
        if not self.wait_s >= 0:
            raise ValueError(f"leases.wait_s must be at least 0, got {self.wait_s!r}")

    def path(self, unit: str, epoch: int) -> Path:
        if not _UNIT.fullmatch(unit):
            raise ValueError(
                f"a unit of work is named by '/'-separated parts of letters, digits, '.', '_', '-': {unit!r}"
            )
        return self.root / f"{unit}.{epoch}.lease"

    def read(self, unit: str, epoch: int) -> dict | None:
        """The record of ``unit``'s lease of ``epoch``; ``None`` when there is none."""
        try:
            text = self.path(unit, epoch).read_text()
        except FileNotFoundError:
            return None
        except OSError:
            return _Unreadable()
        try:
            record = json.loads(text)
        except ValueError:
            return _Unreadable()
        return record if isinstance(record, dict) else _Unreadable()

    def lapsed(self, record: dict, now: float | None = None) -> bool:
        """Whether a lease record no longer claims its unit: expired, damaged, or (``check_local_pid``)
        held by a process of this kernel and pid namespace that is gone."""
        try:
            expires = float(record["expires"])
        except (KeyError, TypeError, ValueError):
            return True
        if (self.clock.now() if now is None else now) >= expires:
            return True
        owner = record.get("owner")
        return (
            self.check_local_pid
            and isinstance(owner, dict)
            and owner.get("kernel") is not None
            and owner.get("kernel") == _KERNEL
            and _pid_gone(owner.get("pid"))
        )

    def _scan(self, unit: str) -> tuple[int, dict | None]:
        """The first epoch of ``unit`` that is free (``None``) or holds a live claim (its record)."""
        epoch, now = 0, self.clock.now()
        while True:
            record = self.read(unit, epoch)
            if record is None or not self.lapsed(record, now):
                return epoch, record
            epoch += 1

    def holder(self, unit: str) -> dict | None:
        """The record of the live claim on ``unit``, if any."""
        return self._scan(unit)[1]

    def claim(self, unit: str) -> Lease | None:
        """Claim ``unit`` now if no live claim holds it (taking over a lapsed one); ``None`` otherwise."""
        epoch, live = self._scan(unit)
        if live is not None:
            return None
        now = self.clock.now()
        record = {
            "unit": unit,
            "epoch": epoch,
            "token": f"{os.getpid()}-{time.time_ns()}-{id(self)}",
            "owner": _owner(),
            "created": now,
            "renewed": now,
            "expires": now + self.duration_s,
            "duration_s": self.duration_s,
        }
        path = self.path(unit, epoch)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = _write_unique(path, record)
        try:
            os.link(temporary, path)
            ours = True
        except FileExistsError:  # another job created it since the scan (or NFS hid it from the scan)
            ours = os.stat(temporary).st_nlink == 2  # a lost reply: the link is ours after all
        except OSError as error:
            if error.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise VldocirError(
                    f"{path.parent}: this file system makes no hard links, which the claims between "
                    f"concurrent jobs need ({error.strerror}); put paths.cache_dir on another one"
                ) from error
            raise
        finally:
            temporary.unlink(missing_ok=True)
        if not ours:
            return None
        lease = Lease(self, unit, epoch, record)
        _HEARTBEAT.add(lease)
        return lease

    def acquire(self, unit: str, done: Callable[[], bool]) -> Lease | None:
        """This job's claim on ``unit``, or ``None`` once ``done()`` (the unit was finished, here or elsewhere).

        While another live job holds the unit, waits for it (polling with backoff up to ``wait_s``,
        then :class:`LeaseWaitError`); takes the unit over when that claim lapses. ``done`` is
        checked first and again once the claim is held (a holder releases only after finishing).
        """
        if done():
            return None
        deadline = self.clock.now() + self.wait_s
        delay, announced = FIRST_POLL_S, False
        while True:
            lease = self.claim(unit)
            if lease is not None:
                if done():
                    lease.release()
                    return None
                _log_take_over(lease)
                return lease
            now = self.clock.now()
            if now >= deadline:
                raise LeaseWaitError(self._waited(unit))
            if not announced:
                log.info(
                    "%s is claimed by %s; waiting for it", unit, describe_owner((self.holder(unit) or {}).get("owner"))
                )
                announced = True
            self.clock.sleep(min(delay, deadline - now))
            delay = min(delay * 2, self.max_poll_s)

    @property
    def max_poll_s(self) -> float:
        return min(MAX_POLL_S, self.duration_s / 4)

    def _waited(self, unit: str) -> str:
        epoch, record = self._scan(unit)
        record = record or {}
        renewed = record.get("renewed")
        ago = f", renewed {self.clock.now() - renewed:.0f} s ago" if isinstance(renewed, (int, float)) else ""
        return (
            f"{unit}: waited leases.wait_s={self.wait_s:g} s for {describe_owner(record.get('owner'))}, "
            f"which claims it ({self.path(unit, epoch)}{ago}) and still renews its claim; "
            "check that job, or raise leases.wait_s"
        )

    @contextmanager
    def single_flight(self, unit: str, done: Callable[[], bool]) -> Iterator[Lease | None]:
        """:meth:`acquire` as a context manager: the claim (released on exit), or ``None`` when done."""
        lease = self.acquire(unit, done)
        if lease is None:
            yield None
            return
        with lease:
            yield lease

    def each(
        self,
        items: Iterable[Item],
        unit: Callable[[Item], str],
        done: Callable[[Item], bool],
        work: Callable[[Item], None],
    ) -> int:
        """``work(item)`` for every item not ``done``, each under its claim; returns how many this job did.

        Free items go first, in order; those other jobs hold are then polled in turn (with backoff
        while none moves, up to ``wait_s``): taken over when their claim lapses, dropped once done.
        ``done(item)`` is called on every poll, so it must be cheap (a file's existence).
        """
        waiting, count = [], 0
        for item in items:
            if done(item):
                continue
            lease = self.claim(unit(item))
            if lease is None:
                waiting.append(item)
                continue
            with lease:
                if not done(item):  # finished by another job between the check and the claim
                    _log_take_over(lease)
                    work(item)
                    count += 1
        delay, deadline = FIRST_POLL_S, self.clock.now() + self.wait_s
        while waiting:
            moved = False
            for item in list(waiting):
                lease = None if done(item) else self.claim(unit(item))
                if lease is None and not done(item):
                    continue
                waiting.remove(item)
                moved = True
                if lease is not None:
                    with lease:
                        if not done(item):
                            _log_take_over(lease)
                            work(item)
                            count += 1
            now = self.clock.now()
            if moved:
                delay, deadline = FIRST_POLL_S, now + self.wait_s
            elif waiting:
                if now >= deadline:
                    raise LeaseWaitError(self._waited(unit(waiting[0])))
                self.clock.sleep(min(delay, deadline - now))
                delay = min(delay * 2, self.max_poll_s)
        return count


def _log_take_over(lease: Lease) -> None:
    if lease.epoch:  # a claim below this one lapsed with its work undone
        log.info("taking over %s: the job that claimed it stopped renewing its claim", lease.unit)


def release_held() -> None:
    """Release every claim this process still holds (a job that failed ends its claims with it)."""
    for lease in _HEARTBEAT.held():
        lease.release()


class _Heartbeat:
    """The one thread of a process that renews its held leases (those of ``heartbeat=True`` leases)."""

    def __init__(self):
        self._reset()

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self.leases: dict[Lease, None] = {}  # insertion order: renewed in the order claimed
        self.thread: threading.Thread | None = None
        self.wake = threading.Event()

    def held(self) -> list[Lease]:
        with self.lock:
            return list(self.leases)

    def add(self, lease: Lease) -> None:
        with self.lock:
            self.leases[lease] = None
            if lease.leases.heartbeat and self.thread is None:
                self.thread = threading.Thread(target=self._run, name="vldocir-leases", daemon=True)
                self.thread.start()
        self.wake.set()  # a shorter duration than the thread is sleeping for

    def discard(self, lease: Lease) -> None:
        with self.lock:
            self.leases.pop(lease, None)

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            with self.lock:
                beating = [lease for lease in self.leases if lease.leases.heartbeat]
                if not beating:
                    self.thread = None
                    return
            due = last + min(lease.leases.duration_s for lease in beating) / 4
            self.wake.clear()
            if time.monotonic() < due:
                self.wake.wait(due - time.monotonic())
                continue  # woken by a new lease (maybe of a shorter duration), or time is up: look again
            last = time.monotonic()
            # One time per clock for the whole pass: the leases of a process renewed in one pass
            # expire together, whatever moment the process dies at.
            nows: dict[int, float] = {}
            for lease in beating:
                if not lease.released:
                    try:
                        lease.renew(nows.setdefault(id(lease.leases.clock), lease.leases.clock.now()))
                    except OSError as error:  # a file system hiccup: the next pass tries again
                        log.warning("could not renew the claim on %s: %s", lease.unit, error)


_KERNEL = _kernel()
_HEARTBEAT = _Heartbeat()
os.register_at_fork(after_in_child=_HEARTBEAT._reset)  # a forked child holds none of its parent's claims
