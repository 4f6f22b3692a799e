"""``arm_counts`` counts from integer codes: the same table as its group-by definition."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from branchpoint.analysis.pairing.realisation import _arm_counts_grouped, arm_counts


def _cand(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 60
    arms_a = [f"a{i}" for i in range(8)]
    arms_b = [f"b{i}" for i in range(9)]
    conditions = pd.Categorical.from_codes(
        rng.integers(-1, 2, n), categories=["none", "teen_aware"]
    )  # -1: a missing condition, its own group (last)
    return pd.DataFrame(
        {
            "contrast": pd.Categorical.from_codes(np.zeros(n, np.int8), categories=["x: p → q"]),
            "option": rng.choice(["q", "r"], n),
            "condition": conditions,
            "target": pd.Series(rng.choice(["t1", "t0", None], n), dtype=object),
            "replicate": rng.integers(0, 2, n),
            # pairs repeat (one row per criterion), an arm sits in several pairs
            "conversation_id_a": rng.choice(arms_a, n),
            "conversation_id_b": rng.choice(arms_b, n),
            "realised_a": rng.random(n) < 0.6,
            "realised_b": rng.random(n) < 0.5,
            "status": pd.Categorical(rng.choice(["pair", "copy", "never_forked"], n)),
        }
    )


@pytest.mark.parametrize("seed", range(5))
def test_coded_counts_equal_the_group_by_definition(seed: int) -> None:
    cand = _cand(seed)
    keys = ["contrast", "option", "condition", "target", "replicate"]
    got = arm_counts(cand, keys)
    want = _arm_counts_grouped(cand[(cand["status"] != "copy").to_numpy()], keys)
    assert_frame_equal(got, want)
    # an arm in several pairs of a group is one arm; every pair is one assigned pair
    assert (got["n_arms_baseline"] <= got["n_assigned_pairs"]).all()
    assert got["n_assigned_pairs"].sum() < len(cand)


def test_only_copies_give_the_empty_table_of_the_definition() -> None:
    cand = _cand(0).assign(status="copy")
    got = arm_counts(cand, ["contrast", "option"])
    assert got.empty
    assert list(got.columns) == ["contrast", "option", "n_realised_baseline", "n_arms_baseline",
                                 "n_realised_option", "n_arms_option", "n_realised_pairs",
                                 "n_assigned_pairs"]  # fmt: skip
