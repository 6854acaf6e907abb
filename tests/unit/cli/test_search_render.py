"""``trawl search`` output: highlights become terminal styling, page text is never markup."""

from __future__ import annotations

from rich.console import Console

from cli.search import result_text, snippet_text


def _render(text: object, *, color: bool) -> str:
    console = Console(
        record=True, width=200, color_system="truecolor" if color else None, force_terminal=color
    )
    console.print(text, highlight=False)
    return console.export_text(styles=color)


def test_marks_become_styles_and_entities_characters() -> None:
    text = snippet_text("say &quot;<mark>hello</mark>&quot; &lt;b&gt; [bold]x[/bold]")
    assert text.plain == 'say "hello" <b> [bold]x[/bold]'
    assert [(text.plain[s.start : s.end], s.style) for s in text.spans] == [("hello", "bold yellow")]
    coloured = _render(text, color=True)
    assert "<mark>" not in coloured and "\x1b[" in coloured


def test_titles_with_brackets_render_literally() -> None:
    plain = _render(
        result_text(1, "[red]Lists[/red] [1] & <i>", 1.5, "http://a/x?[y]", "a <mark>b</mark>"), color=False
    )
    assert plain.splitlines() == ["1. [red]Lists[/red] [1] & <i>  (1.500)", "   http://a/x?[y]", "   a b"]
