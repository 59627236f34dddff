"""Child processes that end with their parent, and SIGTERM as an interrupt.

A process this package starts (Tesseract, a render worker) is asked to be killed by the kernel
when the thread that started it ends (:func:`end_with_parent`: Linux's ``PR_SET_PDEATHSIG``, set
between ``fork`` and ``exec``), so a parent killed by ``SIGKILL`` leaves no orphan working on for
nobody. A build turns ``SIGTERM`` into :class:`Terminated` in its main thread
(:func:`sigterm_as_interrupt`): the ``finally`` blocks that kill the children and remove the
staging directory run as for Ctrl-C, and the app exits with status 143 (128 + SIGTERM).

What ``SIGKILL`` leaves on disk, a staging directory, a watcher removes
(:func:`remove_staging_when_gone`): a small process reading a pipe that only the parent holds
open; when the parent ends, however it ends, the pipe closes and the watcher deletes the staging
directories named after the parent's pid (a finished build has renamed its own away).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
SIGTERM_STATUS = 128 + signal.SIGTERM


def _libc_prctl() -> Callable | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()  # resolved here, in the parent: the child runs no lookup between fork and exec
_SIGKILL = int(signal.SIGKILL)


def end_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that has the kernel SIGKILL the child when the
    thread starting it ends (the parent killed by any signal included); ``None`` off Linux.

    The function runs in the child between ``fork`` and ``exec`` and does only a ``prctl`` call
    and a pid check (a parent that died before the call would never signal it)."""
    if _PRCTL is None:
        return None
    parent, prctl = os.getpid(), _PRCTL

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, _SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread. A :class:`KeyboardInterrupt`, so that no ``except
    Exception`` takes it for a failure of one document or page and every ``finally`` runs as
    for Ctrl-C; the app exits with :attr:`exit_status`."""

    exit_status = SIGTERM_STATUS

    def __str__(self) -> str:
        return "terminated (SIGTERM)"


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread (once: a second
    SIGTERM during the clean-up is ignored, a SIGKILL is not). Off the main thread: no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def staging_glob(final: Path, pid: int) -> str:
    """The names of the staging directories process ``pid`` makes for ``final``
    (:func:`vldocir.cache.staging_path`)."""
    from vldocir.leases import host_name

    return f".{final.name}.staging-{host_name()}-{pid}-*"


def remove_staging_when_gone(final: str | Path) -> subprocess.Popen | None:
    """Start the watcher (module docstring) of this process's staging directories beside ``final``;
    it exits by itself once this process has ended. ``None`` off POSIX."""
    if os.name != "posix":
        return None
    final = Path(final).absolute()
    read_end, write_end = os.pipe()  # the write end stays here (not inherited: close_fds), so EOF = we are gone
    try:
        return subprocess.Popen(
            [sys.executable, "-c", _WATCHER, str(final.parent), staging_glob(final, os.getpid())],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C or a killed process group leaves it to do its work
        )
    finally:
        os.close(read_end)
        _WRITE_ENDS.append(write_end)  # kept open for this process's life


_WRITE_ENDS: list[int] = []
_WATCHER = """
import glob, os, shutil, sys
sys.stdin.buffer.read()  # returns when the parent has ended
for path in glob.glob(os.path.join(sys.argv[1], sys.argv[2])):
    shutil.rmtree(path, ignore_errors=True)
"""
