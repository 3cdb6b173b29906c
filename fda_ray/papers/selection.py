"""Model selection without target test labels (pure): which trial of a study a rule picks, from its rows.

DomainBed (Gulrajani & Lopez-Paz 2021) made model selection part of the protocol; in federated domain adaptation
the target's labels are few, and choosing a hyper-parameter by target test accuracy (as kNN-Per's published
numbers and Auto-weighted FDA Fig. 4 do) overstates every method. The rules, each a column of a trial's per-round rows
(fda_ray.train.evaluation.Evaluator.validation):

    target_val   val_accuracy: the evaluated model on a held-out share of the target's labelled samples
                 (RunConfig.val_share: never trained on; the target's noise drawn from its own stream)
    source_val   source_val_accuracy: the same model on the sources' held-out samples (RunConfig.source_val_share;
                 DomainBed's training-domain validation)
    client_val   val_accuracy of the source-free FedWCA: each client's cluster model on its own validation split,
                 averaged over the clients (FedWCA C.1's 64/16/20 split)
    oracle       accuracy: the target's test set. Reads test labels: an upper bound, labelled as such wherever it
                 is shown, never what a search optimises.

A study's trials are compared at their final round (a trial the scheduler stopped early did not finish and is not
selectable); ties go to the earlier trial (the search's own order), so a selection is a function of the rule's
column alone: corrupting the test labels cannot change a non-oracle selection (tests/test_search.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Rule:
    metric: str  # the rows' column the rule reads
    label: str  # as tables print it
    oracle: bool = False  # reads target test labels


RULES: dict[str, Rule] = {
    "target_val": Rule("val_accuracy", "target validation"),
    "source_val": Rule("source_val_accuracy", "training-domain validation"),
    "client_val": Rule("val_accuracy", "clients' validation splits"),
    "oracle": Rule("accuracy", "test-set oracle (reads test labels)", oracle=True),
}


def final_value(rows: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    """The metric at the last row that reports it (None if no row does)."""
    for r in reversed(rows):
        v = r.get(metric)
        if v is not None:
            return float(v)
    return None


def select(trials: Sequence[tuple[str, Sequence[Mapping[str, Any]], bool]], rule: str) -> str | None:
    """The key of the trial `rule` selects among `trials` = [(key, rows, finished)]: the finished trial with the
    highest final value of the rule's metric; ties to the earlier one. None when no finished trial reports it."""
    metric = RULES[rule].metric
    best, best_value = None, None
    for key, rows, finished in trials:
        if not finished:
            continue
        v = final_value(rows, metric)
        if v is not None and (best_value is None or v > best_value):
            best, best_value = key, v
    return best


def best_so_far(values: Sequence[float | None]) -> list[float | None]:
    """The running maximum of a search's values in trial order (the trajectory figure's line)."""
    out: list[float | None] = []
    best = None
    for v in values:
        if v is not None and (best is None or v > best):
            best = v
        out.append(best)
    return out

