"""The LightGBM scorer and the serving ``ltr`` stage.

A model is a directory: ``model.txt`` (LightGBM's text format, no pickle), a bagged model's
other members ``model-1.txt`` … and ``card.json`` (training data, features, parameters,
cross-validated metrics, date, code version). Loading checks the card's features against
:data:`rerank.features.SCHEMA` and scores a model on its own columns, by name: a model
reading columns in another order would rank nonsense without any error. A model trained
before a feature was added ranks exactly as it did; one naming a feature this code does not
compute is refused. Serving scores with compiled trees (:mod:`rerank.compiled_trees`).

The stage fetches the candidates' stored documents, computes features with the function
training used, scores, and sorts. With ``explain`` it returns each hit's feature values and
their contributions (LightGBM ``pred_contrib``: SHAP values that sum, with the bias, to the
score). It can log the exact rows it scored (:mod:`rerank.feature_log`), so training sets
can be built from live traffic without recomputing anything differently.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

import lightgbm as lgb
import numpy as np
from numpy.typing import NDArray

from core.atomic import staging_dir
from core.errors import ModelLoadError
from core.types import DocId, Query, ScoredDoc
from rerank.compiled_trees import CompiledTrees, build_artefact, default_cache_dir, open_compiled
from rerank.feature_log import FeatureLogger
from rerank.features import INDEX, SCHEMA, FeatureContext, compute_features, reads_doc_vectors
from rerank.model_card import CARD_FILE, CardFormat, read_card, write_card
from retrieval.query.hybrid import Candidate
from retrieval.query.ranking import RankContext, RankOutput

logger = logging.getLogger(__name__)

MODEL_FILE = "model.txt"
COMPILED_DIR = "compiled"
"""Where ``trawl train ltr`` writes the compiled trees inside a model directory."""
CARD = CardFormat("trawl-ltr", 1)
Scorer = Literal["compiled", "lightgbm"]


def member_file(index: int) -> str:
    """``model.txt`` for the first member (a one-booster model's only file), then ``model-1.txt`` …"""
    return MODEL_FILE if index == 0 else f"model-{index}.txt"


def predict_mean(
    boosters: Sequence[lgb.Booster], values: NDArray[np.float64], **options: Any
) -> NDArray[np.float64]:
    """The members' mean prediction (scores, or ``pred_contrib`` SHAP values, which are
    linear in the score, so their mean explains the mean score exactly)."""
    total = np.asarray(boosters[0].predict(values, num_threads=1, **options), dtype=np.float64)
    for booster in boosters[1:]:
        total = total + np.asarray(booster.predict(values, num_threads=1, **options), dtype=np.float64)
    return total / len(boosters) if len(boosters) > 1 else total


@dataclass(frozen=True, slots=True)
class LtrModel:
    """A trained LightGBM ranker plus its card.

    ``boosters`` are the members of a seed-bagged model, trained alike but for LightGBM's
    row and feature sampling seed, and scored by their mean: with a few hundred training
    queries one booster's ranking moves with its seed by about as much as a model change
    is worth, and the mean holds still (measured in ``training.train_ltr.LtrParams.members``).
    A model of one booster is the same as before bagging."""

    boosters: tuple[lgb.Booster, ...]
    features: tuple[str, ...]
    card: Mapping[str, Any] = field(default_factory=dict)
    compiled: CompiledTrees | None = field(default=None, repr=False, compare=False)
    """The same trees compiled (:mod:`rerank.compiled_trees`), checked against LightGBM when
    loaded; None: scores come from LightGBM. Explanations always do (SHAP values)."""
    columns: NDArray[np.intp] | None = field(init=False, repr=False, compare=False)
    """Where the model's features are in a :data:`SCHEMA` row; None when it reads every column.
    Worked out once here: every ranked request selects by it."""

    def __post_init__(self) -> None:
        columns = (
            None if self.features == SCHEMA else np.asarray([INDEX[n] for n in self.features], dtype=np.intp)
        )
        object.__setattr__(self, "columns", columns)

    def model_values(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """The model's own columns of full :data:`SCHEMA` rows, in the order it was trained on."""
        columns = self.columns
        return values if columns is None else values[:, columns]

    @property
    def model_id(self) -> str:
        """Name and content hash: what logs and reports record."""
        return str(self.card.get("model_id") or model_id_of(self.boosters, str(self.card.get("name", "ltr"))))

    def score(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """The mean of the members' scores, from the compiled trees when loaded with them."""
        if values.shape[0] == 0:
            return np.zeros(0)
        if self.compiled is not None:
            return self.compiled.predict(values)
        return predict_mean(self.boosters, values)

    def contributions(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per-feature contributions, one column per feature plus the bias last."""
        if values.shape[0] == 0:
            return np.zeros((0, len(self.features) + 1))
        return predict_mean(self.boosters, values, pred_contrib=True)

    def save(self, directory: Path, *, compile_trees: bool = False) -> Path:
        """Write the members and ``card.json`` into a staging directory, then rename it into place.

        With ``compile_trees`` (``trawl train ltr``) the compiled trees go in too, under
        ``compiled/``, and the card records them (``compiled``: backend, package versions,
        target, each file's SHA-256). Written here, at training, rather than added to the card
        at the first load: a model directory is never written after it is published (it may
        be read-only, or checked in), so a server loads this artefact without compiling or
        writing anything; a model saved without one is compiled at load into a cache
        directory instead. A failed compilation only leaves the artefact out.
        """
        with staging_dir(directory) as tmp:
            for i, booster in enumerate(self.boosters):
                booster.save_model(str(tmp / member_file(i)))
            card = dict(self.card)
            card.pop("compiled", None)  # a copied card must not claim an artefact it lacks
            card.update(features=list(self.features), model_id=self.model_id, members=len(self.boosters))
            if compile_trees:
                files = [tmp / member_file(i) for i in range(len(self.boosters))]
                try:
                    record = build_artefact(tmp / COMPILED_DIR, files, model_id=self.model_id)
                except Exception as exc:  # noqa: BLE001 - an optional speed-up never loses a model
                    logger.warning(
                        "saving %s without compiled trees: %s: %s", self.model_id, type(exc).__name__, exc
                    )
                else:
                    card["compiled"] = record
            write_card(tmp, card, CARD)
        return Path(directory)

    @classmethod
    def load(cls, directory: Path, *, scorer: Scorer = "lightgbm", cache_dir: Path | None = None) -> Self:
        """The model in ``directory``, validated against this code's feature schema.

        ``scorer="compiled"`` (serving) also opens its compiled trees: those shipped in the
        directory, else the ones cached under ``cache_dir`` (default
        :func:`rerank.compiled_trees.default_cache_dir`), compiling them now when missing.
        When that fails (backend not installed, compilation or self-check failed) one warning
        says why and the model scores with LightGBM: serving is never refused for it.
        """
        directory = Path(directory)
        if not (directory / CARD_FILE).exists() or not (directory / MODEL_FILE).exists():
            raise ModelLoadError(
                str(directory), f"expected {MODEL_FILE} and {CARD_FILE}; train one with `trawl train ltr`"
            )
        card = read_card(directory, CARD)
        features = tuple(str(name) for name in card.get("features", ()))
        unknown = [name for name in features if name not in INDEX]
        if unknown or not features or len(set(features)) != len(features):
            raise ModelLoadError(
                str(directory),
                "it was trained on a feature schema this code does not compute "
                f"({', '.join(unknown) or 'empty or repeated names'}); retrain it with `trawl train ltr`",
            )
        members = card.get("members", 1)
        if not isinstance(members, int) or members < 1:
            raise ModelLoadError(
                str(directory), f"card.json members must be a positive integer, not {members!r}"
            )
        missing = [member_file(i) for i in range(members) if not (directory / member_file(i)).exists()]
        if missing:
            raise ModelLoadError(
                str(directory), f"the card names {members} members; missing {', '.join(missing)}"
            )
        boosters = tuple(lgb.Booster(model_file=str(directory / member_file(i))) for i in range(members))
        for booster in boosters:
            if booster.num_feature() != len(features):
                raise ModelLoadError(
                    str(directory), f"model has {booster.num_feature()} features, card {len(features)}"
                )
        model = cls(boosters=boosters, features=features, card=card)
        if scorer == "lightgbm":
            return model
        record = card.get("compiled")
        shipped = (directory / COMPILED_DIR, record) if isinstance(record, dict) else None
        try:
            compiled = open_compiled(
                boosters,
                [directory / member_file(i) for i in range(members)],
                model_id=model.model_id,
                shipped=shipped,
                cache_dir=cache_dir or default_cache_dir(),
            )
        except ModelLoadError as exc:
            logger.warning("scoring %s with LightGBM, not compiled trees: %s", model.model_id, exc.reason)
            return model
        logger.info("scoring %s with compiled trees from %s", model.model_id, compiled.directory)
        return cls(boosters=boosters, features=features, card=card, compiled=compiled)


def model_id_of(boosters: lgb.Booster | Sequence[lgb.Booster], name: str) -> str:
    """``name-<hash of the members' text>``; a one-booster model keeps the id it always had."""
    members = [boosters] if isinstance(boosters, lgb.Booster) else list(boosters)
    text = "\n".join(b.model_to_string() for b in members)
    return f"{name}-{hashlib.blake2b(text.encode(), digest_size=6).hexdigest()}"


def _finite(value: float) -> float | None:
    """JSON has no NaN: a missing feature is reported as null."""
    return None if math.isnan(value) else round(value, 6)


def explain_rows(
    model: LtrModel, doc_ids: Sequence[DocId], values: NDArray[np.float64], scores: NDArray[np.float64]
) -> dict[DocId, dict[str, Any]]:
    """Feature values and contributions of each document (the bias is the model's base score)."""
    contrib = model.contributions(values)
    out: dict[DocId, dict[str, Any]] = {}
    for i, doc_id in enumerate(doc_ids):
        out[doc_id] = {
            "ltr": {
                "model": model.model_id,
                "score": float(scores[i]),
                "bias": float(contrib[i, -1]),
                "features": {n: _finite(float(v)) for n, v in zip(model.features, values[i], strict=True)},
                "contributions": {
                    n: float(c) for n, c in zip(model.features, contrib[i, :-1], strict=True) if c != 0.0
                },
            }
        }
    return out


class LtrStage:
    """Serving stage: features → model score → order, with explain and feature logging.

    ``needs_vector`` is True by default (the model was trained with cosine features);
    it can be turned off to serve a lexical-only index, where cosine features are NaN.
    """

    with_fields = True

    def __init__(
        self,
        model: LtrModel,
        *,
        name: str = "ltr",
        needs_vector: bool = True,
        feature_log: FeatureLogger | None = None,
        user_lang: str = "en",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.model = model
        self.name = name
        self.needs_vector = needs_vector
        self.with_doc_vectors = reads_doc_vectors(model.features)
        self.feature_log = feature_log
        self.user_lang = user_lang
        self.clock = clock

    def rank(
        self, query: Query, candidates: Sequence[Candidate], *, explain: bool, context: RankContext
    ) -> RankOutput:
        if not candidates:
            return RankOutput([])
        now_s = self.clock()
        shard = context.features.select([c.doc_id for c in candidates]) if context.features else None
        # Without shard features (an index built before the forward index) the stored
        # documents are fetched and the same features computed from their text.
        docs = context.fetch(candidates) if shard is None else {}
        matrix = compute_features(
            query,
            candidates,
            docs,
            context=FeatureContext(now_s=now_s, user_lang=self.user_lang),
            shard=shard,
        )
        values = self.model.model_values(matrix.values)
        scores = self.model.score(values)
        order = sorted(range(len(candidates)), key=lambda i: (-scores[i], matrix.doc_ids[i]))
        ranked = [ScoredDoc(matrix.doc_ids[i], float(scores[i])) for i in order]
        info = explain_rows(self.model, matrix.doc_ids, values, scores) if explain else {}
        if self.feature_log is not None and self.feature_log.should_log():
            self.feature_log.log(
                query=query,
                doc_ids=matrix.doc_ids,
                values=matrix.values,
                scores=scores,
                model_id=self.model.model_id,
                generation=context.generation,
                now_s=now_s,
            )
        return RankOutput(ranked, info)

    def close(self) -> None:
        """Write out buffered feature-log rows (call at shutdown)."""
        if self.feature_log is not None:
            self.feature_log.close()
