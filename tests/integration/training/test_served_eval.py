"""`trawl eval` scores exactly what `/v1/search` serves: same ids, same order, first 100.

A slice of cranfield (the first 300 documents and the queries judged on them) is
indexed and embedded once; every ranker's evaluated list is compared with the API's
pages over the same index.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.settings import Settings
from training.datasets import BeirDataset
from training.evaluate import cached_index, eval_settings, evaluate

pytestmark = pytest.mark.slow

DOCS = 300
QUERIES = 15


def write_slice(source: Path, out: Path, start: int, stop: int) -> Path:
    """Documents ``start:stop`` of a BEIR collection and the first queries judged on them."""
    (out / "qrels").mkdir(parents=True)
    lines = (source / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[start:stop]
    (out / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = {json.loads(line)["_id"] for line in lines}
    qrels = BeirDataset(source).qrels()
    judged = [q for q, docs in qrels.items() if any(d in ids and g > 0 for d, g in docs.items())][:QUERIES]
    rows = [f"{q}\t{d}\t{g}" for q in judged for d, g in qrels[q].items() if d in ids]
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    texts = BeirDataset(source).queries()
    (out / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": texts[q]}) + "\n" for q in judged)
    )
    return out


@pytest.fixture(scope="module")
def slice_dir(eval_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_slice(eval_dir / "cranfield", tmp_path_factory.mktemp("cranslice") / "cranslice", 0, DOCS)


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(data_dir=tmp_path_factory.mktemp("data"))


def api_ranking(client: TestClient, text: str, ranker: str, depth: int = 100) -> list[str]:
    ids: list[str] = []
    for page in (1, 2):
        response = client.get(
            "/v1/search", params={"q": text, "ranker": ranker, "size": 50, "page": page, "spell": "false"}
        )
        assert response.status_code == 200, response.text
        ids += [h["url"].rsplit("/", 1)[-1] for h in response.json()["results"]]
    return ids[:depth]


def assert_same_as_api(
    settings: Settings, slice_dir: Path, ranker: str, result_run: dict[str, list[str]], qids: list[str]
) -> None:
    index_dir, _ = cached_index(BeirDataset(slice_dir), settings)
    texts = BeirDataset(slice_dir).queries()
    with TestClient(create_app(settings, index_dir=index_dir)) as client:
        for qid in qids:
            assert result_run[qid] == api_ranking(client, texts[qid], ranker), (ranker, qid)


@pytest.mark.parametrize("ranker", ["bm25", "bm25-rm3", "dense", "hybrid-rrf", "hybrid", "hybrid-rm3"])
def test_eval_scores_what_the_api_serves(settings: Settings, slice_dir: Path, ranker: str) -> None:
    result = evaluate(slice_dir, ranker, settings=settings)
    assert result.extra["path"] == "served"
    assert len(result.run) == QUERIES
    assert sum(len(v) for v in result.run.values()) > QUERIES * 50
    assert_same_as_api(settings, slice_dir, ranker, result.run, sorted(result.run))


def test_eval_ltr_with_a_model_scores_what_the_api_serves(settings: Settings, slice_dir: Path) -> None:
    from rerank.pipeline import default_model_dir

    model = default_model_dir()
    assert model is not None
    result = evaluate(slice_dir, "ltr", settings=settings, options={"model": str(model)})
    assert_same_as_api(
        eval_settings(settings, ltr_model=model), slice_dir, "ltr", result.run, sorted(result.run)
    )


def test_cross_validated_ltr_serves_each_fold_its_own_model(settings: Settings, slice_dir: Path) -> None:
    result = evaluate(slice_dir, "ltr", settings=settings, folds=3)
    models = [Path(m) for m in result.extra["cv"]["fold_models"]]
    assert len(models) == 3
    from training.ltr_folds import fold_assignment

    qids = sorted(result.run)
    assignment, _ = fold_assignment(BeirDataset(slice_dir), qids, 3)
    for fold, model in enumerate(models):
        in_fold = [q for q in qids if assignment[q] == fold]
        assert_same_as_api(eval_settings(settings, ltr_model=model), slice_dir, "ltr", result.run, in_fold)


def test_a_mix_that_names_the_evaluated_collection_never_trains_on_its_test_fold(
    settings: Settings, slice_dir: Path
) -> None:
    from rerank.ltr import LtrModel
    from training.ltr_folds import fold_assignment

    result = evaluate(slice_dir, "ltr", settings=settings, folds=3, options={"train_with": str(slice_dir)})
    assert result.extra["cv"]["train_with"] == []
    assignment, _ = fold_assignment(BeirDataset(slice_dir), sorted(result.run), 3)
    for fold, model in enumerate(result.extra["cv"]["fold_models"]):
        others = sum(1 for f in assignment.values() if f != fold)
        assert LtrModel.load(Path(model)).card["queries"] <= others


def test_transfer_serves_every_query_a_model_that_never_saw_the_collection(
    settings: Settings, slice_dir: Path, eval_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Leave-one-collection-out: one model, trained on the other collection's queries only."""
    from rerank.ltr import LtrModel
    from training.frames import beir_labels

    other_dir = tmp_path_factory.mktemp("other") / "cranother"
    other = write_slice(eval_dir / "cranfield", other_dir, DOCS, 2 * DOCS)
    result = evaluate(slice_dir, "ltr", settings=settings, train_with=[other], transfer=True)
    cv = result.extra["cv"]
    assert cv["transfer"] is True
    assert len(cv["fold_models"]) == 1
    card = LtrModel.load(Path(cv["fold_models"][0])).card
    other_set = BeirDataset(other)
    taught = sum(1 for graded in beir_labels(other_set, other_set.qrels()).values() if any(graded.values()))
    assert card["queries"] == taught  # the other collection's judged queries, none of this one's
    assert "none of cranslice" in card["trained_on"]
    assert len(result.run) == QUERIES
    model = Path(cv["fold_models"][0])
    served = eval_settings(settings, ltr_model=model)
    assert_same_as_api(served, slice_dir, "ltr", result.run, sorted(result.run))


def test_transfer_needs_another_collection(settings: Settings, slice_dir: Path) -> None:
    from core.errors import ConfigError

    with pytest.raises(ConfigError, match="train-with"):
        evaluate(slice_dir, "ltr", settings=settings, train_with=[slice_dir], transfer=True)
    with pytest.raises(ConfigError, match="fine-tuned per fold"):
        evaluate(slice_dir, "ltr+ce", settings=settings)
    with pytest.raises(ConfigError, match="--ranker ltr"):
        evaluate(slice_dir, "bm25", settings=settings, train_with=[slice_dir], transfer=True)
