"""Sandbox uids never collide: each pool, in this process or another, holds its own uid block."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from sandbox.local import UidPool

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uid pools are only used by a root trainer")


def test_two_pools_in_one_process_share_no_uid() -> None:
    first, second = UidPool(8), UidPool(8)
    assert set(first._free).isdisjoint(second._free) and len(first._free) == len(second._free) == 8


@pytest.mark.slow  # starts an interpreter that imports kitchen
def test_a_process_whose_pid_matches_mod_10000_gets_other_uids(monkeypatch: pytest.MonkeyPatch) -> None:
    # pid mod 10000 picked the block: two trainers whose pids matched mod 10000 shared uids.
    code = (
        "import os, time\nfrom sandbox.local import UidPool\n"
        "pool = UidPool(4)\nprint(os.getpid(), pool._free[0], flush=True)\ntime.sleep(30)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert other.stdout is not None
        pid, theirs = map(int, other.stdout.readline().split())
        monkeypatch.setattr(os, "getpid", lambda: pid)
        mine = UidPool(4)
        assert theirs not in mine._free
    finally:
        other.kill()
        other.wait()


def test_a_dropped_pool_gives_its_block_back() -> None:
    pool = UidPool(2)
    uids = set(pool._free)
    del pool
    gc.collect()
    assert set(UidPool(2)._free) == uids
