"""Run every analysis on a store: rates, matched contrasts, the ED analysis, agreement,
realisation, simulator sensitivity, the chatbots compared and the time to the first failure,
gathered in one ``Analysis`` that ``branchpoint analyze`` prints and the report renders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from branchpoint.analysis.chatbots.summary import Chatbots, chatbot_summary
from branchpoint.analysis.contrasts.matched import (
    ContrastResult,
    condition_contrast,
    matched_contrasts,
    simulator_sensitivity,
)
from branchpoint.analysis.contrasts.sensitivity import conclusions_by_simulator
from branchpoint.analysis.ed.responses import EDResult, ed_analysis
from branchpoint.analysis.outcomes.rates import error_counts, failure_rates
from branchpoint.analysis.outcomes.reasoning import reasoning_noticed
from branchpoint.analysis.pairing.fork_summaries import fork_tables
from branchpoint.analysis.pairing.realisation import (
    realisation_summary,
    unrecorded_note,
    without_copied_arms,
)
from branchpoint.analysis.raters.agreement import AgreementResult, agreement_report
from branchpoint.analysis.raters.realism import realism_by_simulator, realism_ratings
from branchpoint.analysis.report.judge_choice import check_judge, plotted_judge, several_judges_note
from branchpoint.analysis.stats.threads import one_blas_thread
from branchpoint.analysis.survival.first_failure import with_endings
from branchpoint.analysis.survival.summary import TimeToFailure, time_to_failure
from branchpoint.analysis.tables.judgments import (
    aggregate,
    conversation_criterion_table,
    conversation_table,
    human_label_table,
    judgment_table,
    resolve_runs,
    turn_table,
)
from branchpoint.analysis.tables.versions import (
    keep_versions_apart,
    run_config_conflicts,
    version_conflicts,
)
from branchpoint.core import read
from branchpoint.core.errors import UserError
from branchpoint.core.human_labels import REALISM_RUBRIC
from branchpoint.core.read.units import Tree, copied_conversations, distinct_ratings, own_turns
from branchpoint.judges.reasoning_criterion import REASONING_RUBRIC


@dataclass
class Analysis:
    """Everything computed for one report (all tables are pandas frames; None: nothing to show)."""

    runs: list[str] | None
    n_conversations: int = 0
    n_judgments: int = 0  # applicable judgments, copies once: ratings and error verdicts
    n_errors: int = 0  # of them, error verdicts (a judge that could not answer)
    rates: pd.DataFrame | None = None  # target x condition x criterion x risk area (turn level)
    rates_target_condition: pd.DataFrame | None = None
    rates_condition: pd.DataFrame | None = None
    rates_condition_conversation: pd.DataFrame | None = None
    rates_risk_area: pd.DataFrame | None = None
    errors: pd.DataFrame | None = None
    contrasts: ContrastResult | None = None
    condition: ContrastResult | None = None
    simulators: ContrastResult | None = None
    # per branch point x option x target x condition x simulator: arms realised (n of N)
    realisation: pd.DataFrame | None = None
    # per contrast under each simulator against the reference one, and whether it moves
    simulator_conclusions: pd.DataFrame | None = None
    ed: EDResult | None = None
    # two or more targets: their ranking and the ED model comparison (``absent``: why not)
    chatbots: Chatbots | None = None
    # Kaplan-Meier summaries per target and arm, branch options matched with their baseline
    time_to_failure: TimeToFailure | None = None
    agreement: AgreementResult | None = None
    realism: pd.DataFrame | None = None  # persona realism ratings by simulator (human labels)
    reasoning: pd.DataFrame | None = None
    # replies that carry reasoning text (distinct turns): the reasoning section says why its
    # table is empty when some do
    n_reasoning_replies: int = 0
    examples: pd.DataFrame | None = None
    primary_judge: str | None = None  # the judge whose pass/partial/fail verdicts are plotted
    ed_judge: str | None = None  # the judge whose ED safety scores are plotted
    n_copied_conversations: int = 0  # arms that never forked (copies; not in n_conversations)
    # conversations left out (--exclude-retried): every section built later leaves them out too
    excluded: frozenset[str] = frozenset()
    notes: list[str] = field(default_factory=list)


def _ed_rubrics(cc: pd.DataFrame) -> list[str]:
    """Rubrics rated only on levels other than pass/partial/fail (the ED risk levels)."""
    if cc.empty:
        return []
    g = cc.groupby("rubric_id")[["n_rated", "n_fail", "n_partial", "n_other"]].sum()
    n_pass = g["n_rated"] - g["n_fail"] - g["n_partial"] - g["n_other"]
    return sorted(
        str(r) for r in g.index[(g["n_other"] > 0) & (g["n_fail"] + g["n_partial"] + n_pass == 0)]
    )


def refuse_pooled_configs(store_or_db: Any, runs: Sequence[str] | None) -> None:
    """Runs with different configurations that hold the same cells are never pooled silently."""
    hashes = read.run_config_hashes(store_or_db, runs)
    if len(set(hashes.values())) < 2:
        return
    lines = run_config_conflicts(hashes, read.conversation_rows(store_or_db, runs))
    if lines:
        more = f" (and {len(lines) - 1} more pairs of runs)" if len(lines) > 1 else ""
        raise UserError(lines[0] + more)


@one_blas_thread()  # small products: worker threads only spin (``stats.threads``)
def run_analysis(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    baselines: Mapping[str, str] | None = None,
    reference_condition: str = "none",
    examples: int = 5,
    exclude_retried: bool = False,
    judge: str | None = None,
    fast: bool = True,
) -> Analysis:
    """``exclude_retried``: leave out the conversations ``--retry-failed`` ran again (those with
    a ``conversation_attempts`` row), with every judgment and label on them.

    ``judge``: the judge the plots show (default: the one with the most non-error ratings; see
    ``branchpoint.analysis.report.judge_choice``); every table still lists each judge apart.

    ``fast``: on SQLite, count a store with forks or several versions from its judgment rows'
    codes (``branchpoint.analysis.pairing.fork_summaries.fork_tables``) instead of a judgment table (the same tables; tests
    compare both paths)."""
    runs = resolve_runs(store_or_db, run)
    refuse_pooled_configs(store_or_db, runs)
    a = Analysis(runs=runs)
    all_judgments: pd.DataFrame | None = None  # read once, only when needed
    retried = read.retried_conversations(store_or_db, runs) if exclude_retried else set()
    a.excluded = frozenset(retried)
    if exclude_retried:
        a.notes.append(
            f"{len(retried)} retried conversation(s) left out (--exclude-retried)"
            if retried
            else "no retried conversations to leave out (--exclude-retried)"
        )

    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        if not retried or "conversation_id" not in frame.columns:
            return frame
        return frame[~frame["conversation_id"].isin(retried)]

    def judgments() -> pd.DataFrame:
        nonlocal all_judgments
        if all_judgments is None:
            jt, _ = keep_versions_apart(keep(judgment_table(store_or_db, runs)))
            all_judgments = jt.merge(tree, on="conversation_id", how="left")  # for the forks
        return all_judgments

    def items() -> pd.DataFrame:
        """The judged items: every judgment row with a copied turn's rows once, in the arm
        that produced it (``branchpoint.core.read.units``); contrasts alone read every arm's
        rows, and cut each pair at its fork."""
        return distinct_ratings(judgments())

    tree = keep(read.conversation_tree(store_or_db, runs))
    version_notes = version_conflicts(read.judgment_versions(store_or_db, runs))
    forked = bool(tree["parent_id"].notna().any()) if not tree.empty else False
    a.notes += version_notes
    cc_conv = None  # conversation-level counts, where they differ from the turn-level ones
    coded = None  # the same counts from the rows' codes (SQLite), without a judgment table
    if (version_notes or forked) and fast:
        coded = fork_tables(store_or_db, runs, retried)
    if coded is not None:
        cc = coded.cc
        cc_conv = coded.cc_conversation if forked else None
    elif version_notes or forked:
        # Versions must be split and shared prefixes cut: both need the judgment rows. A turn
        # that arms share is one judged turn (the unit of analysis), counted once.
        jt_all = judgments()
        cc = aggregate(distinct_ratings(jt_all)) if not jt_all.empty else jt_all.iloc[0:0]
        if forked and not jt_all.empty:
            cc_conv = aggregate(distinct_ratings(jt_all, level="conversation"))
    else:
        cc = keep(conversation_criterion_table(store_or_db, runs))
    if forked:
        copies = copied_conversations(tree)
        a.n_copied_conversations = len(copies)
        a.notes.append(
            "Unit of analysis: a judged chatbot turn, counted once however many arms carry it "
            "(arms share their conversation up to the fork). Failure rates and rating counts "
            "count each shared-prefix turn once, in the arm that produced it"
            + (
                f"; {len(copies)} arm(s) never forked and are copies of a sibling, counted once"
                if copies
                else ""
            )
            + ". Conversation-level rates count a forked arm as its own conversation, prefix "
            "included. Matched contrasts compare only the turns after the fork."
        )
    ed_rubrics = _ed_rubrics(cc)
    ppf_rubrics = (
        [r for r in cc["rubric_id"].unique() if r not in ed_rubrics] if not cc.empty else []
    )
    if cc.empty:
        a.notes.append("no judgments in the selected runs: run `branchpoint judge` first")
    elif int(cc["n_rated"].sum()) == 0:
        a.notes.append(
            f"no applicable ratings: every judgment was not applicable or an error ({int(cc['n_error'].sum())} error verdicts)"
        )
    distinct_convs = cc if cc_conv is None else cc_conv
    a.n_conversations = (
        int(distinct_convs["conversation_id"].nunique()) if not distinct_convs.empty else 0
    )
    a.n_errors = int(cc["n_error"].sum()) if not cc.empty else 0
    a.n_judgments = (int(cc["n_rated"].sum()) if not cc.empty else 0) + a.n_errors
    ppf = cc[cc["rubric_id"].isin(ppf_rubrics)] if not cc.empty else cc
    paired: Any = None  # what the matched contrasts pair; the time to failure pairs the same
    check_judge(judge, cc)
    a.primary_judge = plotted_judge(ppf, judge)
    a.ed_judge = plotted_judge(
        cc[cc["rubric_id"].isin(ed_rubrics)] if ed_rubrics else cc.iloc[0:0], judge
    )
    a.notes += several_judges_note(ppf, a.primary_judge)
    if not ppf.empty:
        a.rates = failure_rates(ppf, n_boot=n_boot, seed=seed)
        a.rates_target_condition = failure_rates(
            ppf, by=("target", "condition"), n_boot=n_boot, seed=seed
        )
        a.rates_condition = failure_rates(ppf, by=("condition",), n_boot=n_boot, seed=seed)
        ppf_conv = ppf if cc_conv is None else cc_conv[cc_conv["rubric_id"].isin(ppf_rubrics)]
        a.rates_condition_conversation = failure_rates(
            ppf_conv, by=("condition",), level="conversation", n_boot=n_boot, seed=seed
        )
        a.rates_risk_area = failure_rates(
            ppf, by=("risk_area", "condition"), n_boot=n_boot, seed=seed
        )
        paired = ppf
        if forked and coded is not None:
            paired = coded.paired[coded.paired["rubric_id"].isin(ppf_rubrics)]
        elif forked:
            jt = judgments()
            paired = jt[jt["rubric_id"].isin(ppf_rubrics)]
        realisation = keep(read.realisation_rows(store_or_db, runs))
        unrecorded = unrecorded_note(realisation)
        if unrecorded:
            a.notes.append(unrecorded)
        a.realisation = realisation_summary(
            # an arm that never forked is its parent's conversation stored again: one arm
            without_copied_arms(realisation, tree),
            keep(conversation_table(store_or_db, runs)),
            by=("target", "condition", "simulator"),
        )
        a.contrasts = matched_contrasts(
            paired, baselines, n_boot=n_boot, seed=seed, realisation=realisation
        )
        if ppf["condition"].nunique() > 1:
            a.condition = condition_contrast(paired, reference_condition, n_boot=n_boot, seed=seed)
        a.simulators = simulator_sensitivity(paired, n_boot=n_boot, seed=seed)
        if a.simulators is not None:
            a.simulator_conclusions = conclusions_by_simulator(
                paired, realisation, baselines, n_boot=n_boot, seed=seed
            )
    if not cc.empty:
        a.errors = error_counts(cc, by=("judge", "rubric_id", "target"))
        # turn by turn, from the judgment rows the other sections read (one read of the store)
        jt_ended = with_endings(judgments(), store_or_db, runs)
        a.time_to_failure = time_to_failure(jt_ended, paired, baselines)
        a.chatbots = chatbot_summary(judgments())

    if ed_rubrics:
        ej = judgments()
        a.ed = ed_analysis(
            ej[ej["rubric_id"].isin(ed_rubrics)],
            n_boot=n_boot,
            seed=seed,
            expected=keep(_expected_responses(store_or_db, runs, ej, ed_rubrics)),
            baselines=baselines,
            reference_condition=reference_condition,
            realisation=keep(read.realisation_rows(store_or_db, runs)),
        )
    labels = keep(human_label_table(store_or_db, runs))
    # realism ratings share the labels table but rate the persona, not a rubric criterion
    realism = labels["rubric_id"] == REALISM_RUBRIC if not labels.empty else None
    if realism is not None and realism.any():
        a.realism = realism_by_simulator(keep(realism_ratings(store_or_db, runs)))
        labels = labels[~realism]
    n_judges = cc["judge"].nunique() if not cc.empty else 0
    if not labels.empty or n_judges > 1:
        jt = items()
        if not labels.empty and n_judges <= 1:
            jt = jt[jt["conversation_id"].isin(set(labels["conversation_id"]))]
        a.agreement = agreement_report(jt, labels)
    a.reasoning, a.n_reasoning_replies = _reasoning(store_or_db, runs, retried, items, Tree(tree))
    if examples and a.contrasts is not None and not a.contrasts.contrasts.empty:
        a.examples = keep(_examples(store_or_db, runs, a.contrasts.contrasts, examples))
    return a


def _expected_responses(
    store_or_db: Any, runs: Sequence[str] | None, judgments: pd.DataFrame, ed_rubrics: list[str]
) -> pd.DataFrame:
    """The chatbot replies an ED judge should have rated, with their conversation's columns: those
    of the runs (and scenario files) judged with an ED rubric, less conversations judged with
    another rubric. A judge that wrote no row for one is counted as leaving it unrated."""
    ed = judgments[judgments["rubric_id"].isin(ed_rubrics)]
    other = set(judgments.loc[~judgments["rubric_id"].isin(ed_rubrics), "conversation_id"])
    conv = conversation_table(store_or_db, runs)
    conv = conv[conv["run_id"].isin(set(ed["run_id"])) & ~conv["conversation_id"].isin(other)]
    paths = set(ed["scenario_path"].dropna())
    if paths:
        conv = conv[conv["scenario_path"].isna() | conv["scenario_path"].isin(paths)]
    turns = turn_table(store_or_db, runs)
    if turns.empty or conv.empty:
        return turns.iloc[0:0]
    return turns[["conversation_id", "turn_index"]].merge(conv, on="conversation_id", how="inner")


def _reasoning(
    store_or_db: Any,
    runs: Sequence[str] | None,
    leave_out: set[str] | None,
    judgments: Any,
    tree: Tree,
) -> tuple[pd.DataFrame | None, int]:
    """The reasoning table, from every judged item (per judge and rubric, errors kept apart): a
    reply that several arms carry is one reply. ``judgments``: a callable giving the judged
    items (read only when reasoning is stored); ``tree``: the store's fork tree."""
    turns = turn_table(store_or_db, runs, with_reasoning=True)
    if leave_out:
        turns = turns[~turns["conversation_id"].isin(leave_out)]
    if turns.empty:
        return None, 0
    jt = judgments()
    # a reply that several arms carry is one reply (the unit of analysis)
    own = own_turns(turns, tree)
    text = own["reasoning"].notna() & (own["reasoning"].astype(str).str.strip() != "")
    n_with = int(text.sum())
    if jt.empty:
        return None, n_with
    cols = ["conversation_id", "turn_index", "judge", "rubric_id", "verdict"]
    # The judged reasoning rubric is the reasoning criterion itself, not a reply outcome.
    keep = jt["conversation_id"].isin(set(turns["conversation_id"])) & (
        jt["rubric_id"] != REASONING_RUBRIC
    )
    j = jt.loc[keep.to_numpy(), cols]
    return reasoning_noticed(j, turns), n_with


def _examples(
    store_or_db: Any, runs: Sequence[str] | None, contrasts: pd.DataFrame, n: int
) -> pd.DataFrame:
    """A few failing replies for the criterion of the strongest contrast (the text is shown literally)."""
    top = contrasts.sort_values(["p_scenario_holm", "diff"], ascending=[True, False]).iloc[0]
    return read.failing_examples(
        store_or_db, runs, rubric=top["rubric_id"], criterion=top["criterion_id"], limit=int(n)
    )
