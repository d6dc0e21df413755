"""Short questions that name what they ask about, on a docs site: "How do I use the `X` function?".

    python benchmarks/named_questions.py [--cache benchmarks/.cache]
                                         [--out benchmarks/results/named_questions.json]

For each hugo-docs function page (``functions/*.md``; its title, the function's name, is ``X``)
the question is asked with the name in backticks and without, on the hugo-docs store of
``benchmarks/trust.py``. A set built to check the abstention's informative-words reliefs on
questions other than the page descriptions they were read on: such a question scores a modest
cosine (its only specific word is the name) while its hits hold every word of it. Reports the
share with found=true, with the page itself as the first block, and among the blocks.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import frontmatter
from corpora import DATA
from rich.console import Console
from rich.table import Table
from trust import knowledge_base
from trust_stores import judged_sets

FORMS = {"backticks": "How do I use the `{name}` function?", "plain": "How do I use the {name} function?"}


def function_pages() -> list[tuple[str, str]]:
    """(doc id, function name) of every hugo-docs function page."""
    pages = sorted((DATA / "hugo-docs" / "functions").glob("*.md"))
    return [
        (f"functions/{p.name}", str(frontmatter.load(p)["title"])) for p in pages if p.name != "_index.md"
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=Path("benchmarks/.cache"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/named_questions.json"))
    args = parser.parse_args()
    hugo = next(s for s in judged_sets(args.cache) if s.name == "hugo-docs")
    pages = function_pages()
    tool, _ = knowledge_base(hugo, args.cache)
    results: dict[str, dict[str, float]] = {}
    missed: dict[str, list[str]] = {}
    with tool:
        for form, template in FORMS.items():
            found = first = among = 0
            missed[form] = []
            for doc_id, name in pages:
                result = tool.lookup(template.format(name=name))
                blocks = [block.doc_id for block in result.evidence_blocks]
                found += result.found
                first += bool(blocks) and blocks[0] == doc_id
                among += doc_id in blocks
                if not result.found:
                    missed[form].append(name)
            results[form] = {"questions": len(pages), "found": found / len(pages)}
            results[form] |= {"page_first": first / len(pages), "page_among_blocks": among / len(pages)}
    table = Table("form", "questions", "found=true", "its page first", "its page among the blocks")
    for form, r in results.items():
        table.add_row(
            form, str(r["questions"]), *(f"{r[k]:.3f}" for k in ("found", "page_first", "page_among_blocks"))
        )
    Console().print(table)
    Console().print({form: names for form, names in missed.items()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"results": results, "no_evidence": missed}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
