"""Model-call ids: unique, ordered by time (cheap index inserts), not repeated by a forked child."""

from __future__ import annotations

import os
import re
import time

import pytest

from branchpoint.gateway.call_ids import new_call_id


def test_ids_are_32_hex_digits_unique_and_ordered_by_time() -> None:
    ids = [new_call_id() for _ in range(20_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    time.sleep(0.002)
    later = new_call_id()
    assert later > max(ids)  # a later millisecond sorts after every earlier id
    assert abs(int(later[:12], 16) - time.time_ns() // 1_000_000) < 1_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next random bits, to the parent
        os.write(write, new_call_id()[12:].encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert len(child) == 20
    assert child != new_call_id()[12:]  # same generator state after fork would repeat them
