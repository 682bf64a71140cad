"""The LTV ledger: an untrained vector never becomes a reported number."""

from __future__ import annotations

import math
from types import SimpleNamespace

from ltvlib.ltv_record import TrainingRecord
from ltvlib.study.ltv_report import DID_NOT_TRAIN, LTVLedger, LTVShown


def _ltv(trained, task="trec", layer=29, seed=0):
    return SimpleNamespace(task=task, layers=(layer,), positions=(-1,), seed=seed, recipe="fast",
                           training=TrainingRecord(trained=trained, start_val_score=0.1,
                                                   best_val_score=0.1 if not trained else 0.5,
                                                   steps_to_best=0 if not trained else 64))


def test_untrained_vectors_are_nan_and_labelled_and_counted() -> None:
    ledger = LTVLedger()
    assert ledger.value(_ltv(True, layer=15), 0.4, where="t") == 0.4
    assert math.isnan(ledger.value(_ltv(False), 0.02, where="t"))
    assert ledger.cell(_ltv(False), "2.0 %", where="t2") == DID_NOT_TRAIN
    assert ledger.cell(_ltv(None, layer=3), "9.0 %", where="t") == DID_NOT_TRAIN  # unknown is not trained
    assert [v.layers for v in ledger.keep([_ltv(True, layer=1), _ltv(False, layer=2)])] == [(1,)]
    assert len(ledger.untrained()) == 4
    text = ledger.summary().data
    assert "did not train" in text and "trec at layer 29" in text


def test_rows_round_trip_through_the_claims_sheet(tmp_path) -> None:
    from ltvlib.book.scorecard import Claim, ClaimSheet, direction_rule, record_claims

    ledger = LTVLedger()
    ledger.value(_ltv(False), 0.0, where="Figure 1.1")
    claim = Claim(paper_claim=1, key="k", statement="s.", paper="p", ours="o", rule=direction_rule(0.1, (0.05, 0.2)),
                  evidence="ch01-x", evidence_title="Figure 1.1")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\n")
    sheet = record_claims("01_x", [claim], model="m", profile="smoke", seed=0, root=tmp_path, ltvs=ledger)
    back = ClaimSheet.from_json((tmp_path / "results" / "claims" / "01_x.json").read_text())
    assert back.ltvs == sheet.ltvs
    row = LTVShown.from_dict(back.ltvs[0])
    assert row.trained is False and row.shown == DID_NOT_TRAIN and row.where == "Figure 1.1"
