from __future__ import annotations

from retrieval.text.tokenizer import analyze, term_frequencies


def test_stems_folds_and_drops_stopwords() -> None:
    assert analyze("The Flows of AIR over Cafés") == ["flow", "air", "cafe"]


def test_apostrophes_join_words_on_both_sides() -> None:
    assert analyze("can't") == analyze("cant") == ["cant"]


def test_repeated_query_words_are_counted() -> None:
    assert term_frequencies("flow flows flowing heat")["flow"] == 3


def test_junk_tokens_are_dropped() -> None:
    assert analyze("a" * 65 + " ok") == ["ok"]


def test_chinese_japanese_and_korean_runs_become_character_bigrams() -> None:
    from retrieval.text.tokenizer import words

    assert words("東京大学の研究") == ["東京", "京大", "大学", "学の", "の研", "研究"]
    assert words("Tokyo大学 日") == ["tokyo", "大学", "日"]  # a lone character stays itself
    assert words("한국어 문서") == ["한국", "국어", "문서"]  # Hangul recomposed after folding, then paired
    assert words("Café naïve résumé") == ["cafe", "naive", "resume"]  # other scripts as before


def test_kana_keep_their_voiced_marks() -> None:
    from retrieval.text.tokenizer import fold, words

    # パ (pa) is not ハ (ha): stripping the mark as a diacritic made パス, バス and ハス one word,
    # and left highlights off the marked characters (the page's text keeps them).
    assert words("パッケージ") == ["パッ", "ッケ", "ケー", "ージ"]
    assert len({fold(w) for w in ("パス", "バス", "ハス")}) == 3
    assert fold("ﾊﾟｯｹｰｼﾞ") == "パッケージ"  # half-width kana composed as typed full-width


def test_words_that_contractions_fold_into_are_kept() -> None:
    # "she'll" and "I'd" lose their apostrophe into shell and id, but shell and id are words.
    assert analyze("shell command id() vortex shedding critically ill") == [
        "shell",
        "command",
        "id",
        "vortex",
        "shed",
        "critic",
        "ill",
    ]
    assert analyze("as well as we'll see") == ["see"]
